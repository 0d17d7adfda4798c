"""The node's GPUs as the RM knows them (gpu/node_view.py): the ledger's own rule applied to the containers, and the
shared cases the Java scheduler plug-in is checked against (its NodeViewTest reads the same file)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import List

from airflow_provider_melon.gpu import node_view, policy
from airflow_provider_melon.gpu.node_view import Held

CASES_PATH = Path(__file__).resolve().parents[1] / "data" / "node_view_cases.json"
WRITE = "python -m tests.unit.test_node_view --write"


def cases(seed: int = 51, count: int = 300) -> List[dict]:
    """Random nodes and container sequences, with the answers of :func:`node_view.estimate` and
    :func:`node_view.holds`."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.choice([0, 1, 2, 4, 8])
        per = rng.choice([1000, 15360, 16384, 24576, 81559])
        node_mb = n * per if n else rng.choice([0, per])  # memory and no count: one GPU
        held: List[Held] = []
        for _ in range(rng.randint(0, 3 * max(1, n))):
            r = rng.random()
            if r < 0.15:
                held.append(Held(rng.choice([1, 1, 2, 4]), 0))
            elif r < 0.25:
                held.append(Held(0, 0))
            else:
                share = rng.choice([0.05, 0.1, 0.25, 0.3, 0.47, 0.5, 0.65, 0.81, 1.0])
                held.append(Held(0, max(1, int(per * share))))
        free = node_view.estimate(n, node_mb, held)
        each = node_view.gpu_memory_per_gpu(n, node_mb)
        asks = [
            {"gpus": g, "gpu_mb": m, "holds": node_view.holds(free, each, g, m)}
            for g, m in [(0, 0), (1, 0), (2, 0), (0, per // 4), (0, per // 2), (0, int(per * 0.81)), (0, per)]
        ]
        out.append({"gpus": n, "gpu_mb": node_mb, "containers": [list(h) for h in held], "free": free, "asks": asks})
    return out


def cases_text() -> str:
    return json.dumps({"generated_by": WRITE, "cases": cases()}) + "\n"


def test_the_committed_cases_are_what_python_answers():
    assert CASES_PATH.read_text() == cases_text(), f"tests/data/node_view_cases.json is stale: {WRITE}"


def test_the_committed_rule_is_the_anchors():
    assert node_view.RULE_PATH.read_text() == node_view.rule_text(), (
        "airflow_provider_melon/rm/ledger-rule.json is stale: python -m airflow_provider_melon.gpu.node_view --write"
    )


def test_the_cases_cover_every_answer():
    """Every branch the Java side must match is exercised: whole GPUs, shares the ledger spreads and stacks, a
    container no GPU holds any more, nodes with no GPU count, and asks both held and refused."""
    cs = cases()
    answers = [a["holds"] for c in cs for a in c["asks"] if a["gpus"] or a["gpu_mb"]]
    assert True in answers and False in answers
    assert any(c["gpus"] == 0 and c["gpu_mb"] > 0 for c in cs)
    assert any(h[0] > 0 for c in cs for h in c["containers"])
    assert any(sum(h[1] for h in c["containers"]) > c["gpu_mb"] > 0 for c in cs)  # more than the node holds


def test_shares_go_where_the_ledger_puts_them():
    """Two half-GPU tasks on a 2-GPU node: the ledger spreads them (each GPU keeps room for another half), so the
    RM's view has no idle GPU left for a whole-GPU task, though the node's sum of free memory is a whole GPU."""
    free = node_view.estimate(2, 2 * 16384, [Held(0, 8192), Held(0, 8192)])
    assert sorted(free) == [8192, 8192]
    assert not node_view.holds(free, 16384, 1, 0)
    assert not node_view.holds(free, 16384, 0, 12000)
    assert node_view.holds(free, 16384, 0, 8192)


def test_whole_gpus_take_the_lowest_idle_ones():
    free = node_view.estimate(4, 4 * 1000, [Held(0, 300), Held(2, 0)])
    assert free[0] == 700 and free[1:3] == [0, 0] and free[3] == 1000


def test_a_node_without_gpus_holds_only_asks_without_gpus():
    assert node_view.estimate(0, 0, [Held(0, 0)]) == []
    assert node_view.holds([], 0, 0, 0)
    assert not node_view.holds([], 0, 1, 0) and not node_view.holds([], 0, 0, 1)


def test_the_gains_are_the_anchors_marginal_gains():
    gains = node_view.small_task_gains()
    assert gains[0] == 1.0  # an idle GPU gains a whole job
    assert gains[1] == policy.marginal_gain(policy.ANCHOR_RATES, 0, 1, False)
    assert abs(gains[20]) < 1e-9  # the anchor's curve is flat from 8 tasks on


if __name__ == "__main__":  # python -m tests.unit.test_node_view --write
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {WRITE}")
    CASES_PATH.write_text(cases_text())
    print(f"wrote {CASES_PATH}")
