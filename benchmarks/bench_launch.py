"""Gang launch latency on the real mini cluster: our AM + executor vs the floor (the same AM launching `true`).

Target (the issue): submit → all tasks registered, for our AM vs a bare AM that launches ``true`` containers
(the floor), same task count; median ratio ≤ 1.25.

The two jobs
------------
Both are the same ``generic`` JobSpec (N ``worker`` tasks, 512 MiB, 1 vcore, no GPU; a small code folder) and
both go through ``MelonHook.submit`` itself -- the same staging (content-cached, so ~0 bytes after the first
run), the same ``new_application``, plan upload and RM submission, the same ApplicationMaster jar, the same
local resources (code + runtime archives) localized into every container.

- **ours**: the plan as ``submission.build_plan`` writes it: every container runs
  ``python -m airflow_provider_melon.runtime.executor``, which chooses a GPU (none here), reserves a port and
  POSTs ``/register`` until the gang is complete, then starts the entrypoint
  ``python -c "import time; print('START', repr(time.time()), flush=True); time.sleep(5)"``.
- **floor**: the identical plan except ``command = "true"`` (and ``success_role = null``, which a generic job
  has anyway): YARN allocates, localizes and launches the same containers, and the command does nothing. The
  plan is changed by wrapping ``submission.build_plan`` for the duration of that one ``hook.submit`` call
  (``MelonHook.submit`` has no plan hook; see the report), so nothing else in the path differs.

What is timed (one clock: the mini cluster runs on this host)
-------------------------------------------------------------
t0 = just before ``hook.submit`` (so staging's cache checks are inside both figures).

- **gang (the target)** -- both from timestamps the containers leave, so neither side carries polling delay:
  - ours: t0 → the earliest ``START`` time printed by the entrypoints. No entrypoint starts before the gang is
    complete (the executor starts it only on the 200 of ``/register``), and the task whose POST completes the
    gang gets its 200 at once and starts its entrypoint right away, so the earliest START is the gang's
    completion plus one ``Popen`` and a bare interpreter start (~0.06 s here) -- counted against us. (The
    other tasks learn of it on their next 0.5 s poll, so the latest START would overstate the gang.)
  - floor: ``true`` cannot register, so its equivalent point is "every container's command has run": t0 → the
    latest modification time of the containers' ``stdout`` files. The launch script's redirection
    ``true 1><LOG_DIR>/stdout`` creates that file the instant the command starts and ``true`` never writes to
    it, so its mtime is the moment the last container reached its command.
  The difference is therefore what our executor adds on top of YARN's own container launch: interpreter
  start, runtime import, port reservation and the registration round trips.
  Cross-check, column ``polled``: t0 → the first poll of the AM's ``/status`` (through the RM web proxy, every
  0.1 s) that shows every task ``REGISTERED`` -- the literal "all registered as the AM sees it", larger by the
  polling interval and the proxy's latency, smaller by the entrypoint's interpreter start; the two agree within
  ~0.1 s, so the choice does not decide PASS/FAIL.
- **finished (context, no target)**: t0 → the RM reports the app ``FINISHED`` (polled every 0.1 s). Ours also
  contains the entrypoint's 5 s sleep, the executors' exit and the AM's teardown, so the column
  ``finished - 5 s`` is shown for ours; the difference to the floor is still not pure overhead (heartbeat and
  exit paths), hence no target on it.

Runs are interleaved (ours, floor, ours, floor, ...) so that drift on the machine (JIT, page cache, other
load) hits both alike; one warm-up pair is run first and discarded (first localization of the archives, the
NodeManagers' JIT). Medians are reported; PASS when median(ours gang) / median(floor gang) ≤ 1.25. The median
of the per-pair ratios (each ours run over the floor run right after it) is printed too: it cancels slow drift
of the machine's load, which on a shared 2-core host is the largest source of spread.

Usage (a running mini cluster, e.g. ``melon minicluster start --work-dir /tmp/bench-mc --port-base 25000``)::

    .venv/bin/python benchmarks/bench_launch.py --work-dir /tmp/bench-mc --tasks 4 --runs 5
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_provider_melon import submission  # noqa: E402
from airflow_provider_melon.cli import melon_hook_for_cluster  # noqa: E402
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES  # noqa: E402
from airflow_provider_melon.spec import JobSpec  # noqa: E402

TARGET = 1.25
SLEEP_S = 5
POLL_S = 0.1
TERMINAL = frozenset(TERMINAL_STATES)
START_RE = re.compile(r"^START ([0-9.]+)$", re.M)


@contextlib.contextmanager
def floor_plan():
    """While active, ``submission.build_plan`` returns the same plan with ``command = "true"``."""
    original = submission.build_plan

    def build(*args, **kwargs):
        plan = original(*args, **kwargs)
        plan["command"] = "true"
        plan["success_role"] = None
        return plan

    submission.build_plan = build
    try:
        yield
    finally:
        submission.build_plan = original


def job_spec(code: Path, tasks: int) -> JobSpec:
    return JobSpec.from_dict(
        {
            "name": "bench-launch",
            "framework": "generic",
            "code": str(code),
            "entrypoint": f"python -c \"import time; print('START', repr(time.time()), flush=True); "
            f'time.sleep({SLEEP_S})"',
            "roles": {"worker": {"instances": tasks, "memory": "512m", "vcores": 1}},
        }
    )


def container_stdouts(work_dir: Path, app_id: str) -> list[Path]:
    return list(work_dir.rglob(f"{app_id}/container_*/stdout"))


def wait_files(work_dir: Path, app_id: str, tasks: int) -> list[Path]:
    for _ in range(50):  # the NodeManager may still be finishing the log folder
        paths = container_stdouts(work_dir, app_id)
        if len(paths) == tasks:
            return paths
        time.sleep(0.1)
    raise RuntimeError(f"{app_id}: {len(paths)} container stdout files, expected {tasks}")


def run_one(hook, spec: JobSpec, kind: str, work_dir: Path, timeout: float = 180) -> dict:
    tasks = spec.roles["worker"].instances
    ctx = floor_plan() if kind == "floor" else contextlib.nullcontext()
    t0 = time.time()
    with ctx:
        result = hook.submit(spec, tags=[f"bench-launch-{kind}"])
    app_id = result["app_id"]
    assert (result["plan"]["command"] == "true") == (kind == "floor"), result["plan"]["command"]
    polled = finished = None
    deadline = time.monotonic() + timeout
    state, i = None, 0
    while time.monotonic() < deadline:
        i += 1
        if kind == "ours" and polled is None:
            st = hook.am_status(app_id)
            if st and len(st.get("tasks", [])) == tasks and all(t["state"] == "REGISTERED" for t in st["tasks"]):
                polled = time.time() - t0
            elif i % 10:  # while waiting for the gang, ask the RM only once a second
                time.sleep(POLL_S)
                continue
        app = hook.yarn.get_application(app_id)
        state = app["state"]
        if state in TERMINAL:
            finished = time.time() - t0
            break
        time.sleep(POLL_S)
    else:
        hook.yarn.kill_application(app_id)
        raise RuntimeError(f"{kind} {app_id} did not finish in {timeout}s (state {state})")
    if (app["state"], app["finalStatus"]) != ("FINISHED", "SUCCEEDED"):
        raise RuntimeError(f"{kind} {app_id} ended {app['state']}/{app['finalStatus']}: {app.get('diagnostics')}")
    paths = wait_files(work_dir, app_id, tasks)
    if kind == "floor":
        gang = max(p.stat().st_mtime for p in paths) - t0
    else:
        starts = [float(m.group(1)) for p in paths for m in START_RE.finditer(p.read_text(errors="replace"))]
        if len(starts) != tasks:
            raise RuntimeError(f"ours {app_id}: {len(starts)} START lines, expected {tasks}")
        if polled is None:
            raise RuntimeError(f"ours {app_id}: never saw all {tasks} tasks REGISTERED in /status")
        gang = min(starts) - t0
    return {
        "kind": kind,
        "app_id": app_id,
        "gang": gang,
        "polled": polled,
        "finished": finished,
        "uploaded": result["staging"].uploaded_bytes,
        "extra": result["staging"].uploaded_bytes - result["staging"].files["plan"].uploaded_bytes,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work-dir", default="/tmp/bench-mc", help="work dir of a running mini cluster")
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--runs", type=int, default=5, help="measured runs of each kind (after one warm-up pair)")
    args = p.parse_args(argv)
    for name in ("hdfs", "airflow_provider_melon"):  # per-call staging logs would drown the table
        logging.getLogger(name).setLevel(logging.WARNING)
    work_dir = Path(args.work_dir)
    hook = melon_hook_for_cluster(work_dir)
    code = Path(tempfile.mkdtemp(prefix="bench-launch-code-"))
    (code / "noop.py").write_text("print('noop')\n")
    spec = job_spec(code, args.tasks)

    print(
        f"bench_launch: {args.tasks} tasks (512 MiB, 1 vcore, no GPU) on the mini cluster in {work_dir}; "
        f"{args.runs} interleaved runs of each after 1 warm-up pair; poll {POLL_S}s"
    )
    print(
        f"ours : command = executor, entrypoint prints START <time> then sleeps {SLEEP_S}s; "
        "gang = t0 -> earliest START (polled = t0 -> AM /status all REGISTERED)"
    )
    print("floor: command = true;     gang = t0 -> latest container stdout mtime (the command ran)")
    print()
    print(f"{'run':>4} {'kind':<6} {'app':<32} {'gang s':>8} {'polled s':>9} {'finished s':>11} {'uploaded B':>11}")
    rows = []
    for i in range(args.runs + 1):
        for kind in ("ours", "floor"):
            r = run_one(hook, spec, kind, work_dir)
            label = "warm" if i == 0 else str(i)
            polled = f"{r['polled']:9.2f}" if r["polled"] is not None else f"{'-':>9}"
            print(
                f"{label:>4} {kind:<6} {r['app_id']:<32} {r['gang']:8.2f} {polled} {r['finished']:11.2f} "
                f"{r['uploaded']:11d}",
                flush=True,
            )
            if i > 0:
                rows.append(r)

    def med(kind, key):
        return statistics.median(r[key] for r in rows if r["kind"] == kind)

    og, fg = med("ours", "gang"), med("floor", "gang")
    of, ff = med("ours", "finished"), med("floor", "finished")
    ratio = og / fg
    print()
    print(f"medians over {args.runs} runs each   {'ours':>8} {'floor':>8} {'ours/floor':>11}")
    print(f"submit -> all registered (gang) s {og:8.2f} {fg:8.2f} {ratio:11.3f}")
    print(
        f"ours gang as polled from /status  {med('ours', 'polled'):8.2f} {fg:8.2f} {med('ours', 'polled') / fg:11.3f}"
    )
    print(f"submit -> FINISHED s             {of:8.2f} {ff:8.2f}")
    print(f"  ours FINISHED - {SLEEP_S} s sleep     {of - SLEEP_S:8.2f} {ff:8.2f} {(of - SLEEP_S) / ff:11.3f}")
    spread = {
        k: (min(r["gang"] for r in rows if r["kind"] == k), max(r["gang"] for r in rows if r["kind"] == k))
        for k in ("ours", "floor")
    }
    print(
        f"gang range: ours {spread['ours'][0]:.2f}..{spread['ours'][1]:.2f} s, "
        f"floor {spread['floor'][0]:.2f}..{spread['floor'][1]:.2f} s; executor overhead (median) {og - fg:.2f} s"
    )
    ours_g = [r["gang"] for r in rows if r["kind"] == "ours"]
    floor_g = [r["gang"] for r in rows if r["kind"] == "floor"]
    paired = statistics.median(o / f for o, f in zip(ours_g, floor_g))
    print(f"paired: median of per-pair ratios (ours_i / floor_i, adjacent runs) {paired:.3f}")
    uploads = [r for r in rows if r["extra"] > 0]
    if uploads:
        print(
            f"note: {len(uploads)} run(s) uploaded more than the plan (the runtime or code changed on disk "
            f"meanwhile: {', '.join(r['app_id'] for r in uploads)})"
        )
    verdict = "PASS" if ratio <= TARGET else "FAIL"
    print(f"{verdict}: gang ratio {ratio:.3f} {'<=' if ratio <= TARGET else '>'} {TARGET}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
