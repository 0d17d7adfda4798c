"""The fault suite's own mini cluster, and the figures each fault test reports.

Faults are injected on real daemons in one of two ways: process kills (a task container's process group, the AM's
JVM, Airflow's triggerer) with signals, as a crashed process or host would die; or the launcher's fault controls
(:func:`airflow_provider_melon.minicluster.control`: a NodeManager going silent, the NameNode or the RM
restarting). The cluster here is not the session's: three NodeManagers (so a lost node's tasks have somewhere to
go), a 12 s NodeManager expiry (the RM finds a silent node LOST after 12 s instead of 10 min) and RM recovery
(work-preserving, state in the work dir). It is started for the tests that need it and stopped after them (package scope).

Each test records a row (fault, recovered, seconds to recover, duplicate applications, lost outputs); the table
is printed at the end of the run.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import Jobs, running_cluster

FAULT_ROWS: list[dict] = []


@pytest.fixture(scope="package")
def fault_cluster():
    # MELON_FAULT_CLUSTER_DIR: a running one, while iterating on these tests
    yield from running_cluster("MELON_FAULT_CLUSTER_DIR", "melon-faults-", "MELON_FAULT_PORT_BASE", 21000,
                               nodemanagers=3, nm_expiry_ms=12_000, rm_recovery=True, timeout=300)


@pytest.fixture
def fault_hook(fault_cluster):
    from airflow_provider_melon.cli import melon_hook_for_cluster

    return melon_hook_for_cluster(fault_cluster.work_dir)


@pytest.fixture
def fault_jobs(fault_hook, fault_cluster, tmp_path_factory):
    j = Jobs(fault_hook, fault_cluster, tmp_path_factory)
    yield j
    j.kill_all()


@pytest.fixture
def report():
    """``report(fault, recovered, seconds, duplicate_apps, lost_outputs, where)``: one row of the fault table."""
    def add(fault: str, *, recovered: bool, seconds: float, duplicate_apps: int = 0, lost_outputs: int = 0,
            where: str = "mini cluster") -> None:
        row = {"fault": fault, "recovered": "yes" if recovered else "no", "seconds": round(seconds, 1),
               "duplicate_apps": duplicate_apps, "lost_outputs": lost_outputs, "where": where}
        FAULT_ROWS.append(row)
        print(f"FAULT {row}")

    return add


def pytest_terminal_summary(terminalreporter):
    if not FAULT_ROWS:
        return
    terminalreporter.section("fault table")
    terminalreporter.write_line(f"{'fault':58} {'recovered':9} {'seconds':>8} {'dup apps':>8} {'lost':>5}  where")
    for r in FAULT_ROWS:
        terminalreporter.write_line(f"{r['fault']:58} {r['recovered']:9} {r['seconds']:>8} {r['duplicate_apps']:>8} "
                                    f"{r['lost_outputs']:>5}  {r['where']}")


# ---- processes of the mini cluster's containers (they are local processes) ---------------------------------------
def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def container_group(container_prefix: str, **env) -> int:
    """The process group of the container whose ``CONTAINER_ID`` starts with ``container_prefix`` and whose
    environment has ``env``: the NodeManager starts each container's command in its own session (``setsid``),
    whose leader has the container's environment."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        e = _environ(pid)
        if re.sub(r"^container_e\d+_", "container_", e.get("CONTAINER_ID", "")).startswith(container_prefix) and all(e.get(k) == v for k, v in env.items()):
            try:
                if os.getpgid(pid) == pid:  # the leader only: its parent (the NM's launcher) is in the NM's group
                    return pid
            except ProcessLookupError:
                continue
    raise AssertionError(f"no container process {container_prefix}* with {env}")


def app_containers_prefix(app_id: str, attempt: int = 1) -> str:
    """``container_<cluster ts>_<app>_<attempt>_`` (an RM epoch, ``e05_`` after restarts, is left out)."""
    return f"container_{app_id[len('application_'):]}_{attempt:02d}_"


def sigkill_group(pgid: int) -> None:
    os.killpg(pgid, signal.SIGKILL)


def wait_for(predicate, timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
