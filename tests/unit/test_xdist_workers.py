"""`make test`'s two pytest-xdist workers (tests/conftest.py): each has its own ports, and a module runs on one
worker. Real pytest runs with the suite's conftest loaded as a plugin, on probe modules in a temp dir."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import PORT_BASES, xdist_group

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json, time
from pathlib import Path
from tests.conftest import port_base

def test_{name}(worker_id):
    time.sleep(1)  # long enough for the other worker to take the other module
    ports = {{var: port_base(var) for var in {vars!r}}}
    Path({out!r}).write_text(json.dumps({{"worker": worker_id, "ports": ports}}))
"""


#: how far past its base a family's ports go: the session cluster's base + 8500 (test_minicluster_live), else a
#: cluster or two on base .. base + 188
REACH = {var: 8589 if var == "MELON_TEST_PORT_BASE" else 189 for var in PORT_BASES}


def _pytest(*args: str) -> subprocess.CompletedProcess:
    # none of the bases set: the defaults (this suite's own worker, if any, has them set and shifted)
    env = {k: v for k, v in os.environ.items() if k not in PORT_BASES and not k.startswith("PYTEST_XDIST")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def test_two_workers_take_ports_9000_apart_and_no_port_twice(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"test_probe_{name}.py").write_text(
            PROBE.format(name=name, vars=sorted(PORT_BASES), out=str(tmp_path / f"{name}.json"))
        )
    result = _pytest("-p", "tests.conftest", "-n", "2", "--dist", "loadgroup", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    seen = {s["worker"]: s["ports"] for s in (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")}
    assert set(seen) == {"gw0", "gw1"}, seen
    assert seen["gw0"] == PORT_BASES  # the defaults
    assert all(seen["gw1"][var] == base - 9000 for var, base in PORT_BASES.items()), seen
    span = {w: set().union(*(range(b, b + REACH[var]) for var, b in ports.items())) for w, ports in seen.items()}
    assert not span["gw0"] & span["gw1"]
    assert 1024 <= min(span["gw1"]) and max(span["gw0"]) < 32768  # no privileged port, none of the kernel's ephemeral


def test_a_module_runs_on_one_worker_and_the_airflow_modules_share_one():
    result = _pytest("-n", "2", "--dist", "loadgroup", "-v", "tests/unit/test_spec.py", "tests/unit/test_planner.py")
    assert result.returncode == 0, result.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    for worker, module in re.findall(r"\[(gw\d)\] .*? (tests/unit/\w+\.py)::", result.stdout):
        workers.setdefault(module, set()).add(worker)
    assert set(workers) == {"tests/unit/test_spec.py", "tests/unit/test_planner.py"}, result.stdout[-2000:]
    assert all(len(w) == 1 for w in workers.values()), workers
    assert xdist_group("tests/e2e/test_ui_plugin.py") == xdist_group("tests/faults/test_triggerer_fault.py")
    assert xdist_group("tests/unit/test_spec.py") != xdist_group("tests/unit/test_planner.py")


def test_more_workers_than_the_ports_allow_is_refused():
    result = _pytest("-n", "3", "tests/unit/test_spec.py")
    assert result.returncode == 4 and "-n 3: at most 2 workers" in result.stdout + result.stderr
