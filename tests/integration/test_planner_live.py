"""The planner's step model against step times measured from a real parameter-server job on the mini cluster.

``planner.plan`` prices a synchronous PS step's compute as ``step_compute_s = B * t`` (t = per-sample compute
seconds on one worker) and ignores per-step protocol overhead (module docstring). So a measured step time should
follow ``T(B) ≈ T0 + B * t``, with T0 the fixed cost of one step (coordinator scheduling, RPCs to worker and PS,
the parameter push/pull -- all independent of B).

How it is measured: ``dags/training/mnist/train_ps.py`` runs as a TF ParameterServerStrategy job (chief + 1
worker + 1 ps). To pay for one cluster start-up instead of six, the chief runs train_ps.py once per batch size,
one after the other, each a fresh coordinator against the same worker and PS servers (the worker and ps tasks
run train_ps.py, which serves until the AM stops them); each run prints ``STEP_TIME_S`` = mean step time over its
last 3/4 of 40 steps. The batch sizes are run in ``ROUNDS`` interleaved rounds (16, 512, 2048, 16, 512, 2048)
and each batch's step time is the minimum over the rounds: other processes on the machine can only slow a run
down (a single run at 2048 was once 2.5x its siblings while the host's load average was 5 on 2 cores), so the
least-disturbed run is the best estimate of the job's own cost -- the usual estimator for timings under
interference (cf. ``timeit``). ``--features 4096`` (the logistic-regression width; 41k parameters) makes a sample cost
tens of microseconds of CPU, so the per-sample part is well above the step-to-step noise of a loaded 2-core
machine at the batches used; at the default 784 features the whole range 1..1024 changes the step by ~10 ms,
about the size of the noise.

Three batch sizes: two calibrate, the third is held out, so the prediction checked is not a re-statement of
the measurements it came from.

- ``B_LO, B1`` (16, 512): the calibration pair -> per-sample time ``t = (T(B1) - T(B_LO)) / (B1 - B_LO)`` (the
  planner's input) and the fixed cost of a step ``T0 = T(B_LO) - B_LO * t``;
- ``B2`` (2048), held out: the planner, given t, prices its compute as ``plan(..., max_batch=B2).step_compute_s``;
  the measured marginal cost ``T(B2) - T0`` must be within 2x of it. Nothing of T(B2) went into the prediction:
  a step time that did not scale with the batch (overhead-bound) or grew much faster than linearly fails this.

Checks (each can fail): 1. the step time grows with the batch and t > 0; 2. the held-out prediction; 3. the fixed
part is not negative (T0 > -10 % of T(B_LO)): a negative intercept would mean super-linear per-sample cost, which
the planner's linear model cannot express.

Why 2x: this is CPU TensorFlow on a 2-core machine that other jobs share; the mean of 30 steps varies by about
±20 % run to run. In exploratory rounds t was ≈ 47-56 us/sample and T0 ≈ 11-13 ms, so the marginal cost at 2048
is ≈ 100 ms; 2x leaves room for the noise of a calibration slope over 496 samples while still failing for an
overhead-dominated or quadratic step.

What the planner does not model, measured here but not asserted: the fixed per-step cost T0 (coordinator
scheduling and gRPC round trips, ~12 ms on loopback) is ~50x the planner's transfer time for these 41k
parameters at 10 Gbit/s (~0.26 ms); the planner's docstring says protocol overhead is ignored.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from airflow_provider_melon.planner import plan

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRAINING = Path(__file__).resolve().parents[2] / "dags" / "training" / "mnist"
B_LO, B1, B2 = 16, 512, 2048
FEATURES = 4096
STEPS = 40
ROUNDS = 2
TOLERANCE = 2.0

CHIEF_LOOP = """\
import os, subprocess, sys

if os.environ.get("MELON_ROLE") != "chief":  # worker, ps: serve for the whole job
    os.execv(sys.executable, [sys.executable, "train_ps.py"])
for batch in sys.argv[1].split(","):
    print(f"BATCH {batch}", flush=True)
    subprocess.run([sys.executable, "train_ps.py", "--batch-size", batch] + sys.argv[2:], check=True)
"""


def _step_times(stdout: str) -> dict[int, list[float]]:
    """batch → the STEP_TIME_S of each of its runs, in order."""
    out, batch = {}, None
    for line in stdout.splitlines():
        if m := re.match(r"BATCH (\d+)$", line.strip()):
            batch = int(m.group(1))
        elif (m := re.match(r"STEP_TIME_S ([0-9.eE+-]+)$", line.strip())) and batch is not None:
            out.setdefault(batch, []).append(float(m.group(1)))
            batch = None
    return out


def test_planner_step_compute_scales_as_measured_on_a_ps_job(jobs, tmp_path):
    code = tmp_path / "ps"
    code.mkdir()
    shutil.copy(TRAINING / "train_ps.py", code / "train_ps.py")
    (code / "chief_loop.py").write_text(CHIEF_LOOP)
    batches = ",".join(str(b) for _ in range(ROUNDS) for b in (B_LO, B1, B2))
    app_id = jobs.submit({
        "name": "planner-live", "framework": "tensorflow", "code": str(code),
        "entrypoint": f"python chief_loop.py {batches} --steps {STEPS} --features {FEATURES}",
        "roles": {"chief": {"memory": "1g"}, "worker": {"memory": "1g"}, "ps": {"memory": "1g"}},
    })
    app = jobs.wait(app_id, timeout=420)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
    chief = [text for text in jobs.container_logs(app_id).values() if "BATCH" in text]
    assert len(chief) == 1, "exactly one container (the chief) runs the batch loop"
    runs = _step_times(chief[0])
    assert sorted(runs) == sorted((B_LO, B1, B2)) and all(len(v) == ROUNDS for v in runs.values()), chief[0][-2000:]
    T = {b: min(v) for b, v in runs.items()}

    # 1. larger batches are slower; calibration from (B_LO, B1) only
    assert T[B_LO] < T[B1] < T[B2], T
    t = (T[B1] - T[B_LO]) / (B1 - B_LO)
    t0 = T[B_LO] - B_LO * t

    # 2. the planner's compute for the held-out batch, given the calibrated t
    params = FEATURES * 10 + 10
    p2 = plan(params, 4, t, workers=1, bandwidth_gbps=10, gpu_memory_mb=16384, max_batch=B2, batch_multiple=1)
    assert p2.batch_size == B2
    predicted = p2.step_compute_s
    measured = T[B2] - t0
    report = (f"runs {runs} s, min T = {T} s; calibrated t = {t * 1e6:.1f} us/sample, T0 = {t0 * 1e3:.2f} ms; "
              f"planner compute at {B2}: {predicted * 1e3:.2f} ms, measured marginal {measured * 1e3:.2f} ms "
              f"(ratio {measured / predicted:.2f}); planner transfer {p2.step_transfer_s * 1e3:.3f} ms vs measured "
              f"fixed {t0 * 1e3:.2f} ms")
    print(report)
    assert 1 / TOLERANCE <= measured / predicted <= TOLERANCE, report

    # 3. a non-negative fixed part (linear, not super-linear, in the batch)
    assert t0 > -0.1 * T[B_LO], report
