"""`melon doctor`'s scheduler check: the resource calculator the CapacityScheduler runs on, told from what the
scheduler itself shows (not from the RM's /conf, which is yarn-site.xml's: the CapacityScheduler reads
capacity-scheduler.xml after it), and `yarn.cluster.max-application-priority`, below learned.MAX_PRIORITY of which
`priority: auto` cannot order the queue.

tests/data/rm-scheduler-*.json are the embedded cluster's (Hadoop 3.5.0) `/ws/v1/cluster/scheduler` answers, trimmed
to what the check reads: `dominant` as the session's cluster runs (the DominantResourceCalculator, the GPU resource
types), `default` started with `minicluster.start(melon_config=False, set_calculator=False, yarn_site={CALCULATOR_KEY:
DRC})`, the calculator in yarn-site.xml and Hadoop's stock capacity-scheduler.xml read after it (the launcher's
details said the scheduler ran on the DefaultResourceCalculator; the RM's /conf said the Dominant one). The live
checks: tests/integration/test_doctor_live.py."""

from __future__ import annotations

import copy
import json
import types
from pathlib import Path

import pytest
import requests_mock as rm_mock

from airflow_provider_melon.cli.doctor import (
    CALCULATOR_FIX,
    CALCULATOR_KEY,
    DRC,
    PRIORITY_KEY,
    Doctor,
    calculator_evidence,
)
from airflow_provider_melon.hooks.yarn import YarnHook

RM = "http://rm:8088"
DATA = Path(__file__).resolve().parents[1] / "data"
DEFAULT = "org.apache.hadoop.yarn.util.resource.DefaultResourceCalculator"


def answer(name: str) -> dict:
    return json.loads((DATA / f"rm-scheduler-{name}.json").read_text())


def without_gpu_types(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    infos = doc["scheduler"]["schedulerInfo"]["maximumAllocation"]["resourceInformations"]
    infos["resourceInformation"] = [i for i in infos["resourceInformation"] if i["name"] in ("memory-mb", "vcores")]
    return doc


def leaf(doc: dict) -> dict:
    return doc["scheduler"]["schedulerInfo"]["queues"]["queue"][0]


def test_gpu_resource_types_prove_a_calculator_of_every_resource():
    every, why = calculator_evidence({"memory-mb", "vcores", "yarn.io/gpu", "melon.io/gpu-memory"}, None)
    assert every is True and "does not start on the DefaultResourceCalculator" in why


def test_the_application_master_limit_tells_the_calculator():
    every, why = calculator_evidence({"memory-mb", "vcores"}, leaf(answer("dominant")))
    assert every is True and "counts vcores (16)" in why
    every, why = calculator_evidence({"memory-mb", "vcores"}, leaf(answer("default")))
    assert every is False and "memory only (8192 MiB and 1 vcore" in why and "32 guaranteed vcores × 0.5" in why
    small = leaf(answer("default")) | {"minEffectiveCapacity": {"memory": 4096, "vCores": 2}}
    assert calculator_evidence(set(), small)[0] is None  # 2 × 0.5 = 1 vcore either way


def _doctor(rm, scheduler: dict, calculator=None, top: str | None = "25", nodes=()):
    rm.get(f"{RM}/ws/v1/cluster/scheduler", json=scheduler)
    rm.get(f"{RM}/ws/v1/cluster/nodes", json={"nodes": {"node": list(nodes)}})
    for key, value in ((CALCULATOR_KEY, calculator), (PRIORITY_KEY, top)):
        if value is None:  # not in the RM's configuration
            rm.get(f"{RM}/conf?name={key}", status_code=404)
        else:
            rm.get(f"{RM}/conf?name={key}", json={"property": {"key": key, "value": value}})
    return Doctor(types.SimpleNamespace(yarn=YarnHook(rm_urls=[RM], user="alice"))).check_scheduler()


@pytest.mark.parametrize(
    "scheduler, calculator, status, says",
    [
        # the documented place: capacity-scheduler.xml, which the RM's /conf does not show
        (answer("dominant"), None, "ok", "the RM declares melon.io/gpu-memory and yarn.io/gpu"),
        # yarn-site.xml names the Default one, capacity-scheduler.xml the Dominant one: the latter wins
        (answer("dominant"), DEFAULT, "ok", "on the DominantResourceCalculator"),
        # the trap: yarn-site.xml names the Dominant one, the stock capacity-scheduler.xml wins
        (answer("default"), DRC, "fail", "yarn-site.xml names DominantResourceCalculator (the RM's /conf), which is"),
        (answer("default"), None, "fail", "by memory alone"),
        # no GPU resource type declared: the ApplicationMaster limit tells
        (without_gpu_types(answer("dominant")), None, "ok", "counts vcores"),
    ],
)
def test_the_scheduler_check_judges_the_calculator_the_scheduler_runs_on(scheduler, calculator, status, says):
    with rm_mock.Mocker() as rm:
        finding = _doctor(rm, scheduler, calculator)
    assert finding.status == status and says in finding.detail, finding
    if status == "fail":
        assert finding.fix == CALCULATOR_FIX and "capacity-scheduler.xml" in finding.fix
        assert "restart the RM" in finding.fix and "-refreshQueues` does not change" in finding.fix


@pytest.mark.parametrize("calculator, status", [(None, "warn"), (DRC, "warn"), (DEFAULT, "fail")])
def test_a_scheduler_that_tells_nothing_leaves_the_rms_configuration_to_judge(calculator, status):
    untold = answer("default")
    leaf(untold)["minEffectiveCapacity"] = {"memory": 4096, "vCores": 2}
    with rm_mock.Mocker() as rm:
        finding = _doctor(rm, untold, calculator)
    assert finding.status == status and finding.fix == CALCULATOR_FIX, finding
    if status == "warn":
        assert "cannot be told from here" in finding.detail


@pytest.mark.parametrize("top, status", [(None, "warn"), ("0", "warn"), ("10", "warn"), ("25", "ok"), ("50", "ok")])
def test_the_scheduler_check_warns_when_priorities_cannot_order_the_queue(top, status):
    with rm_mock.Mocker() as rm:
        finding = _doctor(rm, answer("dominant"), DRC, top)
    assert finding.status == status, finding
    if status == "warn":
        assert f"{PRIORITY_KEY} is {top or '0 (unset)'}" in finding.detail
        assert finding.fix == f"yarn-site.xml on the RM: {PRIORITY_KEY} = 25; restart the RM"
    else:
        assert finding.detail.endswith(f"application priorities up to {top}")


def test_an_rm_that_is_down_names_the_calculator_among_the_causes():
    """The stock capacity-scheduler.xml with the GPU resource types declared: the RM does not start at all (the live
    test sees it), so nothing listens; the fix names that cause among the others."""
    down = YarnHook(rm_urls=["http://127.0.0.1:1"], user="alice", retries=1, backoff=0.1)
    finding = Doctor(types.SimpleNamespace(yarn=down)).check_rm()
    assert finding.status == "fail" and "127.0.0.1:1" in finding.detail, finding
    assert "RM uses DefaultResourceCalculator which used only memory" in finding.fix and CALCULATOR_FIX in finding.fix


def test_an_rms_conf_kept_to_its_admins_leaves_the_calculator_to_the_scheduler():
    """``hadoop.security.instrumentation.requires.admin``: /conf answers 403 to a user not in the RM's admin ACL.
    The calculator is still told (the scheduler's answer); the priorities are not, and the warning says why."""
    with rm_mock.Mocker() as rm:
        rm.get(f"{RM}/ws/v1/cluster/scheduler", json=answer("dominant"))
        rm.get(f"{RM}/ws/v1/cluster/nodes", json={"nodes": {"node": []}})
        rm.get(f"{RM}/conf", status_code=403, text="Unauthorized user")
        finding = Doctor(types.SimpleNamespace(yarn=YarnHook(rm_urls=[RM], user="alice"))).check_scheduler()
    assert finding.status == "warn" and "on the DominantResourceCalculator" in finding.detail, finding
    assert "is unknown (the RM's /conf answered HTTP 403 to this user)" in finding.detail
