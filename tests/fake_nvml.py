"""A pynvml stand-in answering as pynvml (nvidia-ml-py 12) does: bytes or str names, a device the container's
cgroup denies, a driver that is not there; for the GPU host's code path without a GPU (tests/unit/test_devices_nvml.py,
and the mini cluster's GPU split in tests/integration/test_minicluster_live.py)."""

from __future__ import annotations

import types
from collections import namedtuple

MiB = 1024 * 1024
Memory = namedtuple("Memory", "total free used")
Utilization = namedtuple("Utilization", "gpu memory")
Process = namedtuple("Process", "pid usedGpuMemory")


class NVMLError(Exception):
    pass


def fake_nvml(gpus: list[dict], *, init_error: str | None = None) -> types.ModuleType:
    """A pynvml stand-in: ``gpus`` of {uuid, name, total_mb, used_mb, util, procs: {pid: MiB|None}, denied}."""
    calls = {"init": 0, "shutdown": 0}
    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError
    mod.calls = calls

    def init():
        calls["init"] += 1
        if init_error:
            raise NVMLError(init_error)

    def handle(i):
        if i >= len(gpus):
            raise NVMLError("Invalid Argument")
        if gpus[i].get("denied"):
            raise NVMLError("Insufficient Permissions")
        return gpus[i]

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1)
    mod.nvmlDeviceGetCount = lambda: len(gpus)
    mod.nvmlDeviceGetHandleByIndex = handle
    mod.nvmlDeviceGetUUID = lambda h: h["uuid"]
    mod.nvmlDeviceGetName = lambda h: h["name"]
    mod.nvmlDeviceGetMemoryInfo = lambda h: Memory(h["total_mb"] * MiB, (h["total_mb"] - h["used_mb"]) * MiB,
                                                   h["used_mb"] * MiB)

    def util(h):
        if h.get("util") is None:
            raise NVMLError("Not Supported")
        return Utilization(h["util"], 0)

    mod.nvmlDeviceGetUtilizationRates = util
    mod.nvmlDeviceGetComputeRunningProcesses = lambda h: [Process(p, None if m is None else m * MiB)
                                                          for p, m in h.get("procs", {}).items()]
    return mod
