"""What a task's earlier runs teach its next one: its expected GPU memory (``gpu_memory: auto``), the context reserve
beside it, and its place in YARN's queue (``priority: auto``). Pure functions, stdlib only.

:func:`run_record` makes the record of one finished run per role and :func:`ran_s` the run's training time, which
``hadoop/memory_history.py`` keeps in HDFS; :func:`learned_mb` turns a role's recent records into the figure for its
next run, :func:`learned_context_mb` into its context reserve, :func:`learned_duration_s` the recent run times into an
estimate and :func:`priority` that estimate into a YARN application priority. ``docs/internals.md``, "Learned GPU
memory" and "Learned queue order", gives the fields and the rules.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional, Sequence

from airflow_provider_melon.runtime.figures import finite_number
from airflow_provider_melon.runtime.oom import AT_CAP, CAP, OUTSIDE
from airflow_provider_melon.runtime.peak import COUNTERS, mib

__all__ = [
    "MARGIN",
    "RECENT",
    "KEEP",
    "DEVICE_WIDE",
    "STEPS_PER_DOUBLING",
    "MAX_PRIORITY",
    "ALONE_AFTER_S",
    "CONTEXT_STEP_MB",
    "learned_mb",
    "learned_context_mb",
    "run_record",
    "ran_s",
    "learned_duration_s",
    "priority",
]

#: headroom over a measured peak (the profiler's SAFETY_MARGIN)
MARGIN = 0.10
#: how many of a role's latest runs the learned figure looks at
RECENT = 5
#: how many runs a task's history keeps
KEEP = 20
#: the peak source that is not the task's own (``runtime/peak.py``'s NVML device fallback)
DEVICE_WIDE = "nvml-device"
#: a context reserve grows by at least this much after an OOM outside the allocator (the AM's
#: GpuMemory.CONTEXT_STEP_MB)
CONTEXT_STEP_MB = 256
#: how many priorities :func:`priority` steps up per doubling of a run time: a step is a run 26 % longer, about the
#: error of an estimate from a few runs, so the queue keeps the order the history knows (one step per doubling lost
#: part of it; docs/development.md, "Benchmark figures: placement policy")
STEPS_PER_DOUBLING = 3
#: the highest YARN application priority :func:`priority` gives (a run of over 203 minutes, 2 ** (23 / 3)); the
#: cluster's ``yarn.cluster.max-application-priority`` must be at least this, or YARN lowers the longer runs' to it
MAX_PRIORITY = 1 + 8 * STEPS_PER_DOUBLING
#: a run learned to take at least this long (seconds) gets whole GPUs instead of sharing (``alone_after_s``, the
#: yarn connection's extra or ``[melon] alone_after_s``; 0: never): it starts first (:func:`priority`), and a
#: neighbour would stretch it by up to 1.7x, hours by which it would end the schedule alone. Three hours is the
#: middle of the range, 2-4 h, in which bench_policy's simulated traces (job medians 20 and 40 min) meet their
#: targets; a cluster whose runs are longer sets more.
ALONE_AFTER_S = 3 * 3600


def _ceil(value: float) -> int:
    return int(math.ceil(value - 1e-9))  # 1300 × 1.1 is 1430.0000000000002 in floating point


def _kinds(run: Mapping[str, Any]) -> set[str]:
    """Which memory a run's OOMs ran out of (``oom_kinds``); a record written before kinds were told: the cap's."""
    kinds = run.get("oom_kinds")
    if isinstance(kinds, list):
        return {k for k in kinds if k in (CAP, OUTSIDE)}
    return {CAP} if run.get("oom") else set()


def _allocator_mb(run: Mapping[str, Any]) -> Optional[int]:
    """What the run's allocator is known to have needed, MiB: its own counter's peak, or the need an OOM report
    said (its use then plus its request), the larger; None without either (an NVML reading holds the context and a
    preallocated pool, so it says nothing of the allocator)."""
    peak = mib(run.get("peak_mb")) if run.get("peak_source") in COUNTERS else None
    need = mib(run.get("need_mb"))
    known = [v for v in (peak, need) if v]
    return max(known) if known else None


def _at_cap(run: Mapping[str, Any], expected: int) -> bool:
    """Whether a run's cap OOM is one: its allocator reached :data:`AT_CAP` of its cap, or nothing says it did not.
    An allocator far below its cap did not run out there (the GPU was full of memory outside it)."""
    used = _allocator_mb(run)
    return used is None or used >= AT_CAP * expected


def _candidates(run: Mapping[str, Any], growth: float) -> list[tuple[int, str]]:
    """What one run teaches: ``(MiB, why)`` each."""
    peak, expected = mib(run.get("peak_mb")) or None, mib(run.get("expected_mb")) or None  # 0 measured nothing
    succeeded = run.get("state") == "SUCCEEDED"
    out = []
    if run.get("oom") and not succeeded and expected is not None and CAP in _kinds(run) and _at_cap(run, expected):
        grown = (_ceil(expected * growth), f"out of memory at {expected} MiB × {growth:g}")
        need = mib(run.get("need_mb"))
        if need and _ceil(need * (1 + MARGIN)) > grown[0]:  # its allocator said what it needed: more than that
            grown = (
                _ceil(need * (1 + MARGIN)),
                f"out of memory at {expected} MiB needing {need} MiB × {1 + MARGIN:.2f}",
            )
        out.append(grown)
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


def learned_context_mb(
    runs: Sequence[Mapping[str, Any]], *, growth: float = 1.5, recent: int = RECENT
) -> Optional[tuple[int, str]]:
    """The context reserve one role's ``runs`` (oldest first) teach, with a sentence saying where it comes from; None
    when none recorded one. Of the last ``recent`` runs, the largest of: the reserve a run ended with (grown by the AM
    after OOMs outside the allocator during it), and for a run that ended out of memory outside the allocator (or
    whose cap OOM came far below its cap, :func:`_at_cap`) that reserve × ``growth``, at least
    :data:`CONTEXT_STEP_MB` more. The caller takes the larger of this and the first-run figure."""
    best: Optional[tuple[int, str]] = None
    considered = [r for r in runs if isinstance(r, Mapping)][-recent:]
    for run in considered:
        context = mib(run.get("context_mb"))
        if context is None:
            continue
        kinds, expected = _kinds(run), mib(run.get("expected_mb")) or 0
        outside = OUTSIDE in kinds or (CAP in kinds and expected > 0 and not _at_cap(run, expected))
        if run.get("oom") and run.get("state") != "SUCCEEDED" and outside:
            mb = max(_ceil(context * growth), context + CONTEXT_STEP_MB)
            why = f"out of memory outside the allocator at a context reserve of {context} MiB, grown"
        else:
            mb, why = context, f"ran with a context reserve of {context} MiB"
        if best is None or mb > best[0]:
            best = (mb, f"{why} in run {run.get('app_id') or '?'}")
    if best is None:
        return None
    return best[0], f"learned from the last {len(considered)} run(s): {best[1]}"


def run_record(
    role: str,
    tasks: Iterable[Mapping[str, Any]],
    *,
    app_id: str,
    state: Optional[str],
    at: float,
    planned_mb: int,
    planned_context_mb: Optional[int] = None,
) -> dict[str, Any]:
    """One role's record of a finished run from the AM's final status ``tasks`` (``expected_gpu_memory_mb``,
    ``initial_gpu_memory_mb``, ``gpu_context_mb``, ``gpu_memory_peak_mb`` with ``gpu_memory_peak_source`` when the
    AM carries it, ``oom_growths``, ``oom`` per task). The peak is the largest of the tasks' own peaks; a device-wide
    one only when no task has its own. ``context_mb`` is the largest reserve a task ended with (the planned one when
    the AM says none), ``oom_kinds`` which memory the tasks' OOMs ran out of, ``need_mb`` the most an allocator said
    it needed."""
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
    contexts = [c for c in (mib(t.get("gpu_context_mb")) for t in mine) if c is not None]
    ooms = [t["oom"] for t in mine if isinstance(t.get("oom"), Mapping)]
    kinds = sorted({o.get("kind") if o.get("kind") in (CAP, OUTSIDE) else CAP for o in ooms})
    needs = [n for n in (mib(o.get("need_mb")) for o in ooms) if n]
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
        "oom_kinds": kinds,
        "need_mb": max(needs) if needs else None,
        "growths": max([int(t.get("oom_growths") or 0) for t in mine] or [0]),
        "initial_context_mb": planned_context_mb,
        "context_mb": max(contexts) if contexts else planned_context_mb,
    }


def ran_s(app: Optional[Mapping[str, Any]], final: Optional[Mapping[str, Any]]) -> Optional[float]:
    """How long a run that SUCCEEDED trained, in seconds: the RM's ``finishedTime`` less its ``launchTime`` (the AM's
    container started) and the AM's wait for its whole gang (``gang.waiting_s`` of its final status). Queueing is
    not part of it; time slowed by GPU neighbours is. None for a run that did not succeed or a missing figure."""
    app, final = app or {}, final or {}
    report = final.get("gang")
    gang: Mapping[str, Any] = report if isinstance(report, Mapping) else {}
    launched, finished = finite_number(app.get("launchTime")), finite_number(app.get("finishedTime"))
    waited = finite_number(gang.get("waiting_s")) if gang.get("formed") is True else None
    if app.get("finalStatus") != "SUCCEEDED" or not launched or not finished or waited is None:
        return None
    ran = (finished - launched) / 1000.0 - waited
    return round(ran, 1) if ran > 0 else None


def learned_duration_s(docs: Sequence[Mapping[str, Any]], *, recent: int = RECENT) -> Optional[tuple[float, str]]:
    """The estimated run time of a task's next run from its history's run files ``docs`` (oldest first, each with a
    ``ran_s`` when it succeeded): the median of the last ``recent`` run times, with a sentence saying so; None when
    no run has one. The median, not the mean: one run slowed by its neighbours, or cut short, moves it little."""
    recorded = [finite_number(d.get("ran_s")) for d in docs if isinstance(d, Mapping)]
    times = sorted(t for t in [t for t in recorded if t is not None and t > 0][-recent:])
    if not times:
        return None
    mid = len(times) // 2
    median = times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
    return median, f"median run time of the last {len(times)} successful run(s): {median / 60:.1f} min"


def priority(duration_s: float) -> int:
    """The YARN application priority of a run estimated to take ``duration_s``: :data:`STEPS_PER_DOUBLING` more per
    doubling of its minutes, ``1 + ceil(STEPS_PER_DOUBLING * log2(minutes))`` from 1 (a minute or less) to
    :data:`MAX_PRIORITY` (over 203 minutes). YARN's CapacityScheduler serves a queue's higher priorities first, so a
    queue of these runs starts the longest first (Graham's LPT order: the long runs do not end the schedule alone)."""
    minutes = max(float(duration_s), 60.0) / 60.0
    return max(1, min(MAX_PRIORITY, 1 + math.ceil(STEPS_PER_DOUBLING * math.log2(minutes) - 1e-9)))
