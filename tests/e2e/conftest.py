"""Airflow against the session's mini cluster, AIRFLOW_HOME in a temp dir, connections from a file (Airflow's
local-filesystem secrets backend), in two forms:

* ``airflow_stack`` — a real Airflow: api-server, scheduler, dag-processor and triggerer (LocalExecutor,
  parallelism 4) as separate processes (:class:`LocalAirflow`); DAGs are triggered through the REST API as the
  UI does. This is what the example DAGs are tested on.
* ``airflow`` — the CLI (`airflow dags test` / `airflow tasks test`), for the reattach/kill tests that crash a
  task process on purpose, and as a fast extra.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_melon import minicluster as mc
from airflow_provider_melon.local_airflow import LocalAirflow

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


class AirflowRunner:
    def __init__(self, env: dict):
        self.env = env

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def popen(self, *args: str, log: Path) -> subprocess.Popen:
        fh = open(log, "w")
        return subprocess.Popen([AIRFLOW, *args], env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _home(minicluster, tmp_path_factory, name: str) -> dict:
    home = tmp_path_factory.mktemp(name)
    dags = home / "dags"
    shutil.copytree(REPO / "dags", dags)
    shutil.copytree(REPO / "tests" / "e2e" / "dags", dags, dirs_exist_ok=True)  # the test-only DAGs
    return mc.airflow_env(minicluster, home, dags, sys.executable)


@pytest.fixture(scope="session")
def airflow_stack(minicluster, tmp_path_factory):
    stack = LocalAirflow(_home(minicluster, tmp_path_factory, "airflow-stack"), parallelism=4)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def airflow(minicluster, tmp_path_factory):
    env = _home(minicluster, tmp_path_factory, "airflow-home")
    runner = AirflowRunner(env)
    result = runner.run("db", "migrate", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return runner
