"""A synthetic training job for ``bench_sim_vs_system.py``: the entrypoint each YARN container runs.

It does ``work_s`` seconds of solo work in steps of ``step_s`` solo seconds. Each step lasts
``step_s / rate`` wall seconds, where ``rate`` is :class:`benchmarks.simulator.SpeedModel`'s rate for the job's
kind given its *current* companions on its GPU, read from the node's ledger (``gpu.ledger.Ledger.entries``):
the ledger the executor reserved the GPU in, ``$MELON_LEDGER_DIR`` (``{nm}`` expanded), and the GPU it was
given, ``$MELON_GPU``. So the real run slows down and speeds up as the simulator says it should, and what is
left to compare is placement, queueing and launch overhead.

Steps are scheduled back to back on absolute deadlines (the next step starts when the previous one was due to
end, not when the ledger read returned), so the ledger reads do not add up to extra time.

It writes one JSON file (``--out``): wall-clock times of the first step and of the end, its GPU, and the
companions ``(n_large, n_small)`` seen at each change.

Usage (inside a container): ``python sim_job.py --repo R --data D --name s001 --kind small --work 40 --out F``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Iterable, Mapping, Optional, Tuple


def companions(entries: Iterable[Mapping], gpu: int) -> Tuple[int, int]:
    """``(n_large, n_small)`` of the ledger reservations on GPU ``gpu`` (the job's own included)."""
    n_large = n_small = 0
    for r in entries:
        if int(r["gpu"]) != gpu:
            continue
        if r.get("large"):
            n_large += 1
        else:
            n_small += 1
    return n_large, n_small


def step_seconds(model, kind: str, n_large: int, n_small: int, step_s: float) -> float:
    """Wall seconds one step of ``step_s`` solo seconds takes for a ``kind`` job on a GPU holding
    ``n_large`` large and ``n_small`` small jobs (the job itself counted): ``step_s / rate`` with ``rate``
    from ``model.rates`` -- the simulator's speed model, the same function its event loop uses.
    A GPU the ledger does not show the job on (``n`` of its kind is 0) counts the job as alone there."""
    if kind == "large":
        n_large = max(1, n_large)
    else:
        n_small = max(1, n_small)
    lr, sr = model.rates(n_large, n_small)
    rate = lr if kind == "large" else sr
    if rate <= 0:
        raise ValueError(f"rate {rate} for {kind} with {n_large} large + {n_small} small")
    return step_s / rate


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--kind", choices=("small", "large"), required=True)
    ap.add_argument("--work", type=float, required=True, help="solo seconds of work")
    ap.add_argument("--step", type=float, default=0.5, help="solo seconds per step")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    sys.path.insert(0, args.repo)
    from airflow_provider_melon.gpu.ledger import Ledger, default_dir
    from benchmarks.simulator import SpeedModel

    model = SpeedModel.from_data(args.data)
    ledger = Ledger(default_dir())
    gpu = int(os.environ["MELON_GPU"])
    t_first = time.time()
    due = time.monotonic()
    done, steps, seen = 0.0, 0, []
    while done < args.work - 1e-9:
        work = min(args.step, args.work - done)
        nl, ns = companions(ledger.entries(), gpu)
        if not seen or seen[-1][1:] != [nl, ns]:
            seen.append([round(time.time() - t_first, 2), nl, ns])
        due += step_seconds(model, args.kind, nl, ns, work)
        left = due - time.monotonic()
        if left > 0:
            time.sleep(left)
        done += work
        steps += 1
    t_end = time.time()
    body = {
        "name": args.name,
        "kind": args.kind,
        "work_s": args.work,
        "gpu": gpu,
        "steps": steps,
        "first_step": t_first,
        "end": t_end,
        "companions": seen,
        "pid": os.getpid(),
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(body, fh)
    os.replace(tmp, args.out)
    print(f"SIMJOB {args.name} gpu {gpu} {steps} steps in {t_end - t_first:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
