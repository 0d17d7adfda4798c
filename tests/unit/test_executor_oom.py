"""The executor's part of GPU out-of-memory failures: a user's process that died of GPU memory is named (exit 76, the
final heartbeat's ``oom`` with the memory that ran out: its cap, or outside the allocator), anything else keeps its
exit code, and every heartbeat carries its peak GPU memory (``gpu_memory_peak_mb``, from ``MELON_PEAK_FILE`` here:
the virtual GPUs have no NVML samples). A real executor subprocess against the in-test AM, its stderr a file opened
write-only, as the AM's ``2><LOG_DIR>/stderr`` opens it; the user's process runs under the real cap bootstrap."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from airflow_provider_melon.gpu.ledger import Ledger
from airflow_provider_melon.runtime import executor
from tests import oom_texts
from tests.unit.test_executor import am_factory, exec_env, finish, inventory, start  # noqa: F401 - fixtures

# The user's process: says where its peak file is, writes its peak there (as a script or a generic framework may),
# lets a periodic heartbeat (every 0.2 s here) carry it, then prints the recorded text to stderr and exits.
USER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    peak = os.environ["MELON_PEAK_FILE"]
    print("PEAK_FILE=" + peak, flush=True)
    with open(peak + ".tmp", "w") as f:
        json.dump({"peak_mb": 1300}, f)
    os.replace(peak + ".tmp", peak)
    def die(*_):
        sys.stderr.write(open(os.environ["USER_STDERR"]).read())
        sys.stderr.flush()
        if os.environ.get("USER_RAISE"):  # dies of this exception, uncaught (the bootstrap records it)
            raise ValueError(os.environ["USER_RAISE"])
        sys.exit(int(os.environ["USER_EXIT"]))
    if os.environ.get("USER_WAIT_FOR_TERM"):
        signal.signal(signal.SIGTERM, die)
        open(os.environ["USER_WAIT_FOR_TERM"], "w").close()
        time.sleep(120)
    time.sleep(0.8)
    die()
    """
)


def oom_env(tmp_path, am, text, code=1, **extra):
    (tmp_path / "user.py").write_text(USER)
    (tmp_path / "user-stderr.txt").write_text(text)
    return exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_ENTRYPOINT=f"python {tmp_path / 'user.py'}",
        USER_STDERR=tmp_path / "user-stderr.txt",
        USER_EXIT=code,
        **extra,
    )


def start_logged(tmp_path, env):
    """The executor with its stderr a regular file opened for writing only (as YARN's launch script's ``2>``)."""
    log = open(tmp_path / "stderr", "w")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "airflow_provider_melon.runtime.executor"],
            env=env,
            cwd=str(tmp_path),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    finally:
        log.close()


def run_logged(tmp_path, env):
    rc, out, _ = finish(start_logged(tmp_path, env))
    return rc, out, (tmp_path / "stderr").read_text()


def test_a_tensorflow_oom_in_shared_mode_exits_76_and_tells_the_am(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"])
    env = oom_env(
        tmp_path,
        am,
        oom_texts.TF_GPU_OOM_STDERR,
        MELON_FRAMEWORK="tensorflow",
        MELON_GPU_INVENTORY=inventory(8192, 16384),
        MELON_GPU_MEMORY_MB=1024,
    )
    rc, out, err = run_logged(tmp_path, env)
    assert rc == executor.EXIT_GPU_OOM == 76, err
    assert f"PEAK_FILE={tmp_path / 'melon-peak.json'}" in out  # absolute, in the container's directory
    last = am.heartbeats[-1]
    assert last["message"] == "user process exited 1"  # the final heartbeat's message is unchanged
    signature = last["oom"].pop("signature")
    # its allocator needed its peak (1300 MiB, the peak file) and the 4491 MiB tensor it failed: beyond its cap
    assert last["oom"] == {"cap_mb": 1024, "peak_mb": 1300, "largest_gpu_mb": 16384, "kind": "cap", "need_mb": 5791}
    assert (
        signature.startswith(
            "ResourceExhaustedError: OOM when allocating tensor with shape[11772117,100] and "
            "type float on /job:localhost/replica:0/task:0/device:GPU:0"
        )
        and len(signature) <= 200
    )
    assert last["gpu_memory_peak_mb"] == 1300
    # the periodic heartbeats carried the peak while the process ran; none of them an "oom"
    periodic = [h for h in am.heartbeats[:-1] if "message" not in h]
    assert any(h.get("gpu_memory_peak_mb") == 1300 for h in periodic), am.heartbeats
    assert not any("oom" in h for h in am.heartbeats[:-1])
    assert (
        "[melon-executor] the user's process ran out of GPU memory at its cap (cap 1024 MiB; peak seen 1300 MiB; the "
        "allocator needed 5791 MiB; TensorFlow's GPU allocator): " + signature
    ) in err
    assert "ResourceExhaustedError" in err  # the user's stderr is still the container's
    assert Ledger(str(tmp_path / "ledger")).entries() == []


@pytest.mark.parametrize(
    "mode, expected",
    [
        ({"MELON_GPUS": 1}, {"cap_mb": None, "largest_gpu_mb": 16384}),  # exclusive: no cap
        ({"MELON_GPU_MEMORY_MB": 4096, "MELON_GPU_INVENTORY": None}, {"cap_mb": None, "largest_gpu_mb": None}),  # CPU
    ],
)
def test_a_pytorch_oom_without_a_cap(tmp_path, am_factory, inventory, mode, expected):
    am = am_factory(["worker:0"])
    extra = {"MELON_GPU_INVENTORY": inventory(16384, 16384), **mode}
    env = oom_env(
        tmp_path,
        am,
        oom_texts.traceback_of(oom_texts.TORCH_OOM_LINE),
        MELON_FRAMEWORK="pytorch",
        **{k: v for k, v in extra.items() if v is not None},
    )
    rc, out, err = run_logged(tmp_path, env)
    assert rc == 76, err
    oom = am.heartbeats[-1]["oom"]
    assert oom["signature"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB")
    assert {k: oom[k] for k in expected} == expected and oom["peak_mb"] == 1300
    assert oom["kind"] == "cap" and oom["need_mb"] == 42199  # what its message says it held, and the request
    cap = "none" if expected["cap_mb"] is None else f"{expected['cap_mb']} MiB"
    assert f"ran out of GPU memory at its cap (cap {cap}; peak seen 1300 MiB; the allocator needed 42199" in err


@pytest.mark.parametrize(
    "text, code",
    [
        (oom_texts.traceback_of("ValueError: shapes (3,4) and (5,6) not aligned"), 3),  # a plain crash
        (oom_texts.traceback_of(oom_texts.TORCH_OOM_LINE).replace("Traceback", "recovered from"), 0),  # exit 0
    ],
)
def test_other_exits_keep_their_code_and_carry_no_oom(tmp_path, am_factory, inventory, text, code):
    am = am_factory(["worker:0"])
    env = oom_env(tmp_path, am, text, code=code, MELON_GPU_INVENTORY=inventory(16384), MELON_GPU_MEMORY_MB=1024)
    rc, out, err = run_logged(tmp_path, env)
    assert rc == code, err
    assert am.heartbeats[-1]["message"] == f"user process exited {code}"
    assert am.heartbeats[-1]["gpu_memory_peak_mb"] == 1300
    assert not any("oom" in h for h in am.heartbeats)
    assert "ran out of GPU memory" not in err


def test_without_a_stderr_file_there_is_no_tail(tmp_path, am_factory, inventory):
    """The executor's stderr a pipe (started by hand, or piped by a test): no tail to read, so no OOM is named."""
    am = am_factory(["worker:0"])
    env = oom_env(
        tmp_path, am, oom_texts.TF_GPU_OOM_STDERR, MELON_GPU_INVENTORY=inventory(16384), MELON_GPU_MEMORY_MB=1024
    )
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 1 and "ResourceExhaustedError" in err, err
    assert not any("oom" in h for h in am.heartbeats)


def test_a_terminated_task_exits_143_whatever_its_stderr_says(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"])
    ready = tmp_path / "ready"
    env = oom_env(
        tmp_path,
        am,
        oom_texts.TF_GPU_OOM_STDERR,
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_GPU_MEMORY_MB=1024,
        USER_WAIT_FOR_TERM=ready,
    )
    proc = start_logged(tmp_path, env)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    rc, out, _ = finish(proc)
    err = (tmp_path / "stderr").read_text()
    assert rc == executor.EXIT_TERMINATED and "ResourceExhaustedError" in err, err
    assert not any("oom" in h for h in am.heartbeats)


def test_a_host_memory_oom_keeps_its_exit_code(tmp_path, am_factory, inventory):
    """TensorFlow's real OOM text from this CPU-only machine names the host's allocator: that task needs no more GPU
    memory, so it is no exit 76 (the AM would grow its GPU memory for nothing) and carries no ``oom``."""
    am = am_factory(["worker:0"])
    env = oom_env(
        tmp_path,
        am,
        oom_texts.TF_OOM_STDERR,
        MELON_FRAMEWORK="tensorflow",
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_GPU_MEMORY_MB=1024,
    )
    rc, out, err = run_logged(tmp_path, env)
    assert rc == 1, err
    assert not any("oom" in h for h in am.heartbeats)
    assert (
        "the user's process ran out of host memory, not GPU memory (the host's memory (TensorFlow's CPU device)): "
        "tensorflow.python.framework"
    ) in err


@pytest.mark.parametrize(
    "text, why",
    [
        (oom_texts.traceback_of("RuntimeError: CUDA error: out of memory"), "a CUDA allocation outside"),
        # the allocator held 13 MiB of its 4096 and failed 12.5 MiB more: the GPU was full of other memory
        (oom_texts.traceback_of(oom_texts.TORCH_1_OOM_LINE), "far below its cap of 4096 MiB"),
    ],
)
def test_an_oom_outside_the_allocator_asks_for_a_larger_context_reserve(tmp_path, am_factory, inventory, text, why):
    am = am_factory(["worker:0"])
    env = oom_env(
        tmp_path,
        am,
        text,
        MELON_FRAMEWORK="pytorch",
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_GPU_MEMORY_MB=4096,
        MELON_GPU_CONTEXT_MB=1024,
    )
    rc, out, err = run_logged(tmp_path, env)
    assert rc == 76, err
    oom = am.heartbeats[-1]["oom"]
    assert oom["kind"] == "outside" and oom["cap_mb"] == 4096, oom
    assert "ran out of GPU memory outside its framework's allocator (its context reserve: 1024 MiB)" in err
    assert why in err


def test_a_crash_after_an_oom_the_code_caught_keeps_its_exit_code(tmp_path, am_factory, inventory):
    """The user's code caught a torch OOM (to halve its batch, logging its traceback), then died of a ValueError:
    the bootstrap records the ValueError as the exception that ended it, so it is no OOM whatever the text says."""
    am = am_factory(["worker:0"])
    fatal = tmp_path / "melon-fatal.json"
    env = oom_env(
        tmp_path,
        am,
        oom_texts.CAUGHT_TORCH_OOM,
        USER_RAISE="shapes (3,4) and (5,6) not aligned",
        MELON_FRAMEWORK="pytorch",
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_GPU_MEMORY_MB=4096,
    )
    rc, out, err = run_logged(tmp_path, env)
    assert rc == 1, err
    assert "torch.OutOfMemoryError: CUDA out of memory" in err and "ValueError: shapes" in err
    assert not any("oom" in h for h in am.heartbeats)
    assert "ran out of" not in err
    (record,) = [json.loads(line) for line in fatal.read_text().splitlines()]  # what the executor decided from
    assert record["type"] == "builtins.ValueError" and record["message"] == "shapes (3,4) and (5,6) not aligned"


def victim_executor(tmp_path, monkeypatch, neighbour_pid, neighbour_used_mb, notebook=None):
    """An executor in shared mode on NVML's GPU 0 (the fake: tests/fake_nvml.py), holding 4500 MiB on the real
    ledger beside a neighbour task's 4500 MiB; its user's process has just died of a CUDA OOM (stderr's tail)."""
    from airflow_provider_melon.gpu import devices
    from airflow_provider_melon.runtime import oom as oom_mod
    from airflow_provider_melon.runtime.config import Config
    from tests.fake_nvml import fake_nvml

    monkeypatch.chdir(tmp_path)
    cfg = Config.from_env(
        {
            "MELON_ROLE": "worker",
            "MELON_INDEX": "0",
            "MELON_AM_URL": "http://am:1",
            "MELON_SECRET": "s",
            "MELON_ENTRYPOINT": "true",
            "MELON_GPU_MEMORY_MB": "3500",
            "MELON_GPU_CONTEXT_MB": "1000",
        }
    )
    ex = executor.Executor(cfg, env={})
    ex.ledger = Ledger(str(tmp_path / "ledger"))
    procs = {neighbour_pid: neighbour_used_mb, **(notebook or {})}
    device = {"uuid": "GPU-a", "name": "NVIDIA H200", "total_mb": 16384, "driver_mb": 600, "util": 0, "procs": procs}
    monkeypatch.setattr(devices, "import_pynvml", lambda: fake_nvml([device]))
    gpus = devices.nvml_gpus(env={})
    assert ex.ledger.reserve("neighbour-task", neighbour_pid, 4500, gpus) == 0
    assert ex.ledger.reserve(cfg.task_id, os.getpid(), cfg.reserve_mb, gpus) == 0
    ex.gpu_indices, ex.gpu_source, ex.gpu_total_mb, ex.largest_gpu_mb = [0], "nvml", 16384, 16384
    monkeypatch.setattr(
        oom_mod, "stderr_tail", lambda fd, since=None: oom_texts.traceback_of("RuntimeError: CUDA error: out of memory")
    )
    return ex


def test_a_victim_of_a_neighbour_beyond_its_reservation_names_the_oversubscription(tmp_path, monkeypatch, capfd):
    """The GPU is full beyond the ledger's reservations: the neighbour's process uses 11000 MiB of its 4500 MiB.
    The OOM is named as the GPU's oversubscription, with that neighbour as the culprit, so the AM retries this task
    at its old figure instead of growing it."""
    neighbour = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        ex = victim_executor(tmp_path, monkeypatch, neighbour.pid, 11000)
        oom = ex.gpu_oom(1)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert oom["oversubscribed"] is True, oom
    assert oom["culprit"] == f"task neighbour-task (pid {neighbour.pid}) uses 11000 MiB of its 4500 MiB reservation"
    assert oom["cap_mb"] == 3500 and oom["signature"] == "RuntimeError: CUDA error: out of memory"
    err = capfd.readouterr().err
    assert "the GPU was oversubscribed" in err and "neighbour-task" in err, err


def test_an_oom_within_a_calm_gpu_is_the_tasks_own(tmp_path, monkeypatch):
    neighbour = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        ex = victim_executor(tmp_path, monkeypatch, neighbour.pid, 4200)  # within its 4500 MiB
        oom = ex.gpu_oom(1)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert oom is not None and "oversubscribed" not in oom and "culprit" not in oom, oom


def test_a_heartbeat_in_a_container_sends_the_devices_rise_and_its_peak_says_device_wide(tmp_path, monkeypatch):
    """NVML's pids are the host's (YARN's Docker runtime): the sample is the GPU's rise in used memory since the
    task started, neighbours included, sent as such (gpu_memory_used_source "nvml-device"); the peak taken from it,
    less the measured CUDA context, says "nvml-device" too (gpu/learned.py takes it as an upper bound only)."""
    from airflow_provider_melon.gpu import devices
    from airflow_provider_melon.gpu.context import MEASURED_CONTEXT_MB
    from airflow_provider_melon.runtime.config import Config
    from tests.fake_nvml import fake_nvml

    class Recorder:
        bodies = []

        def post(self, path, body):
            self.bodies.append(body)
            return 200, {}

    monkeypatch.chdir(tmp_path)
    cfg = Config.from_env(
        {
            "MELON_ROLE": "worker",
            "MELON_INDEX": "0",
            "MELON_AM_URL": "http://am:1",
            "MELON_SECRET": "s",
            "MELON_ENTRYPOINT": "true",
            "MELON_GPU_MEMORY_MB": "4096",
            "MELON_GPU_CONTEXT_MB": "1024",
        }
    )
    ex = executor.Executor(cfg, env={})
    ex.am = Recorder()
    ex.gpu_indices, ex.gpu_source, ex.gpu_total_mb = [0], "nvml", 143771
    gpu = {
        "uuid": "GPU-a",
        "name": "NVIDIA H200",
        "total_mb": 143771,
        "driver_mb": 618,
        "util": 0,
        "procs": {999999911: 5000},
    }  # a neighbour, by its host pid: none is this namespace's
    monkeypatch.setattr(devices, "import_pynvml", lambda: fake_nvml([gpu]))
    ex.note_device_baseline()  # the executor takes it right before it starts the user's process
    ex.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gpu["procs"][999999912] = 3000  # the task's process: its allocator's memory and its context
        ex.heartbeat()
    finally:
        ex.child.kill()
        ex.child.wait()
    body = ex.am.bodies[-1]
    assert (body["gpu_memory_used_mb"], body["gpu_memory_used_source"]) == (3000, "nvml-device"), body
    assert (body["gpu_memory_peak_mb"], body["gpu_memory_peak_source"]) == (
        3000 - MEASURED_CONTEXT_MB,
        "nvml-device",
    ), body


# A job that always crashes with a ValueError after TensorFlow's BFC allocator warned that a caller (cuDNN's autotuner)
# did without memory it asked for; it writes its own peak, 1000 MiB, far below any cap it gets.
BFC_THEN_BUG = textwrap.dedent(
    f"""
    import json, os, sys
    peak = os.environ["MELON_PEAK_FILE"]
    with open(peak + ".tmp", "w") as f:
        json.dump({{"peak_mb": 1000}}, f)
    os.replace(peak + ".tmp", peak)
    sys.stderr.write({oom_texts.TF_BFC_WARNING!r} + "\\n")
    sys.stderr.flush()
    raise ValueError({oom_texts.VALUE_ERROR.split(": ", 1)[1]!r})
    """
)


def test_ten_nights_of_a_job_that_crashes_after_a_bfc_warning_leave_its_learned_figure_where_it_was(
    tmp_path, am_factory, inventory
):
    """Ten nightly runs of that job through the real executor (and the cap bootstrap): none is an OOM, so none is
    grown by the AM nor recorded as one, and the learned figure, resolved before each night from the runs before it
    (gpu/learned.py, hadoop/memory_history.resolve), does not move. The AM's part is its final status of the task:
    the fields of AmHttp.statusJson the history reads, from the executor's final heartbeat (an exit other than 76
    grows nothing in TaskBook)."""
    from airflow_provider_melon.gpu import learned
    from airflow_provider_melon.hadoop import memory_history
    from airflow_provider_melon.spec import JobSpec

    (tmp_path / "job.py").write_text(BFC_THEN_BUG)
    roles = JobSpec.from_dict(
        {"name": "nightly", "entrypoint": "python job.py", "roles": {"worker": {"gpu_memory": "auto:1100MiB"}}}
    ).roles
    history, figures, exits = [], [], []
    for night in range(10):
        found, _ = memory_history.resolve(lambda role: history, roles, largest_gpu_mb=16384, context_mb=1024)
        figure = found["worker"]
        figures.append(figure)
        folder = tmp_path / f"night-{night}"
        folder.mkdir()
        am = am_factory(["worker:0"])
        env = exec_env(
            folder,
            am,
            "worker",
            0,
            MELON_ENTRYPOINT=f"python {tmp_path / 'job.py'}",
            MELON_FRAMEWORK="tensorflow",
            MELON_GPU_INVENTORY=inventory(16384),
            MELON_GPU_MEMORY_MB=figure,
            MELON_GPU_CONTEXT_MB=1024,
        )
        rc, _, err = run_logged(folder, env)
        exits.append(rc)
        last = am.heartbeats[-1]
        task = {
            "role": "worker",
            "initial_gpu_memory_mb": figure,
            "expected_gpu_memory_mb": figure,  # grown only after an exit 76
            "initial_gpu_context_mb": 1024,
            "gpu_context_mb": 1024,
            "gpu_memory_peak_mb": last.get("gpu_memory_peak_mb"),
            "gpu_memory_peak_source": last.get("gpu_memory_peak_source"),
            "oom_growths": 0,
            "oom": last.get("oom"),
        }
        history.append(
            learned.run_record(
                "worker",
                [task],
                app_id=f"application_1_{night:04d}",
                state="FAILED",
                at=night,
                planned_mb=figure,
                planned_context_mb=1024,
            )
        )
    assert exits == [1] * 10, err
    assert "Allocator (GPU_0_bfc) ran out of memory" in err and "ValueError: shapes" in err
    assert figures == [1100] * 10, figures
    assert not any(r["oom"] for r in history) and {r["peak_mb"] for r in history} == {1000}
    context = learned.learned_context_mb(history)
    assert context is not None and context[0] == 1024 and "grown" not in context[1], context
