"""runtime.peak: a task's peak GPU memory counts the model's memory and the CUDA context once each, and the executor's
heartbeats carry it with its source. The NVML side is tests/fake_nvml.py (pynvml's per-process ``usedGpuMemory``,
which holds the process's CUDA context as well as its allocator's memory: NVML's nvmlDeviceGetComputeRunningProcesses
documentation); no GPU is needed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_melon.gpu import devices
from airflow_provider_melon.gpu.context import MEASURED_CONTEXT_MB
from airflow_provider_melon.runtime import executor, peak
from airflow_provider_melon.runtime.config import Config
from tests.fake_nvml import fake_nvml

# ---- the rule ---------------------------------------------------------------------------------------------------


def test_the_frameworks_counter_wins_over_nvml():
    # TensorFlow preallocated its whole 4096 MiB cap; NVML shows that plus a 500 MiB context; its allocator's peak
    # (get_memory_info's "peak", in-use bytes, not the pool) is what the model needed
    assert peak.task_peak((1300, "tensorflow"), 4596, 500, cap_mb=4096) == (1300, "tensorflow")
    assert peak.task_peak((3208, "torch"), 3708, 500) == (3208, "torch")
    assert peak.task_peak(1299.2, 5000, 500) == (1300, "user")  # a bare figure is the user's script's


def test_nvml_is_the_fallback_without_the_context():
    assert peak.task_peak(None, 3708, 500) == (3208, "nvml-process")
    assert peak.task_peak((None, "torch"), 3708, 500, cap_mb=4096) == (3208, "nvml-process")  # counter not written
    assert peak.task_peak(None, 300, 500) == (0, "nvml-process")
    assert peak.task_peak(None, None, 500, device_mb=2100) == (1600, "nvml-device")
    assert peak.task_peak(None, 3708, 500, device_mb=9000) == (3208, "nvml-process")  # per-process first
    assert peak.task_peak(None, None, 500) is None


def test_a_preallocated_cap_teaches_nothing():
    # TF without memory growth (or JAX) takes its cap up front: NVML's reading at the cap says nothing of the need
    assert peak.task_peak(None, 4096 + 500, 500, cap_mb=4096) is None
    assert peak.task_peak(None, None, 500, cap_mb=4096, device_mb=4700) is None
    assert peak.task_peak(None, 4096 + 300, 1024, cap_mb=4096) is None  # a context smaller than the reserve
    assert peak.task_peak(None, 4000, 500, cap_mb=4096) == (3500, "nvml-process")


def test_bad_sources_are_refused():
    with pytest.raises(ValueError, match="counter source"):
        peak.task_peak((10, "nvml-process"), None, 0)


def learned_after(runs, file_peak, context_mb, cap_mb):
    """The learned figure of a nightly TF job without memory growth: each run is capped at the last figure × 1.1,
    preallocates it, and NVML shows the cap plus the context (the simulation of the ratchet)."""
    figure = cap_mb
    for _ in range(runs):
        got = peak.task_peak(file_peak, figure + context_mb, context_mb, cap_mb=figure)
        if got is not None:
            figure = int(got[0] * 1.1)
    return figure


def test_the_ams_sources_are_runtime_peaks():
    """The AM ranks a heartbeat's gpu_memory_peak_source with its own copy of SOURCES and COUNTERS
    (GpuMemory.PEAK_SOURCES, the first three its counters): the copy must say what this module says, in its order."""
    java = (
        Path(__file__).resolve().parents[2] / "appmaster/am/src/main/java/org/melon/yarn/GpuMemory.java"
    ).read_text()
    declared = re.search(r"PEAK_SOURCES = Collections\.unmodifiableList\(Arrays\.asList\(([^)]*)\)\)", java)
    counters = re.search(r"PEAK_COUNTERS = PEAK_SOURCES\.subList\(0, (\d+)\);", java)
    assert declared and counters, "GpuMemory.java no longer declares PEAK_SOURCES / PEAK_COUNTERS as this test reads"
    sources = tuple(re.findall(r'"([^"]+)"', declared.group(1)))
    assert sources == peak.SOURCES
    assert sources[: int(counters.group(1))] == peak.COUNTERS


def test_a_tensorflow_job_converges_instead_of_ratcheting():
    assert learned_after(12, (3000, "tensorflow"), 500, 4096) == 3300
    assert learned_after(12, None, 500, 4096) == 4096  # no counter: the figure it ran at stays


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"peak_mb": 1300}', (1300, "user")),
        ('{"peak_mb": 1299.2, "source": "torch"}', (1300, "torch")),
        ('{"source": "tensorflow"}', (None, "tensorflow")),  # announced, not written yet
        ('{"source": "nvml-process", "peak_mb": 5}', (5, "user")),  # only counters come from the file
        ('{"source": "user"}', None),
        ('{"peak_mb": 0}', (0, "user")),
        ('{"peak_mb": -5}', None),
        ('{"peak_mb": 1e999}', None),
        ('{"peak_mb": true}', None),
        ('{"peak_mb": "1300"}', None),
        ("[1300]", None),
        ('{"peak_mb": 13', None),
    ],
)
def test_read_file(tmp_path, content, expected):
    path = tmp_path / "melon-peak.json"
    path.write_text(content)
    assert peak.read_file(str(path)) == expected
    assert peak.read_file(None) is None and peak.read_file(str(tmp_path / "none.json")) is None


# ---- the executor's heartbeats ----------------------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.bodies = []

    def post(self, path, body):
        self.bodies.append(json.loads(json.dumps(body)))
        return 200, {}


def capped_executor(tmp_path, monkeypatch, used_mb, cap_mb=4096, context_mb=500):
    """An executor in shared mode on GPU 0, its user's process a real child that NVML (the fake) sees using
    ``used_mb`` MiB; its heartbeats recorded."""
    monkeypatch.chdir(tmp_path)
    cfg = Config.from_env(
        {
            "MELON_ROLE": "worker",
            "MELON_INDEX": "0",
            "MELON_AM_URL": "http://am:1",
            "MELON_SECRET": "s",
            "MELON_ENTRYPOINT": "true",
            "MELON_GPU_MEMORY_MB": str(cap_mb),
            "MELON_GPU_CONTEXT_MB": str(context_mb),
        }
    )
    ex = executor.Executor(cfg, env={})
    ex.am = Recorder()
    ex.gpu_indices, ex.gpu_source, ex.gpu_total_mb = [0], "nvml", 16384
    ex.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    monkeypatch.setattr(
        devices,
        "import_pynvml",
        lambda: fake_nvml(
            [
                {
                    "uuid": "GPU-a",
                    "name": "NVIDIA H200",
                    "total_mb": 143771,
                    "used_mb": used_mb,
                    "util": 0,
                    "procs": {ex.child.pid: used_mb},
                }
            ]
        ),
    )
    return ex


def end(ex):
    ex.child.kill()
    ex.child.wait()


def test_heartbeats_count_a_preallocating_tensorflow_run_by_its_counter(tmp_path, monkeypatch):
    ex = capped_executor(tmp_path, monkeypatch, used_mb=4096 + 500)
    try:
        ex.heartbeat()  # running: NVML shows the preallocated cap, which is no peak
        assert ex.am.bodies[-1]["gpu_memory_used_mb"] == 4596
        assert "gpu_memory_peak_mb" not in ex.am.bodies[-1], ex.am.bodies
        (tmp_path / "melon-peak.json").write_text(json.dumps({"peak_mb": 1300, "source": "tensorflow"}))
        ex.heartbeat()
        assert (ex.am.bodies[-1]["gpu_memory_peak_mb"], ex.am.bodies[-1]["gpu_memory_peak_source"]) == (
            1300,
            "tensorflow",
        )
    finally:
        end(ex)


def test_heartbeats_take_the_measured_context_out_of_nvml_and_wait_for_an_announced_counter(tmp_path, monkeypatch):
    # NVML's per-process reading holds the allocator's memory and the process's CUDA context: the context measured
    # on the H200 runs (gpu/context.py) comes out, not the reserve (1024 MiB, a scheduling margin above it)
    ex = capped_executor(tmp_path, monkeypatch, used_mb=3708, context_mb=1024)
    own = 3708 - MEASURED_CONTEXT_MB
    try:
        ex.heartbeat()
        body = ex.am.bodies[-1]
        assert (body["gpu_memory_peak_mb"], body["gpu_memory_peak_source"]) == (own, "nvml-process")
        # the bootstrap announced torch's counter: until it is written, NVML's samples are no peak
        (tmp_path / "melon-peak.json").write_text(json.dumps({"source": "torch"}))
        ex.heartbeat()
        assert "gpu_memory_peak_mb" not in ex.am.bodies[-1]
        end(ex)  # it died without writing it (SIGKILL): the final heartbeat falls back to NVML's samples
        ex.heartbeat("user process exited -9")
        assert (ex.am.bodies[-1]["gpu_memory_peak_mb"], ex.am.bodies[-1]["gpu_memory_peak_source"]) == (
            own,
            "nvml-process",
        )
    finally:
        end(ex)


def test_a_whole_gpu_tasks_nvml_peak_is_without_the_context_too(tmp_path, monkeypatch):
    ex = capped_executor(tmp_path, monkeypatch, used_mb=3708, cap_mb=0, context_mb=0)
    ex.cfg.gpus = 1  # exclusive: no cap, no reserve; NVML's reading still holds the context
    try:
        ex.heartbeat()
        body = ex.am.bodies[-1]
        assert (body["gpu_memory_peak_mb"], body["gpu_memory_peak_source"]) == (
            3708 - MEASURED_CONTEXT_MB,
            "nvml-process",
        )
    finally:
        end(ex)
