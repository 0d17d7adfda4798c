"""GPU reservations across pid namespaces, without a GPU: executors in pid namespaces of their own (``unshare --pid
--fork --mount-proc``, as YARN's Docker runtime gives each container one; the test machines run as root) share one
ledger folder, and NVML's per-process readings, which name the host's pids, are matched with nothing there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from airflow_provider_melon.gpu import devices, ledger
from tests.unit.test_executor import am_factory, exec_env, finish, inventory  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


def wait_for(condition, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def reservations(folder):
    try:
        with open(folder / "ledger.json") as f:
            return json.load(f)["reservations"]
    except (OSError, ValueError):
        return []


def start_in_namespace(tmp_path, env):
    return subprocess.Popen(
        [*UNSHARE, sys.executable, "-m", "airflow_provider_melon.runtime.executor"],
        env=env,
        cwd=str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_executors_in_their_own_pid_namespaces_keep_each_others_reservations(tmp_path, am_factory, inventory):
    """Each executor is pid 1 of its namespace. The second reserves while the first runs: with reservations kept
    alive by pids it took pid 1 for itself, found a start time that was not the first's, and dropped the first's
    reservation (and got the GPU that was full). Kept alive by their leases, the first's stays: the second finds no
    room and exits 75, and the first's is released when it ends."""
    folder = tmp_path / "ledger"
    gpu = inventory(16384)  # 9000 MiB each: one fits, two do not
    go = tmp_path / "go"
    wait_go = f'python -c "import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"'
    am_a, am_b = am_factory(["worker:0"]), am_factory(["worker:0"])
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    common = {"MELON_GPU_INVENTORY": gpu, "MELON_GPU_MEMORY_MB": 9000, "MELON_LEDGER_DIR": folder}
    a = start_in_namespace(
        a_dir,
        exec_env(a_dir, am_a, "worker", 0, MELON_ENTRYPOINT=wait_go, MELON_CONTAINER_ID="container_1_0001_01_000002",
                 **common),
    )  # fmt: skip
    try:
        wait_for(lambda: am_a.registrations and reservations(folder), "the first executor's reservation")
        [held] = reservations(folder)
        assert held["task_id"] == "container_1_0001_01_000002" and held["pid"] == 1, held  # pid 1 of its namespace
        b = start_in_namespace(
            b_dir,
            exec_env(b_dir, am_b, "worker", 0, MELON_CONTAINER_ID="container_1_0002_01_000002", MELON_GPU_WAIT_S=1,
                     **common),
        )  # fmt: skip
        rc, _, err = finish(b)
        assert rc == 75 and "no GPU fits" in err, err
        assert [r["task_id"] for r in reservations(folder)] == ["container_1_0001_01_000002"]
    finally:
        go.touch()
        rc, _, err = finish(a)
    assert rc == 0, err
    assert reservations(folder) == [] and not [n for n in os.listdir(folder) if n.startswith(ledger.LEASE_PREFIX)]


# In a pid namespace of its own: the ledger's and the executor's readings of NVML's device list. Its processes are
# the recorded H200 runs' (benchmarks/data/h200-colocate.json, two ResNet-50 processes: torch's max_memory_reserved
# plus the measured context each), named by host pids that are also pids here: 1 (this very process) and 2.
IN_NAMESPACE = textwrap.dedent(
    """
    import json, os, subprocess, sys
    sys.path.insert(0, {repo!r})
    from airflow_provider_melon.gpu import devices, ledger
    from airflow_provider_melon.gpu.devices import DeviceInfo
    from tests.fake_nvml import fake_nvml
    per_process, driver = {per_process}, {driver}
    procs = {{1: per_process, 2: per_process}}
    gpu = {{"uuid": "GPU-a", "name": "NVIDIA H200", "total_mb": 143771, "driver_mb": driver, "util": 0, "procs": procs}}
    devices.import_pynvml = lambda: fake_nvml([gpu])
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # pid 2 here, or near
    [dev] = devices.nvml_gpus(env={{}})
    out = {{
        "pid": os.getpid(),
        "host_pids": devices.host_pids(),
        "holder": ledger.holder_of(1, {{1}}),
        "taken": ledger.taken_mb(0, dev, {{1}}),
        "overrun": ledger.overrun(dev, [dict(task_id="me", pid=1, gpu=0, expected_mb=100)], "other"),
        "sample": devices.process_memory(0, [1, 2], baseline_mb=driver),
    }}
    helper.kill()
    print(json.dumps(out))
    """
)


def test_nvmls_host_pids_are_matched_with_nothing_in_a_pid_namespace(tmp_path):
    """NVML names processes by the host's pids (tests/fake_nvml.py, after NVML's reference). In a container's pid
    namespace those numbers are other processes here, or none: pid 1 is the executor itself. So none is taken for a
    reservation's holder or a stranger: the ledger counts the device's processes with MeLoN's (max(reservations,
    their use), never a foreigner twice), names no culprit (an OOM there is the task's own), and the executor's
    sample is the device's rise ('nvml-device'), not pid 1's memory."""
    from airflow_provider_melon.gpu.context import MEASURED_CONTEXT_MB

    recorded = json.loads(
        (__import__("pathlib").Path(ledger.__file__).parents[2] / "benchmarks/data/h200-colocate.json").read_text()
    )
    run = next(r for r in recorded if r["workload"].startswith("resnet50") and r["k"] == 2 and r["mode"] == "plain")
    per_process = int(max(p["max_reserved_mib"] for p in run["per_process"])) + MEASURED_CONTEXT_MB
    script = tmp_path / "ns.py"
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    script.write_text(IN_NAMESPACE.format(repo=repo, per_process=per_process, driver=618))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([*UNSHARE, sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout)
    assert seen["pid"] == 1 and seen["host_pids"] is False
    assert seen["holder"] is None  # pid 1 here is not NVML's pid 1
    assert seen["taken"] == 2 * per_process + 618  # with MeLoN's: max(0 reserved, their use) + the driver's
    assert seen["overrun"] is None
    assert seen["sample"] == [2 * per_process, devices.SOURCE_DEVICE]
