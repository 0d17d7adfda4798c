"""A pynvml stand-in answering as pynvml (nvidia-ml-py 12/13) does: bytes or str names, a device the container's
cgroup denies, a driver that is not there, per-process memory, MIG mode; for the GPU host's code path without a GPU
(tests/unit/test_devices_nvml.py, tests/unit/test_ledger.py, benchmarks/bench_ledger_replay.py, and the mini
cluster's GPU split in tests/integration/test_minicluster_live.py).

Semantics followed, from the NVML API reference (docs.nvidia.com/deploy/nvml-api, "Device Queries") and pynvml:

* ``nvmlDeviceGetMemoryInfo``: ``used`` is all memory in use on the device, allocations of every process and the
  driver's own (the reference: "used: Sum of Reserved and Allocated device memory"). The fake's ``used_mb`` is what a
  device says; when it is not given, the driver's ``driver_mb`` plus every process's memory.
* ``nvmlDeviceGetComputeRunningProcesses``: one ``nvmlProcessInfo_t`` per process with a compute context on the
  device; ``usedGpuMemory`` is "Amount of used GPU memory in bytes", the process's whole footprint on the device, its
  CUDA context included (nvidia-smi's per-process column). It is ``NVML_VALUE_NOT_AVAILABLE`` where the driver cannot
  tell, which pynvml turns into ``None``: under WDDM, and for the processes of a MIG-enabled device queried through
  the parent device's handle ("In MIG mode, if device handle is provided, the API returns aggregate information,
  only if the caller has appropriate privileges. Per-instance information can be queried by using specific MIG
  device handles"). The pids are the host's (the driver's view), whatever pid namespace the caller is in.
* ``nvmlDeviceGetMigMode``: ``[current, pending]``, 1 (``NVML_DEVICE_MIG_ENABLE``) or 0; ``NVML_ERROR_NOT_SUPPORTED``
  on a GPU without MIG (before Ampere), which pynvml raises as an NVMLError.
"""

from __future__ import annotations

import types
from collections import namedtuple

MiB = 1024 * 1024
Memory = namedtuple("Memory", "total free used")
Utilization = namedtuple("Utilization", "gpu memory")
Process = namedtuple("Process", "pid usedGpuMemory")
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1


class NVMLError(Exception):
    pass


def device_used_mb(gpu: dict) -> int:
    """The device's ``used`` (MiB): its ``used_mb``, else the driver's reserve plus every process's memory."""
    if "used_mb" in gpu:
        return gpu["used_mb"]
    return gpu.get("driver_mb", 0) + sum(m or 0 for m in gpu.get("procs", {}).values())


def fake_nvml(gpus: list[dict], *, init_error: str | None = None) -> types.ModuleType:
    """A pynvml stand-in: ``gpus`` of {uuid, name, total_mb, used_mb | driver_mb, util, procs: {pid: MiB|None},
    denied, mig: None (not supported) | 0 | 1}. ``gpus`` may change between calls (a process starts, ends)."""
    calls = {"init": 0, "shutdown": 0}
    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError
    mod.NVML_DEVICE_MIG_DISABLE = NVML_DEVICE_MIG_DISABLE
    mod.NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
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
    mod.nvmlDeviceGetMemoryInfo = lambda h: Memory(
        h["total_mb"] * MiB, (h["total_mb"] - device_used_mb(h)) * MiB, device_used_mb(h) * MiB
    )

    def util(h):
        if h.get("util") is None:
            raise NVMLError("Not Supported")
        return Utilization(h["util"], 0)

    def mig_mode(h):
        if h.get("mig") is None:
            raise NVMLError("Not Supported")
        return [h["mig"], h["mig"]]

    def processes(h):
        aggregate_only = bool(h.get("mig"))  # MIG parent handle: no per-process memory
        return [Process(p, None if m is None or aggregate_only else m * MiB) for p, m in h.get("procs", {}).items()]

    mod.nvmlDeviceGetUtilizationRates = util
    mod.nvmlDeviceGetMigMode = mig_mode
    mod.nvmlDeviceGetComputeRunningProcesses = processes
    return mod
