"""A task's peak GPU memory, counted once: the rule that picks it, and the peak file it is read from. Stdlib only.

How the figure is chosen, and why: ``docs/internals.md`` ("Peak GPU memory").
"""

from __future__ import annotations

import json
import math
from typing import Optional, Tuple, Union

__all__ = ["SOURCES", "COUNTERS", "mib", "task_peak", "read_file"]

#: where a peak figure came from (the heartbeat's ``gpu_memory_peak_source``)
SOURCES = ("tensorflow", "torch", "user", "nvml-process", "nvml-device")
#: the sources that count the allocator's own memory (no CUDA context in them)
COUNTERS = ("tensorflow", "torch", "user")

Counter = Union[None, int, float, Tuple[Optional[float], str]]


def mib(value: object) -> Optional[int]:
    """A MiB figure from a JSON value: a finite number >= 0, rounded up; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return int(math.ceil(value))


def task_peak(
    counter: Counter,
    process_mb: Optional[float],
    context_mb: float = 0,
    *,
    cap_mb: Optional[float] = None,
    device_mb: Optional[float] = None,
) -> Optional[Tuple[int, str]]:
    """``(MiB, source)``: the task's peak GPU memory without the CUDA context, or None when nothing measures it.

    ``counter`` is the framework's own allocator peak, ``(MiB, source)`` with a source of :data:`COUNTERS`
    (a bare number counts as ``"user"``; ``(None, source)`` says the counter has not been written yet); it wins
    whenever it has a figure. Else ``process_mb`` (NVML's per-process reading, which holds the CUDA context), less
    ``context_mb``, is ``"nvml-process"``; else ``device_mb`` (the device's rise, neighbours included) less the
    context is ``"nvml-device"``. A fallback reading (context included) at ``cap_mb`` or above gives None: it is
    what a preallocating allocator (TensorFlow without memory growth, JAX) shows, its whole cap taken up front, not
    the task's need, whatever the context really was.
    """
    if counter is not None:
        mb, source = (counter, "user") if not isinstance(counter, tuple) else counter
        if source not in COUNTERS:
            raise ValueError(f"counter source must be one of {COUNTERS}, got {source!r}")
        mb = mib(mb)
        if mb is not None:
            return mb, source
    for reading, source in ((process_mb, "nvml-process"), (device_mb, "nvml-device")):
        mb = mib(reading)
        if mb is None:
            continue
        if cap_mb is not None and mb >= cap_mb:
            return None
        return max(0, mb - int(context_mb or 0)), source
    return None


def read_file(path: Optional[str]) -> Optional[Tuple[Optional[int], str]]:
    """The peak file (``MELON_PEAK_FILE``): ``(MiB, source)``; ``(None, source)`` while a framework has announced
    its counter (``{"source": "tensorflow"}``) but not written it; None when the file is missing, half-written or
    holds no usable figure. ``{"peak_mb": N}`` without a known source is the user's (``"user"``)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    source = data.get("source")
    if source not in COUNTERS:
        source = "user"
    if "peak_mb" not in data:
        return (None, source) if source != "user" else None
    mb = mib(data.get("peak_mb"))
    return None if mb is None else (mb, source)
