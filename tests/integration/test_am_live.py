"""The MeLoN ApplicationMaster and executor on the real mini cluster: gang start, GPU over-provisioning,
restarts and diagnostics, the secret, and dataset localization."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from tests.conftest import port_base
from tests.waits import wait_for

pytestmark = pytest.mark.integration

SLEEP_PRINT = (
    "python -c \"import os, time; print('TASK', os.environ['MELON_ROLE'], os.environ['MELON_INDEX'], "
    "'GPU', os.environ.get('CUDA_VISIBLE_DEVICES'), 'NM', os.environ.get('NM_PORT')); time.sleep({s})\""
)


def _ledgers(work_dir) -> list[dict]:
    rows = []
    for path in Path(work_dir).glob("ledger-*/ledger.json"):
        for r in json.loads(path.read_text())["reservations"]:
            rows.append({**r, "node": path.parent.name})
    return rows


def _used_gpu_memory(yarn) -> int:
    return sum(n["usedResource"]["resources"].get("melon.io/gpu-memory", 0) for n in yarn.nodes())


def test_shared_mode_runs_more_tasks_than_gpus(jobs, minicluster):
    """6 tasks × 6 GiB on 2 NMs × 2 GPUs × 16 GiB: all 6 run at once (over-provisioning), ≤ 2 per GPU."""
    app_id = jobs.submit(
        {
            "name": "shared-six",
            "framework": "generic",
            "entrypoint": SLEEP_PRINT.format(s=12),
            "env": {"MELON_GPU_WAIT_S": "5"},
            "roles": {"worker": {"instances": 6, "memory": 256, "vcores": 1, "gpu_memory": "6GiB"}},
        }
    )
    status = jobs.wait_status(
        app_id, lambda s: len(s["tasks"]) == 6 and all(t["state"] == "REGISTERED" for t in s["tasks"])
    )
    # Observed, not assumed: the RM has 6 × 6 GiB of GPU memory allocated, the ledgers hold 6 reservations,
    # and no GPU carries more than 2 (16 GiB // 6 GiB).
    assert _used_gpu_memory(jobs.hook.yarn) == 6 * 6144
    rows = [r for r in _ledgers(minicluster.work_dir) if app_id.split("_", 1)[1] in r["task_id"]]
    assert len(rows) == 6
    per_gpu: dict = {}
    for r in rows:
        per_gpu[(r["node"], r["gpu"])] = per_gpu.get((r["node"], r["gpu"]), 0) + 1
    assert max(per_gpu.values()) <= 2 and len(per_gpu) >= 3
    assert all(t["gpu"] is not None and t["gpu_memory_mb"] == 6144 for t in status["tasks"])
    app = jobs.wait(app_id)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
    logs = jobs.container_logs(app_id)
    assert sum("TASK worker" in text for text in logs.values()) == 6


def test_a_small_shared_task_asks_yarn_for_a_quarter_of_the_gpu(jobs, minicluster):
    """2 tasks x 1 GiB on GPUs of 16 GiB: each asks YARN for its slot, a quarter of the GPU (policy.slot_mb), not
    for the 1 GiB it expects, so YARN admits no more than four small tasks a GPU; the node's ledger holds the same
    slot, and each task registers it."""
    app_id = jobs.submit(
        {
            "name": "shared-slots",
            "framework": "generic",
            "entrypoint": SLEEP_PRINT.format(s=5),
            "roles": {"worker": {"instances": 2, "memory": 256, "vcores": 1, "gpu_memory": "1GiB"}},
        }
    )
    status = jobs.wait_status(
        app_id, lambda s: len(s["tasks"]) == 2 and all(t["state"] == "REGISTERED" for t in s["tasks"])
    )
    assert _used_gpu_memory(jobs.hook.yarn) == 2 * 4096, status
    rows = [r for r in _ledgers(minicluster.work_dir) if app_id.split("_", 1)[1] in r["task_id"]]
    assert [(r["expected_mb"], r["held_mb"]) for r in rows] == [(1024, 4096)] * 2, rows
    assert [t["gpu_memory_mb"] for t in status["tasks"]] == [4096, 4096], status
    app = jobs.wait(app_id)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]


def test_whole_gpu_memory_tasks_cannot_all_run(jobs):
    """4 GPUs x 16 GiB, one held by another job; then 4 tasks x 16 GiB with the gang hold off (each container starts
    as it comes): YARN runs 3 and keeps one pending. (A gang larger than the whole queue, 5 x 16 GiB, is refused
    before submission: the queue check; with the hold on, see test_gang_live.py.)"""
    big = {"memory": 256, "vcores": 1, "gpu_memory": "16GiB"}
    blocker = jobs.submit(
        {
            "name": "one-big",
            "framework": "generic",
            "entrypoint": SLEEP_PRINT.format(s=90),
            "roles": {"worker": {"instances": 1, **big}},
        }
    )
    jobs.wait_status(blocker, lambda s: s["tasks"] and s["tasks"][0]["state"] == "REGISTERED")
    app_id = jobs.submit(
        {
            "name": "four-big",
            "framework": "generic",
            "entrypoint": SLEEP_PRINT.format(s=60),
            "register_timeout_s": 120,
            "gang_hold_s": 0,
            "roles": {"worker": {"instances": 4, **big}},
        }
    )
    status = jobs.wait_status(app_id, lambda s: sum(t["state"] == "REGISTERED" for t in s["tasks"]) == 3)
    assert _used_gpu_memory(jobs.hook.yarn) == 4 * 16384
    pending = [t for t in status["tasks"] if t["state"] in ("PENDING", "REQUESTED", "NEW")]
    assert len(pending) == 1 and pending[0]["container_id"] is None, status["tasks"]
    for app in (app_id, blocker):
        jobs.hook.yarn.kill_application(app)
        assert jobs.wait(app, timeout=30)["state"] == "KILLED"


def test_failing_task_is_restarted_then_job_fails_with_named_diagnostic(jobs):
    app_id = jobs.submit(
        {
            "name": "fails",
            "framework": "generic",
            "entrypoint": "python -c \"import sys; print('boom-stderr-line', file=sys.stderr); sys.exit(1)\"",
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1, "restarts": 1}},
        }
    )
    app = jobs.wait(app_id)
    assert app["finalStatus"] == "FAILED"
    diag = app["diagnostics"]
    assert "worker:0" in diag and "exited 1" in diag and "boom-stderr-line" in diag, diag
    # Restarted once: two containers ran the task.
    assert len(jobs.container_logs(app_id, "stderr")) == 2


def test_am_refuses_calls_without_the_secret(jobs):
    app_id = jobs.submit(
        {
            "name": "secret",
            "framework": "generic",
            "entrypoint": SLEEP_PRINT.format(s=20),
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
        }
    )
    jobs.wait_status(app_id, lambda s: s["tasks"] and s["tasks"][0]["state"] == "REGISTERED")
    am = jobs.app(app_id)["amRPCAddress"]  # the AM registers its HTTP address as its RPC address
    for path in ("/register", "/heartbeat"):
        req = urllib.request.Request(f"http://{am}{path}", data=b'{"role": "worker", "index": 0}', method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 403
        req.add_header("X-Melon-Secret", "not-the-secret")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 403
    jobs.hook.yarn.kill_application(app_id)


def test_public_dataset_is_localized_once_per_node(jobs, melon_hook, minicluster):
    """An input is localized PUBLIC: each NodeManager downloads it once into its public cache
    (``<local-dir>/filecache``, not a user's ``usercache/<user>/filecache``), and a second job on that node uses
    the same copy. The second job's 4 tasks of 3 GB cannot fit one 8 GB node, so it runs on both nodes, and
    whichever node the first job used is shared."""
    name = f"blob-{uuid.uuid4().hex[:8]}.bin"
    data = f"/user/root/it-datasets/{name}"
    melon_hook.hdfs.write(data, data=b"x" * 100_000, overwrite=True)
    job = {
        "framework": "generic",
        "inputs": [{"path": data, "name": "blob.bin"}],
        "entrypoint": "python -c \"import os; print('SIZE', os.path.getsize('blob.bin'), 'NM', "
        "os.environ['NM_PORT'])\"",
    }
    first = jobs.submit({**job, "name": "data-1", "roles": {"worker": {"instances": 4, "memory": 256}}})
    app = jobs.wait(first)
    assert app["finalStatus"] == "SUCCEEDED", app["diagnostics"]
    second = jobs.submit({**job, "name": "data-2", "roles": {"worker": {"instances": 4, "memory": 3072}}})
    app = jobs.wait(second)
    assert app["finalStatus"] == "SUCCEEDED", app["diagnostics"]
    nodes = {
        a: {
            line.split("NM ")[1].strip()
            for text in jobs.container_logs(a).values()
            for line in text.splitlines()
            if line.startswith("SIZE 100000")
        }
        for a in (first, second)
    }
    assert len(nodes[second]) == 2 and nodes[first] <= nodes[second], nodes
    local_dirs = sorted(Path(minicluster.work_dir).rglob("*localDir-nm-*"))
    assert len(local_dirs) == 2, local_dirs
    public = {d.name: list(d.glob(f"filecache/*/{name}")) for d in local_dirs}
    private = list(Path(minicluster.work_dir).rglob(f"usercache/*/filecache/*/{name}"))
    # one public copy per node that ran a task (both did), none private; a re-download by the second job on
    # the node the first job used would have left two there
    assert {d: len(c) for d, c in public.items()} == {d.name: 1 for d in local_dirs}, public
    assert private == [], private


PROGRESS = (
    'python -c "import json, os, time\nfor step in range(1, 9):\n'
    "    p = os.environ['MELON_PROGRESS_FILE']\n"
    "    json.dump({'step': step, 'loss': 1.0 / step}, open(p + '.t', 'w')); os.replace(p + '.t', p)\n"
    '    time.sleep(0.6)\ntime.sleep(3)"'
)


def test_status_carries_what_the_ui_draws(jobs, melon_hook):
    """The AM's /status for the UI plugin: the task's node id (as the RM names nodes), its reserved and expected
    GPU memory, MPS, the step/loss history, and the labels the submitter put in the plan."""
    from airflow_provider_melon.spec import JobSpec

    spec = JobSpec.from_dict(
        {
            "name": "ui-status",
            "framework": "generic",
            "code": str(jobs.code),
            "entrypoint": PROGRESS,
            "env": {"MELON_HEARTBEAT_S": "0.5"},
            "roles": {"worker": {"memory": 256, "gpu_memory": "3GiB"}},
        }
    )
    labels = {"dag_id": "d", "task_id": "t", "run_id": "manual__2026-01-01T00:00:00+00:00", "map_index": 2}
    app_id = melon_hook.submit(spec, labels=labels)["app_id"]
    jobs.submitted.append(app_id)
    status = jobs.wait_status(app_id, lambda s: len(s["tasks"][0]["history"]) >= 4, timeout=180)
    [task] = status["tasks"]
    assert status["labels"] == labels
    assert task["node_id"] in {n["id"] for n in melon_hook.yarn.nodes()}
    # reserved: its slot, a quarter of the 16 GiB GPU, above the 3 GiB it expects
    assert (task["gpu_memory_mb"], task["expected_gpu_memory_mb"], task["gpus"], task["mps"]) == (4096, 3072, 0, False)
    assert task["gpu_memory_used_mb"] is None  # no NVML here
    steps = [point[1] for point in task["history"]]
    assert steps == sorted(set(steps)) and steps[0] >= 1  # one point per new step, in order
    assert all(abs(loss - 1.0 / step) < 1e-9 for _, step, loss in task["history"])
    assert jobs.wait(app_id)["finalStatus"] == "SUCCEEDED"


REPORTING = (
    'python -c "import time\nfrom airflow_provider_melon.runtime import report\n'
    "for step in range(1, 11):\n"
    "    report(step=step, total=10, loss=1.0 / step, accuracy=step / 10)\n"
    '    time.sleep(1.5)"'
)


def test_reported_progress_moves_the_rm_progress_bar(jobs, melon_hook):
    """``runtime.report(step, total, loss, **metrics)`` from the job's code: the AM reports step/total to YARN, so the
    RM's progress moves while the job runs; the metrics reach /status."""
    app_id = jobs.submit(
        {
            "name": "report-progress",
            "framework": "generic",
            "entrypoint": REPORTING,
            "env": {"MELON_HEARTBEAT_S": "0.5"},
            "roles": {"worker": {"memory": 256}},
        }
    )
    seen: list[float] = []
    reported = None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        app = jobs.app(app_id)
        if app["state"] == "RUNNING":
            seen.append(float(app.get("progress") or 0))
            status = jobs.status(app_id) if reported is None else None
            if status and status["tasks"] and status["tasks"][0].get("metrics"):
                reported = status["tasks"][0]
        if app["state"] in TERMINAL_STATES:
            break
        time.sleep(1)
    status_seen = [p for p in seen if 0 < p < 100]
    assert len(set(status_seen)) >= 3, seen  # several distinct values between 0 and 100 % while it ran
    assert status_seen == sorted(status_seen), seen  # and they only went up
    assert app["finalStatus"] == "SUCCEEDED" and float(app["progress"]) == 100.0, app
    assert reported and reported["total"] == 10 and reported["metrics"]["accuracy"] == reported["step"] / 10, reported


def test_a_parameter_server_gone_for_good_fails_the_job_and_an_optional_one_does_not(jobs):
    """A ps task (untracked) that fails past its restarts used to be only logged: its workers waited for it until
    the job's timeout. Now it fails the job at once, naming the task; ``optional: true`` keeps the old rule."""
    ps_dies = (
        "python -c \"import os, sys, time; role = os.environ['MELON_ROLE']; "
        "(print('ps-is-gone', file=sys.stderr), sys.exit(3)) if role == 'ps' else time.sleep({s})\""
    )
    hangs = jobs.submit(
        {
            "name": "ps-gone",
            "framework": "generic",
            "entrypoint": ps_dies.format(s=600),
            "roles": {
                "worker": {"instances": 1, "memory": 256, "vcores": 1},
                "ps": {"instances": 1, "memory": 256, "vcores": 1},
            },
        }
    )
    optional = jobs.submit(
        {
            "name": "ps-optional",
            "framework": "generic",
            "entrypoint": ps_dies.format(s=8),
            "roles": {
                "worker": {"instances": 1, "memory": 256, "vcores": 1},
                "ps": {"instances": 1, "memory": 256, "vcores": 1, "optional": True},
            },
        }
    )
    app = jobs.wait(hangs, timeout=180)  # the worker sleeps 600 s: only the ps's failure ends it this early
    assert app["finalStatus"] == "FAILED", app
    diag = app["diagnostics"]
    assert "task ps:0 on" in diag and "exited 3" in diag and "ps-is-gone" in diag, diag
    assert "cannot go on without it" in diag, diag
    app = jobs.wait(optional, timeout=180)
    assert app["finalStatus"] == "SUCCEEDED", app


OUT_OF_GPU_MEMORY = (
    "python -c \"import os, sys; print('GPU_MEMORY', os.environ['MELON_GPU_MEMORY_MB'], file=sys.stderr); "
    "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', file=sys.stderr); "
    'sys.exit(76)"'
)


def test_an_oom_asks_again_with_more_gpu_memory_then_fails_saying_what_to_set(jobs):
    """Exit 76 (out of GPU memory) in shared mode: the AM asks for the task again with its expected GPU memory grown
    by oom_growth (4096 → 6144 → 9216 MiB, in the container request and MELON_GPU_MEMORY_MB), outside the role's
    restarts (0 here), then fails the job saying what to set."""
    app_id = jobs.submit(
        {
            "name": "oom-grows",
            "framework": "generic",
            "entrypoint": OUT_OF_GPU_MEMORY,
            "env": {"MELON_GPU_WAIT_S": "5"},
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1, "gpu_memory": "4GiB"}},
        }
    )
    app = jobs.wait(app_id)
    assert app["finalStatus"] == "FAILED"
    diag = app["diagnostics"]
    assert diag.startswith("task worker:0 exceeded its expected GPU memory (cap 9216 MiB; peak seen "), diag
    assert "grown 2 of 2 times; raise roles.worker.gpu_memory above 9216 MiB" in diag, diag
    seen = sorted(
        int(line.split()[1])
        for text in jobs.container_logs(app_id, "stderr").values()
        for line in text.splitlines()
        if line.startswith("GPU_MEMORY ")
    )
    assert seen == [4096, 6144, 9216]


# Each task listens on the port it registered (MELON_CLUSTER names it), until the test connects to it.
LISTEN_ONCE = (
    "python -c \"import json, os, socket; me = json.loads(os.environ['MELON_CLUSTER'])[os.environ['MELON_ROLE']]"
    "[int(os.environ['MELON_INDEX'])]; s = socket.socket(); s.bind(('127.0.0.1', int(me.rsplit(':', 1)[1]))); "
    "s.listen(); s.accept()[0].close(); print('TASK released', me)\""
)


def _listeners_of(app_id: str) -> dict[int, str]:
    """port → program of every TCP listener (``ss -ltnp``) that a process of ``app_id``'s containers holds: a
    process whose environment names one of its containers (YARN's CONTAINER_ID)."""
    cluster_ts, seq = app_id.split("_")[1:]
    ours = re.compile(rf"^CONTAINER_ID=container_(e\d+_)?{cluster_ts}_{seq}_\d+_\d+$")
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True, timeout=30).stdout
    found: dict[int, str] = {}
    for line in out.splitlines():
        local = line.split()[3]
        for program, pid in re.findall(r'\("([^"]+)",pid=(\d+),', line):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:  # ended meanwhile, or not ours to read
                continue
            if any(ours.match(e.decode(errors="replace")) for e in env):
                found[int(local.rsplit(":", 1)[1])] = program
    return found


def test_with_a_port_range_every_listener_of_the_job_is_in_it(jobs, minicluster):
    """A firewall that opens MELON_PORT_RANGE only: the AM's HTTP server (the RM's web proxy and the executors call
    it) and the tasks' ports all listen in the range, and nothing of the job's listens elsewhere (``ss``)."""
    low = port_base("MELON_TEST_PORT_BASE") + 950  # this worker's own ports, unused by its clusters
    high = low + 49
    app_id = jobs.submit(
        {
            "name": "port-range",
            "framework": "generic",
            "entrypoint": LISTEN_ONCE,
            "env": {"MELON_PORT_RANGE": f"{low}-{high}"},
            "roles": {"worker": {"instances": 2, "memory": 256, "vcores": 1}},
        }
    )
    status = jobs.wait_status(
        app_id, lambda s: len(s["tasks"]) == 2 and all(t["state"] == "REGISTERED" for t in s["tasks"])
    )
    task_ports = {int(t["port"]) for t in status["tasks"]}
    am_port = int(jobs.app(app_id)["amRPCAddress"].rsplit(":", 1)[1])  # the AM registers its HTTP address so

    def all_listening() -> dict[int, str] | None:  # the tasks' processes bind their ports once the gang formed
        found = _listeners_of(app_id)
        return found if task_ports <= set(found) else None

    listening = wait_for(
        all_listening,
        timeout=60,
        what=f"the tasks of {app_id} listening on {sorted(task_ports)}",
        cause=jobs.cause(app_id),
    )
    assert am_port in listening and listening[am_port] == "java", listening
    outside = {port: program for port, program in listening.items() if not low <= port <= high}
    assert not outside, f"listeners of {app_id} outside {low}-{high}: {outside}"
    for port in task_ports:  # let each task end
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    app = jobs.wait(app_id)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
