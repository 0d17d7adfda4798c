"""Measure (or, without a GPU, estimate) a training job's GPU memory, and whether packing it pays. Stdlib only.

:func:`profile_command` runs the job's command for ``MELON_PROFILE_STEPS`` steps and returns a :class:`Profile`
whose ``method`` says how it was obtained (``nvml``: measured on a GPU; ``analytic``: the memory model the script
reported; ``none``), with ``expected_mb`` = ``ceil(peak * (1 + SAFETY_MARGIN) + HEADROOM_MB)`` for the train
operator. ``python -m airflow_provider_melon.gpu.profiler`` is its command line. ``docs/internals.md``, "The
profiler", says how the peak is measured, why the margins, and the command line's options.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from airflow_provider_melon.runtime import framework as _framework
from airflow_provider_melon.runtime import outputs as _outputs
from airflow_provider_melon.runtime import peak as _peak

from . import context as _context
from . import devices as _devices
from . import policy
from .memory_model import MemoryModel

__all__ = [
    "SAFETY_MARGIN",
    "HEADROOM_MB",
    "SAMPLE_INTERVAL_S",
    "DEFAULT_GPU_MEMORY_MB",
    "SMALL_JOB_MB",
    "PROFILE_STEPS_ENV",
    "PROFILE_FILE_ENV",
    "NoGpuError",
    "Samples",
    "NvmlSampler",
    "Profile",
    "expected_mb",
    "analytic_profile",
    "profile_command",
    "report",
    "write_webhdfs",
    "main",
]

SAFETY_MARGIN = 0.10
#: MiB added to every expected figure for what does not scale with the peak (not the CUDA context: that is
#: reserved beside the cap, ``gpu_context_mb``); docs/internals.md ("The profiler") says what it covers
HEADROOM_MB = 256
SAMPLE_INTERVAL_S = 0.1
#: GPU size assumed when neither NVML nor the caller says (a 16 GiB V100/T4-class card: the conservative case).
DEFAULT_GPU_MEMORY_MB = 16384
#: Without a measured utilisation, jobs expected to need at most this much are presumed small (they leave
#: most SMs idle). A choice that errs towards "does not pay", not a figure the data anchors: in h200-colocate.json
#: ResNet-18/CIFAR (packs to 3.7x) and ResNet-50/224 (only 1.19x) hold 3208 and 3520 MiB in their allocators, so
#: memory alone does not tell them apart, and both are above it.
SMALL_JOB_MB = 2048
#: SM share presumed for a small job: ResNet-18's, read back from its 3.71x plateau (policy.implied_sm_util).
SMALL_JOB_SM_UTIL = policy.implied_sm_util(3.71)
PROFILE_STEPS_ENV = "MELON_PROFILE_STEPS"
PROFILE_FILE_ENV = "MELON_PROFILE_FILE"
MIB = 1024 * 1024


class NoGpuError(RuntimeError):
    """Raised when NVML is unusable; the message starts with ``no GPU:``."""


def expected_mb(peak_mb: float) -> int:
    """``ceil(peak * (1 + SAFETY_MARGIN) + HEADROOM_MB)`` (module docstring says why)."""
    if peak_mb < 0:
        raise ValueError(f"peak_mb must be >= 0, got {peak_mb}")
    return int(math.ceil(peak_mb * (1.0 + SAFETY_MARGIN) + HEADROOM_MB - 1e-9))


# -- NVML sampling ----------------------------------------------------------------------------------------
@dataclass
class Samples:
    """What an :class:`NvmlSampler` saw. ``source``: ``process`` (per-pid accounting matched the tree) or
    ``device`` (used memory over the pre-start baseline, summed over the sampled devices)."""

    peak_mb: float
    mean_sm_util: Optional[float]
    samples: int
    source: str
    devices: List[int]
    gpu_total_mb: int


class NvmlSampler:
    """Samples NVML every ``interval_s`` in a daemon thread while the process tree of ``pid`` runs.

    ``start()`` raises :class:`NoGpuError` ("no GPU: ...") when pynvml is missing, the driver is missing or
    there is no device. ``pid`` may be set after construction (``sampler.pid = proc.pid``) but before the
    first sample matters; ``None`` samples device memory only. ``devices`` restricts the GPUs (default: those
    in ``CUDA_VISIBLE_DEVICES`` when it lists indices, else all). ``nvml`` injects a pynvml-like module.
    """

    def __init__(
        self,
        pid: Optional[int] = None,
        *,
        interval_s: float = SAMPLE_INTERVAL_S,
        devices: Optional[Sequence[int]] = None,
        nvml: _devices.Nvml = None,
        proc_root: str = "/proc",
    ):
        self.pid = pid
        self.interval_s = interval_s
        self._devices_arg = list(devices) if devices is not None else None
        self._nvml = nvml
        self._proc_root = proc_root
        self._handles: List[Any] = []  # NVML device handles
        self._indices: List[int] = []
        self._baseline: Dict[int, float] = {}
        self._peak_proc = 0.0
        self._peak_dev = 0.0
        self._proc_matched = False
        self._util: List[float] = []
        self._util_dev: List[float] = []
        self._n = 0
        self._total_mb = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    # setup / teardown
    def _default_devices(self, count: int) -> List[int]:
        raw = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        if raw:
            parts = [p.strip() for p in raw.split(",") if p.strip()]
            if all(p.isdigit() for p in parts):
                return [int(p) for p in parts if int(p) < count]
        return list(range(count))

    def open(self) -> "NvmlSampler":
        """Initialise NVML and take the baseline; raises :class:`NoGpuError`."""
        nv = self._nvml
        if nv is None:
            try:
                nv = _devices.import_pynvml()
            except Exception as exc:
                raise NoGpuError(f"no GPU: pynvml is not importable ({exc})") from exc
        try:
            nv.nvmlInit()
        except Exception as exc:
            raise NoGpuError(f"no GPU: NVML did not initialise ({exc})") from exc
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            self._shutdown(nv)
            raise NoGpuError(f"no GPU: NVML could not count devices ({exc})") from exc
        if count == 0:
            self._shutdown(nv)
            raise NoGpuError("no GPU: NVML found 0 devices")
        self._nvml = nv
        self._indices = self._devices_arg if self._devices_arg is not None else self._default_devices(count)
        self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in self._indices]
        for i, h in zip(self._indices, self._handles):
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            self._baseline[i] = mem.used / MIB
            self._total_mb = max(self._total_mb, int(mem.total // MIB))
        return self

    @staticmethod
    def _shutdown(nv: _devices.Nvml) -> None:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass

    def start(self) -> "NvmlSampler":
        if not self._handles:
            self.open()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="melon-nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # a transient NVML error must not kill the profile
                pass
            self._stop.wait(self.interval_s)

    def sample_once(self) -> None:
        """One sample of every device: the tree's memory (per pid), device memory over baseline, utilisation."""
        nv = self._nvml
        tree = set(_devices.process_tree(self.pid, self._proc_root)) if self.pid is not None else set()
        proc_mb, dev_mb, utils_tree, utils_all = 0.0, 0.0, [], []
        for i, h in zip(self._indices, self._handles):
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            dev_mb += max(0.0, mem.used / MIB - self._baseline.get(i, 0.0))
            on_this = 0.0
            if tree:
                try:
                    procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
                except Exception:
                    procs = []
                for p in procs:
                    used = getattr(p, "usedGpuMemory", None)
                    if p.pid in tree and used is not None:
                        on_this += used / MIB
            try:
                util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu) / 100.0
            except Exception:
                util = None
            if util is not None:
                utils_all.append(util)
                if on_this > 0:
                    utils_tree.append(util)
            proc_mb += on_this
        with self._lock:
            self._n += 1
            self._peak_dev = max(self._peak_dev, dev_mb)
            if proc_mb > 0:
                self._proc_matched = True
                self._peak_proc = max(self._peak_proc, proc_mb)
            if utils_tree:
                self._util.append(max(utils_tree))
            if utils_all and (dev_mb > 0 or proc_mb > 0):
                self._util_dev.append(max(utils_all))

    def stop(self) -> Samples:
        """Stop the thread, shut NVML down, return what was seen."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval_s + 1)
        if self._nvml is not None and self._handles:
            self._shutdown(self._nvml)
        return self.result()

    def result(self) -> Samples:
        with self._lock:
            if self._proc_matched:
                peak, source, utils = self._peak_proc, "process", self._util
            else:
                peak, source, utils = self._peak_dev, "device", self._util_dev
            mean = sum(utils) / len(utils) if utils else None
            return Samples(
                peak_mb=peak,
                mean_sm_util=mean,
                samples=self._n,
                source=source,
                devices=list(self._indices),
                gpu_total_mb=self._total_mb,
            )

    def __enter__(self) -> "NvmlSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the profile ------------------------------------------------------------------------------------------
@dataclass
class Profile:
    """One job's profile. ``method`` is ``nvml`` (measured), ``analytic`` (memory model) or ``none`` (no GPU
    and no model to estimate from: ``expected_mb`` is None and ``reason`` says why)."""

    method: str
    peak_mb: Optional[float]
    mean_sm_util: Optional[float]
    step_time_s: Optional[float]
    expected_mb: Optional[int]
    packing_pays: Optional[bool]
    gpu_memory_mb: Optional[int] = None
    steps: Optional[int] = None
    returncode: Optional[int] = None
    reason: str = ""
    notes: List[str] = field(default_factory=list)
    #: where ``peak_mb`` came from (``runtime.peak.SOURCES``): the framework's own counter, or NVML less the context
    peak_source: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def analytic_profile(
    model_memory: MemoryModel,
    batch: int,
    *,
    gpu_memory_mb: int = DEFAULT_GPU_MEMORY_MB,
    sm_util: Optional[float] = None,
    step_time_s: Optional[float] = None,
    reason: str = "",
) -> Profile:
    """The no-GPU profile: ``peak = model_memory.allocator_mb(batch)`` (the model's memory without its CUDA context,
    which the executor reserves beside the cap), ``expected = expected_mb(peak)``.

    packing_pays, with no utilisation measured: unless the caller passes ``sm_util``, a job whose peak is at
    most :data:`SMALL_JOB_MB` is presumed small and given ResNet-18's SM share (``SMALL_JOB_SM_UTIL`` ~0.27,
    from its measured 3.71x plateau), a larger one is presumed to saturate the GPU (``sm_util = 1``, never
    pays). ``policy.packing_pays(sm_util, expected / gpu_memory_mb)`` then decides, so memory still vetoes a
    job that would not fit twice. This is a size proxy, not a measurement: a small model on large inputs can
    saturate a GPU; profile on a GPU to know.
    """
    peak = model_memory.allocator_mb(batch)
    exp = expected_mb(peak)
    notes = [
        f"analytic: memory model at batch {batch}: "
        + ", ".join(f"{k} {v:.1f}" for k, v in model_memory.breakdown(batch).items())
        + " MiB"
    ]
    if sm_util is None:
        presumed_small = peak <= SMALL_JOB_MB
        util = SMALL_JOB_SM_UTIL if presumed_small else 1.0
        notes.append(
            f"no utilisation measured: presumed {'small' if presumed_small else 'GPU-saturating'} "
            f"from its size ({peak:.0f} MiB vs {SMALL_JOB_MB} MiB), sm_util {util:.2f}"
        )
    else:
        util = sm_util
    mem_fraction = min(1.0, max(exp, 1) / float(gpu_memory_mb))
    pays = policy.packing_pays(util, mem_fraction)
    return Profile(
        method="analytic",
        peak_mb=round(peak, 1),
        mean_sm_util=None,
        step_time_s=step_time_s,
        expected_mb=exp,
        packing_pays=pays,
        gpu_memory_mb=int(gpu_memory_mb),
        reason=reason,
        notes=notes,
    )


def report(
    *,
    step_time_s: Optional[float] = None,
    steps: Optional[int] = None,
    seconds: Optional[float] = None,
    memory_model: Optional[MemoryModel] = None,
    batch: Optional[int] = None,
    path: Optional[str] = None,
) -> bool:
    """For training scripts: tell the profiler the step time and/or the model (for the no-GPU path).

    Writes JSON to ``path`` or ``$MELON_PROFILE_FILE`` (atomically); a no-op returning False when neither is
    set, so scripts can call it unconditionally.
    """
    path = path or os.environ.get(PROFILE_FILE_ENV)
    if not path:
        return False
    data: dict[str, Any] = {}
    if step_time_s is not None:
        data["step_time_s"] = float(step_time_s)
    if steps is not None and seconds is not None:
        data.update(steps=int(steps), seconds=float(seconds))
    if memory_model is not None:
        data["memory_model"] = memory_model.to_dict()
    if batch is not None:
        data["batch"] = int(batch)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)
    return True


def _read_report(path: str) -> dict[str, Any]:
    try:
        with open(path) as fh:
            data: dict[str, Any] = json.load(fh)  # what report() wrote
            return data
    except (OSError, ValueError):
        return {}


@dataclass
class _Run:
    """What one profiled run of a command left: its exit code and wall time, NVML's samples (None without a GPU:
    ``no_gpu`` says why), the script's report and the framework's peak file."""

    returncode: int
    wall_s: float
    samples: Optional[Samples]
    no_gpu: str
    report: dict[str, Any]
    counter: Optional[Tuple[Optional[int], str]]


def _run_sampled(
    argv: Sequence[str],
    steps: int,
    env: Optional[Mapping[str, str]],
    interval_s: float,
    timeout: Optional[float],
    sampler_factory: Optional[Callable[[], NvmlSampler]],
    stdout: Optional[Union[int, IO[Any]]],
    stderr: Optional[Union[int, IO[Any]]],
) -> _Run:
    """Run ``argv`` for ``steps`` steps under the peak bootstrap, with NVML sampling it where there is a GPU."""
    run_env = dict(os.environ if env is None else env)
    run_env[PROFILE_STEPS_ENV] = str(int(steps))
    fd, report_path = tempfile.mkstemp(prefix="melon-profile-", suffix=".json")
    os.close(fd)
    os.unlink(report_path)  # the script creates it if it reports
    run_env[PROFILE_FILE_ENV] = report_path
    fd, peak_path = tempfile.mkstemp(prefix="melon-peak-", suffix=".json")
    os.close(fd)
    os.unlink(peak_path)
    run_env["MELON_PEAK_FILE"] = peak_path
    boot_dir = None
    if not run_env.get("MELON_CAP_MB"):  # under a cap the executor's bootstrap is there already, and writes it
        boot, boot_dir = _framework.peak_env(run_env)
        run_env.update(boot)
    sampler = sampler_factory() if sampler_factory else NvmlSampler(interval_s=interval_s)
    no_gpu = ""
    try:
        sampler.open()
    except NoGpuError as exc:
        no_gpu = str(exc)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(list(argv), env=run_env, stdout=stdout, stderr=stderr)
        if not no_gpu:
            sampler.pid = proc.pid
            sampler.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        wall = time.monotonic() - t0
        samples = sampler.stop() if not no_gpu else None
        return _Run(rc, wall, samples, no_gpu, _read_report(report_path), _peak.read_file(peak_path))
    finally:
        for path in (report_path, peak_path):
            try:
                os.unlink(path)
            except OSError:
                pass
        if boot_dir is not None:
            shutil.rmtree(boot_dir, ignore_errors=True)


def _step_time(rep: Mapping[str, Any], wall: float, steps: int, notes: List[str]) -> float:
    """The step time: the script's report if it gave one, else the wall time over the steps (noted in ``notes``)."""
    if "step_time_s" in rep:
        step_time = float(rep["step_time_s"])
        notes.append("step time reported by the script")
    elif rep.get("steps"):
        step_time = float(rep["seconds"]) / int(rep["steps"])
        notes.append("step time reported by the script (seconds / steps)")
    else:
        step_time = wall / steps
        notes.append(f"step time = wall time / steps ({wall:.2f} s / {steps}); includes start-up")
    return step_time


def _nvml_profile(
    run: _Run,
    steps: int,
    step_time: float,
    gpu_memory_mb: Optional[int],
    interval_s: float,
    context_mb: int,
    reason: str,
    notes: List[str],
) -> Profile:
    """The profile from NVML's samples of ``run`` (``method="nvml"``)."""
    samples, counter, rc = run.samples, run.counter, run.returncode
    assert samples is not None
    total = gpu_memory_mb or samples.gpu_total_mb or DEFAULT_GPU_MEMORY_MB
    by_process = samples.source == "process"
    got = _peak.task_peak(
        counter,
        samples.peak_mb if by_process else None,
        context_mb,
        device_mb=None if by_process else samples.peak_mb,
    )
    assert got is not None  # samples.peak_mb is a figure (>= 0), which task_peak falls back to
    peak, peak_source = got
    exp = expected_mb(peak)
    notes.append(
        f"nvml: {samples.samples} samples every {interval_s * 1000:.0f} ms on GPUs {samples.devices}, "
        f"peak {samples.peak_mb:.0f} MiB by {samples.source}"
    )
    notes.append(
        f"peak {peak} MiB from {_PEAK_SOURCES[peak_source]}"
        + (f", less a {context_mb} MiB CUDA context" if peak_source.startswith("nvml") else "")
    )
    if samples.mean_sm_util is not None:
        pays = policy.packing_pays(max(1e-6, min(1.0, samples.mean_sm_util)), min(1.0, max(exp, 1) / total))
        notes.append("packing_pays from mean utilization.gpu, an upper bound on the SM share (conservative)")
    else:
        pays = None
        notes.append("no utilisation sample while the job held GPU memory: packing_pays unknown")
    return Profile(
        method="nvml",
        peak_mb=peak,
        mean_sm_util=samples.mean_sm_util,
        step_time_s=step_time,
        expected_mb=exp,
        packing_pays=pays,
        gpu_memory_mb=int(total),
        steps=steps,
        returncode=rc,
        reason=reason,
        notes=notes,
        peak_source=peak_source,
    )


def profile_command(
    argv: Sequence[str],
    steps: int,
    env: Optional[Mapping[str, str]] = None,
    *,
    interval_s: float = SAMPLE_INTERVAL_S,
    gpu_memory_mb: Optional[int] = None,
    timeout: Optional[float] = None,
    sampler_factory: Optional[Callable[[], NvmlSampler]] = None,
    stdout: Optional[Union[int, IO[Any]]] = None,
    stderr: Optional[Union[int, IO[Any]]] = None,
    context_mb: int = _context.MEASURED_CONTEXT_MB,
) -> Profile:
    """Run ``argv`` with ``MELON_PROFILE_STEPS=steps`` (and ``MELON_PROFILE_FILE``) and profile it.

    With a GPU: :class:`NvmlSampler` samples while it runs -> ``method="nvml"``. Without one the command still
    runs (it checks the entrypoint and may :func:`report` its memory model and step time): with a reported
    model the result is :func:`analytic_profile`'s (``method="analytic"``), else ``method="none"`` whose
    ``reason`` starts with ``no GPU:``. A non-zero exit is recorded in ``returncode`` and ``reason``.
    ``env`` defaults to this process's environment; ``steps`` must be >= 1. The peak is the framework's own
    allocator peak when the command's TensorFlow or PyTorch wrote it (``MELON_PEAK_FILE``, the cap bootstrap's),
    else NVML's less ``context_mb`` (the CUDA context NVML's reading holds: ``gpu.context.MEASURED_CONTEXT_MB``):
    ``runtime.peak.task_peak``.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not argv:
        raise ValueError("no command to profile")
    run = _run_sampled(argv, steps, env, interval_s, timeout, sampler_factory, stdout, stderr)
    notes: List[str] = []
    step_time = _step_time(run.report, run.wall_s, steps, notes)
    rc, rep, no_gpu = run.returncode, run.report, run.no_gpu
    reason = f"command exited {rc}" if rc != 0 else ""
    if run.samples is not None:
        return _nvml_profile(run, steps, step_time, gpu_memory_mb, interval_s, context_mb, reason, notes)

    if "memory_model" in rep:
        model = MemoryModel.from_dict(rep["memory_model"])
        batch = int(rep.get("batch", 0))
        prof = analytic_profile(
            model,
            batch,
            gpu_memory_mb=gpu_memory_mb or DEFAULT_GPU_MEMORY_MB,
            step_time_s=step_time,
            reason=(reason + "; " if reason else "") + no_gpu,
        )
        prof.steps, prof.returncode = steps, rc
        prof.notes = [f"{no_gpu}: estimated from the model the script reported"] + prof.notes + notes
        return prof
    return Profile(
        method="none",
        peak_mb=None,
        mean_sm_util=None,
        step_time_s=step_time,
        expected_mb=None,
        packing_pays=None,
        gpu_memory_mb=gpu_memory_mb,
        steps=steps,
        returncode=rc,
        reason=(
            no_gpu + " and the script reported no memory model "
            "(call airflow_provider_melon.gpu.profiler.report(memory_model=..., batch=...))"
            + (f"; {reason}" if reason else "")
        ),
        notes=notes,
    )


_PEAK_SOURCES = {
    "tensorflow": "TensorFlow's allocator (get_memory_info peak)",
    "torch": "PyTorch's caching allocator (max_memory_reserved)",
    "user": "the script's own peak file",
    "nvml-process": "NVML's per-process samples",
    "nvml-device": "NVML's device-wide samples over the baseline",
}


def write_webhdfs(
    base_url: str,
    path: str,
    data: bytes,
    user: Optional[str] = None,
    *,
    timeout: float = 60.0,
    use_hdfs_package: bool = True,
) -> None:
    """Write ``data`` to HDFS ``path`` (overwriting) through WebHDFS at ``base_url`` (``http://nn:9870``).

    Uses the ``hdfs`` package's ``InsecureClient`` when it is importable (and ``use_hdfs_package``); otherwise
    the two-step WebHDFS CREATE with urllib: ``PUT <base>/webhdfs/v1<path>?op=CREATE&overwrite=true
    &user.name=<user>`` without a body answers ``307`` with the DataNode's ``Location`` (a NameNode started
    with ``noredirect`` answers ``200 {"Location": ...}`` instead); the data then goes to that location with a
    second ``PUT``, which answers ``201 Created``. Several NameNode URLs may be given separated by ``;`` or
    ``,``: each is tried in turn (a standby refuses with 403 StandbyException). Simple authentication only.
    Raises ``OSError`` on failure.
    """
    hdfs_path = _outputs.hdfs_path(path)
    if hdfs_path is None:
        raise OSError(f"{path!r} is not in HDFS: give an hdfs:// URI or an absolute HDFS path")
    path = hdfs_path
    urls = [u.strip().rstrip("/") for u in base_url.replace(",", ";").split(";") if u.strip()]
    if not urls:
        raise OSError("no WebHDFS URL given")
    if use_hdfs_package:
        try:
            from hdfs import InsecureClient  # noqa: PLC0415 - optional in the container
        except ImportError:
            InsecureClient = None  # noqa: N806
        if InsecureClient is not None:
            InsecureClient(";".join(urls), user=user, timeout=timeout).write(path, data=data, overwrite=True)
            return
    import urllib.error  # noqa: PLC0415
    import urllib.parse  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    query = {"op": "CREATE", "overwrite": "true"}
    if user:
        query["user.name"] = user
    errors = []
    for url in urls:
        create = f"{url}/webhdfs/v1{urllib.parse.quote(path)}?{urllib.parse.urlencode(query)}"
        location = None
        try:
            with urllib.request.urlopen(
                urllib.request.Request(create, method="PUT", data=b""), timeout=timeout
            ) as resp:  # 200 only with noredirect
                location = json.loads(resp.read().decode("utf-8") or "{}").get("Location")
        except urllib.error.HTTPError as exc:
            if exc.code in (307, 302, 303):  # urllib does not follow a redirect of a PUT
                location = exc.headers.get("Location")
            else:
                errors.append(f"{url}: HTTP {exc.code} {exc.read()[:300]!r}")
                continue
        except (OSError, ValueError) as exc:
            errors.append(f"{url}: {exc}")
            continue
        if not location:
            errors.append(f"{url}: no Location in the CREATE answer")
            continue
        req = urllib.request.Request(
            location, method="PUT", data=data, headers={"Content-Type": "application/octet-stream"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                if resp.status not in (200, 201):
                    raise OSError(f"WebHDFS write to {location} answered {resp.status}")
        except urllib.error.HTTPError as exc:
            raise OSError(f"WebHDFS write to {location} failed: HTTP {exc.code} {exc.read()[:300]!r}") from None
        return
    raise OSError(f"WebHDFS CREATE of {path} failed: " + "; ".join(errors))


def _resolve_python(cmd: List[str]) -> List[str]:
    if cmd and cmd[0] in ("python", "python3"):
        return [sys.executable] + cmd[1:]
    return cmd


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m airflow_provider_melon.gpu.profiler --steps N [--gpu-memory-mb M] [--output ...] -- cmd ...``.

    The command's own output passes through (to stderr, so stdout stays parseable); the profile is printed
    as one JSON line, the last line of stdout. Exit status without ``--output``: 0 with a profile (nvml or
    analytic), 2 when there is none (no GPU and no reported model), else the command's non-zero status. With
    ``--output`` see the module docstring.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        i = argv.index("--")
        own, cmd = argv[:i], argv[i + 1 :]
    else:
        own, cmd = argv, []
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider_melon.gpu.profiler",
        description="Profile a training command's GPU memory for MeLoN.",
    )
    parser.add_argument("--steps", type=int, default=int(os.environ.get(PROFILE_STEPS_ENV, "20")))
    parser.add_argument("--gpu-memory-mb", type=int, default=None, help="GPU size for packing_pays (default NVML's)")
    parser.add_argument("--interval-ms", type=float, default=SAMPLE_INTERVAL_S * 1000)
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--output", default=None, help="also write the profile document here (local or HDFS path)")
    parser.add_argument("--webhdfs", default=None, help="WebHDFS base URL(s): --output is then an HDFS path")
    parser.add_argument("--hdfs-user", default=os.environ.get("HADOOP_USER_NAME") or os.environ.get("USER"))
    args = parser.parse_args(own)
    if not cmd:
        parser.error("give the command after --")
    prof = profile_command(
        _resolve_python(cmd),
        args.steps,
        interval_s=args.interval_ms / 1000.0,
        gpu_memory_mb=args.gpu_memory_mb,
        timeout=args.timeout,
        stdout=sys.stderr,
        stderr=sys.stderr,
    )
    sys.stdout.write(prof.to_json() + "\n")
    sys.stdout.flush()
    rc = 0 if prof.expected_mb is not None else 2
    if prof.returncode:
        rc = int(prof.returncode) if 0 < prof.returncode < 256 else 1
    if args.output:
        doc = dict(prof.to_dict(), app_id=os.environ.get("MELON_APP_ID"), container_id=os.environ.get("CONTAINER_ID"))
        data = json.dumps(doc, sort_keys=True).encode("utf-8")
        try:
            if args.webhdfs:
                write_webhdfs(args.webhdfs, args.output, data, args.hdfs_user)
            else:
                tmp = f"{args.output}.tmp{os.getpid()}"
                with open(tmp, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, args.output)
        except Exception as exc:  # noqa: BLE001 - say what failed, fail the run
            sys.stderr.write(f"[melon-profiler] could not write the profile to {args.output}: {exc}\n")
            return rc if prof.returncode else 1
        sys.stderr.write(f"[melon-profiler] profile ({prof.method}) written to {args.output}\n")
        if rc == 2:
            rc = 0
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
