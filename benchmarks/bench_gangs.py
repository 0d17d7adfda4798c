"""Gangs on a busy multi-tenant cluster: all-or-nothing formation with hold and backoff vs taking containers as
they come, side by side on one real mini cluster.

The cluster: the ``tenants`` mini cluster (queues ``tenant_a`` 40 % / max 100 % and ``tenant_b`` 40 % / max 50 %,
preemption on) with one NodeManager of ``--gpus`` GPUs (default 4). The trace: 8 gangs arriving together from
two tenants — alice (tenant_a): 4, 3, 2 and 1 GPUs; bob (tenant_b, at most 2 GPUs there): 2, 2, 1 and 1 — each
task a ``generic`` sleep of ``--task-s`` seconds (default 20) on one whole GPU. It runs twice, with
``gang_hold_s`` 0 (off: each container starts as YARN grants it, and a gang's first tasks wait for the rest)
and with ``--hold-s`` (default 8: held containers start only once the gang is whole; an incomplete gang gives
them back after the hold and asks again after a random backoff). A run that has not finished after
``--bound-s`` (default 600) is stopped and reported as unfinished: gangs that each hold part of what the others
need wait for ever without the hold.

What is measured, by polling every AM's ``/status`` through the RM proxy once a second:
  * makespan: the first submission to the last application's end (the RM's ``finishedTime``);
  * GPU-seconds held by incomplete gangs: the integral over time of the GPUs held by applications that hold some
    but not all of their containers (started or held) — capacity nobody trains on;
  * per run, the AM-side hold/backoff counts (``gang.holds_released``).
Printed as the two runs' figures and their ratios (on / off). The machine is noisy: read the ratios.

Usage (starts and stops its own cluster; ~6-10 minutes)::

    .venv/bin/python benchmarks/bench_gangs.py [--port-base 16000] [--task-s 20] [--hold-s 8]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from airflow_provider_melon.dev import minicluster as mc  # noqa: E402
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES  # noqa: E402
from airflow_provider_melon.spec import JobSpec  # noqa: E402

TRACE = [
    ("alice", "tenant_a", 4),
    ("bob", "tenant_b", 2),
    ("alice", "tenant_a", 3),
    ("bob", "tenant_b", 2),
    ("alice", "tenant_a", 2),
    ("bob", "tenant_b", 1),
    ("alice", "tenant_a", 1),
    ("bob", "tenant_b", 1),
]
TERMINAL = frozenset(TERMINAL_STATES)


def say(text: str) -> None:
    print(text, flush=True)


def run(details, code: Path, hold_s: float, task_s: int, bound_s: float) -> dict:
    hooks = {user: mc.tenant_hook(details, user) for user in ("alice", "bob")}
    apps: list[tuple[str, str, int]] = []
    start = time.time()
    for i, (user, queue, gpus) in enumerate(TRACE):
        spec = JobSpec.from_dict(
            {
                "name": f"gang-{i}-{gpus}gpu",
                "framework": "generic",
                "code": str(code),
                "entrypoint": f'python -c "import time; time.sleep({task_s})"',
                "queue": queue,
                "gang_hold_s": hold_s,
                "register_timeout_s": 3600,
                "roles": {"worker": {"instances": gpus, "memory": 256, "vcores": 1, "gpus": 1}},
            }
        )
        apps.append((hooks[user].submit(spec)["app_id"], user, gpus))
    idle_gpu_s, holds, last = 0.0, {}, time.time()
    finished: dict[str, dict] = {}
    while len(finished) < len(apps) and time.time() - start < bound_s:
        time.sleep(1.0)
        now = time.time()
        dt, last = now - last, now
        for app_id, user, gpus in apps:
            if app_id in finished:
                continue
            yarn = hooks[user].yarn
            app = yarn.get_application(app_id)
            if app["state"] in TERMINAL:
                finished[app_id] = app
                continue
            status = yarn.am_status(app_id) or {}
            tasks = status.get("tasks") or []
            held = sum(1 for t in tasks if t.get("container_id") and t.get("state") not in TERMINAL | {"SUCCEEDED"})
            if 0 < held < gpus:
                idle_gpu_s += held * dt  # one GPU per task
            holds[app_id] = int((status.get("gang") or {}).get("holds_released") or holds.get(app_id, 0))
    unfinished = [a for a, _, _ in apps if a not in finished]
    for app_id, user, _ in apps:
        if app_id in unfinished:
            hooks[user].yarn.kill_application(app_id)
    deadline = time.time() + 120  # the next run starts on an empty cluster
    while any(hooks[u].yarn.get_application(a)["state"] not in TERMINAL for a, u, _ in apps):
        if time.time() > deadline:
            raise RuntimeError(f"applications still live 120 s after the kill: {unfinished}")
        time.sleep(1)
    ends = [int(a.get("finishedTime") or 0) / 1000 for a in finished.values()]
    failed = [
        f"{a['name']}: {str(a.get('diagnostics') or '').splitlines()[0][:100] if a.get('diagnostics') else '?'}"
        for a in finished.values()
        if a.get("finalStatus") != "SUCCEEDED"
    ]
    return {
        "hold_s": hold_s,
        "makespan_s": (max(ends) - start) if ends and not unfinished else None,
        "elapsed_s": time.time() - start,
        "idle_gpu_s": idle_gpu_s,
        "unfinished": len(unfinished),
        "failed": len(failed),
        "failures": failed,
        "holds_released": sum(holds.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port-base", type=int, default=16000)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--task-s", type=int, default=20)
    parser.add_argument("--hold-s", type=float, default=8.0)
    parser.add_argument("--bound-s", type=float, default=600.0)
    args = parser.parse_args()
    for name in ("airflow_provider_melon", "hdfs"):  # the hook's staging/submission lines, 16 times over
        logging.getLogger(name).setLevel(logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="melon-bench-gangs-"))
    code = work / "code"
    code.mkdir()
    (code / "noop.py").write_text("print('noop')\n")
    say(f"starting a tenants mini cluster in {work} (port base {args.port_base}, 1 NM, {args.gpus} GPUs)")
    details = mc.start(
        work / "cluster",
        port_base=args.port_base,
        tenants=True,
        nodemanagers=1,
        gpus=args.gpus,
        gpu_memory_mb=args.gpus * 16384,
        nm_memory_mb=16384,
        timeout=300,
    )
    try:
        say(f"trace: {', '.join(f'{u}:{g}' for u, _, g in TRACE)} GPUs, {args.task_s} s per task")
        results = []
        for hold in (0.0, args.hold_s):
            say(f"run with gang_hold_s={hold:g} ...")
            results.append(run(details, code, hold, args.task_s, args.bound_s))
            say(f"  {results[-1]}")
    finally:
        mc.stop(work / "cluster")
        shutil.rmtree(work, ignore_errors=True)
    off, on = results

    def fmt(value, unit=""):
        return "unfinished" if value is None else f"{value:.1f}{unit}"

    say("")
    say(f"| figure | hold off | hold {args.hold_s:g} s | on / off |")
    say("|---|---|---|---|")
    ratio = (
        f"{on['makespan_s'] / off['makespan_s']:.2f}"
        if off["makespan_s"] and on["makespan_s"]
        else "off did not finish"
        if on["makespan_s"]
        else "n/a"
    )
    say(f"| makespan | {fmt(off['makespan_s'], ' s')} | {fmt(on['makespan_s'], ' s')} | {ratio} |")
    idle_ratio = f"{on['idle_gpu_s'] / off['idle_gpu_s']:.2f}" if off["idle_gpu_s"] else "n/a"
    say(f"| GPU-s held by incomplete gangs | {off['idle_gpu_s']:.0f} | {on['idle_gpu_s']:.0f} | {idle_ratio} |")
    say(f"| gangs unfinished after {args.bound_s:g} s | {off['unfinished']} | {on['unfinished']} | |")
    say(f"| gangs failed | {off['failed']} | {on['failed']} | |")
    say(f"| holds given back | {off['holds_released']} | {on['holds_released']} | |")
    for run_, name in ((off, "hold off"), (on, "hold on")):
        for failure in run_["failures"]:
            say(f"{name}: failed {failure}")
    return 0 if on["unfinished"] == 0 and on["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
