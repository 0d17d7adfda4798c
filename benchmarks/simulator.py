"""Discrete-event simulator of N GPUs running a job trace under four placement policies (stdlib only).

Everything that decides placement comes from :mod:`airflow_provider_melon.gpu.policy`, the product's rules (fits,
admits, exclusive, packing_pays, slot_mb, place_default), or from ``candidates``, the rules they are compared with
(best_fit, place_where_it_pays); everything that decides speed comes from the measured
H200 data (``benchmarks/data/h200-colocate.json``, ``h200-mix.json``). Nothing here is fitted to a target.

Jobs
    ``Job(name, kind, work_s, expected_mb, arrival_s)``: ``work_s`` is the job's solo duration on one GPU,
    ``kind`` is ``small`` (ResNet-18/CIFAR-like) or ``large`` (ResNet-50/224 bf16-like). ``expected_mb`` is
    what MeLoN would reserve: ``profiler.expected_mb(NVML peak of one copy)`` from the data file.

Speed model (a job's rate is the fraction of its solo speed; it finishes when it has done ``work_s``):
    * ``l`` large jobs alone: each at ``colocation_speedup(large_curve, l) / l`` (R50: 1.19x at k >= 2).
    * ``m`` small jobs alone: each at ``colocation_speedup(small_curve, m) / m`` (R18: 1.82/3.52/3.71x).
    * one large + ``m >= 1`` small, no MPS (h200-mix.json): large ``L(m)``, each small ``S(m)``, with the
      measured points ``L(1) = 0.929, S(1) = 0.956`` (r50+r18) and ``L(3) = 0.378, S(3) = 1.010`` (r50+3r18,
      mean of the three R18s), linear in ``m`` between; for ``m > 3`` (not measured) the large job stays at
      ``L(3)`` and the small ones follow the small curve's shape from there,
      ``S(m) = S(3) * (curve_S(m)/m) / (curve_S(3)/3)``.
    * ``l >= 2`` large + ``m >= 1`` small (not measured; only policy (b) creates it): the large jobs share the
      large job's slice, ``L(m) * curve_L(l) / l`` each, the small ones get ``S(m)``. This is optimistic
      for (b) (it adds nothing for the extra contexts), which only makes (b) look better than it is.

Policies (the cluster's scheduler scans the queue in arrival order and starts every job it can place):
    ``exclusive``  (a) YARN's default: a job needs a GPU nobody holds (``policy.exclusive``).
    ``memory``     (b) MeLoN by expected memory only: ``candidates.best_fit(..., mps=True)`` (no interference
                   rule), any kinds together.
    ``pays``       (c) share only where packing pays: ``candidates.place_where_it_pays`` (the former default) with
                   this module's speed model as its ``rates``. A job whose ``policy.packing_pays`` is false
                   (large: sm_util 0.84 from its 1.19x plateau) takes an idle GPU. A job that pays (small:
                   sm_util 0.27) goes to the GPU, among those that fit and ``policy.admits`` it without MPS (so
                   at most one small beside a large), with the largest marginal gain in aggregate throughput
                   (an idle GPU gains 1.0), provided the gain exceeds ``MIN_MARGINAL_GAIN`` (0.1 of a job: the
                   measurements' noise) and no job on that GPU would fall below ``1 / FAIRNESS_BOUND`` of its
                   solo speed; ties go to ``candidates.best_fit``.
    ``pays_mix``   (c') as (c) with ``large_joins_one_small``: a job that does not pay may also take a GPU
                   holding one small job, never one holding another large job.
    ``pays_mix_lookahead`` (cL) (c') plus ``consolidate`` and ``keep_idle`` = the queued jobs that do not pay.
    ``pays_quota`` (cQ) (c') plus ``consolidate`` and the queue quota (``candidates.whole_gpu_quota``): the queued
                   jobs' counts by kind and the mean solo duration of each kind among the jobs finished so far
                   go to ``candidates.place_where_it_pays``, which runs the small-only GPU time first and starts large
                   jobs on every GPU once the small work left fits beside them. ``pays_quota_even`` (cQ=) is the
                   same with ``front=0`` (both kinds spread evenly over the schedule).
    ``gandiva``    (g) a Gandiva-style greedy packer, a baseline: :func:`gandiva_place`.
    ``default``    (D) the product: every job holds its slot, ``policy.slot_mb`` of its expected memory
                   (:func:`slot`), and takes the GPU ``policy.place_default(..., slots=True)`` chooses -- the very
                   call ``gpu.ledger.Ledger.reserve`` makes on a node, with the same inputs (the GPUs' held memory,
                   the tasks' expected memory). With estimates (a history of earlier runs), the queue order
                   ``priority`` is YARN's under ``priority: auto``, and a job estimated at ``learned.ALONE_AFTER_S``
                   or more takes an idle GPU whole (:func:`alone`). ``benchmarks/bench_sim_vs_system.py``
                   compares it with the real YARN + AM + ledger.
    ``expected``   the ledger without slots (each job holds its expected memory alone), as it was before: up to
                   dozens of small jobs on one GPU, each slower. A comparison row, not the product.
    ``ideal``      (d) a lower bound, not a schedule: :func:`ideal_bound`; :func:`rules_bound` is the same
                   bound restricted to the configurations (c)'s own rules allow.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from airflow_provider_melon.gpu import learned, policy  # noqa: E402
from airflow_provider_melon.gpu.policy import Gpu, Task  # noqa: E402
from airflow_provider_melon.gpu.profiler import expected_mb  # noqa: E402
from benchmarks import candidates  # noqa: E402

SMALL_WORKLOAD = "resnet18-cifar-b128-fp32"
LARGE_WORKLOAD = "resnet50-224-b64-bf16"
#: No job under policy (c) may run below half its solo speed (running slowdown <= 2).
FAIRNESS_BOUND = policy.FAIRNESS_BOUND
#: Under (c) a job joins a shared GPU only if that raises the GPU's aggregate throughput by more than this
#: (in solo-job units): a tenth of a job, the run-to-run noise of the measurements (benchmarks/data/README.md).
#: R18: 3 -> 4 copies gains 0.85, 4 -> 5 only 0.05 (the curve flattens), so small jobs stop at 4 per GPU.
MIN_MARGINAL_GAIN = policy.MIN_MARGINAL_GAIN
#: H200: 141 GB (the data file's figure), in MiB.
H200_MB = int(141e9 // 2**20)
EPS = 1e-9


def data_dir() -> str:
    env = os.environ.get("MELON_SHARED_DATA")
    if env:
        return env
    return os.path.join(REPO, "benchmarks", "data")


# -- the speed model -----------------------------------------------------------------------------------------
@dataclass
class SpeedModel:
    small_curve: Dict[int, float]
    large_curve: Dict[int, float]
    mix_large: Dict[int, float]  # m small beside one large -> the large job's rate
    mix_small: Dict[int, float]  # -> each small job's rate
    small_peak_mb: float = 0.0
    large_peak_mb: float = 0.0
    _rates: Optional[object] = field(default=None, repr=False, compare=False)

    @classmethod
    def from_data(cls, directory: Optional[str] = None) -> "SpeedModel":
        d = directory or data_dir()
        with open(os.path.join(d, "h200-colocate.json")) as fh:
            colo = json.load(fh)
        with open(os.path.join(d, "h200-mix.json")) as fh:
            mix = {r["scenario"]: r for r in json.load(fh)}

        def peak(workload):
            return next(
                float(r["nvml_peak_used_mib"])
                for r in colo
                if r["workload"] == workload and int(r["k"]) == 1 and r.get("mode", "plain") == "plain"
            )

        def large_small(scenario):
            r = mix[scenario]
            larges = [v for (w, _), v in zip(r["jobs"], r["normalized"]) if w == LARGE_WORKLOAD]
            smalls = [v for (w, _), v in zip(r["jobs"], r["normalized"]) if w == SMALL_WORKLOAD]
            return larges[0], sum(smalls) / len(smalls), len(smalls)

        ml, ms = {}, {}
        for scen in ("r50+r18", "r50+3r18"):
            lr, sr, m = large_small(scen)
            ml[m], ms[m] = lr, sr
        return cls(
            candidates.curve_from_records(colo, SMALL_WORKLOAD),
            candidates.curve_from_records(colo, LARGE_WORKLOAD),
            ml,
            ms,
            peak(SMALL_WORKLOAD),
            peak(LARGE_WORKLOAD),
        )

    def curve(self, kind: str) -> Dict[int, float]:
        return self.small_curve if kind == "small" else self.large_curve

    def plateau(self, kind: str) -> float:
        return max(self.curve(kind).values())

    def rates(self, n_large: int, n_small: int) -> Tuple[float, float]:
        """(each large job's rate, each small job's rate) on a GPU holding that many of each
        (``policy.rates_from`` on the measured points)."""
        if self._rates is None:
            self._rates = policy.rates_from(self.small_curve, self.large_curve, self.mix_large, self.mix_small)
        return self._rates(n_large, n_small)

    def throughput(self, n_large: int, n_small: int) -> float:
        lr, sr = self.rates(n_large, n_small)
        return n_large * lr + n_small * sr


# -- jobs, traces ------------------------------------------------------------------------------------------
@dataclass
class Job:
    name: str
    kind: str
    work_s: float
    expected_mb: int
    arrival_s: float = 0.0
    #: the solo duration as the system estimates it (learned from the task's earlier runs); None: unknown
    est_s: Optional[float] = None

    @property
    def large(self) -> bool:
        return self.kind == "large"


def make_trace(
    n_jobs: int,
    small_fraction: float,
    seed: int,
    model: SpeedModel,
    *,
    small_median_s: float = 20 * 60,
    large_median_s: float = 40 * 60,
    sigma: float = 0.8,
    arrival_rate_per_s: float = 0.0,
) -> List[Job]:
    """A seeded trace: each job small with probability ``small_fraction``; solo durations lognormal
    (median 20 min small / 40 min large, sigma 0.8, clipped to [2 min, 8 h]); all arrive at 0 unless
    ``arrival_rate_per_s`` > 0 (Poisson arrivals). Expected memory: ``profiler.expected_mb`` of the
    kind's measured NVML peak."""
    rng = random.Random(seed)
    exp = {"small": expected_mb(model.small_peak_mb), "large": expected_mb(model.large_peak_mb)}
    jobs, t = [], 0.0
    for i in range(n_jobs):
        kind = "small" if rng.random() < small_fraction else "large"
        median = small_median_s if kind == "small" else large_median_s
        work = min(8 * 3600.0, max(120.0, median * math.exp(rng.gauss(0.0, sigma))))
        if arrival_rate_per_s > 0:
            t += rng.expovariate(arrival_rate_per_s)
        jobs.append(Job(f"{kind[0]}{i:03d}", kind, round(work, 1), exp[kind], round(t, 1)))
    return jobs


def with_estimates(jobs: Sequence[Job], sigma: float, seed: int = 1) -> List[Job]:
    """Copies of ``jobs`` whose ``est_s`` is the solo duration off by a lognormal factor ``exp(N(0, sigma))``
    (sigma 0.3: about two thirds of the estimates within -26 %..+35 %): what a history of earlier runs would give."""
    rng = random.Random(seed)
    return [
        Job(j.name, j.kind, j.work_s, j.expected_mb, j.arrival_s, j.work_s * math.exp(rng.gauss(0.0, sigma)))
        for j in jobs
    ]


# -- placement ---------------------------------------------------------------------------------------------
def alone(job: Job) -> bool:
    """Whether the default runs ``job`` on a GPU of its own: its estimated run time reaches ``learned.ALONE_AFTER_S``
    (the hook's ``resolve_learned`` makes such a shared role ``gpus: 1``)."""
    return job.est_s is not None and job.est_s >= learned.ALONE_AFTER_S


def _gpus(state: List[List[Job]], total_mb: int, slots: bool = False) -> List[Gpu]:
    """The GPUs as the policy sees them: each job by its expected memory, taking its expected memory or, with
    ``slots``, its :func:`slot` (what the ledger records as ``held_mb``; the whole GPU for a job :func:`alone`)."""
    return [
        Gpu(
            i,
            total_mb,
            sum((total_mb if alone(j) else slot(j, total_mb)) if slots else j.expected_mb for j in js),
            [Task(j.name, j.expected_mb, j.large) for j in js],
        )
        for i, js in enumerate(state)
    ]


def _counts(js: Sequence[Job]) -> Tuple[int, int]:
    nl = sum(1 for j in js if j.large)
    return nl, len(js) - nl


def job_pays(job: Job, model: SpeedModel, total_mb: int) -> bool:
    """``policy.packing_pays`` with the SM share read back from the kind's measured plateau."""
    return policy.packing_pays(policy.implied_sm_util(model.plateau(job.kind)), min(1.0, job.expected_mb / total_mb))


def fair(model: SpeedModel, n_large: int, n_small: int) -> bool:
    """No job on a GPU holding this mix runs below ``1 / FAIRNESS_BOUND`` of its solo speed (``policy.fair_mix``)."""
    return policy.fair_mix(model.rates, n_large, n_small, FAIRNESS_BOUND)


#: Policy names (c) and its variants -> the flags they pass to ``candidates.place_where_it_pays``.
PAYS_VARIANTS = {
    "pays": {},
    "pays_mix": {"large_joins_one_small": True},
    "pays_mix_lookahead": {"consolidate": True, "lookahead": True, "large_joins_one_small": True},
    "pays_quota": {"consolidate": True, "counts": True, "large_joins_one_small": True},
    "pays_quota_even": {"consolidate": True, "counts": True, "large_joins_one_small": True, "front": 0.0},
    "pays_learned": {"large_joins_one_small": True, "large_joins_large": True, "learned": True},
}


def place(
    name: str,
    job: Job,
    state: List[List[Job]],
    total_mb: int,
    model: SpeedModel,
    queued: Sequence[Job] = (),
    done: Sequence[Job] = (),
) -> Optional[int]:
    """The GPU ``job`` takes under policy ``name`` given what runs (``state``) and what else waits (``queued``,
    the jobs behind it in the queue: only the lookahead and quota variants read it), or None. ``done``: the
    jobs finished so far (only the quota variants read it: the mean solo duration of each kind)."""
    gpus = _gpus(state, total_mb)
    if name == "exclusive":
        return policy.exclusive(gpus)
    if name == "memory":
        return candidates.best_fit(gpus, job.expected_mb, large=job.large, mps=True)
    if name == "expected":
        return policy.place_default(gpus, job.expected_mb, large=job.large, mps=False)
    if name == "default":
        held = _gpus(state, total_mb, slots=True)
        if alone(job):  # a whole GPU: the ledger's exclusive reservation
            return policy.exclusive(held)
        return policy.place_default(held, job.expected_mb, large=job.large, slots=True)
    if name == "gandiva":
        return gandiva_place(job, state, gpus, model)
    if name not in PAYS_VARIANTS:
        raise ValueError(f"unknown policy {name!r}")
    flags = dict(PAYS_VARIANTS[name])
    if flags.pop("learned", False):
        # the critical path from the estimates of everything running or waiting (candidates.critical_tasks)
        est = {j.name: j.est_s for js in state for j in js if j.est_s is not None}
        est.update({q.name: q.est_s for q in queued if q.est_s is not None})
        if job.est_s is not None:
            est[job.name] = job.est_s
        crit = candidates.critical_tasks(est, len(state)) if est else set()
        flags["keep_alone"] = crit
        flags["alone"] = job.name in crit
    keep_idle = 0
    if flags.pop("lookahead", False):
        keep_idle = sum(1 for q in queued if q is not job and not job_pays(q, model, total_mb))
    if flags.pop("counts", False):
        others = [job_pays(q, model, total_mb) for q in queued if q is not job]
        flags["queued_whole"] = sum(1 for p in others if not p)
        flags["queued_sharing"] = sum(1 for p in others if p)
        # the mean solo duration of each kind, from the jobs that have finished (what the system could log);
        # 1.0 until one of each kind has finished
        paid = [(job_pays(d, model, total_mb), d.work_s) for d in done]
        wl = [w for p, w in paid if not p]
        ws = [w for p, w in paid if p]
        if wl and ws:
            flags["work_ratio"] = (sum(wl) / len(wl)) / (sum(ws) / len(ws))
    return candidates.place_where_it_pays(
        gpus,
        job.expected_mb,
        large=job.large,
        pays=job_pays(job, model, total_mb),
        rates=model.rates,
        min_gain=MIN_MARGINAL_GAIN,
        fairness_bound=FAIRNESS_BOUND,
        keep_idle=keep_idle,
        **flags,
    )


def slot(job: Job, total_mb: int) -> int:
    """What the default asks for and holds for ``job``: ``policy.slot_mb`` of its expected memory (the anchor's
    presumed speeds, not the simulator's measured ones: the product knows only whether a job is large), the figure
    the ledger records as ``held_mb``."""
    return policy.slot_mb(job.expected_mb, total_mb, large=job.large)


def gandiva_place(job: Job, state: List[List[Job]], gpus: List[Gpu], model: SpeedModel) -> Optional[int]:
    """A Gandiva-style greedy packer (Xiao et al., OSDI 2018), as a baseline: an idle GPU if there is one
    (lowest index), else the least-loaded GPU (fewest jobs, then least memory) where the job fits in memory
    and its introspection finds that packing raises the GPU's aggregate throughput (the simulator hands it
    the measured outcome of that trial for free: no trial period, no migration cost). It knows no kinds, no
    interference rule and no fairness bound; memory is its only hard limit."""
    free = policy.exclusive(gpus)
    if free is not None:
        return free
    best = None
    for g, js in zip(gpus, state):
        if not policy.fits(g, job.expected_mb):
            continue
        nl, ns = _counts(js)
        if model.throughput(nl + job.large, ns + (not job.large)) <= model.throughput(nl, ns) + EPS:
            continue
        key = (len(js), g.reserved_mb, g.index)
        if best is None or key < best[0]:
            best = (key, g.index)
    return best[1] if best else None


# -- simulation --------------------------------------------------------------------------------------------
@dataclass
class Result:
    policy: str
    makespan_s: float
    mean_jct_s: float
    gpu_hours: float
    start: Dict[str, float] = field(default_factory=dict)
    finish: Dict[str, float] = field(default_factory=dict)
    slowdown: Dict[str, float] = field(default_factory=dict)  # (finish - start) / solo work
    gpu: Dict[str, int] = field(default_factory=dict)  # the GPU each job ran on
    max_concurrency: int = 0

    @property
    def worst_slowdown(self) -> float:
        return max(self.slowdown.values()) if self.slowdown else 1.0


#: Queue order among jobs that arrived at the same time: ``name`` (by name: the trace's jobs are named
#: ``<kind letter><index>``, so at t = 0 every large job is ahead of every small one), ``trace`` (by position
#: in the trace, the order they were submitted in), ``lpt`` (longest solo work first: a clairvoyant order,
#: for measuring what not knowing durations costs; the system does not know them), ``learned`` (longest
#: *estimated* solo work first, ``Job.est_s`` via ``candidates.longest_first``: durations learned from earlier runs),
#: ``priority`` (what the product's ``priority: auto`` makes of YARN's queue: :func:`yarn_priority`, highest first,
#: then by name; a job without an estimate at 0, after the others; the queue is kept in that order as jobs arrive,
#: so a later job of a higher priority goes ahead of an earlier one still waiting, as in YARN).
QUEUE_ORDERS = ("name", "trace", "lpt", "learned", "priority")


def yarn_priority(job: Job) -> int:
    """The YARN application priority ``priority: auto`` gives ``job``: ``learned.priority`` of its estimate, 0
    without one."""
    return learned.priority(job.est_s) if job.est_s is not None else 0


def _answer_key(policy_name: str, job: Job) -> tuple:
    """What a policy's answer for ``job`` depends on besides the GPUs' state: its kind and memory, and with estimates
    whether the default runs it :func:`alone`, or for (cD) the job itself (is it on the critical path?)."""
    if job.est_s is None:
        return (job.kind, job.expected_mb)
    if policy_name == "default":
        return (job.kind, job.expected_mb, alone(job))
    return (job.kind, job.expected_mb, job.name)


def simulate(
    jobs: Sequence[Job], n_gpus: int, total_mb: int, policy_name: str, model: SpeedModel, order: str = "name"
) -> Result:
    """Run ``jobs`` on ``n_gpus`` GPUs of ``total_mb`` under ``exclusive``/``memory``/``pays``/..."""
    if order not in QUEUE_ORDERS:
        raise ValueError(f"order must be one of {QUEUE_ORDERS}, got {order!r}")
    if policy_name == "ideal":
        raise ValueError("'ideal' is a bound: use ideal_bound()")
    for j in jobs:
        if j.expected_mb > total_mb:
            raise ValueError(f"{j.name} needs {j.expected_mb} MiB > {total_mb} MiB GPUs")
    position = {id(j): i for i, j in enumerate(jobs)}
    if order == "learned":
        rank = {n: i for i, n in enumerate(candidates.longest_first({j.name: j.est_s for j in jobs}))}
    tie = {
        "name": lambda j: (j.name,),
        "trace": lambda j: (position[id(j)],),
        "lpt": lambda j: (-j.work_s, j.name),
        "learned": lambda j: (rank[j.name],),
        "priority": lambda j: (-yarn_priority(j), j.name),
    }[order]
    pending = sorted(jobs, key=lambda j: (j.arrival_s,) + tie(j))
    queue: List[Job] = []
    done: List[Job] = []
    state: List[List[Job]] = [[] for _ in range(n_gpus)]
    remaining = {j.name: float(j.work_s) for j in jobs}
    res = Result(policy_name, 0.0, 0.0, 0.0)
    t, busy, pi = 0.0, 0.0, 0
    while pi < len(pending) or queue or any(state):
        arrived = pi
        while pi < len(pending) and pending[pi].arrival_s <= t + EPS:
            queue.append(pending[pi])
            pi += 1
        if order == "priority" and pi > arrived:  # YARN serves a queue by priority first, then by submission
            queue.sort(key=lambda j: (-yarn_priority(j), j.arrival_s, j.name))
        refused = set()  # (kind, memory) refused since the last placement: the same answer until state changes
        for job in list(queue):
            same = _answer_key(policy_name, job)
            if same in refused:
                continue
            g = place(policy_name, job, state, total_mb, model, queue, done)
            if g is None:
                refused.add(same)
            else:
                refused.clear()
                state[g].append(job)
                queue.remove(job)
                res.start[job.name] = t
                res.gpu[job.name] = g
        res.max_concurrency = max(res.max_concurrency, max(len(s) for s in state))
        rate: Dict[str, float] = {}
        for js in state:
            lr, sr = model.rates(*_counts(js))
            for j in js:
                rate[j.name] = lr if j.large else sr
        dt = math.inf
        for name, r in rate.items():
            if r <= 0:
                raise RuntimeError(f"job {name} has rate {r}")
            dt = min(dt, remaining[name] / r)
        if pi < len(pending):
            dt = min(dt, pending[pi].arrival_s - t)
        if dt == math.inf:
            raise RuntimeError(f"stuck at t={t}: queued {[j.name for j in queue]} fit nowhere")
        busy += dt * sum(1 for s in state if s)
        t += dt
        for gi, js in enumerate(state):
            keep = []
            for j in js:
                remaining[j.name] -= rate[j.name] * dt
                if remaining[j.name] <= 1e-6 * max(1.0, j.work_s):
                    res.finish[j.name] = t
                    done.append(j)
                else:
                    keep.append(j)
            state[gi] = keep
    res.makespan_s = max(res.finish.values()) if res.finish else 0.0
    res.mean_jct_s = sum(res.finish[j.name] - j.arrival_s for j in jobs) / len(jobs) if jobs else 0.0
    res.gpu_hours = busy / 3600.0
    res.slowdown = {j.name: (res.finish[j.name] - res.start[j.name]) / j.work_s for j in jobs}
    return res


# -- (d) the ideal-packing lower bound ----------------------------------------------------------------------
@dataclass
class Bound:
    makespan_s: float
    mean_jct_s: float
    gpu_hours: float
    configs: List[Tuple[int, int]]


def configurations(
    model: SpeedModel, total_mb: int, small_mb: int, large_mb: int
) -> List[Tuple[int, int, float, float]]:
    """Measured GPU configurations ``(n_large, n_small, small work/s, large work/s)`` that fit in memory:
    k small alone, l large alone, one large with 1..3 small (the measured mixes and between)."""
    out = []
    for m in range(1, total_mb // small_mb + 1):
        out.append((0, m, model.throughput(0, m), 0.0))
    for l in range(1, total_mb // large_mb + 1):
        out.append((l, 0, 0.0, model.throughput(l, 0)))
    for m in range(1, max(model.mix_small) + 1):
        if large_mb + m * small_mb <= total_mb:
            lr, sr = model.rates(1, m)
            out.append((1, m, m * sr, lr))
    return out


def pays_configuration(model: SpeedModel, n_large: int, n_small: int, large_pays: bool) -> bool:
    """Could policy (c) ever form this GPU configuration? Its own three rules, nothing else:
    ``packing_pays`` (a large job that does not pay never joins a GPU with work on it, so no ``l >= 2``; a
    small job may still join it), ``policy.admits`` without MPS (at most ``MAX_SMALL_WITH_LARGE`` small beside
    a large), the fairness bound (:func:`fair`), and the marginal gain (the last small job to join adds more
    than ``MIN_MARGINAL_GAIN``: R18 stops at 4 per GPU)."""
    if n_large > 1 and not large_pays:
        return False
    if n_large and n_small > policy.MAX_SMALL_WITH_LARGE:
        return False
    if (
        n_small
        and (n_large or n_small > 1)
        and model.throughput(n_large, n_small) - model.throughput(n_large, n_small - 1) <= MIN_MARGINAL_GAIN
    ):
        return False
    return fair(model, n_large, n_small)


def rules_bound(
    jobs: Sequence[Job], n_gpus: int, total_mb: int, model: SpeedModel, *, large_pairs: bool = False
) -> Bound:
    """:func:`ideal_bound` over only the configurations policy (c) may form (:func:`pays_configuration`):
    the best any schedule that obeys (c)'s rules could do. ``(c) / rules_bound`` is what (c) loses to its
    online, arrival-order scheduling (mostly the tail: the last jobs start late and run alone);
    ``rules_bound / ideal_bound`` is what its rules (fairness, no large sharing without MPS) cost.
    ``large_pairs``: the rules of (cD), where two large jobs may share a GPU (when fair)."""
    large_mb = max([j.expected_mb for j in jobs if j.large] or [expected_mb(model.large_peak_mb)])
    large_pays = job_pays(Job("l", "large", 1.0, large_mb), model, total_mb)
    return ideal_bound(
        jobs,
        n_gpus,
        total_mb,
        model,
        allowed=lambda nl, ns: pays_configuration(model, nl, ns, large_pays or large_pairs),
    )


def ideal_bound(jobs: Sequence[Job], n_gpus: int, total_mb: int, model: SpeedModel, allowed=None) -> Bound:
    """A lower bound on makespan (and GPU-hours, mean JCT) under any packing, from the measured data.

    Makespan: the least ``T`` such that GPU-time spread over the measured configurations (fractionally,
    any mix of them, all ``N`` GPUs busy until ``T``) does all small and all large work -- a 2-constraint LP,
    solved exactly by trying every single configuration and every pair -- and no less than the latest
    ``arrival + work / fastest per-job rate`` (a job cannot beat its own best speed). GPU-hours: the LP's
    GPU-time at the optimum (every GPU-second at the best mix). Mean JCT: each job's solo duration divided
    by the fastest per-job rate measured (queueing ignored) -- loose, stated for completeness.
    ``allowed(n_large, n_small)``, when given, keeps only the configurations it accepts (:func:`rules_bound`).
    """
    ws = sum(j.work_s for j in jobs if not j.large)
    wl = sum(j.work_s for j in jobs if j.large)
    small_mb = max([j.expected_mb for j in jobs if not j.large] or [expected_mb(model.small_peak_mb)])
    large_mb = max([j.expected_mb for j in jobs if j.large] or [expected_mb(model.large_peak_mb)])
    cfgs = [c for c in configurations(model, total_mb, small_mb, large_mb) if allowed is None or allowed(c[0], c[1])]
    best, used = math.inf, []
    # single configurations
    for c in cfgs:
        _, _, a, b = c
        if (ws > 0 and a <= 0) or (wl > 0 and b <= 0):
            continue
        x = max(ws / a if ws else 0.0, wl / b if wl else 0.0)
        if x < best:
            best, used = x, [c]
    # pairs: x1*a1 + x2*a2 = ws, x1*b1 + x2*b2 = wl, x >= 0
    for c1, c2 in itertools.combinations(cfgs, 2):
        a1, b1, a2, b2 = c1[2], c1[3], c2[2], c2[3]
        det = a1 * b2 - a2 * b1
        if abs(det) < EPS:
            continue
        x1 = (ws * b2 - wl * a2) / det
        x2 = (a1 * wl - b1 * ws) / det
        if x1 < -EPS or x2 < -EPS:
            continue
        if x1 + x2 < best:
            best, used = x1 + x2, [c1, c2]
    vmax = {"small": max(1.0, max(model.mix_small.values())), "large": 1.0}
    lower = max((j.arrival_s + j.work_s / vmax[j.kind] for j in jobs), default=0.0)
    makespan = max(best / n_gpus, lower)
    jct = sum(j.work_s / vmax[j.kind] for j in jobs) / len(jobs) if jobs else 0.0
    return Bound(makespan, jct, best / 3600.0, [(c[0], c[1]) for c in used])
