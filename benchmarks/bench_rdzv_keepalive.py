"""False member losses of torchrun's c10d rendezvous under CPU load, per keep-alive setting (docs/elastic.md).

Three real torchrun agents (``--nnodes=2:3``, as MeLoN starts an elastic role's agents: the rendezvous store served
beside them by ``framework.RDZV_STORE_SCRIPT``, every agent ``is_host=0``) each run one worker that trains on CPU
(matrix products, one thread) for ``--duration`` seconds; ``--load`` busy processes run beside them. Nobody is lost,
so every time a member's last keep-alive in the rendezvous state is older than interval x attempts (torch's
``_sanitize`` removes such a member at the next sync of any agent), every member removed from the participants and
every worker started again is a false loss. The state is read from the store itself, as the agents read it (every
0.25 s: ``torch.rendezvous.<run id>``). Each keep-alive setting (``--settings``, interval x attempts) runs in turn, on
the same load. The first line says where the figures come from (:mod:`provenance`).

    .venv/bin/python benchmarks/bench_rdzv_keepalive.py --settings 1x3,2x3 --duration 120 --load 6
"""

from __future__ import annotations

import argparse
import base64
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_provider_melon.runtime import framework, ports  # noqa: E402
from benchmarks.provenance import ran_at  # noqa: E402

WORKER = """\
import os, sys, time
import torch
torch.set_num_threads(1)
out, duration = sys.argv[1], float(sys.argv[2])
with open(os.path.join(out, "starts"), "a") as f:
    f.write(os.environ["TORCHELASTIC_RESTART_COUNT"] + "\\n")
end = time.monotonic() + duration
a = torch.randn(256, 256)
while time.monotonic() < end:
    a = torch.tanh(a @ a.T / 256)
"""


class Watch(threading.Thread):
    """Reads the rendezvous state from the store every 0.25 s: each member's keep-alive age, the participants; while
    the group is formed and every agent runs (``running``), as a loss would count."""

    def __init__(self, port: int, run_id: str, expiry_s: float, running):
        super().__init__(daemon=True)
        self.running = running
        self.port, self.key, self.expiry_s = port, f"torch.rendezvous.{run_id}", expiry_s
        self.stop = threading.Event()
        self.max_age_s = 0.0
        self.lapses = 0  # a member's keep-alive older than the expiry (counted once per episode)
        self.removed = 0  # members that left the participants
        self.rounds: set[int] = set()
        self.errors: list[str] = []  # reads that failed (the store busy): said in the row, never silent

    def run(self) -> None:
        import datetime
        from datetime import timezone

        from torch.distributed import TCPStore

        late: set = set()
        before: set = set()
        store = None
        while not self.stop.wait(0.25):
            try:
                if store is None:
                    store = TCPStore("127.0.0.1", self.port, is_master=False, timeout=datetime.timedelta(seconds=30))
                if not store.check([self.key]):
                    continue
                state = pickle.loads(base64.b64decode(store.get(self.key)))
            except Exception as exc:  # noqa: BLE001 - counted and shown
                self.errors.append(repr(exc)[:120])
                store = None
                continue
            if not self.running() or not state.complete:
                continue
            now = datetime.datetime.now(timezone.utc)
            for node, beat in state.last_heartbeats.items():
                age = (now - beat).total_seconds()
                self.max_age_s = max(self.max_age_s, age)
                if age > self.expiry_s and node not in late:
                    late.add(node)
                    self.lapses += 1
                elif age <= self.expiry_s:
                    late.discard(node)
            now_in = set(state.participants)
            self.removed += len(before - now_in)
            before = now_in
            self.rounds.add(state.round)


def free_port() -> int:
    sock = ports.reserve("127.0.0.1", None)
    port = sock.getsockname()[1]
    sock.close()
    return port


def run_setting(interval: float, attempts: int, duration: float, agents: int, work: Path) -> dict:
    work.mkdir(parents=True)
    (work / "train.py").write_text(WORKER)
    port = free_port()
    env = {**os.environ, "MELON_RDZV_HOST": "127.0.0.1", "MELON_RDZV_PORT": str(port)}
    store = subprocess.Popen(
        ["bash", "-c", framework.rendezvous_store_command(sys.executable)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert store.stdout is not None
    line = store.stdout.readline()
    if not line.startswith(framework.RDZV_STORE_READY):
        raise SystemExit(f"the rendezvous store did not start: {line!r}")
    conf = f"is_host=0,last_call_timeout=5,keep_alive_interval={interval:g},keep_alive_max_attempt={attempts}"
    procs = []
    watch = Watch(
        port, f"bench-{interval:g}x{attempts}", interval * attempts, lambda: all(p.poll() is None for p, _ in procs)
    )
    for i in range(agents):
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes=2:{agents}",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id=bench-{interval:g}x{attempts}",
            f"--rdzv-conf={conf}",
            "--local-addr=127.0.0.1",
            f"--max-restarts={agents}",
            str(work / "train.py"),
            str(work),
            str(duration),
        ]
        log = open(work / f"agent{i}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(
            (subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True), log)
        )
    watch.start()
    started = time.monotonic()
    rcs = []
    for proc, log in procs:
        try:
            rcs.append(proc.wait(timeout=duration * 3 + 120))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rcs.append(proc.wait())
        log.close()
    elapsed = time.monotonic() - started
    watch.stop.set()
    watch.join(timeout=10)
    store.stdin.close()  # type: ignore[union-attr]
    store.wait(timeout=30)
    starts = (work / "starts").read_text().split() if (work / "starts").exists() else []
    return {
        "setting": f"{interval:g} s x {attempts}",
        "keep-alives late past expiry": watch.lapses,
        "members removed": watch.removed,
        "oldest keep-alive seen s": round(watch.max_age_s, 2),
        "rounds": len(watch.rounds),
        "state reads failed": len(watch.errors),
        "worker starts (3 = none again)": len(starts),
        "agents exited": ",".join(map(str, rcs)),
        "elapsed s": round(elapsed, 1),
        "a real loss detected after": f"{interval * attempts:g}-{interval * (attempts + 1):g} s",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--settings", default="1x3,2x3", help="keep-alive settings, interval x attempts, comma-separated"
    )
    parser.add_argument("--duration", type=float, default=120, help="seconds each worker trains")
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--load", type=int, default=6, help="busy processes beside the agents")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each setting (interleaved)")
    args = parser.parse_args()
    print(f"# {' '.join([Path(sys.executable).name, *sys.argv])}; {ran_at()}; load average {os.getloadavg()}")
    load = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(args.load)
    ]
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="melon-bench-keepalive-") as tmp:
            for r in range(args.rounds):
                for setting in args.settings.split(","):
                    interval, attempts = setting.split("x")
                    row = run_setting(
                        float(interval), int(attempts), args.duration, args.agents, Path(tmp) / f"{r}-{setting}"
                    )
                    row["load average (1 min)"] = round(os.getloadavg()[0], 1)
                    print(row, flush=True)
                    rows.append(row)
    finally:
        for p in load:
            p.kill()
            p.wait()
    keys = list(rows[0])
    print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
