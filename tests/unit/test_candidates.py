"""benchmarks/candidates.py: the placement rules the benchmarks compare the product's default against, checked
against the H200 measurements in benchmarks/data."""

import pytest

from airflow_provider_melon.gpu.policy import Gpu, Task
from benchmarks import candidates
from tests.h200_anchor import H200_MB, R18_CURVE, R50_CURVE, load, rates


def test_best_fit_picks_least_room_that_fits():
    gpus = [Gpu(0, 16000, 2000), Gpu(1, 16000, 12000), Gpu(2, 16000, 13500)]
    # 3000 MiB: GPU 2 has 2500 left (too small), GPU 1 has 4000 (tightest fit), GPU 0 has 14000.
    assert candidates.best_fit(gpus, 3000) == 1
    # a big hole stays free for a big task
    assert candidates.best_fit(gpus, 10000) == 0
    assert candidates.best_fit(gpus, 15000) is None
    assert candidates.best_fit([], 1) is None


def test_best_fit_tie_goes_to_lowest_index():
    gpus = [Gpu(3, 8000), Gpu(1, 8000), Gpu(2, 8000)]
    assert candidates.best_fit(gpus, 1000) == 1


def test_best_fit_applies_the_interference_rule():
    large = Task("r50", 5000, True)
    small = Task("r18", 1600, False)
    busy = Gpu(0, 141000, 6600, [large, small])  # tighter fit, but already R50 + R18
    other = Gpu(1, 141000, 0, [])
    assert candidates.best_fit([busy, other], 1600, large=False, mps=False) == 1
    assert candidates.best_fit([busy, other], 1600, large=False, mps=True) == 0
    assert candidates.best_fit([busy], 1600, large=False, mps=False) is None


def test_colocate_data_matches_the_anchor():
    records = load("h200-colocate.json")
    r18 = candidates.curve_from_records(records, "resnet18-cifar-b128-fp32")
    r50 = candidates.curve_from_records(records, "resnet50-224-b64-bf16")
    for k, v in R18_CURVE.items():
        assert r18[k] == pytest.approx(v, abs=0.01)
    for k, v in R50_CURVE.items():
        assert r50[k] == pytest.approx(v, abs=0.01)
    assert r18[1] == 1.0


def test_curve_from_records_unknown_workload():
    with pytest.raises(KeyError):
        candidates.curve_from_records([{"workload": "x", "k": 1, "speedup_vs_1": 1.0}], "y")


# -- place_where_it_pays: policy (c)'s online rule, with the measured H200 anchor as its speed model ---------------
SMALL, LARGE = Task("s", 2076, False), Task("l", 5653, True)


def _gpu(i, *tasks):
    return Gpu(i, H200_MB, sum(t.expected_mb for t in tasks), list(tasks))


def _place(gpus, large=False, pays=None, **kw):
    return candidates.place_where_it_pays(
        gpus, 5653 if large else 2076, large=large, pays=(not large) if pays is None else pays, rates=rates, **kw
    )


def test_a_small_task_takes_the_largest_gain_so_an_idle_gpu_first():
    gpus = [_gpu(0, SMALL, SMALL), _gpu(1), _gpu(2, LARGE)]
    assert _place(gpus) == 1  # gain 1.0 beats joining two smalls (0.85) or a large (0.89)
    assert _place(gpus[:1] + gpus[2:]) == 2  # then beside the large one (0.89 > 0.85)


def test_a_small_task_stops_at_the_marginal_gain_and_the_fairness_bound():
    assert _place([_gpu(0, *[SMALL] * 4)]) is None  # the fifth R18 would add 0.05 of a job: not worth it
    assert _place([_gpu(0, *[SMALL] * 4)], min_gain=0.04) == 0
    assert _place([_gpu(0, LARGE, SMALL)]) is None  # without MPS admits() allows one small beside a large
    assert _place([_gpu(0, LARGE, SMALL)], mps=True) == 0  # with MPS: R50 + 2 x R18 (0.65/0.98) is fair
    assert _place([_gpu(0, LARGE, SMALL, SMALL)], mps=True) is None  # R50 + 3 x R18: R50 at 0.38 < 1/2
    assert _place([_gpu(0, LARGE, SMALL, SMALL)], mps=True, fairness_bound=3.0) == 0


def test_a_task_that_does_not_pay_takes_an_idle_gpu_only():
    gpus = [_gpu(0, SMALL), _gpu(1, LARGE)]
    assert _place(gpus, large=True) is None
    assert _place(gpus + [_gpu(2)], large=True) == 2
    # (c'): it may join a GPU holding one small (R50 + R18: 0.93/0.96), never one holding a large
    assert _place(gpus, large=True, large_joins_one_small=True) == 0
    assert _place([_gpu(0, SMALL, SMALL)], large=True, large_joins_one_small=True) is None  # admits: one small


def test_consolidation_prefers_a_gpu_that_is_already_shared():
    gpus = [_gpu(0), _gpu(1, SMALL, SMALL), _gpu(2)]
    assert _place(gpus) == 0  # default: the idle GPU gains most
    assert _place(gpus, consolidate=True) == 1  # consolidate: stack on the shared one, idle GPUs stay free
    assert _place([_gpu(0), _gpu(1, *[SMALL] * 4)], consolidate=True) == 0  # the shared one is full: idle after all


def test_lookahead_keeps_an_idle_gpu_for_a_queued_large_task():
    gpus = [_gpu(0), _gpu(1, LARGE)]
    assert _place(gpus) == 0
    # one large task waits in the queue and GPU 0 is the only idle one: the small task joins the large instead
    assert _place(gpus, keep_idle=1) == 1
    assert _place([_gpu(0), _gpu(1, LARGE, SMALL)], keep_idle=1) is None  # nothing else qualifies: it waits
    assert _place([_gpu(0), _gpu(2), _gpu(1, LARGE, SMALL)], keep_idle=1) == 0  # two idle, one needed: fine
    # with large_joins_one_small a GPU holding one small still takes a large task: a second small may not fill it
    one = [_gpu(0, SMALL), _gpu(1, *[SMALL] * 3)]
    assert _place(one, large_joins_one_small=True) == 1  # 3 -> 4 gains 0.85 > 1 -> 2 gains 0.82
    assert _place([_gpu(0, SMALL)], large_joins_one_small=True) == 0
    assert _place([_gpu(0, SMALL)], large_joins_one_small=True, keep_idle=1) is None


# -- queue quota ((cQ)): whole-GPU tasks start once the paying work left fits beside them ----------------------------
def test_small_only_throughput_stops_at_the_gain_rule():
    k, tp = candidates.small_only_throughput(rates)
    assert k == 4 and tp == pytest.approx(3.52)
    assert candidates.small_only_throughput(rates, min_gain=0.04)[0] > 4


def test_whole_gpu_quota_front_loads_the_small_only_time():
    assert candidates.whole_gpu_quota(8, rates, 0, 100) == 0  # no whole-GPU work
    # 10 large units need 10 / 0.93 GPU-h beside one small each, which absorbs 0.96 * 10 / 0.93 = 10.3 small units
    assert candidates.whole_gpu_quota(8, rates, 10, 10) == 8  # the small work fits beside them: every GPU may take one
    assert candidates.whole_gpu_quota(8, rates, 10, 40) == 1  # small-only GPU time still needed: one GPU (learns)
    assert candidates.whole_gpu_quota(8, rates, 10, 40, min_whole=0) == 0
    assert candidates.whole_gpu_quota(8, rates, 20, 20) == 8  # a longer large kind (work ratio 2) switches sooner
    # front=0: both kinds spread evenly, GPUs in proportion to their GPU-time (10 / 0.93 vs (40 - 10.3) / 3.52)
    assert candidates.whole_gpu_quota(8, rates, 10, 40, front=0.0) == 5  # ceil(8 * 10.75 / (10.75 + 8.43)) = ceil(4.48)
    assert candidates.whole_gpu_quota(8, rates, 10, 40, front=1.0) == 1  # ceil(8 * (10.75 - 8.43) / 19.18) = 1


def test_quota_a_large_task_waits_while_small_only_time_is_still_needed():
    gpus = [_gpu(0), _gpu(1, LARGE), _gpu(2)]
    assert _place(gpus, large=True) == 0  # (c): an idle GPU
    # 30 small tasks wait: the one GPU the quota allows already holds a large task, the small ones go first
    assert _place(gpus, large=True, large_joins_one_small=True, queued_whole=3, queued_sharing=30) is None
    # little small work left: it may start (idle GPU first)
    assert _place(gpus, large=True, large_joins_one_small=True, queued_whole=3, queued_sharing=0) == 0


def test_quota_a_small_task_goes_to_the_shared_gpu_and_leaves_the_idle_one_to_a_queued_large():
    gpus = [_gpu(0), _gpu(1, SMALL, SMALL)]
    assert _place(gpus) == 0  # (c): the idle GPU gains most
    # a large task waits and the small work left fits beside it: the idle GPU is kept, the small one stacks
    assert _place(gpus, large_joins_one_small=True, consolidate=True, queued_whole=1, queued_sharing=0) == 1
    # no large task waiting: no GPU kept, and without whole-GPU tasks waiting no consolidation either
    assert _place(gpus, large_joins_one_small=True, consolidate=True, queued_whole=0, queued_sharing=0) == 0


def test_quota_drains_the_gpu_with_the_fewest_small_tasks_for_a_queued_large():
    gpus = [_gpu(0, SMALL, SMALL, SMALL), _gpu(1, SMALL, SMALL), _gpu(2, LARGE)]
    # with one large waiting and the quota not met, GPU 1 (fewest small tasks, no large) is kept to drain to the
    # one small a large task may join; the small task takes the largest gain elsewhere: beside the large (0.89)
    kw = dict(large_joins_one_small=True, consolidate=True, queued_whole=1, queued_sharing=0)
    assert _place(gpus, **kw) == 2
    assert _place(gpus[:2], **kw) == 0  # not GPU 1
    assert _place(gpus[:2], **dict(kw, queued_whole=0)) == 0  # nothing waits: 3 -> 4 and 2 -> 3 tie, best fit
    assert _place([_gpu(1, SMALL, SMALL)], **kw) is None  # the only GPU drains: the small task waits


# -- (cD): large pairs, the critical path, learned durations --------------------------------------------------------
def test_large_joins_large_only_with_the_flag_and_never_beside_a_small():
    busy = [_gpu(0, LARGE)]
    assert _place(busy, large=True) is None  # (c): a task that does not pay waits for an idle GPU
    assert _place(busy, large=True, large_joins_large=True) == 0  # 2 x R50 at 0.595 each: fair, gains 0.19
    # two large and a small were never measured: neither a large joins (large, small) nor a small joins (large, large)
    assert _place([_gpu(0, LARGE, SMALL)], large=True, large_joins_one_small=True, large_joins_large=True) is None
    assert _place([_gpu(0, LARGE, Task("l2", 5653, True))], large_joins_large=True) is None
    assert _place([_gpu(0, LARGE)], large_joins_large=True) == 0  # a small beside one large is still fine


def test_keep_alone_protects_the_critical_path():
    shared = [_gpu(0, Task("long", 2076, False)), _gpu(1, SMALL)]
    assert _place(shared, keep_alone={"long"}) == 1  # never beside the critical task
    assert _place([_gpu(0, Task("long", 2076, False))], keep_alone={"long"}) is None
    assert _place(shared, alone=True) is None  # a critical task itself waits for an idle GPU
    assert _place(shared + [_gpu(2)], alone=True) == 2
    assert _place([_gpu(0, LARGE), _gpu(1)], large=True, large_joins_large=True, alone=True) == 1


def test_critical_tasks_reach_half_the_even_share():
    est = {"a": 10.0, "b": 2.0, "c": 2.0, "d": 2.0}  # even share on 2 GPUs 8, half of it 4
    assert candidates.critical_tasks(est, 2) == {"a"}
    assert candidates.critical_tasks(est, 2, fraction=0.2) == {"a", "b", "c", "d"}  # 1.6
    assert candidates.critical_tasks(est, 1) == {"a"}  # 0.5 * 16 = 8
    assert candidates.critical_tasks({}, 4) == set()
    with pytest.raises(ValueError, match="n_gpus"):
        candidates.critical_tasks(est, 0)
    with pytest.raises(ValueError, match="fraction"):
        candidates.critical_tasks(est, 2, fraction=0)


def test_longest_first_puts_unknown_estimates_last_in_their_order():
    assert candidates.longest_first({"x": None, "a": 1.0, "b": 3.0, "y": None, "c": 2.0}) == ["b", "c", "a", "x", "y"]


# -- fragmentation across nodes (FGD's measure with CPU and host memory) --------------------------------------------
D_SHARE = candidates.Demand(0.5, 1000, 1000, 0, 0.5)  # half a GPU
D_WHOLE = candidates.Demand(0.5, 1000, 1000, 1, 0.0)  # one whole GPU


def test_node_fragmentation_by_hand():
    demands = (D_SHARE, D_WHOLE)
    idle = candidates.NodeFree(8000, 8000, (1.0, 1.0))
    assert candidates.node_fragmentation(idle, demands) == 0.0  # every kind fits, no GPU below any need
    part = candidates.NodeFree(8000, 8000, (1.0, 0.3))
    # half-GPU tasks cannot use the 0.3 left (0.5 x 0.3); whole-GPU tasks cannot either (0.5 x 0.3)
    assert candidates.node_fragmentation(part, demands) == pytest.approx(0.3)
    starved = candidates.NodeFree(500, 8000, (1.0, 0.3))  # too little CPU for any task: all 1.3 GPUs are fragment
    assert candidates.node_fragmentation(starved, demands) == pytest.approx(1.3)
    assert candidates.node_fragmentation(candidates.NodeFree(0, 0, (0.0,)), demands) == 0.0


def test_placements_and_least_fragmenting():
    demands = (D_SHARE, D_WHOLE)
    node = candidates.NodeFree(8000, 8000, (1.0, 0.6, 0.6))
    assert candidates.placements(node, candidates.Demand(1, 1000, 1000, 0, 0.5)) == [
        (0,),
        (1,),
    ]  # equal free parts once
    assert candidates.placements(node, candidates.Demand(1, 1000, 1000, 2, 0.0)) == []  # one whole GPU only
    assert candidates.placements(node, candidates.Demand(1, 9000, 1000, 0, 0.5)) == []  # CPU short
    # a half-GPU task: cutting node 0's whole GPU leaves 0.5 no whole-GPU task can use (+0.25 weighted); on node
    # 1's 0.6 GPU the fragment falls from 0.3 (no whole-GPU task fits) to 0.1: least fragmentation picks node 1
    nodes = [candidates.NodeFree(8000, 8000, (1.0,)), candidates.NodeFree(8000, 8000, (0.6,))]
    assert candidates.least_fragmenting(nodes, D_SHARE, demands) == (1, (0,))
    # ties (two idle nodes alike) go to best fit: the node whose CPU and memory the task uses most
    nodes = [candidates.NodeFree(64000, 64000, (1.0,)), candidates.NodeFree(2000, 2000, (1.0,))]
    assert candidates.least_fragmenting(nodes, D_WHOLE, demands) == (1, (0,))
    assert candidates.least_fragmenting([candidates.NodeFree(0, 0, (1.0,))], D_WHOLE, demands) is None
