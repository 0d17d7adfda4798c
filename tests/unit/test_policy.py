"""gpu.policy: the product's placement rules, checked against the H200 measurements in benchmarks/data."""

import pytest

from airflow_provider_melon.gpu import policy
from airflow_provider_melon.gpu.policy import Gpu, Task
from tests.h200_anchor import H200_MB, R18_CURVE, R18_MB, R50_CURVE, R50_MB, load, rates


def test_fits_counts_reserved_memory():
    g = Gpu(0, total_mb=16000, reserved_mb=12000)
    assert policy.fits(g, 4000)
    assert not policy.fits(g, 4001)
    assert policy.room(Gpu(0, 1000, 5000)) == 0  # over-reserved (foreign process): no room, not negative
    with pytest.raises(ValueError):
        policy.fits(g, -1)


def test_exclusive_needs_a_gpu_without_reservations():
    gpus = [Gpu(0, 8000, 1000, [Task("a", 1000)]), Gpu(1, 8000, 300), Gpu(2, 8000)]
    assert policy.exclusive(gpus) == 2
    assert policy.exclusive(gpus, idle_mb=512) == 1  # NVML shows a few hundred MiB on an idle GPU
    assert policy.exclusive(gpus[:2]) is None
    assert policy.exclusive_set(gpus, 2, idle_mb=512) == [1, 2]
    assert policy.exclusive_set(gpus, 3, idle_mb=512) is None


def test_no_mps_large_gpu_takes_at_most_one_small():
    large = Task("r50", 5000, True)
    small = ("r18", 1600, False)  # plain tuples work as tasks too
    g_large = Gpu(0, 141000, 5000, [large])
    g_large_small = Gpu(0, 141000, 6600, [large, small])
    assert policy.admits(g_large, large=False, mps=False)  # R50 + 1 x R18: 0.93 / 0.96
    assert not policy.admits(g_large_small, large=False, mps=False)  # R50 + 2nd R18 -> toward 0.38
    assert policy.admits(g_large_small, large=False, mps=True)  # MPS: R50 + 3 x R18 keeps R50 at 0.96
    # symmetric: a large task does not join a GPU that already has 2+ small ones
    g_smalls = Gpu(1, 141000, 3200, [small, small])
    assert not policy.admits(g_smalls, large=True, mps=False)
    assert policy.admits(Gpu(1, 141000, 1600, [small]), large=True, mps=False)
    assert policy.admits(g_smalls, large=True, mps=True)
    # small tasks together and large tasks together are not limited by this rule
    assert policy.admits(Gpu(2, 141000, 4800, [small] * 3), large=False, mps=False)
    assert policy.admits(g_large, large=True, mps=False)


def test_mix_data_supports_the_rule():
    mix = {s["scenario"]: s["normalized"] for s in load("h200-mix.json")}
    r50_with_one, r18_with_r50 = mix["r50+r18"]
    assert r50_with_one > 0.9 and r18_with_r50 > 0.9  # one small next to a large: both fine
    assert mix["r50+3r18"][0] < 0.5  # three small without MPS starve the large one
    assert mix["mps-r50+3r18"][0] > 0.9  # not with MPS
    assert policy.MAX_SMALL_WITH_LARGE == 1


def test_packing_pays_separates_resnet18_from_resnet50():
    u18 = policy.implied_sm_util(max(R18_CURVE.values()))
    u50 = policy.implied_sm_util(max(R50_CURVE.values()))
    assert u18 == pytest.approx(0.27, abs=0.01)
    assert u50 == pytest.approx(0.84, abs=0.01)
    assert policy.packing_pays(u18, R18_MB / H200_MB)
    assert not policy.packing_pays(u50, R50_MB / H200_MB)


def test_packing_pays_is_also_memory_bound():
    # light on SMs but needs 60 % of the memory: only one copy fits, nothing to gain
    assert policy.predicted_gain(0.2, 0.6) == 1.0
    assert not policy.packing_pays(0.2, 0.6)
    assert policy.predicted_gain(0.2, 0.5) == 2.0
    assert policy.packing_pays(0.2, 0.5)
    assert not policy.packing_pays(0.7, 0.01)  # 1/0.7 = 1.43 < 1.5
    assert policy.packing_pays(0.6, 0.01)
    with pytest.raises(ValueError):
        policy.packing_pays(0, 0.5)
    with pytest.raises(ValueError):
        policy.packing_pays(0.5, 1.5)


def test_colocation_speedup_interpolates_and_saturates():
    curve = {2: 1.82, 4: 3.52, 8: 3.71}
    assert policy.colocation_speedup(curve, 1) == 1.0  # implied point
    assert policy.colocation_speedup(curve, 1.5) == pytest.approx(1.41)
    assert policy.colocation_speedup(curve, 3) == pytest.approx((1.82 + 3.52) / 2)
    assert policy.colocation_speedup(curve, 6) == pytest.approx((3.52 + 3.71) / 2)
    assert policy.colocation_speedup(curve, 16) == pytest.approx(3.71)  # flat past the last point
    assert policy.colocation_speedup([(2, 1.19), (8, 1.19)], 5) == pytest.approx(1.19)
    with pytest.raises(ValueError):
        policy.colocation_speedup(curve, 0.5)


def test_marginal_gain_and_fairness_from_the_rates():
    assert policy.marginal_gain(rates, 0, 0, large=False) == pytest.approx(1.0)  # an idle GPU
    assert policy.marginal_gain(rates, 0, 3, large=False) == pytest.approx(3.52 - 2.67)
    assert policy.marginal_gain(rates, 0, 4, large=False) == pytest.approx((3.71 - 3.52) / 4)  # 0.05 (k=5 interpolated)
    assert policy.marginal_gain(rates, 1, 0, large=False) == pytest.approx(0.93 + 0.96 - 1.0)
    assert policy.fair_mix(rates, 1, 1) and policy.fair_mix(rates, 2, 0)  # 0.93/0.96; 2 x R50 at 0.595
    assert not policy.fair_mix(rates, 1, 3)  # R50 at 0.38 < 1/2
    assert not policy.fair_mix(rates, 4, 0)  # R50 at 0.30
