"""Simulator vs system: one seeded trace through the simulator and through the real YARN + AM + ledger.

Target (issue 13 §4): the real makespan within 15 % of the simulator's for the same trace and policy -- the
benchmark measures the system, not a model of it.

The trace: ``simulator.make_trace`` (12 jobs, small with probability ``--small-fraction``, lognormal solo
durations, sigma 0.5, expected GPU memory from the measured NVML peaks: small 2076 MiB, large 5653 MiB) with
the durations divided by ``--time-scale`` (default 30: medians 40 s small / 80 s large) and job ``i`` arriving
at ``i * --gap`` seconds (default 10 s), so the order in which jobs reach the node's ledger is the trace's
order (twelve AM JVMs launched in the same second on a shared 2-core host would reach it in a racy order, and
the ledger's answer depends on the order).

The policy: the default (D) -- what the node's executor really does (``gpu.ledger.Ledger.reserve``: each task holds
its slot, ``policy.slot_mb`` of its expected memory, and goes where ``policy.place_default(..., slots=True)`` puts
it, no MPS), simulated with the same ``policy.place_default`` call on the same figures. The AM asks YARN for the
slot too (the plan's ``gpu_slot_mb``), so a job whose slot does not fit waits in YARN's queue or on the node.

The real run: a mini cluster with ONE NodeManager advertising ``--gpus`` virtual GPUs of an H200's memory
(134465 MiB each; the simulator's GPUs), 24 GiB / 48 vcores of container room and an AM share of 0.5, so YARN
memory/vcores never make a job wait (12 AMs x 512 MiB + 12 tasks x 256 MiB = 9 GiB); GPU memory does (slots:
33616 MiB a small job, 67232 a large one, of 268930). One NodeManager, because YARN's choice of node is not in the simulator. Each job
goes through ``MelonHook.submit`` as a one-task ``generic`` job with ``gpu_memory`` = its expected memory and
``large`` for large jobs; its entrypoint is ``benchmarks/sim_job.py``: steps of 0.5 solo seconds, each lasting
``0.5 / rate`` with ``rate`` from ``SpeedModel.rates`` for the job's *current* companions on its GPU, read from
the ledger the executor reserved it in. ``MELON_GPU_WAIT_S`` is 1200, so a task that finds no GPU waits on the
node (as a queued job waits in the simulator) instead of exiting 75.

What is compared (t = 0: the first submission; one clock, the cluster runs on this host):
  * makespan: the simulator's vs the last job's last step (from the file ``sim_job.py`` writes);
  * per job: start (simulated placement / real first step), finish, GPU;
  * launch overhead, shown separately: real first step - the job's submission (``hook.submit`` called:
    staging, the RM's submission, the AM's JVM start and container request, the task container's launch, the
    executor's GPU choice and registration, the interpreter's start). The simulator has none of it.
  * YARN's own end: the RM's ``finishedTime`` of the last application (adds the AM's teardown).

Usage (starts and stops its own mini cluster; takes ~8 minutes)::

    .venv/bin/python benchmarks/bench_sim_vs_system.py --port-base 33000
    .venv/bin/python benchmarks/bench_sim_vs_system.py --sim-only    # just the simulator's side, instantly
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks import simulator as sim  # noqa: E402

TARGET = 0.15


def make_system_trace(
    model: "sim.SpeedModel",
    *,
    n_jobs: int = 12,
    small_fraction: float = 0.67,
    seed: int = 2,
    time_scale: float = 30.0,
    gap_s: float = 10.0,
    history: bool = False,
) -> List["sim.Job"]:
    """``simulator.make_trace`` (sigma 0.5, all at 0) with durations divided by ``time_scale`` (rounded to
    0.1 s) and job ``i`` arriving at ``i * gap_s``. ``history``: each job has an estimate of its run time as the
    product would learn it (``simulator.with_estimates``, sigma ``bench_policy.EST_SIGMA``), of the *unscaled*
    duration: the priority and ``alone`` a run of that length would get."""
    if time_scale <= 0 or gap_s < 0:
        raise ValueError("time_scale must be > 0 and gap_s >= 0")
    jobs = sim.make_trace(n_jobs, small_fraction, seed, model, sigma=0.5)
    if history:
        from benchmarks.bench_policy import EST_SIGMA

        jobs = sim.with_estimates(jobs, EST_SIGMA)
    return [
        dataclasses.replace(j, work_s=round(j.work_s / time_scale, 1), arrival_s=round(i * gap_s, 1))
        for i, j in enumerate(jobs)
    ]


def job_spec(job: "sim.Job", code: str, data: str, out_dir: str) -> dict:
    entry = (
        f"python sim_job.py --repo {REPO} --data {data} --name {job.name} --kind {job.kind} "
        f"--work {job.work_s} --out {os.path.join(out_dir, job.name + '.json')}"
    )
    gpu = {"gpus": 1} if sim.alone(job) else {"gpu_memory": int(job.expected_mb)}
    return {
        "name": f"simvs-{job.name}",
        "framework": "generic",
        "code": code,
        "entrypoint": entry,
        "env": {"MELON_GPU_WAIT_S": "1200"},
        "register_timeout_s": 1200,
        # with a history: what MelonHook.resolve_learned makes of priority: auto and alone_after_s
        "priority": sim.yarn_priority(job),
        "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1, "large": job.large, **gpu}},
    }


def run_system(trace, args, data: str, log) -> Dict:
    from airflow_provider_melon.cli import melon_hook_for_cluster
    from airflow_provider_melon.dev import minicluster as mc
    from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES as TERMINAL
    from airflow_provider_melon.spec import JobSpec

    if not args.verbose:  # the hook's staging/submission lines, twelve times over; our own progress goes to stderr
        for name in ("airflow_provider_melon", "hdfs"):
            logging.getLogger(name).setLevel(logging.WARNING)
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="wt-sim-vs-system-", dir="/tmp"))
    code = work_dir / "code"
    out_dir = work_dir / "timings"
    hook = None
    submitted: Dict[str, dict] = {}
    try:
        log(f"starting a mini cluster in {work_dir} (port base {args.port_base}, 1 NM, {args.gpus} GPUs)")
        t = time.time()
        mc.start(
            work_dir,
            port_base=args.port_base,
            nodemanagers=1,
            gpus=args.gpus,
            gpu_memory_mb=args.gpus * sim.H200_MB,
            nm_memory_mb=24576,
            nm_vcores=48,
            timeout=300,
        )
        log(f"  ready in {time.time() - t:.0f}s")
        code.mkdir(exist_ok=True)
        out_dir.mkdir(exist_ok=True)
        shutil.copy(os.path.join(HERE, "sim_job.py"), code / "sim_job.py")
        hook = melon_hook_for_cluster(work_dir)
        t0 = time.time()
        for job in trace:  # trace order = arrival order
            delay = t0 + job.arrival_s - time.time()
            if delay > 0:
                time.sleep(delay)
            s = time.time()
            app_id = hook.submit(JobSpec.from_dict(job_spec(job, str(code), data, str(out_dir))))["app_id"]
            submitted[job.name] = {"app_id": app_id, "submit": s - t0, "submitted": time.time() - t0}
            log(f"  t={s - t0:6.1f}s submitted {job.name} ({job.kind}, {job.work_s}s solo) as {app_id}")
        deadline = time.time() + args.timeout
        apps: Dict[str, dict] = {}
        while time.time() < deadline:
            for name, row in submitted.items():
                if name not in apps:
                    app = hook.yarn.get_application(row["app_id"])
                    if app["state"] in TERMINAL:
                        apps[name] = app
                        log(f"  t={time.time() - t0:6.1f}s {name} {app['state']}/{app.get('finalStatus')}")
            if len(apps) == len(submitted):
                break
            time.sleep(2)
        else:
            raise RuntimeError(f"not all applications ended within {args.timeout}s")
        rows = {}
        for name, row in submitted.items():
            f = out_dir / f"{name}.json"
            app = apps[name]
            if app["finalStatus"] != "SUCCEEDED" or not f.exists():
                raise RuntimeError(
                    f"{name} ({row['app_id']}) {app['state']}/{app['finalStatus']}: {app.get('diagnostics', '')[:500]}"
                )
            body = json.loads(f.read_text())
            rows[name] = {
                **row,
                "start": body["first_step"] - t0,
                "finish": body["end"] - t0,
                "gpu": body["gpu"],
                "companions": body["companions"],
                "yarn_end": app["finishedTime"] / 1000.0 - t0,
            }
        return rows
    finally:
        if hook is not None:
            for row in submitted.values():
                try:
                    if hook.yarn.get_application(row["app_id"])["state"] not in TERMINAL:
                        hook.yarn.kill_application(row["app_id"])
                except Exception:  # noqa: BLE001 - best effort before the cluster goes
                    pass
        log("stopping the mini cluster")
        mc.stop(work_dir)
        if not args.keep:
            shutil.rmtree(work_dir, ignore_errors=True)


def report(trace, res, real, args, model) -> List[str]:
    out = []
    p = out.append
    p(
        f"Simulator vs system: {len(trace)} jobs (seed {args.seed}, small fraction {args.small_fraction}, durations "
        f"/{args.time_scale:g}, arrivals every {args.gap:g}s), {args.gpus} GPUs x {sim.H200_MB} MiB, policy 'default' "
        f"(policy.place_default with slots, no MPS)"
        + (
            "; with a history: YARN priority from each job's estimated (unscaled) run time, queue order 'priority'"
            if args.history
            else ""
        )
    )
    p("")
    hdr = (
        f"{'job':5} {'kind':5} {'solo':>6} {'MiB':>5} {'arr':>5} {'pri':>3} | "
        f"{'sim gpu':>7} {'start':>6} {'finish':>7} | "
        f"{'real gpu':>8} {'start':>6} {'finish':>7} | {'launch':>6} {'d fin':>6}"
    )
    p(hdr)
    p("-" * len(hdr))
    for j in trace:
        line = (
            f"{j.name:5} {j.kind:5} {j.work_s:6.1f} {j.expected_mb:5d} {j.arrival_s:5.0f} "
            f"{sim.yarn_priority(j):3d} | "
            f"{res.gpu[j.name]:7d} {res.start[j.name]:6.1f} {res.finish[j.name]:7.1f} | "
        )
        if real:
            r = real[j.name]
            line += (
                f"{r['gpu']:8d} {r['start']:6.1f} {r['finish']:7.1f} | {r['start'] - r['submit']:6.1f} "
                f"{r['finish'] - res.finish[j.name]:+6.1f}"
            )
        p(line)
    p("")
    p("launch = the real first step - the job's submission (staging, RM, AM JVM, container, executor, interpreter);")
    p("the simulator has none. d fin = real finish - simulated finish.")
    p("")
    sim_mk = res.makespan_s
    p(f"simulated makespan            {sim_mk:8.1f} s")
    if not real:
        return out
    real_mk = max(r["finish"] for r in real.values())
    yarn_mk = max(r["yarn_end"] for r in real.values())
    launch = [r["start"] - r["submit"] for r in real.values()]
    same_gpu = sum(real[j.name]["gpu"] == res.gpu[j.name] for j in trace)
    ratio = real_mk / sim_mk
    p(f"real makespan (last step)     {real_mk:8.1f} s")
    p(f"real, YARN's last finishedTime{yarn_mk:8.1f} s  (adds the AM's teardown)")
    p(
        f"launch overhead per job       mean {sum(launch) / len(launch):.1f} s, min {min(launch):.1f} s, "
        f"max {max(launch):.1f} s"
    )
    p(f"same GPU as simulated         {same_gpu}/{len(trace)} jobs")
    p(
        f"ratio real/sim                {ratio:8.3f}   target within {TARGET:.0%}: "
        f"{'PASS' if abs(ratio - 1) <= TARGET else 'FAIL'}"
    )
    p(f"ratio (real - mean launch)/sim {(real_mk - sum(launch) / len(launch)) / sim_mk:7.3f}   (diagnostic)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--small-fraction", type=float, default=0.67)
    ap.add_argument("--time-scale", type=float, default=30.0)
    ap.add_argument("--gap", type=float, default=10.0)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--port-base", type=int, default=33000)
    ap.add_argument("--work-dir", default=None, help="default: a fresh /tmp/wt-sim-vs-system-* (removed after)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (logs, ledger) after the run")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds to wait for the applications")
    ap.add_argument("--sim-only", action="store_true")
    ap.add_argument(
        "--history",
        action="store_true",
        help="jobs with learned run times: YARN priorities by priority: auto, alone_after_s (the default (D))",
    )
    ap.add_argument("--verbose", action="store_true", help="keep the hook's INFO log lines")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    data = sim.data_dir()
    model = sim.SpeedModel.from_data(data)
    trace = make_system_trace(
        model,
        n_jobs=args.jobs,
        small_fraction=args.small_fraction,
        seed=args.seed,
        time_scale=args.time_scale,
        gap_s=args.gap,
        history=args.history,
    )
    res = sim.simulate(trace, args.gpus, sim.H200_MB, "default", model, order="priority" if args.history else "trace")
    real = None if args.sim_only else run_system(trace, args, os.path.abspath(data), log)
    lines = report(trace, res, real, args, model)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    if real:
        real_mk = max(r["finish"] for r in real.values())
        return 0 if abs(real_mk / res.makespan_s - 1) <= TARGET else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
