"""Hadoop 3.1 and 3.2 as their ResourceManagers answered: what the provider reads of them, and what it refuses there
before a submission. The JSON under tests/data/hadoop-<version>/ was captured from the embedded 3.1.4 and 3.2.4
clusters by ``scripts/compat-am.sh`` (its ``.compat/probe-<version>/``), not written by hand."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_melon.cli.doctor import Doctor
from airflow_provider_melon.gpu import preflight
from airflow_provider_melon.hadoop import compat as hc
from airflow_provider_melon.hadoop import queues
from airflow_provider_melon.hadoop.rm_json import GPU_MEMORY_RESOURCE, GPU_RESOURCE, as_dict, as_list, normalise_node
from airflow_provider_melon.hooks.yarn import _normalise_app
from airflow_provider_melon.spec import JobSpec

DATA = Path(__file__).resolve().parent.parent / "data"
LINES = ["3.1.4", "3.2.4"]


def _load(version: str, name: str) -> Any:
    return json.loads((DATA / f"hadoop-{version}" / name).read_text())


class _Captured:
    """The RM of ``version`` as the hook reads it, from what that RM answered."""

    def __init__(self, version: str):
        self.version = version

    def cluster_info(self) -> dict:
        return _load(self.version, "cluster-info.json")

    def rm_conf(self, name: str) -> str | None:
        prop = as_dict(_load(self.version, "rm-conf-placement-handler.json").get("property"))
        assert name == prop.get("key") == preflight.PLACEMENT_HANDLER
        return prop.get("value")

    def scheduler(self) -> dict:
        return _load(self.version, "scheduler.json")["scheduler"]["schedulerInfo"]

    def nodes(self, states: Any = None) -> list[dict]:
        return [normalise_node(n) for n in as_list(_load(self.version, "nodes.json").get("nodes"), "node")]

    def rm_jmx(self, query: str) -> list[dict]:
        return _load(self.version, "rm-jmx-melon.json")["beans"]


def _hook(version: str):
    from airflow_provider_melon.hooks.melon import MelonHook

    hook = MelonHook.__new__(MelonHook)
    hook.yarn = _Captured(version)
    hook._nodes = None
    return hook


def _job(**worker: Any) -> JobSpec:
    return JobSpec.from_dict(
        {"name": "j", "framework": "generic", "entrypoint": "python t.py", "roles": {"worker": worker}}
    )


@pytest.mark.parametrize("version", LINES)
def test_the_version_and_its_line(version):
    info = _Captured(version).cluster_info()
    assert hc.hadoop_version(info) == version
    assert hc.line_of(hc.hadoop_version(info)).server_java == (8,)


@pytest.mark.parametrize("version", LINES)
def test_the_nodes_gpus_are_read_though_the_rm_lists_no_total(version):
    raw = as_list(_load(version, "nodes.json")["nodes"], "node")
    assert "totalResource" not in raw[0]  # 3.1.4 and 3.2.4 list usedResource and availableResource only
    assert ("nodeAttributesInfo" in raw[0]) == (version == "3.2.4")  # node attributes: 3.2.0 on
    nodes = _Captured(version).nodes()
    for node in nodes:
        total = node["totalResource"]
        assert total["resources"][GPU_RESOURCE] == 2 and total["resources"][GPU_MEMORY_RESOURCE] == 32768
        assert total["units"][GPU_MEMORY_RESOURCE] == "Mi"
        assert preflight.node_gpu_model(node) is None  # none published (3.1 has no node attributes)
    report = preflight.check(nodes, {"worker": {"instances": 2, "gpus": 1}})
    assert report.ok and report.total_gpus == 2 * len(nodes), report.message


def test_gpu_models_are_refused_before_submission_on_3_1_naming_the_version_and_the_feature():
    with pytest.raises(preflight.PreflightError) as err:
        _hook("3.1.4").check_gpu_models(_job(gpus=1, gpu_models=["A10"]))
    assert str(err.value) == (
        "the job cannot run on this cluster: role worker names GPU models, but this cluster's Hadoop 3.1.4 has no "
        "node attributes (nm.yarn.io/gpu-model, by which a role's gpu_models is placed; added in Hadoop 3.2.0)"
    )
    _hook("3.1.4").check_gpu_models(_job(gpus=1))  # no models: nothing to refuse


def test_on_3_2_gpu_models_are_judged_by_the_rm_setting_not_the_version():
    with pytest.raises(preflight.PreflightError) as err:
        _hook("3.2.4").check_gpu_models(_job(gpus=1, gpu_models=["A10"]))
    assert "placement-constraints.handler=scheduler, but it is disabled" in str(err.value)  # what 3.2.4's RM said
    assert "Hadoop" not in str(err.value)


@pytest.mark.parametrize("version", LINES)
def test_the_queue_check_reads_the_scheduler_json(version):
    scheduler = _Captured(version).scheduler()
    assert scheduler["type"] == "capacityScheduler"
    fits = queues.check(scheduler, "default", {"worker": {"instances": 2, "gpus": 1}}, user="alice")
    assert fits.checked and fits.ok, fits.message
    assert fits.maximum[GPU_RESOURCE] == 2 * len(_Captured(version).nodes())
    too_big = queues.check(scheduler, "default", {"worker": {"instances": 9, "gpus": 1}})
    assert not too_big.ok and "more than the queue may ever hold" in too_big.message


@pytest.mark.parametrize("version", LINES)
def test_an_application_answer_is_read(version):
    app = _normalise_app(_load(version, "app.json")["app"])
    assert app["id"].startswith("application_") and app["state"] in ("FINISHED", "FAILED", "KILLED")
    assert app["finalStatus"] in ("SUCCEEDED", "FAILED", "KILLED")
    assert isinstance(app["applicationTagList"], list)


def test_doctor_says_3_1_places_on_heartbeat_and_3_2_by_the_plug_ins_order():
    on31 = Doctor(types.SimpleNamespace(yarn=_Captured("3.1.4"))).check_placement()
    assert on31.status == "ok", on31
    assert on31.detail.startswith(
        "Hadoop 3.1.4 has no multi-node placement in the CapacityScheduler (the plug-in's node order; added in Hadoop "
        "3.2.0): YARN places on NodeManager heartbeats; the scheduler plug-in "
    )
    on32 = Doctor(types.SimpleNamespace(yarn=_Captured("3.2.4"))).check_placement()
    assert "is the CapacityScheduler's node order" in on32.detail, on32


def test_an_attempts_one_container_comes_bare_and_is_read():
    """3.1.4's ``/appattempts/{attempt}/containers`` for one running container (captured with curl from the same
    embedded cluster while smoke job 2 ran): ``{"container": {...}}``, no ``containers`` wrapper, numbers as
    strings, ``nodeHttpAddress`` with its scheme."""
    import requests_mock as rm_mock

    from airflow_provider_melon.hadoop.nodemanager import nm_base_url
    from airflow_provider_melon.hooks.yarn import YarnHook

    body = _load("3.1.4", "app-attempt-containers.json")
    assert "containers" not in body and isinstance(body["container"], dict)
    rm = "http://rm:8088"
    app, attempt = "application_1796683874811_0002", "appattempt_1796683874811_0002_000001"
    with rm_mock.Mocker() as m:
        m.get(f"{rm}/ws/v1/cluster/apps/{app}/appattempts/{attempt}/containers", json=body)
        [container] = YarnHook(rm_urls=[rm], user="root", retries=0).app_containers(app, attempt)
    assert container["containerId"] == "container_1796683874811_0002_01_000001"
    assert nm_base_url(container["nodeHttpAddress"], rm) == container["nodeHttpAddress"] == "http://localhost:33109"
