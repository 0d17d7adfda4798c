"""The scheduler plug-in inside the embedded cluster's real CapacityScheduler, on three NodeManagers of two 16 GiB
virtual GPUs: the node order packs GPU memory (a small task goes to the fullest node that has room, not to whichever
node heartbeats), and an ask no single GPU of a node can hold is not granted there, though YARN's sum of the node's
GPU memory would let it."""

from __future__ import annotations

import json
import urllib.request

import pytest

from airflow_provider_melon import rm
from airflow_provider_melon.cli import melon_hook_for_cluster
from airflow_provider_melon.dev import minicluster as mc
from tests.conftest import Jobs, running_cluster

pytestmark = pytest.mark.integration

SLEEP = 'python -c "import time; time.sleep(300)"'


@pytest.fixture(scope="module")
def cluster():
    yield from running_cluster(
        "MELON_TEST_PLUGIN_CLUSTER_DIR", "melon-plugin-", "MELON_TEST_PORT_BASE", port_offset=300, nodemanagers=3
    )


@pytest.fixture
def jobs(cluster, tmp_path_factory):
    j = Jobs(melon_hook_for_cluster(cluster.work_dir), cluster, tmp_path_factory)
    yield j
    j.kill_all()


def stats(cluster: mc.ClusterDetails) -> dict:
    """The plug-in's MBean on the RM's /jmx."""
    with urllib.request.urlopen(f"{cluster.rm_web_url}/jmx?qry={rm.STATS_MBEAN}", timeout=30) as resp:
        [bean] = json.load(resp)["beans"]
    return bean


def placed(jobs: Jobs, name: str, instances: int, gpu_memory: str) -> list[tuple[str, str]]:
    """Submit a job of ``instances`` sleeping tasks of ``gpu_memory`` each; once all run, their (node, GPU)."""
    app_id = jobs.submit(
        {
            "name": name,
            "framework": "generic",
            "entrypoint": SLEEP,
            "env": {"MELON_GPU_WAIT_S": "2"},
            "roles": {"worker": {"instances": instances, "memory": 256, "vcores": 1, "gpu_memory": gpu_memory}},
        }
    )
    status = jobs.wait_status(
        app_id, lambda s: len(s["tasks"]) == instances and all(t["state"] == "REGISTERED" for t in s["tasks"])
    )
    # placed once: no task was asked for again (no exit 75 on a node where no GPU held it)
    assert all(len(t["containers"]) == 1 for t in status["tasks"]), status["tasks"]
    return [(t["node_id"], t["gpu"]) for t in status["tasks"]]


def test_gpu_memory_is_packed_node_by_node_and_asks_go_only_where_a_gpu_holds_them(jobs, cluster):
    assert stats(cluster)["PolicyLoaded"] is True
    # two 9 GiB tasks: the fullest node first, so both on one node; its ledger spreads them over its two GPUs
    # (7 GiB left on each, 14 GiB on the node)
    first = placed(jobs, "nine-nine", 2, "9GiB")
    [full] = {node for node, _ in first}
    assert sorted(gpu for _, gpu in first) == ["0", "1"]
    refusals = stats(cluster)["FitRefusals"]
    # 12 GiB: YARN's sum on that node (14 GiB) fits, no single GPU there does: it goes to another node, first time
    [(node12, _)] = placed(jobs, "twelve", 1, "12GiB")
    assert node12 != full
    assert stats(cluster)["FitRefusals"] > refusals  # the allocator turned the full node down
    # a small task goes to the fullest node that still holds it (14 GiB free there, 20 GiB beside the 12 GiB task,
    # 32 GiB on the idle node), where heartbeat placement would take whichever node heartbeats first
    [(node4, _)] = placed(jobs, "four", 1, "4GiB")
    assert node4 == full
