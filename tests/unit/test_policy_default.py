"""gpu.policy's default: the memory slot a shared task asks for (slot_mb) and the GPU it takes on a node
(place_default), the one rule the node's ledger applies and benchmarks/bench_policy.py scores."""

import itertools
import os
import random
import sys

import pytest

from airflow_provider_melon.gpu import policy
from airflow_provider_melon.gpu.policy import Gpu, Task
from benchmarks import candidates

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
H200 = 134468


def test_anchor_rates_are_the_measured_h200_speeds():
    """The default presumes the anchor's speeds (it knows only small or large); they are benchmarks/data's to 0.5 %
    for every mix the rules can form and the neighbours they are compared with."""
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import simulator as sim

    model = sim.SpeedModel.from_data()
    for nl, ns in itertools.product(range(3), range(9)):
        a, m = policy.ANCHOR_RATES(nl, ns), model.rates(nl, ns)
        assert a == pytest.approx(m, rel=5e-3, abs=1e-9), (nl, ns, a, m)


def test_max_colocated_is_four_small_and_two_large_with_the_anchor():
    assert policy.max_colocated(False) == 4  # the fifth R18 adds 0.05 of a job (< 0.1)
    assert policy.max_colocated(True) == 2  # 2 x R50 at 0.595 each is fair; 3 would run at 0.40
    assert policy.max_colocated(False, min_gain=0.01) == 7  # then fairness stops it: 8 run at 0.46
    assert policy.max_colocated(True, fairness_bound=1.5) == 1


def test_slot_mb_is_the_expected_memory_or_the_gpus_share():
    assert policy.slot_mb(2076, H200, large=False) == H200 // 4
    assert policy.slot_mb(5653, H200, large=True) == H200 // 2
    assert policy.slot_mb(50000, H200, large=False) == 50000  # a task bigger than its share keeps its own figure
    with pytest.raises(ValueError, match="gpu_mb"):
        policy.slot_mb(100, 0, large=False)
    with pytest.raises(ValueError, match="expected_mb"):
        policy.slot_mb(-1, H200, large=False)


def _place(gpus, mb, large=False, mps=False):
    return policy.place_default(gpus, mb, large=large, mps=mps)


def _with(g, *tasks):
    ts = [Task(n, mb, lg) for n, mb, lg in tasks]
    return Gpu(g.index, g.total_mb, g.reserved_mb + sum(t.expected_mb for t in ts), g.task_tuples() + ts)


def test_slots_bound_a_gpu_to_the_configurations_the_rules_allow():
    """With slot_mb reservations and nothing else, memory and admits reach exactly (0, <= 4), (1, <= 1), (2, 0)."""
    s, l = policy.slot_mb(2076, H200, large=False), policy.slot_mb(5653, H200, large=True)
    seen, todo = {(0, 0)}, [(0, 0)]
    while todo:
        nl, ns = todo.pop()
        g = _with(Gpu(0, H200), *([("l", l, True)] * nl + [("s", s, False)] * ns))
        for large in (True, False):
            if _place([g], l if large else s, large=large) is not None:
                nxt = (nl + large, ns + (not large))
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
    assert seen == {(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (2, 0)}


def test_an_idle_gpu_first_then_the_largest_gain():
    gpus = [_with(Gpu(0, H200), ("a", 2076, False)), Gpu(1, H200)]
    assert _place(gpus, 2076) == 1  # idle gains a whole job; beside a small only 0.82
    two = [_with(Gpu(0, H200), ("a", 2076, False)), _with(Gpu(1, H200), ("b", 2076, False), ("c", 2076, False))]
    assert _place(two, 2076) == 1  # no fragment either way: 2 -> 3 small gains 0.85, 1 -> 2 only 0.82
    # with MPS the speeds are not the anchor's: no gain ranking, best fit (GPU 0: a small and 118 GB of another's)
    crowded = [Gpu(0, H200, 120000, [Task("a", 2076, False)]), Gpu(1, H200)]
    assert _place(crowded, 2076) == 1
    assert _place(crowded, 2076, mps=True) == 0


def test_fragmentation_before_gain_a_large_pairs_rather_than_close_a_gpu_to_small_tasks():
    """A large beside the one small (gain 0.89) would leave that GPU closed to small tasks (admits) with memory free;
    beside the other large (gain 0.19) nothing is cut off. Fragmentation decides first: the small GPU stays open for
    three more small ones (4 small: 3.52 jobs' worth, a large and a small: 1.89)."""
    s, l = policy.slot_mb(2076, H200, large=False), policy.slot_mb(5653, H200, large=True)
    busy = [_with(Gpu(0, H200), ("a", s, False)), _with(Gpu(1, H200), ("l", l, True))]
    assert _place(busy, l, large=True) == 1
    kinds = policy.node_kinds(busy, l, True)
    beside_small = policy.gpu_fragmentation([_with(busy[0], ("x", l, True)), busy[1]], kinds)
    beside_large = policy.gpu_fragmentation([busy[0], _with(busy[1], ("x", l, True))], kinds)
    assert beside_large < beside_small


def test_fragmentation_keeps_a_gpu_open_for_a_large_task():
    """Two GPUs each with one small: spreading a second small to the other would close both to a large task
    (admits: at most one small beside a large without MPS), so it stacks."""
    gpus = [_with(Gpu(0, 16384), ("s1", 2076, False)), _with(Gpu(1, 16384), ("l", 5653, True))]
    # the node holds a large kind: a small beside the large leaves GPU 0 and 1 both unusable for another large?
    # GPU 0 with two small refuses a large; GPU 1 with a large and a small refuses a small. Compare by hand:
    assert _place(gpus, 2076) == 0
    kinds = policy.node_kinds(gpus, 2076, False)
    frag0 = policy.gpu_fragmentation([_with(gpus[0], ("x", 2076, False)), gpus[1]], kinds)
    frag1 = policy.gpu_fragmentation([gpus[0], _with(gpus[1], ("x", 2076, False))], kinds)
    assert frag0 < frag1


def test_memory_fragmentation_by_hand():
    """16000 MiB GPUs, a 10000 task on GPU 0: a 4000 task stacks there (2000 left, too small for either kind) rather
    than cut GPU 1 to 12000 (too small for nothing) -- FGD's measure: GPU 0's 6000 free are a fragment for the 10000
    kind either way, so stacking removes it."""
    gpus = [_with(Gpu(0, 16000), ("a", 10000, False)), Gpu(1, 16000)]
    assert _place(gpus, 4000) == 0


def test_mps_skips_the_speed_ranking_and_the_interference_rule():
    gpus = [_with(Gpu(0, H200), ("l", 5653, True), ("s", 2076, False)), Gpu(1, H200)]
    assert _place(gpus, 2076) == 1  # no MPS: GPU 0 refuses a second small beside its large
    assert _place(gpus[:1], 2076) is None
    assert _place(gpus[:1], 2076, mps=True) == 0


def test_it_refuses_only_what_best_fit_refuses():
    """place_default changes which GPU, never whether: the same None as best fit under admits, on random nodes."""
    rng = random.Random(5)
    for _ in range(400):
        gpus = []
        for i in range(rng.randint(1, 4)):
            g = Gpu(i, rng.choice([16384, 40960, H200]))
            for k in range(rng.randint(0, 4)):
                g = _with(g, (f"t{k}", rng.choice([1024, 2076, 5653, 9000]), rng.random() < 0.3))
            gpus.append(g)
        mb, large, mps = rng.choice([1024, 2076, 5653, 12000]), rng.random() < 0.3, rng.random() < 0.2
        got = _place(gpus, mb, large=large, mps=mps)
        want = candidates.best_fit(gpus, mb, large=large, mps=mps)
        assert (got is None) == (want is None)
        if got is not None:
            g = next(x for x in gpus if x.index == got)
            assert policy.fits(g, mb) and policy.admits(g, large, mps)


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="expected_mb"):
        _place([Gpu(0, H200)], -5)
    assert _place([], 100) is None


def _held(g, *tasks):
    """``g`` with tasks ``(name, expected_mb, large)`` that each hold their slot on it (what the ledger records)."""
    ts = [Task(n, mb, lg) for n, mb, lg in tasks]
    held = sum(policy.slot_mb(t.expected_mb, g.total_mb, large=t.large) for t in ts)
    return Gpu(g.index, g.total_mb, g.reserved_mb + held, g.task_tuples() + ts)


def test_with_slots_a_task_is_placed_as_if_it_asked_for_its_slot():
    """place_default(..., slots=True) on expected memory == place_default on slot-sized tasks, on random nodes of one
    GPU model: the ledger's call (expected memory, slots held) and the simulator's former (D) agree."""
    rng = random.Random(11)
    for _ in range(300):
        total = rng.choice([16384, 40960, H200])
        tasks = [
            [(f"t{i}{k}", rng.choice([1000, 2076, 5653, 12000]), rng.random() < 0.3) for k in range(rng.randint(0, 3))]
            for i in range(rng.randint(1, 4))
        ]
        exp_gpus = [_held(Gpu(i, total), *ts) for i, ts in enumerate(tasks)]
        slot_gpus = [
            _with(Gpu(i, total), *[(n, policy.slot_mb(mb, total, large=lg), lg) for n, mb, lg in ts])
            for i, ts in enumerate(tasks)
        ]
        mb, large = rng.choice([1000, 2076, 5653, 12000]), rng.random() < 0.3
        got = policy.place_default(exp_gpus, mb, large=large, slots=True)
        assert got == _place(slot_gpus, policy.slot_mb(mb, total, large=large), large=large), (tasks, mb, large)


def test_with_slots_the_fifth_small_task_is_refused_and_each_gpu_sizes_its_own_slot():
    four = _held(Gpu(0, H200), *[(f"s{i}", 2076, False) for i in range(4)])
    assert policy.place_default([four], 2076, slots=True) is None
    by_expected = _with(Gpu(0, H200), *[(f"s{i}", 2076, False) for i in range(4)])
    assert policy.place_default([by_expected], 2076) == 0  # held at their expected memory, a fifth would join
    # a 16 GiB GPU with three 1 GiB tasks holds a fourth (a quarter: 4096 MiB), not a 5000 MiB one
    three = _held(Gpu(1, 16384), *[(f"s{i}", 1024, False) for i in range(3)])
    assert three.reserved_mb == 3 * 4096
    assert policy.place_default([four, three], 1024, slots=True) == 1
    assert policy.place_default([four, three], 5000, slots=True) is None


def test_the_slot_of_expected_plus_context_is_what_yarn_is_asked_for():
    """The ledger holds slot_mb(expected + context) on a GPU; the AM asks YARN for max(expected + context,
    slot_mb(expected, largest GPU)): the same figure on the largest GPU, never less than what a smaller GPU holds."""
    rng = random.Random(3)
    for _ in range(500):
        e, c, large = rng.randint(0, 200000), rng.randint(0, 2000), rng.random() < 0.5
        largest = rng.choice([16384, 81920, H200])
        ask = max(e + c, policy.slot_mb(e, largest, large=large))
        assert policy.slot_mb(e + c, largest, large=large) == ask
        for size in (16384, 40960, largest):
            if size <= largest:
                assert policy.slot_mb(e + c, size, large=large) <= ask
