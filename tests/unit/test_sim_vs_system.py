"""The pure parts of benchmarks/bench_sim_vs_system.py: the simulator's default (D) places jobs exactly where the
node's real ledger does, the synthetic job's step time is the simulator's rate for its companions,
and the scaled trace keeps make_trace's jobs."""

import os
import sys
from pathlib import Path

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, REPO)

from airflow_provider_melon.gpu.devices import DeviceInfo  # noqa: E402
from airflow_provider_melon.gpu.ledger import Ledger  # noqa: E402
from benchmarks import bench_sim_vs_system as bench  # noqa: E402
from benchmarks import plot_results, sim_job  # noqa: E402
from benchmarks import simulator as sim  # noqa: E402

DATA = sim.data_dir()  # benchmarks/data: the project's copy of the H200 measurements (no skip: it is always there)


@pytest.fixture(scope="module")
def model():
    return sim.SpeedModel.from_data(DATA)


def test_the_default_places_like_the_real_ledger(tmp_path, model):
    """Same jobs in the same order, none finishing: the simulator's default (D) puts each job where Ledger.reserve
    does, and queues exactly the jobs the ledger refuses (each holds its slot: a quarter of a 16 GiB GPU for a small
    job, half for a large one). The sequence exercises policy.place_default (spreading, pairing), the interference
    rule (a small refused beside a large and a small; a large refused beside two small) and the slots' memory."""
    kinds = ["large", "small", "small", "large", "small", "large", "small", "small", "large", "small"]
    jobs = [sim.Job(f"j{i}", k, 1000.0, 5653 if k == "large" else 2076) for i, k in enumerate(kinds)]
    total = 16384
    res = sim.simulate(jobs, 3, total, "default", model, order="trace")
    ledger = Ledger(str(tmp_path))
    devices = [DeviceInfo(i, f"GPU-{i}", "virtual", total) for i in range(3)]
    real = {j.name: ledger.reserve(j.name, os.getpid(), j.expected_mb, devices, large=j.large) for j in jobs}
    at_once = {j.name for j in jobs if res.start[j.name] == 0.0}
    assert {n for n, g in real.items() if g is not None} == at_once
    assert 0 < len(at_once) < len(jobs)  # the slots filled the GPUs: some jobs wait in both
    assert {n: res.gpu[n] for n in at_once} == {n: real[n] for n in at_once}
    # the rule was exercised: some GPU holds a large job and exactly one small one
    per_gpu = {g: sim_job.companions(ledger.entries(), g) for g in range(3)}
    assert (1, 1) in per_gpu.values() or (2, 1) in per_gpu.values()


def test_companions_counts_the_jobs_on_one_gpu():
    entries = [
        {"gpu": 0, "large": True},
        {"gpu": 0, "large": False},
        {"gpu": 1, "large": False},
        {"gpu": 0, "large": False},
        {"gpu": 1},
    ]
    assert sim_job.companions(entries, 0) == (1, 2)
    assert sim_job.companions(entries, 1) == (0, 2)
    assert sim_job.companions(entries, 2) == (0, 0)


def test_step_seconds_follow_the_speed_model(model):
    assert sim_job.step_seconds(model, "small", 0, 1, 0.5) == pytest.approx(0.5)  # alone: solo speed
    assert sim_job.step_seconds(model, "large", 1, 0, 0.5) == pytest.approx(0.5)
    lr, sr = model.rates(1, 1)  # r50 + r18 measured: 0.929 / 0.956
    assert sim_job.step_seconds(model, "large", 1, 1, 0.5) == pytest.approx(0.5 / lr)
    assert sim_job.step_seconds(model, "small", 1, 1, 0.5) == pytest.approx(0.5 / sr)
    assert sim_job.step_seconds(model, "small", 0, 4, 1.0) == pytest.approx(1.0 / model.rates(0, 4)[1])
    # a job the ledger does not (yet) show counts itself
    assert sim_job.step_seconds(model, "small", 0, 0, 1.0) == pytest.approx(1.0)
    assert sim_job.step_seconds(model, "large", 0, 1, 1.0) == pytest.approx(1.0 / lr)


def test_system_trace_scales_make_trace(model):
    base = sim.make_trace(12, 0.67, 2, model, sigma=0.5)
    trace = bench.make_system_trace(model, n_jobs=12, small_fraction=0.67, seed=2, time_scale=30, gap_s=10)
    assert [(j.name, j.kind, j.expected_mb) for j in trace] == [(j.name, j.kind, j.expected_mb) for j in base]
    assert [j.work_s for j in trace] == [round(j.work_s / 30, 1) for j in base]
    assert [j.arrival_s for j in trace] == [10.0 * i for i in range(12)]
    with pytest.raises(ValueError):
        bench.make_system_trace(model, time_scale=0)


@pytest.mark.parametrize("name", ["bench_sim_vs_system.txt", "bench_sim_vs_system-history.txt"])
def test_the_docs_plot_reads_every_job_of_a_committed_result(name):
    """plot_results draws docs/img/sim-vs-system.svg from the committed result, whose rows carry a priority column
    since --history: every job gets its lane, and the caption's makespans are the result's."""
    path = Path(REPO, "benchmarks", "results", name)
    svg = plot_results.sim_vs_system(path)
    text = path.read_text()
    jobs = [line.split()[0] for line in text.splitlines() if line[:1] in ("s", "l") and " | " in line]
    assert len(jobs) == 12 and all(f">{job}</text>" in svg for job in jobs)
    simulated = text.split("simulated makespan")[1].split()[0]
    assert f"Makespan {simulated} s simulated" in svg
