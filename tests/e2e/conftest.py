"""`airflow dags test` / `airflow tasks test` against the session's mini cluster, AIRFLOW_HOME in a temp dir,
connections from a file (Airflow's local-filesystem secrets backend)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_melon import minicluster as mc

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


@pytest.fixture(scope="session")
def airflow(minicluster, tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-home")
    dags = home / "dags"
    shutil.copytree(REPO / "dags", dags)
    shutil.copy(REPO / "tests" / "e2e" / "dags" / "melon_e2e_probe.py", dags / "melon_e2e_probe.py")
    env = mc.airflow_env(minicluster, home, dags, sys.executable)
    runner = AirflowRunner(env)
    result = runner.run("db", "migrate", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return runner
