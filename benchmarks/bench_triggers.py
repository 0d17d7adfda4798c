"""Many deferred jobs, one triggerer: RM requests, CPU, RSS and end -> event delay of N YarnApplicationTriggers in one
process, per-trigger polling (old) vs the shared poller (new), side by side on a real mini cluster.

Targets (the issue): RM requests/s bounded independent of the number of triggers (new: at N=500 at most 2x
the rate at N=10); end -> completion delay <= 2 poll intervals at N=500 (new); a slow RM never starves the
event loop (max loop lag reported; the hanging-RM case is a unit test, tests/unit/test_poller.py).

Setup (all real): the bench starts its own mini cluster (1 NodeManager of 4096 MiB, ports from
``MELON_TEST_PORT_BASE``, default 29000). YARN's AM share (``maximum-am-resource-percent`` 0.5 → 2048 MiB of AMs)
keeps applications waiting: 3 MeLoN jobs (our AM, 512 MiB, and one ``sleep`` task each) run; then every further application
asks for a 2048 MiB AM, which no longer fits in the AM share, so YARN keeps it ACCEPTED (no container ever starts).
Every application carries the ``melon`` tag, as MeLoN submissions do.

For each N in 10/100/500 and each mode, a child process (``--child``: one asyncio process running the triggers'
``run()`` coroutines, as the triggerer does; not Airflow's triggerer itself) follows the 3 running applications
and N-3 ACCEPTED ones with real ``YarnApplicationTrigger``s on real ``AsyncYarnHook``s, poll interval 5 s (the
minimum). Its RM address is a loopback counting proxy (``tests/counting_proxy.py``) in front of the RM, so the RM
requests are counted, not estimated. ``old`` sets ``YarnApplicationTrigger.coalesce_polls = False`` (each trigger
its own ``GET /apps/{id}`` per interval, in the default executor: the code before the shared poller); ``new`` is
the default.

Per run: warm-up 2 intervals + 2 s (every trigger has polled), then a 20 s window: RM requests/s through the
proxy (by kind: list, single app GET, other = the AM ``/status`` progress calls for running applications), the
child's CPU (getrusage, user+system, % of one core) and RSS (VmRSS) and the event loop's worst lag in the
window (a 50 ms ticker). Then 5 of its ACCEPTED applications are killed (outside the proxy) and the delay from the RM's
``finishedTime`` to the trigger's TriggerEvent is taken for each (same host clock). Old and new runs alternate per
N. About 6 minutes on a busy 2-core host.

Usage::

    MELON_TEST_PORT_BASE=29000 .venv/bin/python benchmarks/bench_triggers.py
    .venv/bin/python benchmarks/bench_triggers.py --counts 10,100 --window 10   # shorter
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RUNNING_APPS = 3
KILLS = 5
INTERVAL = 5.0
PENDING_AM_MB = 2048


# ------------------------------------------------------------------------------------------------ the child


def child(args) -> int:
    """One process following the given applications with real triggers; reports on stdin's ``mark`` lines."""
    import asyncio
    import logging

    logging.basicConfig(level=logging.WARNING)
    from airflow_provider_melon.hooks.yarn import AsyncYarnHook
    from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger

    ids = Path(args.ids).read_text().split()
    YarnApplicationTrigger.coalesce_polls = args.mode == "new"

    def out(**kw):
        print(json.dumps(kw), flush=True)

    def rss_mb() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    async def main():
        loop = asyncio.get_running_loop()
        lag = {"max": 0.0}
        done = asyncio.Event()

        async def ticker():
            while True:
                t0 = loop.time()
                await asyncio.sleep(0.05)
                lag["max"] = max(lag["max"], loop.time() - t0 - 0.05)

        async def follow(app_id):
            trig = YarnApplicationTrigger(app_id=app_id, poll_interval=args.interval)
            trig._hook = AsyncYarnHook(rm_urls=[args.rm], user=args.user)
            gen = trig.run()
            try:
                event = await gen.__anext__()
                out(event=app_id, t=time.time(), status=event.payload["status"], state=event.payload["state"])
            finally:
                await gen.aclose()
                await trig.cleanup()

        def on_line(line: str):
            if line.strip() == "mark":
                usage = resource.getrusage(resource.RUSAGE_SELF)
                out(
                    mark=time.time(),
                    cpu=usage.ru_utime + usage.ru_stime,
                    rss_mb=rss_mb(),
                    lag_max_ms=lag["max"] * 1000,
                    threads=threading.active_count(),
                )
                lag["max"] = 0.0
            else:
                done.set()

        def read_stdin():
            for line in sys.stdin:
                loop.call_soon_threadsafe(on_line, line)
            loop.call_soon_threadsafe(done.set)

        tasks = [asyncio.ensure_future(follow(a)) for a in ids] + [asyncio.ensure_future(ticker())]
        threading.Thread(target=read_stdin, daemon=True).start()
        out(ready=len(ids))
        await done.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    return 0


class Child:
    def __init__(self, mode: str, rm: str, user: str, ids: list[str], tmp: Path):
        ids_file = tmp / f"ids-{mode}-{len(ids)}.txt"
        ids_file.write_text("\n".join(ids))
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                "--mode",
                mode,
                "--rm",
                rm,
                "--user",
                user,
                "--ids",
                str(ids_file),
                "--interval",
                str(INTERVAL),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.events: dict[str, dict] = {}
        self.marks: list[dict] = []
        self.ready = threading.Event()
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self._cv:
                if "event" in msg:
                    self.events[msg["event"]] = msg
                elif "mark" in msg:
                    self.marks.append(msg)
                elif "ready" in msg:
                    self.ready.set()
                self._cv.notify_all()

    def mark(self) -> dict:
        with self._cv:
            n = len(self.marks)
            self.proc.stdin.write("mark\n")
            self.proc.stdin.flush()
            self._cv.wait_for(lambda: len(self.marks) > n, timeout=60)
            return self.marks[-1]

    def wait_events(self, ids: list[str], timeout: float) -> None:
        with self._cv:
            self._cv.wait_for(lambda: all(i in self.events for i in ids), timeout=timeout)

    def stop(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------------------------------------ the parent


def context(app_id: str, memory: int, tag: str) -> dict:
    return {
        "application-id": app_id,
        "application-name": "bench-triggers",
        "application-type": "MELON",
        "queue": "default",
        "max-app-attempts": 1,
        "application-tags": {"tag": ["melon", tag]},
        "am-container-spec": {"commands": {"command": "sleep 3600"}},
        "resource": {"memory": memory, "vCores": 1},
    }


def running_spec():
    from airflow_provider_melon.spec import JobSpec

    return JobSpec.from_dict(
        {
            "name": "bench-triggers-running",
            "framework": "generic",
            "entrypoint": "sleep 3600",
            "roles": {"worker": {"instances": 1, "memory": "256m", "vcores": 1}},
        }
    )


def submit(hook, memory: int, tag: str) -> str:
    app_id = hook.new_application()["application-id"]
    return hook.submit_application(context(app_id, memory, tag))


def wait_states(hook, tag: str, want: str, count: int, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        apps = hook.find_applications([tag])
        if sum(a["state"] == want for a in apps) >= count or time.monotonic() > deadline:
            return apps
        time.sleep(1)


def parent(args) -> int:
    import logging

    from airflow_provider_melon.cli import melon_hook_for_cluster
    from airflow_provider_melon.dev import minicluster as mc
    from airflow_provider_melon.hooks.yarn import YarnHook
    from tests.counting_proxy import CountingProxy

    counts = [int(c) for c in args.counts.split(",")]
    need_pending = max(counts) - RUNNING_APPS + KILLS * len(counts) * 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-triggers-"))
    work_dir = Path(args.work_dir) if args.work_dir else tmp / "mc"
    port_base = int(os.environ.get("MELON_TEST_PORT_BASE", "29000"))
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    logging.getLogger("airflow_provider_melon").setLevel(logging.WARNING)
    t_start = time.monotonic()
    details = mc.start(work_dir, port_base=port_base, nodemanagers=1, nm_memory_mb=4096, gpus=1)
    try:
        hook = YarnHook(rm_urls=[details.rm_web_url], user=details.user, backoff=0.5)
        tag = f"bench-triggers-{uuid.uuid4().hex[:8]}"
        melon = melon_hook_for_cluster(work_dir)
        running = [melon.submit(running_spec(), tags=[tag])["app_id"] for _ in range(RUNNING_APPS)]
        wait_states(hook, tag, "RUNNING", RUNNING_APPS, 180)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            pending = list(pool.map(lambda _: submit(hook, PENDING_AM_MB, tag), range(need_pending)))
        time.sleep(5)
        apps = {a["id"]: a for a in wait_states(hook, tag, "ACCEPTED", need_pending, 60)}
        states = sorted({apps[a]["state"] for a in pending if a in apps})
        n_running = sum(apps[a]["state"] == "RUNNING" for a in running)
        say(
            f"bench_triggers: mini cluster (1 NM, 4096 MiB, AM share 0.5), {n_running} RUNNING MeLoN jobs (AM 512 "
            f"MiB + one sleep task) + {len(pending)} apps kept ACCEPTED by the AM share ({PENDING_AM_MB} MiB AMs; "
            f"states seen: {', '.join(states)}); submitted in {time.monotonic() - t_start:.0f} s"
        )
        say(
            f"one child process per run running N YarnApplicationTrigger.run() coroutines (real AsyncYarnHook, "
            f"RM via a counting loopback proxy), poll interval {INTERVAL:g} s; window {args.window:g} s; "
            f"{KILLS} ACCEPTED apps killed per run for the end -> event delay"
        )
        say("old = per-trigger GET /apps/{id} (coalesce_polls=False); new = shared poller (one tagged list/cycle)")
        say()
        say(
            f"{'N':>4} {'mode':4} {'req/s':>7} {'list/s':>7} {'app/s':>7} {'other/s':>7} {'CPU %':>6} "
            f"{'RSS MB':>7} {'lag ms':>7} {'delay med s':>11} {'delay max s':>11} {'events':>6}"
        )
        results: dict[tuple[int, str], dict] = {}
        with CountingProxy(details.rm_web_url) as proxy:
            for n in counts:
                for mode in ("old", "new"):
                    ids = running + pending[: n - RUNNING_APPS]
                    child_proc = Child(mode, proxy.url, details.user, ids, tmp)
                    try:
                        child_proc.ready.wait(120)
                        time.sleep(2 * INTERVAL + 2)
                        c0, m0 = proxy.snapshot(), child_proc.mark()
                        time.sleep(args.window)
                        c1, m1 = proxy.snapshot(), child_proc.mark()
                        span = m1["mark"] - m0["mark"]
                        rate = {k: (c1[k] - c0[k]) / span for k in ("list", "app", "other")}
                        victims = pending[: n - RUNNING_APPS][:: max(1, (n - RUNNING_APPS) // KILLS)][:KILLS]
                        for app_id in victims:
                            hook.kill_application(app_id)
                        child_proc.wait_events(victims, 6 * INTERVAL)
                        delays = []
                        for app_id in victims:
                            ended = hook.get_application(app_id)
                            event = child_proc.events.get(app_id)
                            if event and ended.get("finishedTime"):
                                delays.append(event["t"] - float(ended["finishedTime"]) / 1000.0)
                    finally:
                        child_proc.stop()
                    pending = [a for a in pending if a not in victims]
                    row = {
                        "req_s": sum(rate.values()),
                        **{f"{k}_s": v for k, v in rate.items()},
                        "cpu_pct": 100 * (m1["cpu"] - m0["cpu"]) / span,
                        "rss_mb": m1["rss_mb"],
                        "lag_ms": m1["lag_max_ms"],  # in the window (not the start of 500 triggers)
                        "delay_med": statistics.median(delays) if delays else float("nan"),
                        "delay_max": max(delays) if delays else float("nan"),
                        "events": len(delays),
                    }
                    results[(n, mode)] = row
                    say(
                        f"{n:>4} {mode:4} {row['req_s']:7.2f} {row['list_s']:7.2f} {row['app_s']:7.2f} "
                        f"{row['other_s']:7.2f} {row['cpu_pct']:6.1f} {row['rss_mb']:7.1f} {row['lag_ms']:7.1f} "
                        f"{row['delay_med']:11.2f} {row['delay_max']:11.2f} {row['events']:>3}/{KILLS}"
                    )
        say()
        say(
            "ratios old/new        "
            + "  ".join(
                f"N={n}: req {results[(n, 'old')]['req_s'] / results[(n, 'new')]['req_s']:.1f}x"
                f" cpu {results[(n, 'old')]['cpu_pct'] / max(results[(n, 'new')]['cpu_pct'], 0.01):.1f}x"
                f" rss {results[(n, 'old')]['rss_mb'] / results[(n, 'new')]['rss_mb']:.2f}x"
                for n in counts
            )
        )
        lo, hi = min(counts), max(counts)
        growth = results[(hi, "new")]["req_s"] / results[(lo, "new")]["req_s"]
        delay = results[(hi, "new")]["delay_max"]
        say(
            f"{'PASS' if growth <= 2 else 'FAIL'}: new RM requests/s at N={hi} / at N={lo} = {growth:.2f} (<= 2: "
            f"bounded independent of the count; old: "
            f"{results[(hi, 'old')]['req_s'] / results[(lo, 'old')]['req_s']:.1f})"
        )
        say(
            f"{'PASS' if delay <= 2 * INTERVAL else 'FAIL'}: new end -> event delay at N={hi}: max {delay:.2f} s "
            f"(<= 2 poll intervals = {2 * INTERVAL:g} s)"
        )
        say(f"total {time.monotonic() - t_start:.0f} s")
    finally:
        mc.stop(work_dir)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="10,100,500", help="numbers of triggers (comma-separated)")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of each measurement window")
    parser.add_argument("--work-dir", help="mini cluster folder (default: a temporary one)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "bench_triggers.txt"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("old", "new"), help=argparse.SUPPRESS)
    parser.add_argument("--rm", help=argparse.SUPPRESS)
    parser.add_argument("--user", help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    parser.add_argument("--interval", type=float, default=INTERVAL, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
