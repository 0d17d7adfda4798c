"""Expected GPU memory learned from a task's earlier runs (``gpu_memory: auto``). Pure functions, stdlib only.

:func:`run_record` makes the record of one finished run per role, which ``hadoop/memory_history.py`` keeps in
HDFS, and :func:`learned_mb` turns a role's recent records into the figure for its next run.
``docs/internals.md``, "Learned GPU memory", gives the record's fields and the rules.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional, Sequence

from airflow_provider_melon.runtime.peak import mib

__all__ = ["MARGIN", "RECENT", "KEEP", "DEVICE_WIDE", "learned_mb", "run_record"]

#: headroom over a measured peak (the profiler's SAFETY_MARGIN)
MARGIN = 0.10
#: how many of a role's latest runs the learned figure looks at
RECENT = 5
#: how many runs a task's history keeps
KEEP = 20
#: the peak source that is not the task's own (``runtime/peak.py``'s NVML device fallback)
DEVICE_WIDE = "nvml-device"


def _ceil(value: float) -> int:
    return int(math.ceil(value - 1e-9))  # 1300 × 1.1 is 1430.0000000000002 in floating point


def _candidates(run: Mapping[str, Any], growth: float) -> list[tuple[int, str]]:
    """What one run teaches: ``(MiB, why)`` each."""
    peak, expected = mib(run.get("peak_mb")) or None, mib(run.get("expected_mb")) or None  # 0 measured nothing
    succeeded = run.get("state") == "SUCCEEDED"
    out = []
    if run.get("oom") and not succeeded and expected is not None:
        out.append((_ceil(expected * growth), f"out of memory at {expected} MiB × {growth:g}"))
    if peak is not None and run.get("peak_source") == DEVICE_WIDE:
        # The device's whole use, neighbours included: not this task's need (three neighbours would teach it
        # their memory, and an OOM beside them a figure no GPU has). It is only an upper bound of what the task
        # used, so a successful run may teach less than the figure it succeeded at, never more.
        if succeeded and expected is not None:
            bound = _ceil(peak * (1 + MARGIN))
            out.append(
                (
                    bound,
                    f"device-wide peak {peak} MiB (neighbours included) × {1 + MARGIN:.2f}, under "
                    f"the {expected} MiB it succeeded at",
                )
                if bound < expected
                else (expected, f"succeeded at {expected} MiB")
            )
    elif (
        peak is not None
        and run.get("peak_source") == "nvml-process"
        and succeeded
        and expected is not None
        and peak >= expected
    ):
        # NVML's reading at the cap is an allocator that takes what it is given (TensorFlow without memory growth):
        # it says the cap sufficed, not that the task needs more. Cap × 1.1 would grow every night. (A framework's
        # own counter cannot pass the cap; a user's figure above it is a job the cap does not bind: both kept.)
        out.append((expected, f"succeeded at {expected} MiB (its peak {peak} MiB reached its cap)"))
    elif peak is not None:
        out.append((_ceil(peak * (1 + MARGIN)), f"peak {peak} MiB × {1 + MARGIN:.2f}"))
    elif succeeded and expected is not None:
        out.append((expected, f"succeeded at {expected} MiB"))
    return out


def learned_mb(
    runs: Sequence[Mapping[str, Any]],
    *,
    growth: float = 1.5,
    recent: int = RECENT,
    largest_gpu_mb: Optional[int] = None,
    context_mb: int = 0,
) -> Optional[tuple[int, str]]:
    """The learned expected memory of one role from its ``runs`` (oldest first), with a sentence saying where it
    comes from; None when no run teaches anything (none yet, or only runs that neither succeeded nor ran out of
    memory with a known figure). ``largest_gpu_mb``: the cluster's largest GPU, of which ``context_mb`` is the
    CUDA context's: the figure never asks for more than the rest (pre-flight would refuse every later run)."""
    best: Optional[tuple[int, str]] = None
    considered = [r for r in runs if isinstance(r, Mapping)][-recent:]
    for run in considered:
        for candidate in _candidates(run, growth):
            if best is None or candidate[0] > best[0]:
                best = (candidate[0], f"{candidate[1]} in run {run.get('app_id') or '?'}")
    if best is None:
        return None
    mb, why = best
    room = int(largest_gpu_mb or 0) - int(context_mb or 0)
    if largest_gpu_mb and room > 0 and mb > room:
        less = f" less {int(context_mb)} MiB for the CUDA context" if context_mb else ""
        mb, why = room, f"{why}, capped at the largest GPU ({int(largest_gpu_mb)} MiB{less})"
    return mb, f"learned from the last {len(considered)} run(s): {why}"


def run_record(
    role: str, tasks: Iterable[Mapping[str, Any]], *, app_id: str, state: Optional[str], at: float, planned_mb: int
) -> dict[str, Any]:
    """One role's record of a finished run from the AM's final status ``tasks`` (``expected_gpu_memory_mb``,
    ``initial_gpu_memory_mb``, ``gpu_memory_peak_mb`` with ``gpu_memory_peak_source`` when the AM carries it,
    ``oom_growths``, ``oom`` per task). The peak is the largest of the tasks' own peaks; a device-wide one only
    when no task has its own."""
    mine = [t for t in tasks if isinstance(t, Mapping) and t.get("role") == role]
    peaks = []  # (MiB, source)
    for t in mine:
        source = t.get("gpu_memory_peak_source") if isinstance(t.get("gpu_memory_peak_source"), str) else None
        raw_oom = t.get("oom")
        oom: Mapping[str, Any] = raw_oom if isinstance(raw_oom, Mapping) else {}
        oom_source = oom.get("peak_source") if isinstance(oom.get("peak_source"), str) else source
        for mb, src in ((mib(t.get("gpu_memory_peak_mb")), source), (mib(oom.get("peak_mb")), oom_source)):
            if mb:  # a peak of 0 measured nothing
                peaks.append((mb, src))
    own = [p for p in peaks if p[1] != DEVICE_WIDE]
    peak = max(own or peaks, key=lambda p: p[0], default=(None, None))
    expected = [e for e in (mib(t.get("expected_gpu_memory_mb")) for t in mine) if e]
    return {
        "role": role,
        "app_id": app_id,
        "at": int(at),
        "state": state,
        "initial_mb": planned_mb,
        "expected_mb": max(expected) if expected else planned_mb,
        "peak_mb": peak[0],
        "peak_source": peak[1],
        "oom": any(bool(t.get("oom")) for t in mine),
        "growths": max([int(t.get("oom_growths") or 0) for t in mine] or [0]),
    }
