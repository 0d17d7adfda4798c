"""The launcher's own behaviour: bounded failure on a taken port; the CLI; hooks' test_connection."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from airflow_provider_melon import minicluster as mc

pytestmark = pytest.mark.integration


def test_port_in_use_fails_fast_with_the_flag_named(tmp_path):
    base = 27500
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
    out = subprocess.run([sys.executable, "-m", "airflow_provider_melon.cli", "minicluster", "status",
                          "--work-dir", str(minicluster.work_dir)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["running"] and status["rm_web_url"] == minicluster.rm_web_url
    assert len(status["nodes"]) == 2
    assert all(n["total"]["yarn.io/gpu"] == 2 and n["total"]["melon.io/gpu-memory"] == 32768
               for n in status["nodes"])


def test_melon_hook_test_connection(melon_hook):
    ok, message = melon_hook.test_connection()
    assert ok, message
    assert "STARTED" in message and "HDFS reachable" in message


def test_melon_hook_test_connection_reports_hdfs_down(melon_hook):
    from hdfs import InsecureClient

    from airflow_provider_melon.hooks.melon import MelonHook

    broken = MelonHook(yarn_hook=melon_hook.yarn, hdfs_client=InsecureClient("http://127.0.0.1:9", user="root"),
                       user="root")
    ok, message = broken.test_connection()
    assert not ok and "HDFS" in message


def test_the_embedded_rm_serves_its_web_ui(minicluster, jobs):
    """The RM's HTML pages (the extra link "YARN application" opens /cluster/app/<id>; yarn-api-client probes
    /cluster/cluster), while the NodeManagers' REST API (container logs) keeps working."""
    import urllib.request

    app_id = jobs.submit({"name": "ui-page", "framework": "generic", "entrypoint": "true",
                          "roles": {"worker": {"memory": 128}}})
    jobs.wait(app_id)
    for path in ("/cluster/cluster", f"/cluster/app/{app_id}"):
        with urllib.request.urlopen(minicluster.rm_web_url + path, timeout=30) as resp:
            body = resp.read().decode()
        assert resp.status == 200 and "<html" in body.lower(), path
    assert app_id in body and "ui-page" in body
    node = json.load(urllib.request.urlopen(minicluster.rm_web_url + "/ws/v1/cluster/nodes", timeout=30))
    nm = "http://" + node["nodes"]["node"][0]["nodeHTTPAddress"]
    assert "nodeInfo" in json.load(urllib.request.urlopen(nm + "/ws/v1/node/info", timeout=30))
