"""The trace replay through the real CapacityScheduler (``benchmarks/bench_scale.py``, ``appmaster/replay``), small:
the first 40 of the openb trace's nodes, arrivals up to a third of their GPUs. A test of the harness and of what the
scheduler plug-in does inside YARN's own scheduler, not of the benchmark's figures."""

from __future__ import annotations

import shutil

import pytest

from benchmarks import bench_scale, bench_trace
from benchmarks.bench_trace import Demand

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (the ResourceManager runs in one)")

NODES = 40
FILL = 1 / 3


@pytest.fixture(scope="module")
def replayed():
    """One seed's arrivals through MeLoN's plug-in and through stock multi-node placement."""
    nodes = bench_scale.load_nodes()[:NODES]
    tasks = bench_trace.load_tasks()
    seq = bench_trace.arrivals(tasks, sum(n[2] for n in nodes) * FILL, seed=1)
    classpath = bench_scale.harness_classpath()
    return seq, {rule: bench_scale.run_scheduler(classpath, rule, nodes, seq) for rule in ("melon", "multinode")}


def test_melon_packs_where_stock_multi_node_placement_spreads(replayed):
    seq, rows = replayed
    melon, stock = rows["melon"], rows["multinode"]
    # Hadoop's ResourceUsageMultiNodeLookupPolicy puts the least used node first: a third of the GPUs asked for touch
    # more nodes than MeLoN's best fit, which fills node by node
    assert melon["nodes_used"] < stock["nodes_used"], (melon, stock)
    assert melon["placed"] == len(seq) and melon["refused"] == 0


def test_every_grant_is_answered_by_the_ledger_and_only_stock_placement_misfits(replayed):
    seq, rows = replayed
    melon, stock = rows["melon"], rows["multinode"]
    # GpuFitPlacement offers a share only to a node one of whose GPUs holds it, by the ledger's own rule: the ledger
    # takes every grant. YARN alone sees one sum of GPU memory per node, grants where no GPU holds the task, and the
    # ledger refuses (exit 75: released and asked for again elsewhere).
    assert melon["misfits"] == 0 and melon["grants"] == melon["placed"]
    assert melon["FitRefusals"] > 0  # the check did turn nodes away
    assert stock["misfits"] > 0
    assert stock["grants"] == stock["placed"] + stock["misfits"]
    assert stock["heartbeats"] >= stock["grants"]


def test_the_ledger_refuses_a_grant_no_gpu_of_the_node_holds():
    # a node with two GPUs, 0.6 of one held: a 0.5 share fits the other one, a whole GPU does not fit at all once the
    # second is shared too; a task for another GPU model is refused however free the node is
    nodes = [(64000, 262144, 2, 16384, "P100")]
    share, whole = Demand(1.0, 1000, 1024, 0, 0.6), Demand(1.0, 1000, 1024, 2, 0.0)
    seq = [share, Demand(1.0, 1000, 1024, 0, 0.5), whole, share._replace(models=("T4",))]
    ledger = bench_scale.Ledger(nodes, seq)
    assert ledger.grant(0, 0) and ledger.grant(1, 0)
    assert ledger.cl.held[0] == [[0.6], [0.5]]  # place_default's choice: the 0.5 share on the other GPU
    assert not ledger.grant(2, 0)
    assert not ledger.grant(3, 0)
    assert ledger.misfits == 2
    res = ledger.result()
    assert res["nodes_used"] == 1 and res["unallocated"] == pytest.approx(0.45)
