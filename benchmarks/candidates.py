"""The placement rules the benchmarks compare the product's default against: the former default (c) and its
variants (:func:`place_where_it_pays`, with the queue quota, the critical path and longest-first), the FGD-style node
rules (:func:`least_fragmenting` on FGD's :func:`node_fragmentation`) and best fit (:func:`best_fit`, the ledger's
former rule, baseline (b)).

Pure functions like the product's rules in :mod:`airflow_provider_melon.gpu.policy`, which they build on; the
product itself never calls them. ``benchmarks/README.md`` says which benchmark scores which rule.
"""

from __future__ import annotations

import bisect
import math
from typing import Any, Callable, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from airflow_provider_melon.gpu.policy import (
    FAIRNESS_BOUND,
    MAX_SMALL_WITH_LARGE,
    MIN_MARGINAL_GAIN,
    Gpu,
    Rates,
    admits,
    exclusive,
    fair_mix,
    fits,
    marginal_gain,
    room,
)


def best_fit(
    gpus: Iterable[Gpu],
    expected_mb: int,
    *,
    large: bool = False,
    mps: bool = False,
) -> Optional[int]:
    """Index of the GPU with the least room left that still fits ``expected_mb`` and admits the task.

    Best fit keeps big holes free for big tasks: with GPUs of 10 GiB free and 3 GiB free, a 2 GiB task goes
    to the 3 GiB one, so a later 8 GiB task still finds a place. Ties go to the lowest index (deterministic).
    Returns ``None`` when no GPU fits (the executor then waits, and finally exits 75 so the AM re-requests).
    """
    best: Optional[Tuple[int, int]] = None
    best_index: Optional[int] = None
    for gpu in gpus:
        if not fits(gpu, expected_mb) or not admits(gpu, large, mps):
            continue
        key = (room(gpu) - expected_mb, gpu.index)
        if best is None or key < best:
            best, best_index = key, gpu.index
    return best_index


def curve_from_records(records: Iterable[Mapping[str, Any]], workload: str, mode: str = "plain") -> dict[int, float]:
    """Extract ``{k: speedup_vs_1}`` for one workload from h200-colocate.json-shaped records."""
    curve = {
        int(r["k"]): float(r["speedup_vs_1"])
        for r in records
        if r.get("workload") == workload and r.get("mode", "plain") == mode
    }
    if not curve:
        raise KeyError(f"no records for workload {workload!r} (mode {mode!r})")
    return curve


def small_only_throughput(
    rates: Rates, *, min_gain: float = MIN_MARGINAL_GAIN, fairness_bound: float = FAIRNESS_BOUND, limit: int = 64
) -> Tuple[int, float]:
    """``(k, aggregate throughput)`` of the fullest small-only GPU the gain and fairness rules allow.

    With the H200 anchor: R18 stops at k = 4 (3 -> 4 adds 0.85 of a job, 4 -> 5 only 0.05), 3.52 jobs' worth.
    """
    k = 1
    while k < limit and fair_mix(rates, 0, k + 1, fairness_bound) and marginal_gain(rates, 0, k, False) > min_gain:
        k += 1
    return k, k * rates(0, k)[1]


def whole_gpu_quota(
    n_gpus: int,
    rates: Rates,
    whole_work: float,
    sharing_work: float,
    *,
    min_gain: float = MIN_MARGINAL_GAIN,
    fairness_bound: float = FAIRNESS_BOUND,
    pair: bool = True,
    min_whole: int = 1,
    front: float = math.inf,
) -> int:
    """How many of ``n_gpus`` may hold a task that does not pay (a "whole-GPU" task), given the work left.

    ``whole_work`` / ``sharing_work`` are the solo work still to do by tasks that do not pay / that pay, in any
    common unit (the caller's estimate: task counts times a mean duration per kind). Whole-GPU tasks can use
    only one slot per GPU (two large together do not pay, and a large one admits at most one small beside it
    without MPS), so they set the makespan unless they start early enough; paying tasks are shorter and
    pack 4 to a GPU, so running them first lowers mean JCT. The rule front-loads the small-only GPU time:

    * GPU-time the whole-GPU work needs: ``whole_work / lr`` where ``lr`` is a large task's rate beside one
      small (``pair``: when that pairing is fair and gains more than ``min_gain``), else alone;
    * paying work that fits beside them: ``sr * whole_work / lr`` (``sr``: the small partner's rate);
    * while more paying work than that is left (``small_only_left`` GPU-time of small-only GPUs), only
      ``min_whole`` GPUs hold whole-GPU tasks (the rest pack small tasks, :func:`small_only_throughput`); once
      the rest fits beside them, every GPU may take one.

    This is the fractional lower bound's schedule ((0, 4) GPU-time first, then (1, 1) GPU-time: the order that
    lets the short tasks finish first). ``front`` < inf hedges it: the whole-GPU tasks get
    ``ceil(n_gpus * (x_pair - front * small_only_left) / (x_pair + small_only_left))`` GPUs (``x_pair``: their
    GPU-time), so ``front = 0`` spreads both kinds evenly over the schedule (they drain together: better
    makespan when durations are unknown, worse mean JCT). Returns 0 when there is no whole-GPU work.
    """
    if whole_work <= 0:
        return 0
    _, small_tp = small_only_throughput(rates, min_gain=min_gain, fairness_bound=fairness_bound)
    if pair and fair_mix(rates, 1, 1, fairness_bound) and marginal_gain(rates, 1, 0, False) > min_gain:
        lr, sr = rates(1, 1)
    else:
        lr, sr = rates(1, 0)[0], 0.0
    small_only_left = max(0.0, sharing_work - sr * whole_work / lr) / small_tp if small_tp > 0 else 0.0
    if small_only_left <= 1e-9:
        return n_gpus
    if front == math.inf:
        return max(0, min(n_gpus, min_whole))
    x_pair = whole_work / lr
    share = max(0.0, x_pair - front * small_only_left) / (x_pair + small_only_left)
    return max(min(n_gpus, min_whole), min(n_gpus, math.ceil(n_gpus * share - 1e-9)))


def place_where_it_pays(
    gpus: Sequence[Gpu],
    expected_mb: int,
    *,
    large: bool,
    pays: bool,
    rates: Rates,
    mps: bool = False,
    min_gain: float = MIN_MARGINAL_GAIN,
    fairness_bound: float = FAIRNESS_BOUND,
    consolidate: bool = False,
    keep_idle: int = 0,
    large_joins_one_small: bool = False,
    queued_whole: Optional[int] = None,
    queued_sharing: int = 0,
    work_ratio: float = 1.0,
    front: float = math.inf,
    min_whole: int = 1,
    large_joins_large: bool = False,
    keep_alone: Iterable[str] = (),
    alone: bool = False,
) -> Optional[int]:
    """Policy (c): the GPU a task should take, or ``None`` (it waits).

    A task whose :func:`packing_pays` is false (``pays=False``) takes an idle GPU (:func:`exclusive`); with
    ``large_joins_one_small`` it may also join a GPU that holds small tasks only, if :func:`admits` lets it in
    (without MPS: one small), under the gain and fairness rules below -- never a GPU with another large task.

    A task that pays goes to a GPU where it fits and :func:`admits` it, that gains more than ``min_gain`` of a
    job in aggregate throughput (:func:`marginal_gain`; an idle GPU gains 1.0) and where no task falls below
    ``1 / fairness_bound`` of its solo speed (:func:`fair_mix`). Among those:

    * ``consolidate=False``: the largest gain (so idle GPUs first), ties by :func:`best_fit`;
    * ``consolidate=True``: a GPU that already holds work before an idle one (largest gain among those,
      ties by best fit): small tasks stack on GPUs that are already shared, and idle GPUs stay free for tasks
      that need a whole one. An idle GPU is still taken when no shared one qualifies, unless
    * ``keep_idle`` (lookahead at the queue: how many queued tasks need an idle GPU and cannot use a shared
      one) is at least the number of idle GPUs: then the paying task waits rather than take one of them.

    Queue quota ((cQ), on when ``queued_whole`` is given): ``queued_whole`` / ``queued_sharing`` count the tasks
    waiting besides this one that do not pay / pay, ``work_ratio`` is the mean solo duration of a task that does
    not pay over one that pays (estimated from finished tasks; 1.0 while unknown). With the running tasks (one
    unit each) they give :func:`whole_gpu_quota`. A task that does not pay waits while that many GPUs already
    hold one; a paying task stays off the GPUs still missing from the quota (idle ones first, then those with
    the fewest small tasks, so they drain to the one small a large task may join) and, while whole-GPU tasks
    wait, consolidates on shared GPUs. ``front`` and ``min_whole`` go to :func:`whole_gpu_quota`.

    ``large_joins_large``: a task that does not pay may also join a GPU holding another one (2 x R50 run at 0.595
    each, 1.19 in all: fair, and more than ``min_gain``), still under :func:`admits` and the fairness bound, and
    never beside a small task (two large and a small together were not measured: no rule may rest on a guess).
    ``keep_alone`` (names of running tasks, from :func:`critical_tasks`) and ``alone`` (this task is one of them):
    no task joins a GPU holding one of those, and such a task takes only an idle GPU -- a job long enough to set the
    makespan on its own is never slowed by a neighbour.
    """
    gpus = list(gpus)
    keep = set(keep_alone)
    reserved: set[int] = set()
    if queued_whole is not None:
        running_whole = sum(1 for g in gpus if g.mix()[0])
        quota = whole_gpu_quota(
            len(gpus),
            rates,
            work_ratio * (queued_whole + running_whole + (not pays)),
            queued_sharing + sum(g.mix()[1] for g in gpus) + pays,
            min_gain=min_gain,
            fairness_bound=fairness_bound,
            pair=large_joins_one_small,
            front=front,
            min_whole=min_whole,
        )
        if not pays and running_whole >= quota:
            return None  # the quota is used: the paying tasks behind it go first
        if pays:
            # drain: the GPUs a queued whole-GPU task is to start on (idle first, then the fewest small tasks)
            deficit = max(0, min(queued_whole, quota - running_whole))
            free_of_whole = sorted(
                (g for g in gpus if not g.mix()[0]), key=lambda g: (len(g.tasks), g.reserved_mb, g.index)
            )
            reserved = {g.index for g in free_of_whole[:deficit]}
            consolidate = consolidate and queued_whole > 0
    if not pays and not large_joins_one_small and not large_joins_large:
        return exclusive(gpus)

    def whole_slot(g: Gpu, extra_small: int = 0) -> bool:
        """Could a task that does not pay still start on ``g`` (after ``extra_small`` more small tasks)?"""
        nl, ns = g.mix()
        ns += extra_small
        if not nl and not ns:
            return not g.tasks and g.reserved_mb <= 0
        return large_joins_one_small and not nl and ns <= MAX_SMALL_WITH_LARGE

    idle = [g for g in gpus if not g.tasks and g.reserved_mb <= 0]
    slots = sum(1 for g in gpus if whole_slot(g))
    best_gain, cands, best_shared_gain, shared = 0.0, [], 0.0, []
    eps = 1e-9
    for g in gpus:
        if not fits(g, expected_mb) or not admits(g, large, mps):
            continue
        nl, ns = g.mix()
        if not pays and not large_joins_large and (nl or not ns):
            continue  # a task that does not pay joins small tasks only (idle GPUs: exclusive() below)
        if pays and g.index in reserved:
            continue  # drained for a queued task that needs (nearly) a whole GPU
        if g.tasks and (alone or any(t.name in keep for t in g.task_tuples())):
            continue  # the critical path: a task that alone sets the makespan is never slowed
        if pays and keep_idle and slots <= keep_idle and whole_slot(g) and not whole_slot(g, int(not large)):
            continue  # lookahead: this GPU is one a queued task that needs a whole one could still start on
        if nl + large >= 2 and ns + (not large) >= 1:
            continue  # two large tasks with a small one: never measured, so never formed
        if not fair_mix(rates, nl + large, ns + (not large), fairness_bound):
            continue
        gain = marginal_gain(rates, nl, ns, large)
        if gain <= min_gain:
            continue
        if gain > best_gain + eps:
            best_gain, cands = gain, [g]
        elif abs(gain - best_gain) <= eps:
            cands.append(g)
        if g.tasks:
            if gain > best_shared_gain + eps:
                best_shared_gain, shared = gain, [g]
            elif abs(gain - best_shared_gain) <= eps:
                shared.append(g)
    if not pays:
        return exclusive(gpus) if idle else best_fit(cands, expected_mb, large=large, mps=True)
    if consolidate and shared:
        return best_fit(shared, expected_mb, large=large, mps=True)
    return best_fit(cands, expected_mb, large=large, mps=True) if cands else None


#: A task whose estimated solo work is at least this fraction of the backlog's even share per GPU is on the
#: critical path (:func:`critical_tasks`). Half: with lognormal durations (sigma 0.5-0.8) the few jobs above it are
#: the ones that end the schedule; at 1.0 too few are kept alone (bench_policy: the heavy-tailed large-job trace).
CRITICAL_FRACTION = 0.5


def critical_tasks(estimates: Mapping[str, float], n_gpus: int, *, fraction: float = CRITICAL_FRACTION) -> set[str]:
    """Names of the tasks (running or queued: ``estimates`` maps each to its estimated solo work, any unit) whose
    work alone reaches ``fraction`` of the even share ``sum(estimates) / n_gpus``: slowing one of them by sharing
    lengthens the whole schedule, so :func:`place_where_it_pays` keeps them alone (``keep_alone`` / ``alone``).
    Tasks without an estimate are simply absent: they are never critical."""
    if n_gpus < 1:
        raise ValueError(f"n_gpus must be >= 1, got {n_gpus}")
    if fraction <= 0:
        raise ValueError(f"fraction must be > 0, got {fraction}")
    share = fraction * sum(estimates.values()) / n_gpus
    return {name for name, w in estimates.items() if w > 0 and w >= share}


def longest_first(estimates: Mapping[str, float]) -> List[str]:
    """Queue order by estimated solo work, longest first (LPT), names without an estimate last in their given order.

    The classic makespan order (Graham's LPT); with durations learned from a task's earlier runs it is what an
    online scheduler that does not know the durations loses most to (bench_policy: the (c-lpt) oracle row)."""
    order = {n: i for i, n in enumerate(estimates)}
    return sorted(order, key=lambda n: (-(estimates[n] or 0.0), order[n]))


# -- fragmentation-aware placement across nodes (FGD's measure, with every resource YARN's calculator checks) ------
class Demand(NamedTuple):
    """One kind of task the cluster sees, as a node must hold it: ``weight`` (its share of arrivals), ``cpu``
    (millicores), ``mem`` (MiB of host memory), ``gpus`` (whole GPUs), ``share`` (the fraction of one GPU's
    memory a task that shares asks for; 0 when it takes whole GPUs or none) and ``models`` (the GPU models it
    accepts, a trace's ``gpu_spec``; empty: any)."""

    weight: float
    cpu: int
    mem: int
    gpus: int = 0
    share: float = 0.0
    models: Tuple[str, ...] = ()


class NodeFree(NamedTuple):
    """What is left on a node: ``cpu`` millicores, ``mem`` MiB and each GPU's free fraction of its memory."""

    cpu: int
    mem: int
    gpu_free: Tuple[float, ...]


def _holds(node: NodeFree, d: Demand) -> bool:
    """Could ``node`` hold one task of kind ``d`` (every resource fits, as DominantResourceCalculator checks)?"""
    if node.cpu < d.cpu or node.mem < d.mem:
        return False
    if d.share > 0:
        return any(f >= d.share - 1e-9 for f in node.gpu_free)
    return sum(1 for f in node.gpu_free if f >= 1.0 - 1e-9) >= d.gpus


def node_fragmentation(node: NodeFree, demands: Sequence[Demand]) -> float:
    """Expected free GPU capacity (in GPUs) on ``node`` that a task drawn from ``demands`` could not use.

    FGD's measure (Weng et al., ATC '23): for each kind, if the node cannot hold such a task at all -- short of a
    GPU, of CPU or of host memory -- all its free GPU capacity is fragment; if it can, the GPUs whose free part is
    smaller than the task's share are. Weighted by the kinds' shares of arrivals.
    """
    total = sum(node.gpu_free)
    if total <= 0:
        return 0.0
    free = sorted(node.gpu_free)
    below = [0.0]  # below[k]: the sum of the k smallest free parts
    for f in free:
        below.append(below[-1] + f)
    whole = sum(1 for f in free if f >= 1.0 - 1e-9)
    frag = 0.0
    for d in demands:
        need = d.share if d.share > 0 else (1.0 if d.gpus else 0.0)
        k = bisect.bisect_left(free, need - 1e-9)  # the GPUs whose free part is below the task's need
        fits = node.cpu >= d.cpu and node.mem >= d.mem and (len(free) - k > 0 if d.share > 0 else whole >= d.gpus)
        frag += d.weight * (below[k] if fits else total)
    return frag


def _after(node: NodeFree, task: Demand, gpu_idx: Sequence[int]) -> NodeFree:
    free = list(node.gpu_free)
    for i in gpu_idx:
        free[i] = 0.0 if task.gpus else max(0.0, free[i] - task.share)
    return NodeFree(node.cpu - task.cpu, node.mem - task.mem, tuple(free))


def placements(node: NodeFree, task: Demand) -> List[Tuple[int, ...]]:
    """The distinct ways ``task`` can go on ``node``: GPU index tuples (one per distinct free part for a task that
    shares, the lowest-index whole GPUs otherwise; ``()`` for a task with no GPU); empty when it does not fit."""
    if not _holds(node, task):
        return []
    if task.share > 0:
        seen: set[float] = set()
        out: List[Tuple[int, ...]] = []
        for i, f in enumerate(node.gpu_free):
            if f >= task.share - 1e-9 and round(f, 6) not in seen:
                seen.add(round(f, 6))
                out.append((i,))
        return out
    if task.gpus:
        return [tuple([i for i, f in enumerate(node.gpu_free) if f >= 1.0 - 1e-9][: task.gpus])]
    return [()]


#: how :func:`best_on_node` ranks a placement: (fragmentation added, free GPU left, dominant share used)
_Key = Tuple[float, float, float]


def best_on_node(
    node: NodeFree, task: Demand, demands: Sequence[Demand], frag: Optional[Callable[[NodeFree], float]] = None
) -> Optional[Tuple[_Key, Tuple[int, ...]]]:
    """``(key, GPU indices)`` of the best way to put ``task`` on ``node`` (see :func:`least_fragmenting`), or
    ``None`` when it does not fit. Lower keys are better; the key does not depend on the node's position."""
    score = frag or (lambda n: node_fragmentation(n, demands))
    best: Optional[Tuple[_Key, Tuple[int, ...]]] = None
    options = placements(node, task)
    if not options:
        return None
    before = score(node)
    for gi in options:
        after = _after(node, task, gi)
        key = (
            round(score(after) - before, 9),
            round(sum(after.gpu_free), 9),
            round(max(after.cpu / max(node.cpu, 1), after.mem / max(node.mem, 1)), 9),
        )
        if best is None or key < best[0]:
            best = (key, gi)
    return best


def least_fragmenting(
    nodes: Sequence[NodeFree],
    task: Demand,
    demands: Sequence[Demand],
    frag: Optional[Callable[[NodeFree], float]] = None,
) -> Optional[Tuple[int, Tuple[int, ...]]]:
    """``(node index, GPU indices)`` for ``task`` that grows :func:`node_fragmentation` least, or ``None``.

    Ties (common: many empty nodes alike) go to best fit, as :func:`best_fit` does on one node: the least free GPU
    capacity left on the node after placement, then the largest part of the node's free CPU and memory used (its
    dominant resource, so whole nodes stay whole), then the lowest index. ``frag`` may be a memoised
    ``node_fragmentation`` for ``demands`` (large clusters: the answer is the same).
    """
    best: Optional[Tuple[Tuple[_Key, int], Tuple[int, Tuple[int, ...]]]] = None
    for ni, node in enumerate(nodes):
        b = best_on_node(node, task, demands, frag)
        if b is not None and (best is None or (b[0], ni) < best[0]):
            best = ((b[0], ni), (ni, b[1]))
    return best[1] if best else None
