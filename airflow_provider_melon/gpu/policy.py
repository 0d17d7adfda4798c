"""Pure GPU placement decisions for MeLoN sharing (no I/O, no clock, stdlib only).

The product's rules: the executor's ledger (which GPU on this node, :func:`place_default`), the slot a task that
shares asks for and holds (:func:`slot_mb`, :func:`ask_mb`), the operator's pre-flight check and the profiler (can
this job share at all, :func:`packing_pays`). They must stay pure: inputs are plain dataclasses, outputs are
indices, booleans and numbers. The rules the benchmarks compare them with live in ``benchmarks/candidates.py``.
``docs/internals.md``, "GPU placement policy", gives the measurements the thresholds are anchored on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

__all__ = [
    "Task",
    "Gpu",
    "MAX_SMALL_WITH_LARGE",
    "DEFAULT_MIN_GAIN",
    "room",
    "fits",
    "admits",
    "exclusive",
    "exclusive_set",
    "predicted_gain",
    "implied_sm_util",
    "packing_pays",
    "colocation_speedup",
    "MIN_MARGINAL_GAIN",
    "FAIRNESS_BOUND",
    "fair_mix",
    "marginal_gain",
    "rates_from",
    "ANCHOR_RATES",
    "max_colocated",
    "slot_mb",
    "slot_share",
    "ask_mb",
    "node_kinds",
    "gpu_fragmentation",
    "place_default",
]


class Task(NamedTuple):
    """A task placed on a GPU: ``(name, expected_mb, large)``. Plain tuples of the same shape work too."""

    name: str
    expected_mb: int
    large: bool = False


@dataclass
class Gpu:
    """One GPU as the policy sees it.

    ``reserved_mb`` is the memory already taken on it. The caller decides what that means: the ledger
    passes ``max(sum of MeLoN reservations, NVML used memory)`` so that memory used by processes outside
    MeLoN counts too. ``tasks`` are the MeLoN tasks on it, as ``(name, expected_mb, large)``; they drive the
    interference rule (:func:`admits`) and :func:`exclusive`.
    """

    index: int
    total_mb: int
    reserved_mb: int = 0
    tasks: Sequence[Union[Task, Tuple[str, int], Tuple[str, int, bool]]] = field(default_factory=list)

    def task_tuples(self) -> List[Task]:
        return [Task(*t) if not isinstance(t, Task) else t for t in self.tasks]

    def mix(self) -> Tuple[int, int]:
        """``(n_large, n_small)``: how many large and small MeLoN tasks the GPU holds."""
        n_large = sum(1 for t in self.task_tuples() if t.large)
        return n_large, len(self.tasks) - n_large


#: Without MPS, a GPU that holds a large task accepts at most this many small tasks.
#:
#: Why 1: without MPS the GPU time-slices between processes' contexts, and a large job (one whose kernels
#: alone saturate the SMs, ResNet-50/224 bf16 here) gets roughly one slice per round. h200-mix.json:
#: R50 + 1 x R18 keeps R50 at 0.93 and R18 at 0.96 of solo (a fair split that almost doubles the work done),
#: but R50 + 3 x R18 drops R50 to 0.38 while the three R18s stay at ~1.0: the small jobs starve the large one.
#: With the MPS control daemon the same R50 + 3 x R18 keeps R50 at 0.96 (kernels run concurrently instead of
#: being time-sliced), so with MPS there is no such limit.
MAX_SMALL_WITH_LARGE = 1

#: Aggregate throughput gain a GPU must promise before a job is worth sharing (see :func:`packing_pays`).
DEFAULT_MIN_GAIN = 1.5


def room(gpu: Gpu) -> int:
    """Memory still free on ``gpu`` in MiB (never negative)."""
    return max(0, int(gpu.total_mb) - int(gpu.reserved_mb))


def fits(gpu: Gpu, expected_mb: int) -> bool:
    """True when ``expected_mb`` fits in what is left on ``gpu`` (memory only; see :func:`admits`)."""
    if expected_mb < 0:
        raise ValueError(f"expected_mb must be >= 0, got {expected_mb}")
    return room(gpu) >= expected_mb


def admits(gpu: Gpu, large: bool, mps: bool) -> bool:
    """Interference rule: may a task (``large`` or small) join ``gpu`` given what already runs there?

    With MPS: always (memory permitting). Without MPS the invariant kept on every GPU is
    "a GPU with a large task holds at most :data:`MAX_SMALL_WITH_LARGE` small tasks", whichever arrives
    first: a small task is refused by a GPU with a large task and already one small; a large task is refused
    by a GPU with more than one small task (that would recreate the R50 + 3 x R18 mix where R50 fell to 0.38).
    Two large tasks together are not refused here: 2 x R50 share fairly (0.66/0.66, sum 1.32); whether a
    large job should share at all is :func:`packing_pays`' question, asked before submission.
    """
    if mps:
        return True
    n_large, n_small = gpu.mix()
    if large:
        return n_small <= MAX_SMALL_WITH_LARGE
    if n_large == 0:
        return True
    return n_small + 1 <= MAX_SMALL_WITH_LARGE


def exclusive(gpus: Iterable[Gpu], *, idle_mb: int = 0) -> Optional[int]:
    """Index of a GPU nobody holds (no MeLoN task, ``reserved_mb <= idle_mb``), lowest index first.

    ``idle_mb`` tolerates the few hundred MiB NVML reports as used on an idle GPU (driver/context reserve).
    """
    chosen = exclusive_set(gpus, 1, idle_mb=idle_mb)
    return chosen[0] if chosen else None


def exclusive_set(gpus: Iterable[Gpu], count: int, *, idle_mb: int = 0) -> Optional[List[int]]:
    """``count`` free GPUs (see :func:`exclusive`) by ascending index, or ``None`` if fewer are free."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    free = sorted(g.index for g in gpus if not g.tasks and g.reserved_mb <= idle_mb)
    return free[:count] if len(free) >= count else None


def predicted_gain(sm_util: float, mem_fraction: float) -> float:
    """Upper bound on the aggregate throughput of packing copies of a job onto one GPU.

    Compute bound: if one copy keeps a fraction ``sm_util`` of the SMs busy, at most ``1 / sm_util`` copies'
    worth of work can run at once. Memory bound: at most ``floor(1 / mem_fraction)`` copies fit. The gain is
    the smaller of the two (and at least 1: one copy always runs).
    """
    if not 0 < sm_util <= 1:
        raise ValueError(f"sm_util must be in (0, 1], got {sm_util}")
    if not 0 < mem_fraction <= 1:
        raise ValueError(f"mem_fraction must be in (0, 1], got {mem_fraction}")
    copies = math.floor(1.0 / mem_fraction + 1e-9)
    return max(1.0, min(1.0 / sm_util, float(copies)))


def implied_sm_util(saturated_speedup: float) -> float:
    """The SM share one copy uses, read back from a measured co-location plateau: ``1 / speedup``.

    h200-colocate.json: ResNet-18 plateaus at 3.71x (k = 8) -> ~0.27 of the GPU per copy;
    ResNet-50 at 1.19x -> ~0.84. This is the figure :func:`packing_pays` wants. NVML's ``utilization.gpu``
    is *not* it: that is the fraction of time any kernel runs and reads near 100 % for both models;
    use a short k = 2..4 trial (this function), or DCGM's SM-active/occupancy counters.
    """
    if saturated_speedup < 1:
        raise ValueError(f"a co-location speedup is >= 1, got {saturated_speedup}")
    return 1.0 / saturated_speedup


def packing_pays(sm_util: float, mem_fraction: float, *, min_gain: float = DEFAULT_MIN_GAIN) -> bool:
    """Should a job share a GPU, given its solo SM share and the fraction of GPU memory it needs?

    It shares only if :func:`predicted_gain` reaches ``min_gain`` (default 1.5, i.e. the solo job leaves at
    least a third of the SMs idle, ``sm_util <= 0.67``, and at least two copies fit in memory).

    Tied to the H200 data: ResNet-18/CIFAR (sm_util ~0.27 by :func:`implied_sm_util`, 3.9 GiB of 140 GiB: its
    allocator's 3208 MiB and the 768 MiB context) predicts ~3.7x and measured 1.82x/3.52x/3.71x at k = 2/4/8 -> pays.
    ResNet-50/224 bf16 (~0.84, 4.2 GiB: 3520 + 768 MiB)
    predicts 1.19x and measured 1.19x at every k -> does not pay: each co-located copy runs at ~0.6 of its solo
    speed for a 19 % aggregate gain, which is barely above the ~10 % run-to-run noise. The 1.5 threshold sits
    well clear of both measured points.
    """
    return predicted_gain(sm_util, mem_fraction) >= min_gain


Curve = Union[Mapping[int, float], Mapping[float, float], Sequence[Tuple[float, float]]]


def colocation_speedup(curve: Curve, k: float) -> float:
    """Aggregate speedup of ``k`` co-located copies, linearly interpolated on a measured curve.

    ``curve`` maps k -> speedup vs k = 1 (a dict or ``(k, speedup)`` pairs); the point (1, 1.0) is implied
    when absent. Beyond the last measured k the curve is held flat (the GPU is saturated: more copies do not
    add throughput, e.g. ResNet-18 3.52x at k=4 and 3.71x at k=8); below 1 it is an error.
    Example: with the ResNet-18 points, k = 3 gives (1.82 + 3.52) / 2 = 2.67.
    """
    points = dict(curve.items()) if isinstance(curve, Mapping) else dict(curve)
    points.setdefault(1, 1.0)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    xs = sorted(points)
    if k <= xs[0]:
        return float(points[xs[0]])
    for lo, hi in zip(xs, xs[1:]):
        if lo <= k <= hi:
            y0, y1 = float(points[lo]), float(points[hi])
            return y0 + (y1 - y0) * (k - lo) / (hi - lo)
    return float(points[xs[-1]])


# -- gain and fairness: how many tasks a GPU should hold --------------------------------------------------------
#: (n_large, n_small) on one GPU -> (each large task's rate, each small task's rate), as fractions of solo speed.
Rates = Callable[[int, int], Tuple[float, float]]

#: A task joins a shared GPU only if the GPU's aggregate throughput rises by more than this (in solo-job units):
#: a tenth of a job, the run-to-run noise of the measurements. ResNet-18: 3 -> 4 copies adds 0.85, 4 -> 5 only 0.05.
MIN_MARGINAL_GAIN = 0.10
#: No task on a shared GPU may run below ``1 / FAIRNESS_BOUND`` of its solo speed (running slowdown <= 2).
FAIRNESS_BOUND = 2.0


def fair_mix(rates: Rates, n_large: int, n_small: int, bound: float = FAIRNESS_BOUND) -> bool:
    """True when no task on a GPU holding ``n_large`` large and ``n_small`` small tasks runs below
    ``1 / bound`` of its solo speed under ``rates``."""
    lr, sr = rates(n_large, n_small)
    eps = 1e-9
    return not ((n_large and lr < 1.0 / bound - eps) or (n_small and sr < 1.0 / bound - eps))


def marginal_gain(rates: Rates, n_large: int, n_small: int, large: bool) -> float:
    """Aggregate throughput added (solo-job units) when one more task (``large`` or small) joins that mix."""

    def total(nl: int, ns: int) -> float:
        if not nl and not ns:
            return 0.0
        lr, sr = rates(nl, ns)
        return nl * lr + ns * sr

    return total(n_large + large, n_small + (not large)) - total(n_large, n_small)


# -- the default: one rule for the node's ledger and the simulator --------------------------------------------------
def rates_from(
    small_curve: Curve, large_curve: Curve, mix_large: Mapping[int, float], mix_small: Mapping[int, float]
) -> Rates:
    """A :data:`Rates` function from measured points: ``l`` large tasks alone each run at
    ``colocation_speedup(large_curve, l) / l``, ``m`` small ones alone at ``colocation_speedup(small_curve, m) / m``;
    one large with ``m`` small (no MPS) at ``mix_large[m]`` / ``mix_small[m]``, linear between the measured ``m`` and
    held beyond the last one for the large task (the small ones follow the small curve's shape from there); with
    ``l >= 2`` large the large tasks share the large task's slice (``* curve_L(l) / l``: never measured, and no rule
    here forms it beside a small task)."""
    sc, lc = dict(small_curve), dict(large_curve)
    ml, ms = dict(mix_large), dict(mix_small)
    m_top, m_low = max(ms), min(ms)

    def rates(n_large: int, n_small: int) -> Tuple[float, float]:
        if n_large and not n_small:
            return colocation_speedup(lc, n_large) / n_large, 0.0
        if n_small and not n_large:
            return 0.0, colocation_speedup(sc, n_small) / n_small
        if not n_small and not n_large:
            return 0.0, 0.0
        lr = colocation_speedup(ml, n_small) if n_small <= max(ml) else ml[max(ml)]
        if n_small <= m_top:
            sr = colocation_speedup(ms, n_small) if n_small >= m_low else ms[m_low]
        else:

            def per(k: int) -> float:
                return colocation_speedup(sc, k) / k

            sr = ms[m_top] * per(n_small) / per(m_top)
        if n_large > 1:
            lr *= colocation_speedup(lc, n_large) / n_large
        return lr, sr

    return rates


#: The speeds the default presumes when it knows only whether a task is large: the H200 anchor of the module
#: docstring (ResNet-18 for a small task, ResNet-50 for a large one; ``benchmarks/data``, to three decimals), the
#: same presumption the profiler makes for a small job (``profiler.SMALL_JOB_SM_UTIL``).
ANCHOR_RATES = rates_from(
    {1: 1.0, 2: 1.823, 4: 3.525, 8: 3.706},
    {1: 1.0, 2: 1.191, 4: 1.186, 8: 1.193},
    {1: 0.929, 3: 0.378},
    {1: 0.956, 3: 1.010},
)


def max_colocated(
    large: bool,
    rates: Rates = ANCHOR_RATES,
    *,
    min_gain: float = MIN_MARGINAL_GAIN,
    fairness_bound: float = FAIRNESS_BOUND,
    limit: int = 64,
) -> int:
    """The most tasks of one kind a GPU should hold together: it grows while the next one adds more than
    ``min_gain`` of a job (:func:`marginal_gain`) and keeps every task there at ``1 / fairness_bound`` of its solo speed
    (:func:`fair_mix`). The anchor: 4 small (the fifth adds 0.05 of a job), 2 large (1.19x in all, 0.595 each; a
    third would run each at 0.40)."""
    k = 1
    while k < limit:
        nl, ns = (k + 1, 0) if large else (0, k + 1)
        if (
            not fair_mix(rates, nl, ns, fairness_bound)
            or marginal_gain(rates, nl - large, ns - (not large), large) <= min_gain
        ):
            break
        k += 1
    return k


def slot_mb(expected_mb: int, gpu_mb: int, *, large: bool, rates: Rates = ANCHOR_RATES) -> int:
    """GPU memory to ask for and hold for a task that shares a GPU: its expected memory, and at least the GPU's
    memory over :func:`max_colocated` (a quarter of the GPU for a small task, half for a large one with the anchor).

    The headroom is what keeps the sharing fair and worth it with no rule beyond memory: YARN admits by memory and
    the ledger refuses by memory, so a GPU never holds more than 4 small tasks, 2 large, or a large and a small
    (:func:`admits` forbids a large with two small). The task's own memory cap stays its expected memory."""
    if expected_mb < 0 or gpu_mb <= 0:
        raise ValueError(f"expected_mb must be >= 0 and gpu_mb > 0, got {expected_mb} and {gpu_mb}")
    return max(int(expected_mb), int(gpu_mb) // max_colocated(large, rates))


def ask_mb(need_mb: int, largest_gpu_mb: Optional[int], *, large: bool) -> int:
    """What a task that shares a GPU asks YARN for (``melon.io/gpu-memory``): its need (expected memory plus the
    CUDA context reserve) raised to its :func:`slot_mb` on the cluster's largest GPU -- the AM's
    ``max(expected + context, gpu_slot_mb)``, since ``slot_mb(e + c, G) == max(e + c, slot_mb(e, G))``; the need
    alone when the cluster's GPUs are unknown (``largest_gpu_mb`` None or 0)."""
    return slot_mb(need_mb, largest_gpu_mb, large=large) if largest_gpu_mb else int(need_mb)


def slot_share(large: bool, rates: Rates = ANCHOR_RATES) -> str:
    """The slot's part of a GPU in words, for messages: "a quarter of the GPU" (small, anchor), "half of the GPU"."""
    k = max_colocated(large, rates)
    return {1: "the whole GPU", 2: "half of the GPU", 3: "a third of the GPU", 4: "a quarter of the GPU"}.get(
        k, f"1/{k} of the GPU"
    )


def _need(expected_mb: int, gpu: Gpu, large: bool, slots: bool, rates: Rates) -> int:
    """What a task of ``expected_mb`` takes on ``gpu``: its :func:`slot_mb` there with ``slots``, else
    ``expected_mb``."""
    if slots and gpu.total_mb > 0:
        return slot_mb(expected_mb, gpu.total_mb, large=large, rates=rates)
    return int(expected_mb)


def node_kinds(gpus: Sequence[Gpu], expected_mb: int, large: bool) -> Tuple[Tuple[Tuple[int, bool], float], ...]:
    """The task kinds a node holds, ``((expected_mb, large), weight)``: the distinct reservations on its GPUs and the
    task being placed, weighted by how many there are (what the node has seen; it knows no other demand)."""
    counts: dict[Tuple[int, bool], int] = {}
    for t in [t for g in gpus for t in g.task_tuples()] + [Task("", int(expected_mb), bool(large))]:
        key = (int(t.expected_mb), bool(t.large))
        counts[key] = counts.get(key, 0) + 1
    n = sum(counts.values())
    return tuple((k, c / n) for k, c in sorted(counts.items()))


def gpu_fragmentation(
    gpus: Sequence[Gpu],
    kinds: Iterable[Tuple[Tuple[int, bool], float]],
    mps: bool = False,
    *,
    slots: bool = False,
    rates: Rates = ANCHOR_RATES,
) -> float:
    """FGD's measure (Weng et al., ATC '23) on one node's GPUs, with the interference rule: the expected
    free GPU capacity (in GPUs) that a task drawn from ``kinds`` (:func:`node_kinds`) could not use, because the
    GPU's free memory is too small for it or :func:`admits` refuses it there (a GPU with two small tasks is no
    place for a large one without MPS). With ``slots`` a kind needs its :func:`slot_mb` on each GPU."""
    frag = 0.0
    for (mb, large), w in kinds:
        for g in gpus:
            if g.total_mb > 0 and not (room(g) >= _need(mb, g, large, slots, rates) and admits(g, large, mps)):
                frag += w * room(g) / g.total_mb
    return frag


def place_default(
    gpus: Sequence[Gpu],
    expected_mb: int,
    *,
    large: bool = False,
    mps: bool = False,
    rates: Rates = ANCHOR_RATES,
    slots: bool = False,
) -> Optional[int]:
    """The GPU a task that shares takes on a node (the executor's ledger) -- and the default the simulator scores.

    With ``slots`` (the ledger's call) the task takes its :func:`slot_mb` of whichever GPU it goes to, sized against
    that GPU, and the tasks already there are given by their expected memory (``Gpu.tasks``) while ``reserved_mb``
    counts what they hold; without, it takes ``expected_mb``. It refuses only what does not fit in memory or what
    :func:`admits` refuses (the interference rule): how many tasks share a GPU is set by the memory each holds.
    Among the GPUs left it takes:

    1. the one whose placement leaves the node least fragmented (:func:`gpu_fragmentation`: FGD's measure with the
       interference rule, over the kinds the node holds, :func:`node_kinds`): memory is not cut into pieces, nor
       GPUs filled with small tasks, that no task there could use;
    2. then the largest gain in aggregate throughput (:func:`marginal_gain` under ``rates``; an idle GPU gains a
       whole job): a task goes where it slows its neighbours least, an idle GPU first (skipped with MPS: the rates
       are measured without it);
    3. then best fit (the least memory left), then the lowest index.
    """
    gpus = list(gpus)
    if expected_mb < 0:
        raise ValueError(f"expected_mb must be >= 0, got {expected_mb}")
    need = [_need(expected_mb, g, large, slots, rates) for g in gpus]
    cands = [i for i, g in enumerate(gpus) if fits(g, need[i]) and admits(g, large, mps)]
    if not cands:
        return None
    kinds = node_kinds(gpus, expected_mb, large)
    best = None
    for i in cands:
        g = gpus[i]
        placed = Gpu(
            g.index,
            g.total_mb,
            g.reserved_mb + need[i],
            g.task_tuples() + [Task("", int(expected_mb), bool(large))],
        )
        frag = gpu_fragmentation(gpus[:i] + [placed] + gpus[i + 1 :], kinds, mps, slots=slots, rates=rates)
        gain = 0.0 if mps else marginal_gain(rates, *g.mix(), large)
        key = (round(frag, 9), -round(gain, 9), room(g) - need[i], g.index)
        if best is None or key < best[0]:
            best = (key, g.index)
    assert best is not None  # cands is not empty
    return best[1]
