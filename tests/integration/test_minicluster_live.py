"""The launcher's own behaviour: bounded failure on a taken port; the CLI; hooks' test_connection."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from tests.conftest import port_base

pytestmark = pytest.mark.integration


def test_port_in_use_fails_fast_with_the_flag_named(tmp_path):
    base = port_base("MELON_TEST_PORT_BASE") + 8500
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", mc.ports_from_base(base)["rm-web-port"]))
        sock.listen(1)
        t0 = time.monotonic()
        with pytest.raises(mc.MiniClusterError) as err:
            mc.start(tmp_path / "mc", port_base=base, timeout=120)
        assert time.monotonic() - t0 < 60
    assert "in use" in str(err.value) and "--rm-web-port" in str(err.value)
    assert mc.running_pid(tmp_path / "mc") is None


def test_cli_status_shows_nodes_with_gpu_resources(minicluster):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_melon.cli",
            "minicluster",
            "status",
            "--work-dir",
            str(minicluster.work_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["running"] and status["rm_web_url"] == minicluster.rm_web_url
    assert len(status["nodes"]) == 2
    assert all(n["total"]["yarn.io/gpu"] == 2 and n["total"]["melon.io/gpu-memory"] == 32768 for n in status["nodes"])


def test_melon_hook_test_connection(melon_hook):
    ok, message = melon_hook.test_connection()
    assert ok, message
    assert "STARTED" in message and "HDFS reachable" in message


def test_melon_hook_test_connection_reports_hdfs_down(melon_hook):
    from hdfs import InsecureClient

    from airflow_provider_melon.hooks.melon import MelonHook

    broken = MelonHook(
        yarn_hook=melon_hook.yarn, hdfs_client=InsecureClient("http://127.0.0.1:9", user="root"), user="root"
    )
    ok, message = broken.test_connection()
    assert not ok and "HDFS" in message


def test_the_embedded_rm_serves_its_web_ui(minicluster, jobs):
    """The RM's HTML pages (the extra link "YARN application" opens /cluster/app/<id>; yarn-api-client probes
    /cluster/cluster), while the NodeManagers' REST API (container logs) keeps working."""
    import urllib.request

    app_id = jobs.submit(
        {"name": "ui-page", "framework": "generic", "entrypoint": "true", "roles": {"worker": {"memory": 128}}}
    )
    jobs.wait(app_id)
    for path in ("/cluster/cluster", f"/cluster/app/{app_id}"):
        with urllib.request.urlopen(minicluster.rm_web_url + path, timeout=30) as resp:
            body = resp.read().decode()
        assert resp.status == 200 and "<html" in body.lower(), path
    assert app_id in body and "ui-page" in body
    node = json.load(urllib.request.urlopen(minicluster.rm_web_url + "/ws/v1/cluster/nodes", timeout=30))
    nm = "http://" + node["nodes"]["node"][0]["nodeHTTPAddress"]
    assert "nodeInfo" in json.load(urllib.request.urlopen(nm + "/ws/v1/node/info", timeout=30))


def test_a_two_gpu_host_gives_each_nodemanager_its_own_gpu(tmp_path, monkeypatch):
    """On a host with real GPUs the embedded cluster's NodeManagers must not both claim one. A fake 2-GPU
    host (the fake NVML, seen by the product's own ``devices.nvml_gpus``): NM0 advertises and gets GPU 0, NM1 GPU
    1; a job of two 1-GPU tasks (one per NM, as YARN must place them) sees GPU 0 on NM0 and GPU 1 on NM1."""
    import shutil

    from airflow_provider_melon.cli import melon_hook_for_cluster
    from airflow_provider_melon.gpu import devices
    from airflow_provider_melon.spec import JobSpec
    from tests.fake_nvml import fake_nvml

    gpus = [{"uuid": f"GPU-{i}", "name": "NVIDIA H200", "total_mb": 16384, "used_mb": 0, "util": 0} for i in (0, 1)]
    monkeypatch.setattr(devices, "import_pynvml", lambda: fake_nvml(gpus))
    work = tmp_path / "mc"
    try:
        details = mc.start(work, port_base=port_base("MELON_TEST_PORT_BASE") + 700, timeout=480)
        assert [n["gpus"] for n in mc.read_layout(work)["nodes"]] == [[0], [1]]
        port_to_nm = {nm_id.rsplit(":", 1)[1]: i for i, nm_id in enumerate(details.details["nodemanager_ids"])}
        nodes = mc.status(work)["nodes"]
        assert sorted((n["total"]["yarn.io/gpu"], n["total"]["melon.io/gpu-memory"]) for n in nodes) == [
            (1, 16384),
            (1, 16384),
        ], nodes
        hook = melon_hook_for_cluster(work)
        entry = (
            "python -c \"import os; print('SEEN', os.environ['NM_PORT'], os.environ['CUDA_VISIBLE_DEVICES'], "
            "os.environ['MELON_GPU_INVENTORY'], sep='|')\""
        )
        app_id = hook.submit(
            JobSpec.from_dict(
                {
                    "name": "gpu-split",
                    "framework": "generic",
                    "entrypoint": entry,
                    "roles": {"worker": {"instances": 2, "memory": 256, "vcores": 1, "gpus": 1}},
                }
            )
        )["app_id"]
        deadline = time.monotonic() + 240
        while (app := hook.yarn.get_application(app_id))["state"] not in TERMINAL_STATES:
            if time.monotonic() > deadline:
                hook.yarn.kill_application(app_id)
                raise AssertionError(
                    f"{app_id} still {app['state']} after 240 s: {app.get('diagnostics')}\n" + mc._log_tail(work)
                )
            time.sleep(1)
        assert app["finalStatus"] == "SUCCEEDED", app["diagnostics"]
        seen = [
            line.split("|")[1:]
            for text in mc.container_logs(work, app_id).values()
            for line in text.splitlines()
            if line.startswith("SEEN|")
        ]
        stderr = "\n".join(mc.container_logs(work, app_id, "stderr").values())
        assert sorted((port_to_nm[port], cuda, inventory.rsplit("/", 1)[1]) for port, cuda, inventory in seen) == [
            (0, "0", "gpu-inventory-nm0.json"),
            (1, "1", "gpu-inventory-nm1.json"),
        ], (seen, stderr)
    finally:
        mc.stop(work)
        shutil.rmtree(work, ignore_errors=True)
