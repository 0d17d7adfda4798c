"""What a shared-mode task reserves on its GPU besides its expected memory, per framework, by default. Stdlib only.

The in-process cap limits the framework's allocator to the task's expected memory; the CUDA context, the kernels
the driver loads and the libraries' handles take memory besides it. ``[melon] gpu_context_mb`` (or the yarn
connection's extra) overrides these defaults for every framework. Where each figure comes from (measured on the
recorded H200 runs, ``benchmarks/data``, or inferred) is in docs/gpu-sharing.md ("The CUDA context is reserved
too"); ``benchmarks/bench_ledger_replay.py`` derives the measured one again from the data and replays the
recorded co-locations through the ledger.
"""

from __future__ import annotations

__all__ = ["MEASURED_CONTEXT_MB", "CONTEXT_MB", "context_mb_default"]

#: Memory outside PyTorch's caching allocator, per process, MiB, fitted on the recorded H200 runs of ResNet-50
#: (k = 1, 2, 4, 8 processes: NVML used - k x torch.cuda.max_memory_reserved = 618 + 768 k, within 1 MiB of every
#: point); 618 MiB is the device's own (the driver's), counted by the ledger from NVML, not per process. What NVML's
#: per-process reading holds beyond the allocator: the executor and the profiler take it out of that reading for a
#: task's peak (``runtime/peak.py``), and it is the memory model's ``F`` (``gpu/memory_model.py``).
MEASURED_CONTEXT_MB = 768

#: The default per framework (``MELON_FRAMEWORK``): the measured figure rounded up to the next 256 MiB, a margin
#: for kernels other models load lazily. PyTorch: measured. TensorFlow and generic jobs: inferred (the same CUDA
#: context, cuDNN and cuBLAS; no TensorFlow GPU run is recorded).
CONTEXT_MB = {"pytorch": 1024, "tensorflow": 1024, "generic": 1024}


def context_mb_default(framework: str | None) -> int:
    """The default reserve for ``framework`` (``pytorch``, ``tensorflow``, ``generic``; anything else: generic)."""
    return CONTEXT_MB.get((framework or "generic").strip().lower(), CONTEXT_MB["generic"])
