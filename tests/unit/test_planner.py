"""planner: batch size from the shared memory model, PS count from transfer <= compute (Zou et al.)."""

import json
import os
import subprocess
import sys

import pytest

from airflow_provider_melon import planner
from airflow_provider_melon.gpu.memory_model import MemoryModel

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MIB = 2**20


def _r50(**kw):
    # 25e6 fp32 params, momentum SGD (1 slot), 50 MiB of activations per sample, W 128 + F 400 MiB (the worked
    # example's F; the default is gpu.context.MEASURED_CONTEXT_MB).
    args = dict(
        model_params=25e6,
        bytes_per_param=4,
        per_sample_compute_s=0.002,
        workers=4,
        bandwidth_gbps=10,
        gpu_memory_mb=16384,
    )
    activation = kw.pop("activation_bytes_per_sample", 50 * MIB)
    args.update(kw)
    args.setdefault(
        "memory_model",
        MemoryModel.for_optimizer(
            25_000_000, "momentum", workspace_mb=128, activation_bytes_per_sample=activation, framework_overhead_mb=400
        ),
    )
    return planner.plan(**args)


def test_hand_worked_two_ps():
    # memory: 25e6 x 4 B x (1 weight + 1 grad + 1 slot) = 300e6 B = 286.1 MiB; + 128 + 400 = 814.1 MiB fixed.
    # (16384 - 814.1) / 50 = 311.4 -> 311 -> multiple of 8: 304.   compute = 304 x 2 ms = 0.608 s.
    # W = 10 Gb/s = 1.25e9 B/s; per worker 2 x 25e6 x 4 = 2e8 B; 4 workers over k PS: 8e8 / (k x 1.25e9) s
    # k = 1: 0.64 s > 0.608 -> k = 2: 0.32 s (worker NIC floor 2e8/1.25e9 = 0.16 s) <= 0.608.
    p = _r50()
    assert p.batch_size == 304
    assert p.step_compute_s == pytest.approx(0.608)
    assert p.ps == 2 and p.workers == 4 and not p.communication_bound
    assert p.step_transfer_s == pytest.approx(0.32)
    assert p.memory_mb_at_batch == pytest.approx(300e6 / MIB + 528 + 304 * 50)
    assert any("rounded down to a multiple of 8 from 311" in r for r in p.reasons)
    assert any("1 PS would take 0.64 s" in r for r in p.reasons)


def test_hand_worked_one_ps_and_no_rounding():
    # twice the per-sample time: compute 304 x 4 ms = 1.216 s >= 0.64 s with one PS.
    assert _r50(per_sample_compute_s=0.004).ps == 1
    # batch_multiple=1 keeps the raw 311
    assert _r50(batch_multiple=1).batch_size == 311


def test_communication_bound_recommends_fewer_workers():
    # 16 workers, at most 2 PS: 2e8 x 16 / (2 x 1.25e9) = 1.28 s > 0.608 s.
    # n' = floor(2 x 1.25e9 x 0.608 / 2e8) = floor(7.6) = 7 (7 workers: 0.56 s; 8 would take 0.64 s).
    p = _r50(workers=16, max_ps=2)
    assert p.communication_bound and p.ps == 2 and p.workers == 7
    assert p.step_transfer_s == pytest.approx(0.56)
    assert any(r.startswith("communication-bound: even 2 PS take 1.28 s") for r in p.reasons)
    assert any("recommend 7 workers (from 16)" in r for r in p.reasons)


def test_communication_bound_even_for_one_worker():
    # 1 Gb/s = 1.25e8 B/s: a worker's own push + pull 2e8 B takes 1.6 s > 0.608 s whatever the PS count;
    # batch needed: ceil(1.6 / 0.002) = 800 > 311 that fit.
    p = _r50(bandwidth_gbps=1)
    assert p.communication_bound and p.workers == 1
    msg = " ".join(p.reasons)
    assert "batch 800 would be compute-bound but only 311 fits" in msg and "faster network" in msg


def test_model_that_does_not_fit():
    p = _r50(gpu_memory_mb=800)
    assert p.batch_size == 0 and any("does not fit" in r for r in p.reasons)


def test_more_bandwidth_never_needs_more_ps():
    ks = [_r50(workers=8, bandwidth_gbps=g).ps for g in (5, 10, 25, 40, 100, 400)]
    assert ks == sorted(ks, reverse=True) and ks[0] > ks[-1] == 1


def test_more_memory_gives_larger_batch_and_fewer_ps():
    plans = [_r50(gpu_memory_mb=m) for m in (4096, 8192, 16384, 40960, 81920)]
    batches = [p.batch_size for p in plans]
    assert batches == sorted(batches) and batches[0] < batches[-1]
    ks = [p.ps for p in plans]
    assert ks == sorted(ks, reverse=True)


def test_same_memory_model_both_ways():
    # the batch the planner picks is one the profiler's forward evaluation says fits
    mm = MemoryModel.for_optimizer(25e6, "adam", activation_bytes_per_sample=37 * MIB)
    p = planner.plan(25e6, 4, 0.002, 4, 10, 16384, memory_model=mm)
    assert mm.total_mb(p.batch_size) <= 16384 < mm.total_mb(mm.max_batch(16384) + 1)


def test_no_activation_needs_a_cap():
    with pytest.raises(ValueError, match="max_batch"):
        _r50(activation_bytes_per_sample=0)
    assert _r50(activation_bytes_per_sample=0, max_batch=256).batch_size == 256


def test_parse_size():
    assert planner.parse_size_mb("16GiB") == 16384
    assert planner.parse_size_mb("16384") == 16384
    assert planner.parse_size_mb("1.5Gi") == 1536
    # the planner reads a size as the job spec does (one parse_size_mb): "GB" is binary, as YARN and nvidia-smi
    # count memory, so the same spec value is the same size in the plan as in the submission
    assert planner.parse_size_mb("141GB") == 141 * 1024
    from airflow_provider_melon.spec import parse_size_mb

    assert planner.parse_size_mb is parse_size_mb
    with pytest.raises(ValueError):
        planner.parse_size_mb("lots")


def test_cli_prints_json(capsys):
    rc = planner.plan_main(
        [
            "--params",
            "25e6",
            "--per-sample-ms",
            "2",
            "--workers",
            "4",
            "--bandwidth-gbps",
            "10",
            "--gpu-memory",
            "16GiB",
            "--optimizer",
            "momentum",
            "--activation-mb",
            "50",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and (out["batch_size"], out["ps"], out["workers"]) == (304, 2, 4)


def test_cli_as_in_the_issue_in_a_subprocess():
    # no activation size: batch capped at 1024 -> compute 2.048 s, one PS (0.64 s) suffices.
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from airflow_provider_melon.planner import plan_main; sys.exit(plan_main(sys.argv[1:]))",
            "--params",
            "25e6",
            "--per-sample-ms",
            "2",
            "--workers",
            "4",
            "--bandwidth-gbps",
            "10",
            "--gpu-memory",
            "16GiB",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["batch_size"], out["ps"]) == (1024, 1)
    assert out["reasons"][0].startswith("no activation_mb (--activation-mb)")
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_melon.planner",
            "--params",
            "1e6",
            "--per-sample-ms",
            "1",
            "--workers",
            "1",
            "--bandwidth-gbps",
            "1",
            "--gpu-memory",
            "lots",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "gpu_memory (--gpu-memory): unparsable size 'lots'" in bad.stderr
