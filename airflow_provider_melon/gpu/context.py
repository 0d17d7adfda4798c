"""What a shared-mode task reserves on its GPU besides its expected memory before its runs teach it: the first-run
context reserve per framework and backend. Stdlib only.

The in-process cap limits the framework's allocator to the task's expected memory; the CUDA context, the kernels the
driver loads and the libraries' handles and buffers (cuBLAS, cuDNN, NCCL) take memory besides it. A task's reserve is
learned like its expected memory (``gpu/learned.py``: an OOM outside the allocator grows it, the history keeps it);
:func:`first_run_mb` is where it starts. ``[melon] gpu_context_mb`` (or the yarn connection's extra) sets one figure
for every framework instead. Where each figure comes from: docs/gpu-sharing.md ("The CUDA context is reserved too");
``benchmarks/bench_ledger_replay.py`` derives the measured one again from the recorded H200 runs.
"""

from __future__ import annotations

import math

__all__ = [
    "MEASURED_CONTEXT_MB",
    "GRAIN_MB",
    "NCCL_CONNECTION_MB",
    "NCCL_CHANNELS",
    "NCCL_CONNECTIONS_PER_CHANNEL",
    "TF_SYSTEM_MB",
    "CONTEXT_MB",
    "first_run_mb",
]

#: Memory outside PyTorch's caching allocator, per process, MiB, fitted on the recorded H200 runs of ResNet-50
#: (k = 1, 2, 4, 8 processes: NVML used - k x torch.cuda.max_memory_reserved = 618 + 768 k, within 1 MiB of every
#: point); 618 MiB is the device's own (the driver's), counted by the ledger from NVML, not per process. What NVML's
#: per-process reading holds beyond the allocator: the executor and the profiler take it out of that reading for a
#: task's peak (``runtime/peak.py``), and it is the memory model's ``F`` (``gpu/memory_model.py``).
MEASURED_CONTEXT_MB = 768
#: a figure is raised to the next multiple of this above it: a margin for kernels other models load lazily (a choice,
#: not a measurement)
GRAIN_MB = 256
#: NCCL's buffers for one connection of one channel, MiB: its three protocols' default sizes (NCCL's src/init.cc:
#: DEFAULT_BUFFSIZE 4 MiB for Simple, DEFAULT_LL128_BUFFSIZE 120 x 640 x 8 x 8 B for LL128, DEFAULT_LL_BUFFSIZE
#: 8 x 512 x 8 x 16 B for LL), allocated with cudaMalloc or cuMem, outside the framework's allocator and its cap
NCCL_CONNECTION_MB = (4 * 2**20 + 120 * 640 * 8 * 8 + 8 * 512 * 8 * 16) / 2**20
#: NCCL's most channels per communicator (MAXCHANNELS, src/include/device.h)
NCCL_CHANNELS = 32
#: the connections a rank receives on per channel with the default algorithms: the ring's from its predecessor and
#: the tree's from its parent
NCCL_CONNECTIONS_PER_CHANNEL = 2
#: what TensorFlow itself leaves outside its allocator on a GPU of compute capability 9 (Hopper) when it takes the
#: rest: tensorflow/core/common_runtime/gpu/gpu_device.cc, MinSystemMemory (1050 MiB for 7.x, 1536 for 8.x)
TF_SYSTEM_MB = 1800


def _grain(mb: float) -> int:
    """The next multiple of :data:`GRAIN_MB` above ``mb``."""
    return (int(math.floor(mb / GRAIN_MB + 1e-9)) + 1) * GRAIN_MB


#: The first-run reserve by framework and backend, MiB, each figure raised to the next grain. ``pytorch``: measured
#: (MEASURED_CONTEXT_MB).
#: ``pytorch+nccl``: that plus NCCL's buffers at its most channels (inferred from NCCL's defaults: an upper figure).
#: ``tensorflow``: TensorFlow's own figure for the same purpose (TF_SYSTEM_MB). ``generic``: a process
#: that uses CUDA at all holds a context (inferred: the PyTorch figure).
CONTEXT_MB = {
    "pytorch": _grain(MEASURED_CONTEXT_MB),
    "pytorch+nccl": _grain(MEASURED_CONTEXT_MB)
    + _grain(NCCL_CHANNELS * NCCL_CONNECTIONS_PER_CHANNEL * NCCL_CONNECTION_MB),
    "tensorflow": _grain(TF_SYSTEM_MB),
    "generic": _grain(MEASURED_CONTEXT_MB),
}


def first_run_mb(framework: str | None, nccl: bool = False) -> int:
    """The reserve a task starts with (:data:`CONTEXT_MB`): ``framework`` (``tensorflow``, ``pytorch``, ``generic``;
    anything else is generic), ``nccl`` for a PyTorch task in a process group of several processes on GPUs, whose
    default backend there is NCCL."""
    name = (framework or "generic").strip().lower()
    if name == "pytorch" and nccl:
        name = "pytorch+nccl"
    return CONTEXT_MB.get(name, CONTEXT_MB["generic"])
