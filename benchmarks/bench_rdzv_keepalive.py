"""False member losses of torchrun's c10d rendezvous under CPU load, per keep-alive setting (docs/elastic.md).

Three real torchrun agents (``--nnodes=2:3``, as MeLoN starts an elastic role's agents: the rendezvous store served
beside them by ``framework.RDZV_STORE_SCRIPT``, every agent ``is_host=0``) each run one worker that trains on CPU
(matrix products, one thread) for ``--duration`` seconds; ``--load`` busy processes run beside them. Nobody is lost,
so every member torch finds dead (``Detected dead node``: its keep-alive is older than interval x attempts) and every
worker started again is a false loss. Each keep-alive setting (``--settings``, interval x attempts) runs in turn, on
the same load. The first line says where the figures come from (:mod:`provenance`).

    .venv/bin/python benchmarks/bench_rdzv_keepalive.py --settings 1x3,2x3 --duration 120 --load 6
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
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
DEAD = re.compile(r"Detected dead node '([^']+)'")


def free_port() -> int:
    sock = ports.reserve("127.0.0.1", None)
    port = sock.getsockname()[1]
    sock.close()
    return port


def run_setting(interval: float, attempts: int, duration: float, agents: int, work: Path) -> dict:
    work.mkdir(parents=True)
    (work / "train.py").write_text(WORKER)
    port = free_port()
    env = {**os.environ, "MELON_RDZV_HOST": "127.0.0.1", "MELON_RDZV_PORT": str(port), "LOGLEVEL": "DEBUG"}
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
    store.stdin.close()  # type: ignore[union-attr]
    store.wait(timeout=30)
    text = "".join((work / f"agent{i}.log").read_text(errors="replace") for i in range(agents))
    dead = DEAD.findall(text)
    beats = text.count("updated its keep-alive heartbeat")  # torch's debug log is on: the count above can be seen
    starts = (work / "starts").read_text().split() if (work / "starts").exists() else []
    return {
        "setting": f"{interval:g} s x {attempts}",
        "declared dead (log lines)": len(dead),
        "distinct nodes declared dead": len(set(dead)),
        "worker starts (3 = none again)": len(starts),
        "keep-alives logged": beats,
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
