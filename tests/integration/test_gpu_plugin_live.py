"""MeLoN beside YARN's own GPU plugin (docs/gpu-plugin.md), on a real MiniYARNCluster NodeManager running the
plugin (``yarn.nodemanager.resource-plugins=yarn.io/gpu``) with a stand-in ``nvidia-smi`` that prints a recorded
``nvidia-smi -q -x`` (tests/integration/data/nvidia-smi-q-x.xml, the shape of Hadoop's TestGpuDiscoverer fixture).

* ``allowed-gpu-devices=auto`` (the plugin takes every GPU, as most GPU clusters run it): YARN discovers the two
  recorded GPUs through the stand-in, and ``melon doctor`` flags the node with the fix;
* the coexistence we chose (the plugin given GPU 0 only, MeLoN sharing GPU 1, ``CUDA_VISIBLE_DEVICES=1`` in the
  connection's container_env): doctor is content, and a shared-mode task runs and is placed on GPU 1.

The mini cluster has no LinuxContainerExecutor (no root, no cgroups), so the devices cgroup's denial itself is not
exercised here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_melon.cli import melon_hook_for_cluster
from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.spec import JobSpec
from tests.conftest import port_base

pytestmark = pytest.mark.integration

MELON = str(Path(sys.executable).parent / "melon")
RECORDED = Path(__file__).parent / "data" / "nvidia-smi-q-x.xml"
PLUGINS = "yarn.nodemanager.resource-plugins"
ALLOWED = "yarn.nodemanager.resource-plugins.gpu.allowed-gpu-devices"
BINARY = "yarn.nodemanager.resource-plugins.gpu.path-to-discovery-executables"


def stand_in_nvidia_smi(folder: Path) -> Path:
    """An ``nvidia-smi`` that answers ``-q -x`` with the recorded XML (and logs each call)."""
    script = folder / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
echo "$*" >> {folder / "nvidia-smi.calls"}
case " $* " in *" -q "*) exec cat {RECORDED};; esac
echo "stand-in nvidia-smi: only -q -x is recorded" >&2
exit 1
""")
    script.chmod(0o755)
    return script


def plugin_cluster(tmp_path_factory, name: str, allowed: str, offset: int):
    work = tmp_path_factory.mktemp(f"melon-gpu-plugin-{name}")
    smi = stand_in_nvidia_smi(work)
    base = port_base("MELON_TEST_PORT_BASE") + offset
    details = mc.start(
        work / "cluster",
        port_base=base,
        nodemanagers=1,
        timeout=420,
        yarn_site={PLUGINS: "yarn.io/gpu", ALLOWED: allowed, BINARY: str(smi)},
    )
    return work, details


def doctor(details, container_env: dict | None = None) -> tuple[int, dict]:
    host, port = details.nn_http
    extra = {
        "fs_default_fs": details.fs_default_fs,
        "container_env": {**mc.container_env(details), **(container_env or {})},
    }
    env = dict(os.environ)
    env["AIRFLOW_CONN_YARN_DEFAULT"] = json.dumps(
        {"conn_type": "yarn", "host": details.rm_web_url, "login": details.user, "extra": extra}
    )
    env["AIRFLOW_CONN_WEBHDFS_DEFAULT"] = json.dumps(
        {"conn_type": "webhdfs", "host": host, "port": port, "login": details.user}
    )
    result = subprocess.run([MELON, "doctor", "--json"], env=env, capture_output=True, text=True, timeout=180)
    try:
        return result.returncode, {f["check"]: f for f in json.loads(result.stdout)}
    except ValueError:
        raise AssertionError(f"doctor printed no JSON (rc {result.returncode}):\n{result.stdout}\n{result.stderr}")


def nm_gpu_resource(details) -> dict:
    """The NodeManager's own view of yarn.io/gpu (served by the GPU plugin: what its discovery found)."""
    from airflow_provider_melon.hooks.yarn import YarnHook

    yarn = YarnHook(rm_urls=[details.rm_web_url], user=details.user)
    (node,) = yarn.nodes(["RUNNING"])
    resp = yarn.get_url(
        f"http://{node['nodeHTTPAddress']}/ws/v1/node/resources/yarn.io%2Fgpu", headers={"Accept": "application/json"}
    )
    assert resp.status_code == 200, resp.text[:500]
    return {"node": node, "info": resp.json()}


@pytest.fixture(scope="module")
def auto_cluster(tmp_path_factory):
    work, details = plugin_cluster(tmp_path_factory, "auto", "auto", 800)
    try:
        yield work, details
    finally:
        mc.stop(details.work_dir)


def test_the_plugin_discovers_the_recorded_gpus_and_doctor_flags_it(auto_cluster):
    work, details = auto_cluster
    assert "-q" in (work / "nvidia-smi.calls").read_text()  # YARN's discovery ran the stand-in
    seen = nm_gpu_resource(details)
    gpus = seen["info"]["gpuDeviceInformation"]["gpu"]
    assert [g["product_name"] for g in gpus] == ["Tesla P100-PCIE-12GB", "Tesla P100-PCIE-12GB_2"]
    assert [g["minor_number"] for g in gpus] == [0, 1]
    assert seen["node"]["totalResource"]["resources"]["yarn.io/gpu"] == 2
    rc, findings = doctor(details)
    plugin = findings["gpu-plugin"]
    assert plugin["status"] == "warn", plugin  # DefaultContainerExecutor: no isolation yet, the same trap later
    assert "the plugin manages every GPU (2 discovered, allowed-gpu-devices=auto)" in plugin["detail"], plugin
    assert "allowed-gpu-devices" in plugin["fix"] and "CUDA_VISIBLE_DEVICES" in plugin["fix"], plugin
    assert "docs/gpu-plugin.md" in plugin["fix"]
    assert findings["nodes"]["status"] == "ok" and findings["resourcemanager"]["status"] == "ok"


@pytest.fixture(scope="module")
def split_cluster(tmp_path_factory, auto_cluster):
    mc.stop(auto_cluster[1].work_dir)  # one plugin cluster at a time (the auto one's ports and memory)
    work, details = plugin_cluster(tmp_path_factory, "split", "0:0", 800)
    try:
        yield work, details
    finally:
        mc.stop(details.work_dir)


def test_the_split_lets_a_shared_task_run_on_melons_gpu(split_cluster):
    work, details = split_cluster
    node = nm_gpu_resource(details)["node"]
    assert node["totalResource"]["resources"]["yarn.io/gpu"] == 1  # the plugin advertises only GPU 0
    rc, findings = doctor(details)
    assert findings["gpu-plugin"]["status"] == "warn", findings["gpu-plugin"]
    assert "sets no CUDA_VISIBLE_DEVICES" in findings["gpu-plugin"]["detail"]
    rc, findings = doctor(details, {"CUDA_VISIBLE_DEVICES": "1"})
    assert findings["gpu-plugin"]["status"] == "ok", findings["gpu-plugin"]
    assert "the plugin manages GPUs 0:0; MeLoN shares CUDA_VISIBLE_DEVICES=1" in findings["gpu-plugin"]["detail"]

    hook = melon_hook_for_cluster(details.work_dir)
    hook.container_env["CUDA_VISIBLE_DEVICES"] = "1"
    code = work / "code"
    code.mkdir()
    (code / "show.py").write_text(
        "import os\nprint('task sees CUDA_VISIBLE_DEVICES=' + os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'))\n"
    )
    spec = JobSpec.from_dict(
        {
            "name": "shared-beside-plugin",
            "framework": "generic",
            "code": str(code),
            "entrypoint": "python show.py",
            "roles": {"worker": {"instances": 1, "memory": "512m", "vcores": 1, "gpu_memory": "4GiB"}},
        }
    )
    app_id = hook.submit(spec)["app_id"]
    app = wait_until_ended(hook, app_id)
    stdout = "".join(mc.container_logs(details.work_dir, app_id, "stdout").values())
    assert app["finalStatus"] == "SUCCEEDED", (app.get("diagnostics"), stdout[-2000:])
    assert "task sees CUDA_VISIBLE_DEVICES=1" in stdout, stdout[-2000:]


def wait_until_ended(hook, app_id: str, timeout: float = 300) -> dict:
    import time

    deadline = time.monotonic() + timeout
    app = {}
    while time.monotonic() < deadline:
        app = hook.yarn.get_application(app_id)
        if app["state"] in TERMINAL_STATES:
            return app
        time.sleep(1)
    raise AssertionError(
        f"{app_id} not ended after {timeout}s: {json.dumps({k: app.get(k) for k in ('state', 'diagnostics')})}"
    )
