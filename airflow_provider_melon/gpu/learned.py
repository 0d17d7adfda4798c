"""Expected GPU memory learned from a task's earlier runs (``gpu_memory: auto``). Pure functions, stdlib only.

Each finished run of a task adds one record per role to the task's history (``hadoop/memory_history.py`` keeps it
in HDFS, one file per run in the staging folder's ``profiles/``, per tenant):

``{"app_id", "at" (epoch s), "state" (the application's final status), "initial_mb" (the expected memory it
started with), "expected_mb" (the figure its tasks ended with: grown after out-of-memory exits), "peak_mb" (the
highest GPU memory its tasks used: NVML or the framework's own peak counter; null when unknown, e.g. without a
GPU), "oom" (whether a task of the role ran out of GPU memory), "growths"}``

The learned figure (:func:`learned_mb`) looks at the role's last :data:`RECENT` runs and takes the largest of:

- a run with a known peak: ``peak × (1 + MARGIN)`` — what the task really used, plus headroom;
- a run that succeeded without a known peak: the figure it succeeded at (``expected_mb``);
- a run that ended out of memory (its growths used up): ``expected_mb × growth`` — more than what was too little.

So one OOM that grew 1024 → 1536 MiB and then succeeded teaches 1536 MiB (or ``peak × 1.1`` once a GPU reports
the peak), and the next run starts there: no OOM, no growth.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Optional, Sequence

__all__ = ["MARGIN", "RECENT", "KEEP", "learned_mb", "run_record"]

#: headroom over a measured peak (the profiler's SAFETY_MARGIN)
MARGIN = 0.10
#: how many of a role's latest runs the learned figure looks at
RECENT = 5
#: how many runs a task's history keeps
KEEP = 20


def _ceil(value: float) -> int:
    return int(math.ceil(value - 1e-9))  # 1300 × 1.1 is 1430.0000000000002 in floating point


def _int(value) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return int(math.ceil(value))


def learned_mb(runs: Sequence[Mapping], *, growth: float = 1.5, recent: int = RECENT,
               largest_gpu_mb: Optional[int] = None) -> Optional[tuple[int, str]]:
    """The learned expected memory of one role from its ``runs`` (oldest first), with a sentence saying where it
    comes from; None when no run teaches anything (none yet, or only runs that neither succeeded nor ran out of
    memory with a known figure)."""
    best: Optional[tuple[int, str]] = None
    considered = [r for r in runs if isinstance(r, Mapping)][-recent:]
    for run in considered:
        peak, expected = _int(run.get("peak_mb")), _int(run.get("expected_mb"))
        candidates = []
        if peak is not None:
            candidates.append((_ceil(peak * (1 + MARGIN)), f"peak {peak} MiB × {1 + MARGIN:.2f}"))
        if run.get("oom") and run.get("state") != "SUCCEEDED" and expected is not None:
            candidates.append((_ceil(expected * growth), f"out of memory at {expected} MiB × {growth:g}"))
        elif peak is None and run.get("state") == "SUCCEEDED" and expected is not None:
            candidates.append((expected, f"succeeded at {expected} MiB"))
        for candidate in candidates:
            if best is None or candidate[0] > best[0]:
                best = (candidate[0], f"{candidate[1]} in run {run.get('app_id') or '?'}")
    if best is None:
        return None
    mb, why = best
    if largest_gpu_mb and mb > largest_gpu_mb:
        mb, why = largest_gpu_mb, f"{why}, capped at the largest GPU ({largest_gpu_mb} MiB)"
    return mb, f"learned from the last {len(considered)} run(s): {why}"


def run_record(role: str, tasks: Iterable[Mapping], *, app_id: str, state: Optional[str], at: float,
               planned_mb: int) -> dict:
    """One role's record of a finished run from the AM's final status ``tasks`` (``expected_gpu_memory_mb``,
    ``initial_gpu_memory_mb``, ``gpu_memory_peak_mb``, ``oom_growths``, ``oom`` per task)."""
    mine = [t for t in tasks if isinstance(t, Mapping) and t.get("role") == role]
    peaks = [p for p in (_int(t.get("gpu_memory_peak_mb")) for t in mine) if p is not None]
    peaks += [p for p in (_int((t.get("oom") or {}).get("peak_mb")) for t in mine) if p is not None]
    expected = [e for e in (_int(t.get("expected_gpu_memory_mb")) for t in mine) if e is not None]
    return {
        "role": role, "app_id": app_id, "at": int(at), "state": state,
        "initial_mb": planned_mb,
        "expected_mb": max(expected) if expected else planned_mb,
        "peak_mb": max(peaks) if peaks else None,
        "oom": any(bool(t.get("oom")) for t in mine),
        "growths": max([int(t.get("oom_growths") or 0) for t in mine] or [0]),
    }
