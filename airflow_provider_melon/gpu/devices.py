"""Which GPUs this node has: NVML when present, else a declared inventory, else none. Stdlib only.

:func:`list_gpus` returns the node's GPUs with their memory and NVML's per-process use, filtered by
``CUDA_VISIBLE_DEVICES`` and without GPUs in MIG mode; :func:`process_memory` and :func:`device_used_mb` give the
executor's samples. ``docs/internals.md``, "Which GPUs a node has", describes the sources and the filters.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Mapping, NamedTuple, Optional, Tuple, TypeVar

__all__ = [
    "DeviceInfo",
    "GpuList",
    "GpuReading",
    "list_gpus",
    "nvml_gpus",
    "inventory_gpus",
    "mps_active",
    "process_tree",
    "process_memory",
    "host_pids",
    "device_used_mb",
    "SOURCE_PROCESS",
    "SOURCE_DEVICE",
]

DEFAULT_MPS_PIPE_DIR = "/tmp/nvidia-mps"
MIB = 1024 * 1024
MPS_COMM = "nvidia-cuda-mps-control"[:15]

#: the ``pynvml`` module and its device handles: nvidia-ml-py ships no type hints
Nvml = Any
_T = TypeVar("_T")


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    uuid: str
    name: str
    total_mb: int
    used_mb: int = 0
    sm_util: Optional[float] = None  # NVML utilization.gpu / 100 (a time fraction; None when unknown)
    #: NVML's compute processes on the device, (host pid, MiB used, CUDA context included); None when NVML cannot
    #: say (an inventory's virtual GPU, or a process whose memory NVML does not report)
    processes: Optional[Tuple[Tuple[int, int], ...]] = None


#: the initial pid namespace's inode number (the kernel's PROC_PID_INIT_INO, include/linux/proc_ns.h)
INIT_PID_NS = 0xEFFFFFFC


def host_pids(ns_path: str = "/proc/self/ns/pid") -> bool:
    """Whether this process sees the host's pids: it is in the initial pid namespace. NVML names processes by the
    host's pids whatever namespace asks (the driver's view); in a container's own pid namespace (YARN's Docker
    runtime) such a pid is another process here, or none, so NVML's pids are matched with nothing. True when it
    cannot be told (no ``/proc/self/ns``)."""
    try:
        return os.stat(ns_path).st_ino == INIT_PID_NS
    except OSError:
        return True


#: a sample of the user's process tree's own memory (NVML per process)
SOURCE_PROCESS = "nvml-process"
#: the device's rise in used memory since the task started, neighbours included: NVML's pids are not this container's
SOURCE_DEVICE = "nvml-device"


class GpuReading(NamedTuple):
    """An NVML figure (MiB) and what it covers: :data:`SOURCE_PROCESS` or :data:`SOURCE_DEVICE`."""

    mb: int
    source: str


class GpuList(list[DeviceInfo]):
    """A list of :class:`DeviceInfo` that also says where it came from (``source``) and why it is empty."""

    def __init__(
        self, gpus: Iterable[DeviceInfo] = (), source: str = "none", reason: str = "", mig: Iterable[int] = ()
    ) -> None:
        super().__init__(gpus)
        self.source = source
        self.reason = reason
        self.mig = list(mig)  # indices of devices left out because they are in MIG mode

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"GpuList(source={self.source!r}, reason={self.reason!r}, gpus={list.__repr__(self)})"


def _s(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _visible_filter(env: Mapping[str, str]) -> Optional[set[str]]:
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None or raw.strip() == "":
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}


def import_pynvml() -> Nvml:
    """pynvml (from nvidia-ml-py, or the deprecated ``pynvml`` wrapper, whose FutureWarning is silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml  # noqa: PLC0415 - optional, lazily imported on purpose
    return pynvml


def _mig_enabled(pynvml: Nvml, h: Any) -> bool:
    """Is the device in MIG mode now (``nvmlDeviceGetMigMode``'s current mode)? False on a GPU without MIG."""
    try:
        current = pynvml.nvmlDeviceGetMigMode(h)[0]
    except Exception:  # NVML_ERROR_NOT_SUPPORTED: a GPU without MIG; or a pynvml without the call
        return False
    return bool(current == getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1))


def _processes(pynvml: Nvml, h: Any) -> Optional[Tuple[Tuple[int, int], ...]]:
    """(pid, MiB) of the device's compute processes; None when NVML does not give every process's memory."""
    try:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    except Exception:
        return None
    out = []
    for proc in procs:
        if proc.usedGpuMemory is None:  # NVML_VALUE_NOT_AVAILABLE (MIG, WDDM): the list says nothing of memory
            return None
        out.append((int(proc.pid), int(proc.usedGpuMemory) // (1024 * 1024)))
    return tuple(out)


def nvml_gpus(env: Optional[Mapping[str, str]] = None) -> GpuList:
    """GPUs as NVML sees them; empty with a reason when pynvml or the driver is missing."""
    env = os.environ if env is None else env
    try:
        pynvml = import_pynvml()
    except Exception as exc:  # ImportError, or a broken install
        return GpuList(source="none", reason=f"no GPU: NVML found no device (pynvml not importable: {exc})")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return GpuList(source="none", reason=f"no GPU: NVML found no device ({_s(exc)})")
    try:
        count = pynvml.nvmlDeviceGetCount()
        allowed = _visible_filter(env)
        out, skipped, mig = [], [], []
        for i in range(count):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = _s(pynvml.nvmlDeviceGetUUID(h))
                if allowed is not None and str(i) not in allowed and uuid not in allowed:
                    continue
                if _mig_enabled(pynvml, h):
                    mig.append(i)
                    skipped.append(
                        f"device {i} ({_s(pynvml.nvmlDeviceGetName(h))}) is in MIG mode, which MeLoN does "
                        f"not share (disable it: nvidia-smi -i {i} -mig 0, or keep this node's MIG GPUs "
                        f"out of MeLoN with CUDA_VISIBLE_DEVICES)"
                    )
                    continue
                mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                try:
                    util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
                except Exception:
                    util = None
                out.append(
                    DeviceInfo(
                        index=i,
                        uuid=uuid,
                        name=_s(pynvml.nvmlDeviceGetName(h)),
                        total_mb=int(mem.total // (1024 * 1024)),
                        used_mb=int(mem.used // (1024 * 1024)),
                        sm_util=util,
                        processes=_processes(pynvml, h),
                    )
                )
            except Exception as exc:  # e.g. a device denied to this container by cgroups
                skipped.append(f"device {i}: {_s(exc)}")
        if not out:
            why = "; ".join(skipped) if skipped else f"{count} device(s), none visible"
            if allowed == {"-1"}:
                why = f"CUDA_VISIBLE_DEVICES=-1 hides this node's {count} device(s)"
            return GpuList(source="none", reason=f"no GPU: NVML found no device ({why})", mig=mig)
        return GpuList(out, source="nvml", reason="; ".join(f"left out: {m}" for m in skipped if "MIG" in m), mig=mig)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def is_model(name: str, model: str) -> bool:
    """Whether NVML's device name ``name`` is of the GPU model ``model`` (a node's ``gpu-model`` attribute): the model
    is a word of the name, or a run of its words, case aside ("A100" in "NVIDIA A100-SXM4-80GB", "T4" in "Tesla T4";
    "A10" is not "A100")."""
    return re.search(r"(?<![0-9a-z])" + re.escape(model.lower()) + r"(?![0-9a-z])", name.lower()) is not None


def inventory_gpus(path: str) -> GpuList:
    """Virtual GPUs from an inventory JSON file (see the module docstring). Raises ValueError if malformed."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    try:
        gpus = [
            DeviceInfo(
                index=int(g["index"]),
                uuid=str(g.get("uuid", f"virtual-{g['index']}")),
                name=str(g.get("name", "virtual")),
                total_mb=int(g["total_mb"]),
                used_mb=int(g.get("used_mb", 0)),
                sm_util=g.get("sm_util"),
            )
            for g in data["gpus"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"GPU inventory {path} is malformed ({exc!r}); expected "
            '{"gpus": [{"index": 0, "total_mb": 16384}, ...]}'
        ) from exc
    if not gpus:
        return GpuList(source="none", reason=f"no GPU: inventory {path} lists no GPU")
    return GpuList(gpus, source="inventory")


def list_gpus(env: Optional[Mapping[str, str]] = None) -> GpuList:
    """This node's GPUs: NVML, else ``$MELON_GPU_INVENTORY``, else an empty list (``source == "none"``)."""
    env = os.environ if env is None else env
    found = nvml_gpus(env)
    if found:
        return found
    inventory = env.get("MELON_GPU_INVENTORY")
    if inventory:
        if not os.path.exists(inventory):
            return GpuList(source="none", reason=f"{found.reason}; inventory {inventory} does not exist")
        gpus = inventory_gpus(inventory)
        allowed = _visible_filter(env)
        # "-1" names no device: it hides the host's real GPUs (minicluster.gpu_layout on a host whose GPUs cannot be
        # split gives it with a virtual inventory), so it does not filter the inventory; a list of devices does
        if allowed is None or not gpus or allowed == {"-1"}:
            return gpus
        kept = [g for g in gpus if str(g.index) in allowed or g.uuid in allowed]
        if not kept:
            return GpuList(
                source="none",
                reason=f"no GPU: inventory {inventory} lists none of CUDA_VISIBLE_DEVICES="
                f"{env.get('CUDA_VISIBLE_DEVICES')}",
            )
        return GpuList(kept, source="inventory")
    return found


def mps_active(env: Optional[Mapping[str, str]] = None, proc_root: str = "/proc") -> bool:
    """Is a CUDA MPS control daemon running for this node?

    ``MELON_MPS=0|1`` overrides detection. Otherwise: the daemon's ``control`` pipe in
    ``$CUDA_MPS_PIPE_DIRECTORY`` (default ``/tmp/nvidia-mps``), or an ``nvidia-cuda-mps-control`` process.
    """
    env = os.environ if env is None else env
    forced = env.get("MELON_MPS")
    if forced is not None and forced.strip() != "":
        return forced.strip().lower() in ("1", "true", "yes", "on")
    pipe_dir = env.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_MPS_PIPE_DIR
    if os.path.exists(os.path.join(pipe_dir, "control")):
        return True
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            with open(os.path.join(proc_root, pid, "comm"), encoding="utf-8", errors="replace") as f:
                comm = f.read().strip()
        except OSError:
            continue
        # The kernel truncates comm to 15 characters: "nvidia-cuda-mps" (control daemon or its server).
        if comm == MPS_COMM:
            return True
    return False


def process_tree(pid: int, proc_root: str = "/proc") -> List[int]:
    """``pid`` and its descendants, from ``<proc_root>/*/stat`` (the parent pid is the field after the state); just
    ``[pid]`` where there is no ``/proc``."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return [pid]
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, entry, "stat"), "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # comm may hold spaces and parentheses: the fields after the last ')' are "state ppid ..."
        rest = stat.rsplit(")", 1)[-1].split()
        if len(rest) >= 2 and rest[1].lstrip("-").isdigit():
            children.setdefault(int(rest[1]), []).append(int(entry))
    out, seen, todo = [], set(), [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _visible(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _nvml_call(read: Callable[[Nvml], _T]) -> Optional[_T]:
    """``read(pynvml)`` between nvmlInit and nvmlShutdown; None when NVML cannot be loaded or initialised, or the
    call fails."""
    try:
        pynvml = import_pynvml()
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return read(pynvml)
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def device_used_mb(gpu_index: int) -> Optional[int]:
    """The device's used memory (MiB, NVML's ``used``: every process's and the driver's), None when NVML cannot
    say: the baseline a device-wide reading of :func:`process_memory` rises from."""
    return _nvml_call(
        lambda pynvml: (
            int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(int(gpu_index))).used) // MIB
        )
    )


def process_memory(gpu_index: int, pids: Iterable[int], baseline_mb: Optional[int] = None) -> Optional[GpuReading]:
    """GPU memory (MiB) used on ``gpu_index`` by the given pids, by NVML (``nvml-process``); None when NVML is
    unavailable or lists none of them while the pids it lists are this pid namespace's too (the process has no
    context there yet). In a pid namespace of its own (:func:`host_pids`), or when none of NVML's pids exists here,
    NVML's pids are not this container's (YARN's Docker runtime: NVML answers with the host's pids, some of which
    are other processes' numbers here): the device's rise in used memory over ``baseline_mb`` (:func:`device_used_mb`
    when the task started; neighbours included) is returned as ``nvml-device``, never the whole device's use; None
    without a baseline."""
    pids = set(pids) if host_pids() else set()

    def read(pynvml: Nvml) -> Optional[GpuReading]:
        h = pynvml.nvmlDeviceGetHandleByIndex(int(gpu_index))
        procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(h))
        total, matched = 0, False
        for proc in procs:
            if proc.pid in pids and proc.usedGpuMemory is not None:
                total += int(proc.usedGpuMemory)
                matched = True
        if matched:
            return GpuReading(total // MIB, SOURCE_PROCESS)
        if baseline_mb is not None and procs and (not pids or not any(_visible(p.pid) for p in procs)):
            used = int(pynvml.nvmlDeviceGetMemoryInfo(h).used) // MIB
            return GpuReading(max(0, used - int(baseline_mb)), SOURCE_DEVICE)
        return None

    return _nvml_call(read)
