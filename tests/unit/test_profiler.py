"""gpu.profiler: NVML sampling (against a fake NVML module), the no-GPU path, real subprocess runs."""

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

from airflow_provider_melon.gpu import profiler
from airflow_provider_melon.gpu.context import MEASURED_CONTEXT_MB
from airflow_provider_melon.gpu.memory_model import MemoryModel

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MIB = 2**20


class FakeNvml(types.ModuleType):
    """Just the pynvml calls the sampler makes. ``procs()`` returns [(pid, used_mib)] for every device;
    ``used`` and ``util`` are per-device lists of values handed out one per sample (the last one repeats)."""

    def __init__(self, n=1, total_mib=16384, used=None, util=None, procs=lambda: [], fail_init=None):
        super().__init__("pynvml")
        self.n, self.total, self.procs_fn, self.fail_init = n, total_mib, procs, fail_init
        self.used = used or [[0.0]] * n
        self.util = util or [[0]] * n
        self.calls = {"init": 0, "shutdown": 0}
        self._mem_i = [0] * n
        self._util_i = [0] * n

    def nvmlInit(self):
        self.calls["init"] += 1
        if self.fail_init:
            raise RuntimeError(self.fail_init)

    def nvmlShutdown(self):
        self.calls["shutdown"] += 1

    def nvmlDeviceGetCount(self):
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetMemoryInfo(self, h):
        seq, i = self.used[h], self._mem_i[h]
        self._mem_i[h] = min(i + 1, len(seq) - 1)
        return types.SimpleNamespace(used=int(seq[i] * MIB), total=self.total * MIB, free=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=int(mib * MIB)) for pid, mib in self.procs_fn() if h == 0]

    def nvmlDeviceGetUtilizationRates(self, h):
        seq, i = self.util[h], self._util_i[h]
        self._util_i[h] = min(i + 1, len(seq) - 1)
        return types.SimpleNamespace(gpu=seq[i], memory=0)


def test_expected_mb_formula():
    # ceil(1000 x 1.1 + 256) = 1356; ResNet-18 on the H200 (1654 MiB by NVML): ceil(1819.4 + 256) = 2076
    assert profiler.expected_mb(1000) == 1356
    assert profiler.expected_mb(1653.875) == 2076
    assert profiler.expected_mb(0) == 256
    with pytest.raises(ValueError):
        profiler.expected_mb(-1)


def test_no_gpu_is_said_clearly(monkeypatch):
    broken = FakeNvml(fail_init="NVML Shared Library Not Found")
    with pytest.raises(profiler.NoGpuError, match=r"^no GPU: NVML did not initialise \(NVML Shared Library"):
        profiler.NvmlSampler(nvml=broken).start()
    with pytest.raises(profiler.NoGpuError, match="^no GPU: NVML found 0 devices"):
        profiler.NvmlSampler(nvml=FakeNvml(n=0)).start()
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(profiler.NoGpuError, match="^no GPU: pynvml is not importable"):
        profiler.NvmlSampler().start()


def test_sampler_peak_by_process_tree_and_mean_util(monkeypatch):
    me = os.getpid()
    seen = iter([[(me, 100)], [(me, 900), (999999, 5000)], [(me, 400)], [(me, 400)]])
    fake = FakeNvml(used=[[1000, 1100, 1900, 1400, 1400]], util=[[10, 50, 90, 70]], procs=lambda: next(seen))
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # the sampler's lazy import picks the fake up
    s = profiler.NvmlSampler(pid=me, interval_s=3600)
    s.open()  # baseline: 1000 MiB used before the start
    for _ in range(4):
        s.sample_once()
    r = s.stop()
    # the foreign pid's 5000 MiB is not ours; peak by process = 900
    assert (r.source, r.peak_mb, r.samples, r.gpu_total_mb) == ("process", 900, 4, 16384)
    assert r.mean_sm_util == pytest.approx((0.1 + 0.5 + 0.9 + 0.7) / 4)  # one util reading per sample
    assert fake.calls == {"init": 1, "shutdown": 1}


def test_sampler_falls_back_to_device_memory_over_baseline():
    # pids invisible (PID namespace): used memory over the 500 MiB baseline, summed over both GPUs
    fake = FakeNvml(n=2, used=[[500, 700, 2500, 600], [100, 100, 400, 100]], util=[[40, 80, 20], [0, 0, 0]])
    s = profiler.NvmlSampler(pid=os.getpid(), nvml=fake, interval_s=3600).open()
    for _ in range(3):
        s.sample_once()
    r = s.result()
    assert r.source == "device" and r.peak_mb == (2500 - 500) + (400 - 100)
    assert r.mean_sm_util == pytest.approx((0.4 + 0.8 + 0.2) / 3)
    assert r.devices == [0, 1]


def test_sampler_thread_samples_every_interval():
    fake = FakeNvml(used=[[0, 50]], util=[[30]])
    import time

    with profiler.NvmlSampler(nvml=fake, interval_s=0.01) as s:
        time.sleep(0.3)
    r = s.result()
    assert r.samples >= 5 and r.peak_mb == 50


def test_devices_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    s = profiler.NvmlSampler(nvml=FakeNvml(n=2)).open()
    assert s.result().devices == [1]


SCRIPT = textwrap.dedent("""
    import json, os, sys
    steps = int(os.environ["MELON_PROFILE_STEPS"])
    print("trained", steps, "steps")
    sys.path.insert(0, {repo!r})
    from airflow_provider_melon.gpu.profiler import report
    from airflow_provider_melon.gpu.memory_model import MemoryModel
    if "model" in sys.argv:
        report(step_time_s=0.125, memory_model=MemoryModel(params=2**20, optimizer_slots=2,
               activation_bytes_per_sample=2**20, workspace_mb=64, framework_overhead_mb=300), batch=32)
    sys.exit(int(sys.argv[1]))
""")


def _script(tmp_path):
    p = tmp_path / "train.py"
    p.write_text(SCRIPT.format(repo=REPO))
    return str(p)


def _no_gpu_factory():
    return profiler.NvmlSampler(nvml=FakeNvml(fail_init="Driver Not Loaded"))


def test_profile_command_runs_subprocess_with_steps_no_gpu_no_model(tmp_path, capfd):
    prof = profiler.profile_command([sys.executable, _script(tmp_path), "0"], 7, sampler_factory=_no_gpu_factory)
    assert "trained 7 steps" in capfd.readouterr().out  # MELON_PROFILE_STEPS reached the script
    assert prof.method == "none" and prof.expected_mb is None and prof.returncode == 0
    assert prof.reason.startswith("no GPU: NVML did not initialise (Driver Not Loaded)")
    assert prof.step_time_s > 0 and "wall time / steps" in prof.notes[0]


def test_profile_command_no_gpu_uses_the_reported_model(tmp_path):
    prof = profiler.profile_command(
        [sys.executable, _script(tmp_path), "0", "model"], 3, sampler_factory=_no_gpu_factory, gpu_memory_mb=16384
    )
    # memory model: 16 + 32 + 64 + 300 = 412 MiB, of which the allocator's 112 (the 300 MiB CUDA context is reserved
    # beside the cap, gpu_context_mb) -> expected ceil(112 x 1.1 + 256) = 380
    assert prof.method == "analytic" and prof.peak_mb == 112 and prof.expected_mb == 380
    assert prof.step_time_s == 0.125
    assert "no GPU" in prof.reason and "no GPU" in prof.notes[0]
    assert prof.packing_pays is True  # 112 MiB <= 2 GiB -> presumed small; 380/16384 of the GPU


def test_profile_command_nvml_path_with_fake(tmp_path):
    holder = {}

    def factory():
        fake = FakeNvml(
            total_mib=143771,
            used=[[0, 1800]],
            util=[[20]],  # 1500 MiB + the measured 768 MiB context
            procs=lambda: [(holder["s"].pid, 1500 + 768)] if holder["s"].pid else [],
        )
        holder["s"] = profiler.NvmlSampler(nvml=fake, interval_s=0.02)
        return holder["s"]

    script = tmp_path / "slow.py"
    script.write_text("import os, time; assert os.environ['MELON_PROFILE_STEPS'] == '5'; time.sleep(0.4)\n")
    prof = profiler.profile_command([sys.executable, str(script)], 5, sampler_factory=factory)
    assert prof.method == "nvml" and prof.returncode == 0
    assert prof.peak_mb == 1500 and prof.expected_mb == profiler.expected_mb(1500) == 1906  # ceil(1650 + 256)
    assert prof.peak_source == "nvml-process"  # the context is reserved beside the cap: not in the peak too
    assert prof.mean_sm_util == pytest.approx(0.2)
    assert prof.gpu_memory_mb == 143771
    assert prof.packing_pays is True  # gain min(1/0.2, 143771/1907) = 5 >= 1.5


def test_the_nvml_peak_is_without_the_measured_context_not_the_reserve(tmp_path):
    """Profiled inside a shared task (MELON_GPU_CONTEXT_MB, the reserve, 1024 MiB): NVML's per-process reading holds
    the process's context, which the H200 runs measured (gpu/context.py), not the reserve's margin above it."""
    script = tmp_path / "slow.py"
    script.write_text("import time; time.sleep(0.4)\n")
    env = {k: v for k, v in os.environ.items() if k != "MELON_PEAK_FILE"}
    env["MELON_GPU_CONTEXT_MB"] = "1024"
    prof = profiler.profile_command(
        [sys.executable, str(script)], 5, env=env, sampler_factory=nvml_sampler(1500 + MEASURED_CONTEXT_MB)
    )
    assert (prof.peak_mb, prof.peak_source) == (1500, "nvml-process"), prof.notes


def nvml_sampler(process_mib):
    """A sampler whose NVML sees the command's tree at ``process_mib`` (the context included)."""
    holder = {}

    def factory():
        fake = FakeNvml(
            total_mib=143771,
            used=[[0, process_mib]],
            util=[[20]],
            procs=lambda: [(holder["s"].pid, process_mib)] if holder["s"].pid else [],
        )
        holder["s"] = profiler.NvmlSampler(nvml=fake, interval_s=0.02)
        return holder["s"]

    return factory


def test_the_frameworks_counter_wins_over_sampling(tmp_path):
    """The recorded ResNet-18 run on the H200 (benchmarks/data/h200-colocate.json, k=1): NVML's sampled peak was
    1653.9 MiB, torch's own max_memory_reserved 3208 MiB: the sampling missed the peak."""
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import json, os, time
        path = os.environ["MELON_PEAK_FILE"]
        with open(path + ".tmp", "w") as f:
            json.dump({"peak_mb": 3208, "source": "torch"}, f)
        os.replace(path + ".tmp", path)
        time.sleep(0.2)
        """)
    )
    prof = profiler.profile_command(
        [sys.executable, str(script)],
        5,
        sampler_factory=nvml_sampler(1654),
        env={k: v for k, v in os.environ.items() if k != "MELON_PEAK_FILE"},
    )
    assert (prof.method, prof.peak_mb, prof.peak_source) == ("nvml", 3208, "torch"), prof.notes
    assert prof.expected_mb == profiler.expected_mb(3208)
    assert "peak 3208 MiB from PyTorch's caching allocator (max_memory_reserved)" in prof.notes


def test_the_profiled_command_writes_its_frameworks_counter_without_a_cap(tmp_path):
    """No cap in a profile job (it has whole GPUs): the bootstrap only writes the peak. torch is the fake that follows
    torch/cuda's semantics (tests/unit/test_cap_bootstrap.py)."""
    from tests.unit.test_cap_bootstrap import FAKE_TORCH, fake

    env = {k: v for k, v in os.environ.items() if not k.startswith("MELON_") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=fake(tmp_path, "torch", FAKE_TORCH), FAKE_PEAK_BYTES=str(3208 * MIB))
    out = tmp_path / "calls.txt"
    code = f"import torch; torch.cuda._lazy_init(); open({str(out)!r}, 'w').write(repr(torch.cuda.calls))"
    prof = profiler.profile_command(
        [sys.executable, "-c", code], 5, env=env, sampler_factory=nvml_sampler(1654), context_mb=768
    )
    assert (prof.peak_mb, prof.peak_source) == (3208, "torch"), prof.notes
    assert out.read_text() == "[]"  # nothing capped: the profile job has its GPUs whole


def test_profile_command_records_failure(tmp_path):
    prof = profiler.profile_command([sys.executable, _script(tmp_path), "3"], 1, sampler_factory=_no_gpu_factory)
    assert prof.returncode == 3 and "command exited 3" in prof.reason


def test_analytic_profile_packing_rule():
    small = MemoryModel(params=11_000_000, optimizer_slots=1, activation_bytes_per_sample=4 * MIB)
    p = profiler.analytic_profile(small, 128, gpu_memory_mb=143771)
    assert p.method == "analytic" and p.packing_pays is True and p.mean_sm_util is None
    assert "no utilisation measured" in p.notes[1]
    big = MemoryModel(params=25_600_000, optimizer_slots=2, activation_bytes_per_sample=60 * MIB)
    q = profiler.analytic_profile(big, 64, gpu_memory_mb=143771)
    assert q.peak_mb > profiler.SMALL_JOB_MB and q.packing_pays is False
    # a measured SM share overrides the size proxy; memory still vetoes (two copies must fit)
    assert profiler.analytic_profile(big, 64, gpu_memory_mb=143771, sm_util=0.3).packing_pays is True
    assert profiler.analytic_profile(big, 64, gpu_memory_mb=int(q.expected_mb * 1.2), sm_util=0.3).packing_pays is False


def test_report_is_a_noop_without_the_env(monkeypatch, tmp_path):
    monkeypatch.delenv("MELON_PROFILE_FILE", raising=False)
    assert profiler.report(step_time_s=1.0) is False
    path = tmp_path / "r.json"
    assert profiler.report(steps=10, seconds=2.5, path=str(path)) is True
    assert json.loads(path.read_text()) == {"steps": 10, "seconds": 2.5}


def test_main_cli_prints_json_last_line(tmp_path):
    # real process, real pynvml-or-not: on a GPU-less machine it must say "no GPU"; with a GPU it measures
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_melon.gpu.profiler",
            "--steps",
            "2",
            "--",
            sys.executable,
            _script(tmp_path),
            "0",
            "model",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    last = json.loads(r.stdout.strip().splitlines()[-1])
    assert "trained 2 steps" in r.stderr  # the command's output goes to stderr, stdout stays parseable
    assert r.returncode == 0
    assert last["method"] in ("nvml", "analytic")
    if last["method"] == "analytic":
        assert "no GPU" in last["reason"] and last["expected_mb"] == 380  # 112 MiB of the allocator's


def test_profiler_module_imports_no_framework():
    code = (
        "import sys; import airflow_provider_melon.gpu.profiler; "
        "bad = [x for x in ('tensorflow', 'torch', 'airflow', 'pynvml') if x in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
