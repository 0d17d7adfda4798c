"""Benchmark: the openb trace through Hadoop's real CapacityScheduler at 1,213 nodes, MeLoN's scheduler plug-in beside
YARN's stock placements and ``bench_trace.py``'s Python rules, on the same arrivals.

The scheduler side is ``org.melon.replay.ReplayHarness`` (``appmaster/replay``, built here with Maven's ``replay``
profile; not shipped): Hadoop 3.3.6's ResourceManager in one JVM (its test utilities' ``MockRM``), the trace's nodes
registered as NodeManagers with ``yarn.io/gpu`` and ``melon.io/gpu-memory``, the DominantResourceCalculator, one
application asking for one container per arriving task. Rows:

  * ``heartbeat``  stock placement: the nodes heartbeat in turn, each fills itself;
  * ``multinode``  stock multi-node placement, Hadoop's ``ResourceUsageMultiNodeLookupPolicy`` (least used first);
  * ``melon``      multi-node placement by ``GpuPackingPolicy``, the application asking for ``GpuFitPlacement`` through
                   ``APPLICATION_PLACEMENT_TYPE_CLASS``, as the provider sets it;
  * ``default`` and ``FGD-style``: ``bench_trace.py``'s Python replay of the same arrivals (the node chosen by
                   ``least_fragmenting``, the GPU by the ledger; FGD's rule over its typical kinds).

Arrivals are ``bench_trace.arrival_indices`` (same seeds): tasks drawn from the trace until their GPU request reaches
the cluster's GPUs, no departures. Units in the RM: vcores are thousandths of a core (``cpu_milli``), GPU memory
thousandths of the node's GPU (``gpu_milli``), so a task's share is the same on every GPU model, as in
``bench_trace.py``. The GPU within the node the scheduler granted is chosen by the node's ledger's own code
(``bench_trace.ledger_gpus``: ``policy.place_default`` for a share, ``policy.exclusive_set`` for whole GPUs), in
lockstep with the scheduler: a grant no GPU of the node can hold is the product's exit 75 (the container released, the
host avoided while the task is asked for again, three times at most) and counted as a misfit. A task with
``gpu_spec`` models is asked for as the AM asks for a role's ``gpu_models``: a scheduling request whose placement
constraint names the ``gpu-model`` node attribute (the nodes carry their model from the node list).

Per row: GPUs left unallocated (the share of the cluster's GPUs no task holds when arrivals stop), demand refused,
misfits, the scheduler's throughput (containers granted per CPU-second of the thread that made every scheduler call,
rows measured one after another in this run) and the RM JVM's heap in use after the replay. Verdict, issue 51: MeLoN
leaves no more GPUs unallocated than FGD-style, is within 1 percentage point of ``default``, and costs at most 10 % of
stock (heartbeat) scheduling throughput.

``--copies 1,2,4,8`` replays copies of the node list instead (the cluster twice, four and eight times as large, the
arrivals scaled with it; ``--fill`` of the GPUs asked for) and prints per node count what a heartbeat costs the
scheduler thread and what the policy's sorting costs per pass; ``--sorting-interval-ms`` sets the policy's sorting
interval (0: sorted before each placement; more: on a thread of its own, placements use the last order).

    .venv/bin/python benchmarks/bench_scale.py [--seeds 1,2] [--pods openb_pod_list_gpushare100.csv]
    .venv/bin/python benchmarks/bench_scale.py --copies 1,2,4,8 --fill 0.25 --rules heartbeat,melon --seeds 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks import bench_trace  # noqa: E402
from benchmarks.bench_trace import Cluster, Demand, gpu_request, ledger_gpus  # noqa: E402
from benchmarks.provenance import ran_at  # noqa: E402

REPLAY = os.path.join(REPO, "appmaster", "replay")
RULES = ("heartbeat", "multinode", "melon")
#: the scheduler rows' names in the output
ROW = {"heartbeat": "stock heartbeat", "multinode": "stock multi-node", "melon": "MeLoN"}


def load_nodes(path: str = bench_trace.NODES_CSV) -> List[Tuple[int, int, int, int, str]]:
    """``bench_trace.load_nodes`` with each node's GPU model: ``(cpu_milli, memory_mib, gpus, gpu_mb, model)``."""
    return [(*n, m) for n, m in zip(bench_trace.load_nodes(path), bench_trace.load_models(path))]


def harness_classpath() -> str:
    """Build the harness when missing or older than its sources (``appmaster/build.sh --replay``); its classpath."""
    subprocess.run([os.path.join(REPO, "appmaster", "build.sh"), "--replay"], check=True)
    with open(os.path.join(REPLAY, "target", "classpath.txt")) as fh:
        return os.path.join(REPLAY, "target", "classes") + os.pathsep + fh.read().strip()


class Ledger:
    """The nodes' ledgers for one scheduler row: each grant is answered with the ledger's own choice of GPU."""

    def __init__(self, nodes, seq: Sequence[Demand]):
        self.cl = Cluster([n[:4] for n in nodes], [n[4] for n in nodes])
        self.seq = seq
        self.placed = [False] * len(seq)
        self.misfits = 0

    def grant(self, ti: int, ni: int) -> bool:
        """Task ``ti`` was granted node ``ni``: True when a GPU there holds it (and it is placed), False for exit 75."""
        t = self.seq[ti]
        # a node of another model: the executor's check of its GPU (NVML) exits 75 too
        gi = ledger_gpus(self.cl, ni, t) if self.cl.accepts(ni, t) else None
        if gi is None:
            self.misfits += 1
            return False
        self.cl.place(ni, t, gi)
        self.placed[ti] = True
        return True

    def result(self) -> Dict[str, float]:
        capacity = sum(len(f.gpu_free) for f in self.cl.free)
        asked = sum(gpu_request(t) for t in self.seq)
        refused = sum(gpu_request(t) for t, p in zip(self.seq, self.placed) if not p)
        return {
            "unallocated": sum(sum(f.gpu_free) for f in self.cl.free) / capacity,
            "refused": refused / asked if asked else 0.0,
            "nodes_used": sum(1 for held in self.cl.held if any(held)),
        }


def write_inputs(folder: str, nodes, seq: Sequence[Demand]) -> Tuple[str, str]:
    """The harness's two input files (its class comment gives the format)."""
    npath, apath = os.path.join(folder, "nodes.txt"), os.path.join(folder, "arrivals.txt")
    with open(npath, "w") as fh:
        for i, (cpu, mem, gpus, _, model) in enumerate(nodes):
            fh.write(f"node-{i:05d} {cpu} {mem} {gpus} {gpus * bench_trace.MILLI} {model}\n")
    with open(apath, "w") as fh:
        for t in seq:
            units = int(round(t.share * bench_trace.MILLI)) if t.share else 0
            fh.write(f"{t.cpu} {t.mem} {t.gpus} {units} {','.join(t.models) or '-'}\n")
    return npath, apath


def run_scheduler(classpath: str, rule: str, nodes, seq, *, sorting_ms: int = 0, heap: str = "3g") -> Dict[str, float]:
    """One scheduler row: the harness replays ``seq``, this process answers each grant as the ledger."""
    ledger = Ledger(nodes, seq)
    with tempfile.TemporaryDirectory(prefix="melon-replay-") as folder:
        npath, apath = write_inputs(folder, nodes, seq)
        cmd = [
            "java",
            f"-Xmx{heap}",
            f"-Djava.io.tmpdir={folder}",
            f"-Dhadoop.tmp.dir={folder}",
            "-cp",
            classpath,
            "org.melon.replay.ReplayHarness",
            "--rule",
            rule,
            "--nodes",
            npath,
            "--arrivals",
            apath,
            "--sorting-interval-ms",
            str(sorting_ms),
        ]
        with open(os.path.join(folder, "harness.log"), "w+") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
            assert proc.stdin is not None and proc.stdout is not None
            end: Optional[dict] = None
            for line in proc.stdout:
                if line.startswith("A "):
                    _, ti, ni = line.split()
                    proc.stdin.write("OK\n" if ledger.grant(int(ti), int(ni)) else "NO\n")
                    proc.stdin.flush()
                elif line.startswith("END "):
                    end = json.loads(line[4:])
            rc = proc.wait()
            if rc != 0 or end is None:
                log.seek(0)
                raise RuntimeError(f"the replay harness ({rule}) failed, exit {rc}:\n{log.read()[-4000:]}")
    if end["misfits"] != ledger.misfits:
        raise RuntimeError(f"{rule}: the harness counted {end['misfits']} misfits, the ledger {ledger.misfits}")
    out = dict(end)
    out.update(ledger.result())
    out["per_cpu_s"] = end["grants"] / end["scheduler_cpu_s"] if end["scheduler_cpu_s"] else 0.0
    return out


def run_python(nodes, seq: Sequence[Demand], rule) -> Dict[str, float]:
    """One of ``bench_trace.py``'s rows on the same arrivals (placements per CPU-second of this process)."""
    start = time.process_time()
    res = bench_trace.replay([n[:4] for n in nodes], list(seq), rule, [n[4] for n in nodes])
    res["per_cpu_s"] = len(seq) / max(time.process_time() - start, 1e-9)
    return res


def mean(rows: List[Dict[str, float]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--pods", default=bench_trace.PODS_CSV, help="a pod list (a path, or a file in benchmarks/data)")
    ap.add_argument("--nodes", type=int, default=0, help="only the first N GPU nodes (0: all)")
    ap.add_argument("--rules", default=",".join(RULES) + ",python")
    ap.add_argument("--fill", type=float, default=1.0, help="arrivals until this share of the GPUs is asked for")
    ap.add_argument("--sorting-interval-ms", type=int, default=0)
    ap.add_argument("--copies", default="", help="node-list copies per cluster size, e.g. 1,2,4,8: the scaling curve")
    ap.add_argument("--heap", default="3g")
    args = ap.parse_args(argv)
    pods = args.pods if os.path.exists(args.pods) else os.path.join(bench_trace.DATA, args.pods)
    print(f"# {ran_at()}")
    t0 = time.monotonic()
    nodes = load_nodes()
    if args.nodes:
        nodes = nodes[: args.nodes]
    tasks = bench_trace.load_tasks(pods)
    capacity = sum(n[2] for n in nodes)
    rules = [r for r in args.rules.split(",") if r]
    seeds = [int(s) for s in args.seeds.split(",")]
    print(
        f"bench_scale: {len(nodes)} GPU nodes, {capacity} GPUs; {os.path.basename(pods)}: {len(tasks)} tasks "
        f"({sum(1 for t in tasks if t.models)} with gpu_spec); arrivals as bench_trace.py until {args.fill:.0%} of the GPUs "
        f"are asked for, seeds {args.seeds}; the real "
        f"CapacityScheduler (Hadoop 3.3.6, DominantResourceCalculator), sorting interval {args.sorting_interval_ms} ms"
    )
    classpath = harness_classpath() if any(r in RULES for r in rules) else ""
    if args.copies:
        scaling(classpath, nodes, tasks, rules, seeds, args)
        print(f"whole benchmark: {time.monotonic() - t0:.0f} s")
        return 0
    all_kinds, typical = bench_trace.kinds(tasks), bench_trace.kinds(tasks, 0.95)
    rows: Dict[str, List[Dict[str, float]]] = {}
    for seed in seeds:
        seq = bench_trace.arrivals(tasks, capacity * args.fill, seed)
        for rule in rules:
            if rule == "python":
                for name, mk in (
                    ("default", lambda: bench_trace.make_default_rule(all_kinds)),
                    ("FGD-style", lambda: bench_trace.make_frag_rule(typical, True)),
                ):
                    rows.setdefault(name, []).append(run_python(nodes, seq, mk()))
                continue
            res = run_scheduler(classpath, rule, nodes, seq, sorting_ms=args.sorting_interval_ms, heap=args.heap)
            rows.setdefault(ROW[rule], []).append(res)
        print(
            f"  seed {seed}: {len(seq)} arrivals, "
            + ", ".join(f"{name} {rs[-1]['unallocated']:.2%}" for name, rs in rows.items())
        )
    print(
        f"\n{'row':<18}{'unallocated':>12}{'refused':>9}{'misfits':>9}{'granted/CPU-s':>15}{'heartbeats':>12}"
        f"{'sort ms/pass':>14}{'RM heap MiB':>13}"
    )
    for name, rs in rows.items():
        sched = "grants" in rs[0]

        def col(key: str, rs=rs, sched=sched) -> str:
            return f"{mean(rs, key):.0f}" if sched else "-"

        passes = sum(r.get("SortPasses", 0) for r in rs)
        sort = f"{sum(r['SortNanos'] for r in rs) / passes / 1e6:.2f}" if sched and passes else "-"
        print(
            f"{name:<18}{mean(rs, 'unallocated'):>11.2%}{mean(rs, 'refused'):>9.2%}{col('misfits'):>9}"
            f"{mean(rs, 'per_cpu_s'):>15.0f}{col('heartbeats'):>12}{sort:>14}{col('heap_mib'):>13}"
        )
    print()
    for name, rs in rows.items():
        unit = "containers/s (per CPU-second of the scheduler thread)" if "grants" in rs[0] else "placements/s (Python)"
        print(
            f"SCALE {name}: unallocated {mean(rs, 'unallocated') * 100:.2f} %, refused "
            f"{mean(rs, 'refused') * 100:.2f} %, {mean(rs, 'per_cpu_s'):.0f} {unit}"
        )
    verdict(rows)
    print(f"whole benchmark: {time.monotonic() - t0:.0f} s")
    return 0


def scaling(classpath: str, nodes, tasks, rules: List[str], seeds: List[int], args) -> None:
    """The scheduler rows on copies of the node list: cost per heartbeat and per sorting pass, by cluster size."""
    print(
        f"\n{'row':<18}{'nodes':>7}{'arrivals':>9}{'unallocated':>12}{'µs/heartbeat':>14}{'granted/CPU-s':>15}"
        f"{'sort µs/pass':>14}{'sort passes':>13}{'RM heap MiB':>13}"
    )
    for copies in (int(c) for c in args.copies.split(",")):
        cluster = nodes * copies
        capacity = sum(n[2] for n in cluster)
        for seed in seeds:
            seq = bench_trace.arrivals(tasks, capacity * args.fill, seed)
            for rule in (r for r in rules if r in RULES):
                r = run_scheduler(classpath, rule, cluster, seq, sorting_ms=args.sorting_interval_ms, heap=args.heap)
                passes = r.get("SortPasses", 0)
                sort = f"{r['SortNanos'] / passes / 1e3:.0f}" if passes else "-"
                print(
                    f"{ROW[rule]:<18}{len(cluster):>7}{len(seq):>9}{r['unallocated']:>11.2%}"
                    f"{r['scheduler_cpu_s'] / r['heartbeats'] * 1e6:>14.0f}{r['per_cpu_s']:>15.0f}{sort:>14}"
                    f"{passes or '-':>13}{r['heap_mib']:>13.0f}",
                    flush=True,
                )


def verdict(rows: Dict[str, List[Dict[str, float]]]) -> None:
    """Issue 51's three goals for MeLoN's row, where the rows they compare were run."""
    if "MeLoN" not in rows:
        return
    m = mean(rows["MeLoN"], "unallocated")
    checks = []
    if "FGD-style" in rows:
        f = mean(rows["FGD-style"], "unallocated")
        checks.append((m <= f + 1e-12, f"unallocated {m:.2%} <= FGD-style {f:.2%}"))
    if "default" in rows:
        d = mean(rows["default"], "unallocated")
        checks.append((abs(m - d) <= 0.01, f"within 1 pp of Python default {d:.2%} ({(m - d) * 100:+.2f} pp)"))
    tm = mean(rows["MeLoN"], "per_cpu_s")
    if "stock heartbeat" in rows:
        th = mean(rows["stock heartbeat"], "per_cpu_s")
        checks.append(
            (tm >= 0.9 * th, f"throughput {tm:.0f}/s >= 90 % of stock heartbeat {th:.0f}/s ({tm / th:.0%} of it)")
        )
    for ok, text in checks:
        print(f"{'PASS' if ok else 'FAIL'}: MeLoN {text}")
    if "stock multi-node" in rows:
        tn = mean(rows["stock multi-node"], "per_cpu_s")
        print(
            f"note: against stock multi-node placement (ResourceUsageMultiNodeLookupPolicy, the same candidate pass over "
            f"all nodes per heartbeat) MeLoN's throughput is {tm / tn:.0%} of it ({tm:.0f} vs {tn:.0f}/s)"
        )


if __name__ == "__main__":
    raise SystemExit(main())
