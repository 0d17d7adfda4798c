"""benchmarks/simulator.py on tiny traces whose answers can be worked by hand from the H200 data."""

import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import simulator as sim  # noqa: E402

DATA = sim.data_dir()  # benchmarks/data: the project's copy of the H200 measurements (no skip: it is always there)

W = 3600.0  # one hour of solo work


@pytest.fixture(scope="module")
def model():
    return sim.SpeedModel.from_data(DATA)


def small(name, work=W, arrival=0.0):
    return sim.Job(name, "small", work, 2076, arrival)


def large(name, work=W, arrival=0.0):
    return sim.Job(name, "large", work, 5653, arrival)


def test_rates_come_from_the_data(model):
    assert model.rates(0, 2)[1] == pytest.approx(1.8229 / 2, abs=1e-4)  # 0.911 each
    assert model.rates(0, 3)[1] == pytest.approx((1.8229 + 3.5247) / 2 / 3, abs=1e-4)  # interpolated k = 3
    assert model.rates(2, 0)[0] == pytest.approx(1.1906 / 2, abs=1e-4)
    assert model.rates(1, 1) == pytest.approx((0.9288, 0.9565), abs=1e-4)  # r50+r18
    assert model.rates(1, 3) == pytest.approx((0.3779, 1.0096), abs=1e-4)  # r50+3r18
    lr, sr = model.rates(1, 2)  # halfway between the two measured mixes
    assert lr == pytest.approx((0.9288 + 0.3779) / 2, abs=1e-4) and sr == pytest.approx((0.9565 + 1.0096) / 2, abs=1e-4)
    assert model.rates(1, 5)[0] == pytest.approx(0.3779, abs=1e-4)  # held beyond the data


def test_two_small_jobs_exclusive_take_twice_solo(model):
    r = sim.simulate([small("s0"), small("s1")], 1, sim.H200_MB, "exclusive", model)
    assert r.makespan_s == pytest.approx(2 * W)
    assert r.mean_jct_s == pytest.approx(1.5 * W)  # 1 h and 2 h
    assert r.gpu_hours == pytest.approx(2.0)
    assert r.slowdown == {"s0": pytest.approx(1.0), "s1": pytest.approx(1.0)}


def test_two_small_jobs_packed_by_memory(model):
    # 1.82x at k = 2: each at 0.911 of solo, both finish at W / 0.911 = 1.097 h
    r = sim.simulate([small("s0"), small("s1")], 1, sim.H200_MB, "memory", model)
    per = model.rates(0, 2)[1]
    assert r.makespan_s == pytest.approx(W / per)
    assert r.gpu_hours == pytest.approx(1 / per)
    assert r.worst_slowdown == pytest.approx(1 / per)


def test_unequal_jobs_speed_up_when_a_neighbour_leaves(model):
    # s0 (0.5 h) and s1 (1 h) share at 0.911: s0 done at 0.5/0.911 h, s1 has 1 - 0.5 = 0.5 h left alone at 1.0
    r = sim.simulate([small("s0", W / 2), small("s1")], 1, sim.H200_MB, "memory", model)
    per = model.rates(0, 2)[1]
    assert r.finish["s0"] == pytest.approx(0.5 * W / per)
    assert r.makespan_s == pytest.approx(0.5 * W / per + 0.5 * W)


def test_pays_stops_at_four_small_jobs(model):
    # 4 -> 5 copies adds (3.706 - 3.525) / 4 = 0.045 of a job < MIN_MARGINAL_GAIN: the fifth waits
    jobs = [small(f"s{i}") for i in range(5)]
    r = sim.simulate(jobs, 1, sim.H200_MB, "pays", model)
    assert r.max_concurrency == 4
    per4 = model.rates(0, 4)[1]
    assert r.start["s4"] == pytest.approx(W / per4)
    assert r.makespan_s == pytest.approx(W / per4 + W)


def test_pays_spreads_to_idle_gpus_first_and_keeps_large_alone(model):
    jobs = [large("l0"), large("l1"), small("s0"), small("s1")]
    r = sim.simulate(jobs, 2, sim.H200_MB, "pays", model)
    # the two large jobs take one GPU each (they do not pay); each small may join a large (admits: at most one)
    assert r.start == {"l0": 0.0, "l1": 0.0, "s0": 0.0, "s1": 0.0}
    assert r.max_concurrency == 2
    lr, sr = model.rates(1, 1)
    assert r.slowdown["s0"] == pytest.approx(1 / sr)
    # s0 ends first (0.956 > 0.929); l0 then finishes its remaining 1 - lr/sr hours alone at full speed
    assert r.finish["l0"] == pytest.approx(W / sr + W * (1 - lr / sr))


def test_pays_admits_at_most_one_small_beside_a_large(model):
    r = sim.simulate([large("l0"), small("s0"), small("s1")], 1, sim.H200_MB, "pays", model)
    lr, sr = model.rates(1, 1)
    assert r.start["s1"] == pytest.approx(W / sr)  # waits for s0 (which ends before l0)
    assert r.max_concurrency == 2


def test_memory_policy_respects_gpu_memory(model):
    # 16 GiB: floor(16384 / 2076) = 7 small jobs at once; the rest wait
    jobs = [small(f"s{i}") for i in range(10)]
    r = sim.simulate(jobs, 1, 16384, "memory", model)
    assert r.max_concurrency == 7
    with pytest.raises(ValueError):
        sim.simulate([sim.Job("x", "small", W, 20000)], 1, 16384, "memory", model)


def test_exclusive_on_a_large_mix_equals_pays(model):
    jobs = sim.make_trace(20, 0.0, 3, model)
    a = sim.simulate(jobs, 4, sim.H200_MB, "exclusive", model)
    c = sim.simulate(jobs, 4, sim.H200_MB, "pays", model)
    assert a.makespan_s == pytest.approx(c.makespan_s) and a.mean_jct_s == pytest.approx(c.mean_jct_s)


def test_ideal_bound_hand_worked(model):
    # 8 one-hour small jobs on 1 GPU: best small config is the 3.706x plateau -> 8 / 3.706 = 2.159 h
    b = sim.ideal_bound([small(f"s{i}") for i in range(8)], 1, sim.H200_MB, model)
    assert b.makespan_s == pytest.approx(8 * W / model.plateau("small"))
    # a single job cannot beat its own solo time (mix speeds up to 1.0096 allowed)
    b1 = sim.ideal_bound([small("s0")], 4, sim.H200_MB, model)
    assert b1.makespan_s == pytest.approx(W / 1.0095841538052517)
    # no schedule beats the bound
    jobs = sim.make_trace(40, 0.75, 5, model)
    bound = sim.ideal_bound(jobs, 4, sim.H200_MB, model)
    for p in ("exclusive", "pays"):
        assert sim.simulate(jobs, 4, sim.H200_MB, p, model).makespan_s >= bound.makespan_s - 1e-6


def test_rules_bound_keeps_only_what_pays_may_form(model):
    allowed = lambda nl, ns: sim.pays_configuration(model, nl, ns, large_pays=False)  # noqa: E731
    assert allowed(0, 4) and not allowed(0, 5)  # R18: 4 -> 5 adds 0.05 of a job, under MIN_MARGINAL_GAIN
    assert allowed(1, 0) and not allowed(2, 0)  # a large job that does not pay never joins another
    assert allowed(1, 1)  # but a small job may join it: R50 + R18 keep 0.93/0.96
    assert not allowed(1, 2)  # admits, no MPS: one small beside a large
    assert sim.pays_configuration(model, 2, 0, large_pays=True)  # 2 x R50 at 0.6 each: fair, +0.19 of a job
    # 8 one-hour small jobs on 1 GPU under (c)'s rules: 4 at a time at 3.52x -> 8 / 3.5247 h
    b = sim.rules_bound([small(f"s{i}") for i in range(8)], 1, sim.H200_MB, model)
    assert b.makespan_s == pytest.approx(8 * W / model.throughput(0, 4)) and b.configs == [(0, 4)]
    # between the unconstrained bound and what (c) really achieves
    jobs = sim.make_trace(40, 0.75, 5, model)
    rules = sim.rules_bound(jobs, 4, sim.H200_MB, model).makespan_s
    assert sim.ideal_bound(jobs, 4, sim.H200_MB, model).makespan_s <= rules + 1e-6
    assert sim.simulate(jobs, 4, sim.H200_MB, "pays", model).makespan_s >= rules - 1e-6


def test_pays_mix_lets_a_large_job_join_one_small_but_never_a_large(model):
    one_small, one_large, busy = [[small("s0")]], [[large("l0")]], [[small("s0"), small("s1")]]
    assert sim.place("pays", large("l1"), one_small, sim.H200_MB, model) is None  # (c): idle GPUs only
    assert sim.place("pays_mix", large("l1"), one_small, sim.H200_MB, model) == 0  # (c'): R50 + R18 0.93/0.96
    assert sim.place("pays_mix", large("l1"), one_large, sim.H200_MB, model) is None
    assert sim.place("pays_mix", large("l1"), busy, sim.H200_MB, model) is None  # admits: one small beside a large
    assert sim.place("pays_mix", large("l1"), [[small("s0")], []], sim.H200_MB, model) == 1  # idle gains more


def test_trace_is_seeded_and_deterministic(model):
    a = sim.make_trace(50, 0.75, 11, model)
    assert a == sim.make_trace(50, 0.75, 11, model)
    assert a != sim.make_trace(50, 0.75, 12, model)
    assert {j.expected_mb for j in a} == {2076, 5653}  # profiler.expected_mb of the measured NVML peaks
    assert all(120 <= j.work_s <= 8 * 3600 for j in a)


def test_job_pays_from_policy(model):
    assert sim.job_pays(small("s"), model, sim.H200_MB) is True
    assert sim.job_pays(large("l"), model, sim.H200_MB) is False


def test_pays_is_the_candidates_rule(model, monkeypatch):
    # the simulator's (c) is candidates.place_where_it_pays, not a copy: break that rule, (c) breaks with it
    assert sim.place("pays", small("s1"), [[small("s0")], []], sim.H200_MB, model) == 1  # idle GPU gains most
    monkeypatch.setattr(sim.candidates, "place_where_it_pays", lambda *a, **k: None)
    assert sim.place("pays", small("s1"), [[small("s0")], []], sim.H200_MB, model) is None


def test_gandiva_packs_greedily_past_the_fairness_bound(model):
    # idle GPU first, then the least-loaded GPU whenever throughput rises: two R50s share (1.19x, 0.595 each)
    assert sim.place("gandiva", large("l1"), [[large("l0")], []], sim.H200_MB, model) == 1
    assert sim.place("gandiva", large("l1"), [[large("l0")]], sim.H200_MB, model) == 0
    assert sim.place("pays", large("l1"), [[large("l0")]], sim.H200_MB, model) is None
    # R50 + 3 x R18 (R50 at 0.38, below the fairness bound) still raises throughput: Gandiva packs it
    assert sim.place("gandiva", small("s2"), [[large("l0"), small("s0"), small("s1")]], sim.H200_MB, model) == 0
    r = sim.simulate([large("l0"), large("l1")], 1, sim.H200_MB, "gandiva", model)
    assert r.makespan_s == pytest.approx(2 * W / model.throughput(2, 0))


def test_lookahead_keeps_the_idle_gpu_for_a_queued_large_job(model):
    state = [[], [large("l0")]]
    queue = [small("s0"), large("l1")]
    assert sim.place("pays_mix", small("s0"), state, sim.H200_MB, model, queue) == 0
    assert sim.place("pays_mix_lookahead", small("s0"), state, sim.H200_MB, model, queue) == 1
    assert sim.place("pays_mix_lookahead", small("s0"), state, sim.H200_MB, model, queue[:1]) == 1  # consolidate


def test_queue_order(model):
    jobs = [small("s0", W), large("l1", 2 * W), small("s2", 3 * W)]
    for order, first in (("name", "l1"), ("trace", "s0"), ("lpt", "s2")):
        r = sim.simulate(jobs, 1, sim.H200_MB, "exclusive", model, order=order)
        assert r.start[first] == 0.0, order
    with pytest.raises(ValueError, match="order"):
        sim.simulate(jobs, 1, sim.H200_MB, "exclusive", model, order="random")


def test_pays_quota_passes_the_queue_and_runs_small_jobs_first(model):
    # the queue goes to candidates.place_where_it_pays as counts: with much small work waiting, the large job waits
    # for the one GPU the quota gives large jobs; a small job joins the large one first (consolidation), then the
    # idle GPU
    state = [[large("l0")], []]
    queue = [large("l1")] + [small(f"s{i}") for i in range(20)]
    assert sim.place("pays_mix", large("l1"), state, sim.H200_MB, model, queue) == 1
    assert sim.place("pays_quota", large("l1"), state, sim.H200_MB, model, queue) is None
    assert sim.place("pays_quota", small("s0"), state, sim.H200_MB, model, queue) == 0
    assert sim.place("pays_quota", small("s1"), [[large("l0"), small("s0")], []], sim.H200_MB, model, queue) == 1
    # nothing small left to run first: the large job starts
    assert sim.place("pays_quota", large("l1"), state, sim.H200_MB, model, queue[:1]) == 1
    jobs = [large("l0"), large("l1")] + [small(f"s{i}") for i in range(12)]
    r = sim.simulate(jobs, 2, sim.H200_MB, "pays_quota", model)
    assert r.worst_slowdown <= sim.FAIRNESS_BOUND and set(r.finish) == {j.name for j in jobs}
    assert r.start["l1"] > 0.0 and min(r.start[f"s{i}"] for i in range(12)) == 0.0


def test_learned_order_and_estimates(model):
    jobs = [small("s0", W), large("l1", 2 * W), small("s2", 3 * W)]
    exact = sim.with_estimates(jobs, 0.0)
    assert [j.est_s for j in exact] == [W, 2 * W, 3 * W]
    r = sim.simulate(exact, 1, sim.H200_MB, "exclusive", model, order="learned")
    assert r.start["s2"] == 0.0 and r.start["l1"] < r.start["s0"]  # longest estimated first
    noisy = sim.with_estimates(jobs, 0.3, seed=5)
    assert [j.work_s for j in noisy] == [j.work_s for j in jobs]  # the truth is unchanged
    assert all(j.est_s != j.work_s for j in noisy)
    assert sim.with_estimates(jobs, 0.3, seed=5) == noisy  # seeded


def test_pays_learned_pairs_large_jobs_but_keeps_the_critical_one_alone(model):
    # 4 large jobs on 2 GPUs: the 8 h one is critical (>= half of 11 h / 2) and runs alone at full speed; the
    # three 1 h jobs pair on the other GPU (2 x R50 at 0.595 each) instead of waiting
    jobs = sim.with_estimates([large("l0", 8 * W), large("l1"), large("l2"), large("l3")], 0.0)
    r = sim.simulate(jobs, 2, sim.H200_MB, "pays_learned", model, order="learned")
    assert r.slowdown["l0"] == pytest.approx(1.0)
    assert r.makespan_s == pytest.approx(8 * W)
    assert r.max_concurrency == 2 and r.worst_slowdown <= sim.FAIRNESS_BOUND
    assert {r.gpu[n] for n in ("l1", "l2", "l3")} == {1 - r.gpu["l0"]}
    # without estimates nothing is critical: a large job may join the long one
    plain = sim.simulate(
        [large("l0", 8 * W), large("l1"), large("l2"), large("l3")], 2, sim.H200_MB, "pays_learned", model
    )
    assert plain.slowdown["l0"] > 1.0


def test_the_default_with_a_history_starts_long_jobs_first_and_runs_the_longest_alone(model):
    # the product's priority: auto and alone_after_s: l0 (8 h, at learned.ALONE_AFTER_S or more) is first in YARN's
    # queue and holds a GPU whole; the 1 h jobs pair on the other (two large tasks, half a GPU each)
    long_first = [large("l1"), large("l2"), large("l3"), large("l0", 8 * W)]
    jobs = sim.with_estimates(long_first, 0.0)
    assert sim.alone(jobs[3]) and not sim.alone(jobs[0]) and not sim.alone(long_first[3])  # no estimate: shares
    r = sim.simulate(jobs, 2, sim.H200_MB, "default", model, order="priority")
    assert r.start["l0"] == 0.0 and r.slowdown["l0"] == pytest.approx(1.0) and r.makespan_s == pytest.approx(8 * W)
    assert {r.gpu[n] for n in ("l1", "l2", "l3")} == {1 - r.gpu["l0"]} and r.max_concurrency == 2
    # the first night (no history, every job at priority 0): all four start at once, two on each GPU, and the 8 h job
    # shares its GPU
    first = sim.simulate(long_first, 2, sim.H200_MB, "default", model, order="trace")
    assert first.slowdown["l0"] > 1.0 and first.makespan_s > 8 * W
    # a later, longer job goes ahead of an earlier, shorter one that still waits, as in YARN's queue
    staggered = [
        sim.Job("a", "small", W, 2076, 0.0, 10 * 60.0),
        sim.Job("b", "small", W, 2076, 1.0, 5 * 60.0),
        sim.Job("c", "small", W, 2076, 2.0, 100 * 60.0),
    ]
    by_priority = sim.simulate(staggered, 1, sim.H200_MB, "exclusive", model, order="priority")
    assert by_priority.start["c"] == pytest.approx(W) and by_priority.start["b"] == pytest.approx(2 * W)
    assert sim.simulate(staggered, 1, sim.H200_MB, "exclusive", model, order="trace").start["b"] == pytest.approx(W)
    # YARN's priorities are steps of a 26 % longer run: jobs of 70 and 80 minutes are in one step, by name; 100 is
    # a step above
    close = sim.with_estimates([small("a", 70 * 60), small("b", 80 * 60), small("c", 100 * 60)], 0.0)
    starts = sim.simulate(close, 1, sim.H200_MB, "exclusive", model, order="priority").start
    assert sorted(starts, key=starts.get) == ["c", "a", "b"]


def test_rules_bound_with_large_pairs(model):
    jobs = [large(f"l{i}") for i in range(4)]
    assert sim.rules_bound(jobs, 1, sim.H200_MB, model).configs == [(1, 0)]
    b = sim.rules_bound(jobs, 1, sim.H200_MB, model, large_pairs=True)
    assert (2, 0) in b.configs and b.makespan_s == pytest.approx(4 * W / model.throughput(2, 0))
