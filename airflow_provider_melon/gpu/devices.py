"""Which GPUs this node has: NVML when present, else a declared inventory, else none. Stdlib only.

Sources, in order:

1. ``nvml`` — pynvml (imported lazily; optional) initialises and finds at least one device.
2. ``inventory`` — env ``MELON_GPU_INVENTORY`` names a JSON file
   ``{"gpus": [{"index": 0, "total_mb": 16384, "name": "virtual"}, ...]}`` (optional keys ``uuid``,
   ``used_mb``, ``sm_util``). Used by tests and by the GPU-less mini cluster, where YARN advertises
   ``melon.io/gpu-memory`` without a physical device.
3. ``none`` — the result is empty and ``reason`` says why, e.g.
   ``no GPU: NVML found no device (NVML Shared Library Not Found)``.

If ``CUDA_VISIBLE_DEVICES`` is already set in this process's environment (a container runtime restricted the
node's GPUs for us, the embedded cluster gave each NodeManager its own: ``minicluster.gpu_layout``, or the admin set
it in the yarn connection's ``container_env`` to keep MeLoN off the GPUs YARN's own GPU plugin manages:
docs/gpu-plugin.md), devices outside it (by index or UUID) are not offered, NVML's and the inventory's alike;
``-1`` hides them all.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from typing import List, Optional

__all__ = ["DeviceInfo", "GpuList", "list_gpus", "nvml_gpus", "inventory_gpus", "mps_active", "process_tree",
           "process_memory_mb"]

DEFAULT_MPS_PIPE_DIR = "/tmp/nvidia-mps"
MPS_COMM = "nvidia-cuda-mps-control"[:15]


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    uuid: str
    name: str
    total_mb: int
    used_mb: int = 0
    sm_util: Optional[float] = None  # NVML utilization.gpu / 100 (a time fraction; None when unknown)


class GpuList(list):
    """A list of :class:`DeviceInfo` that also says where it came from (``source``) and why it is empty."""

    def __init__(self, gpus=(), source: str = "none", reason: str = ""):
        super().__init__(gpus)
        self.source = source
        self.reason = reason

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"GpuList(source={self.source!r}, reason={self.reason!r}, gpus={list.__repr__(self)})"


def _s(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _visible_filter(env) -> Optional[set]:
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None or raw.strip() == "":
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}


def _import_pynvml():
    """pynvml (from nvidia-ml-py, or the deprecated ``pynvml`` wrapper, whose FutureWarning is silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml  # noqa: PLC0415 - optional, lazily imported on purpose
    return pynvml


def nvml_gpus(env=None) -> GpuList:
    """GPUs as NVML sees them; empty with a reason when pynvml or the driver is missing."""
    env = os.environ if env is None else env
    try:
        pynvml = _import_pynvml()
    except Exception as exc:  # ImportError, or a broken install
        return GpuList(source="none", reason=f"no GPU: NVML found no device (pynvml not importable: {exc})")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return GpuList(source="none", reason=f"no GPU: NVML found no device ({_s(exc)})")
    try:
        count = pynvml.nvmlDeviceGetCount()
        allowed = _visible_filter(env)
        out, skipped = [], []
        for i in range(count):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = _s(pynvml.nvmlDeviceGetUUID(h))
                if allowed is not None and str(i) not in allowed and uuid not in allowed:
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
                    )
                )
            except Exception as exc:  # e.g. a device denied to this container by cgroups
                skipped.append(f"device {i}: {_s(exc)}")
        if not out:
            why = "; ".join(skipped) if skipped else f"{count} device(s), none visible"
            if allowed == {"-1"}:
                why = f"CUDA_VISIBLE_DEVICES=-1 hides this node's {count} device(s)"
            return GpuList(source="none", reason=f"no GPU: NVML found no device ({why})")
        return GpuList(out, source="nvml")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


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
        raise ValueError(f"GPU inventory {path} is malformed ({exc!r}); expected "
                         '{"gpus": [{"index": 0, "total_mb": 16384}, ...]}') from exc
    if not gpus:
        return GpuList(source="none", reason=f"no GPU: inventory {path} lists no GPU")
    return GpuList(gpus, source="inventory")


def list_gpus(env=None) -> GpuList:
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
            return GpuList(source="none", reason=f"no GPU: inventory {inventory} lists none of CUDA_VISIBLE_DEVICES="
                           f"{env.get('CUDA_VISIBLE_DEVICES')}")
        return GpuList(kept, source="inventory")
    return found


def mps_active(env=None, proc_root: str = "/proc") -> bool:
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


def process_tree(pid: int) -> List[int]:
    """pid and its descendants (Linux /proc); just [pid] elsewhere."""
    children = {}
    try:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read().decode(errors="replace")
                ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    except OSError:
        return [pid]
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def process_memory_mb(gpu_index: int, pids) -> Optional[int]:
    """GPU memory (MiB) used on ``gpu_index`` by the given pids, by NVML; None when unknown/unavailable."""
    try:
        pynvml = _import_pynvml()
    except Exception:
        return None
    pids = set(pids)
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(int(gpu_index))
        total, matched = 0, False
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if proc.pid in pids and proc.usedGpuMemory is not None:
                total += int(proc.usedGpuMemory)
                matched = True
        return total // (1024 * 1024) if matched else None
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
