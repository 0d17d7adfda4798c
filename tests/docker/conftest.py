"""The docker/ deployment, started for the session with compose (project ``melon-test``) and torn down after.

Run by `make docker-test` (docker/test.sh builds the images first and exports MELON_COMPOSE_CMD and, for podman,
CONTAINERS_CONF). From the host the tests reach the stack only through the ports it publishes on 127.0.0.1:
Airflow 28080, the RM 28088, the NameNode 29870; anything else goes through `compose exec` inside it.

The stack's DAG folder is a copy of ``dags/`` plus the tests' probe DAGs (``tests/docker/dags``), given to compose
as ``MELON_DAGS``; ``HADOOP_VERSION`` (default 3.5.0) picks the Hadoop image the cluster runs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from airflow_provider_melon.dev.local_airflow import AirflowApi

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
PROJECT = "melon-test"
HADOOP_VERSION = os.environ.get("HADOOP_VERSION", "3.5.0")
CELERY_WORKERS = ("worker-1", "worker-2")
SERVICES = ("namenode", "datanode", "resourcemanager", "nodemanager-1", "nodemanager-2", "postgres", "redis",
            "api-server", "scheduler", "dag-processor", "triggerer", *CELERY_WORKERS)
AIRFLOW_URL = "http://127.0.0.1:28080"
RM_URL = "http://127.0.0.1:28088"
NN_URL = "http://127.0.0.1:29870"


def http_json(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


class Stack:
    def __init__(self, dags: Path):
        self.compose_cmd = shlex.split(os.environ.get("MELON_COMPOSE_CMD", "podman-compose"))
        self.env = {**os.environ, "MELON_DAGS": str(dags), "HADOOP_VERSION": HADOOP_VERSION}
        env = dict(line.strip().split("=", 1) for line in (DOCKER / ".env").read_text().splitlines() if "=" in line)
        self.api = AirflowApi(AIRFLOW_URL, "admin", env["MELON_ADMIN_PASSWORD"])

    def compose(self, *args: str, timeout: float = 600, check: bool = True, **kw) -> subprocess.CompletedProcess:
        result = subprocess.run([*self.compose_cmd, "-p", PROJECT, "-f", str(DOCKER / "compose.yaml"), *args],
                                cwd=DOCKER, env=self.env, capture_output=True, text=True, timeout=timeout, **kw)
        if check and result.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    def exec(self, service: str, *cmd: str, input: str | None = None, timeout: float = 300) -> str:
        return self.compose("exec", "-T", service, *cmd, input=input, timeout=timeout).stdout

    def rm(self, path: str):
        return http_json(f"{RM_URL}{path}")

    def celery_workers(self) -> set[str]:
        """The Celery workers that answer a ping through the broker (``celery@<host>`` each)."""
        out = self.compose("exec", "-T", "scheduler", "celery", "--app",
                           "airflow.providers.celery.executors.celery_executor.app", "inspect", "ping", "--json",
                           check=False, timeout=120).stdout
        try:
            replies = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        except (json.JSONDecodeError, IndexError):
            return set()
        return {name.split("@", 1)[-1] for name in replies}

    def ready(self) -> str | None:
        """None when Airflow, both NodeManagers (with GPU memory) and HDFS (with /user/airflow) are up; else
        what is still missing."""
        try:
            health = self.api._http("GET", "/api/v2/monitor/health", auth=False)
            if any((health.get(p) or {}).get("status") != "healthy"
                   for p in ("metadatabase", "scheduler", "triggerer", "dag_processor")):
                return f"airflow {health}"
            nodes = self.rm("/ws/v1/cluster/nodes?states=RUNNING").get("nodes") or {}
            if len(nodes.get("node") or []) < 2:
                return f"nodes {nodes}"
            status = http_json(f"{NN_URL}/webhdfs/v1/user/airflow?op=GETFILESTATUS&user.name=airflow")
            if status["FileStatus"]["owner"] != "airflow":
                return f"hdfs {status}"
            workers = self.celery_workers()
            if not set(CELERY_WORKERS) <= workers:
                return f"celery workers answering: {sorted(workers)}"
        except Exception as exc:  # noqa: BLE001 - not up yet
            return f"{type(exc).__name__}: {exc}"
        return None


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    if not (DOCKER / ".env").is_file():
        pytest.skip("docker/.env missing: run `make docker-test` (docker/build.sh writes it)")
    dags = tmp_path_factory.mktemp("dags")
    shutil.copytree(REPO / "dags", dags, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    for probe in (Path(__file__).parent / "dags").glob("*.py"):
        shutil.copy(probe, dags / probe.name)
    s = Stack(dags)
    s.compose("down", "-v", check=False)
    started = time.monotonic()
    s.compose("up", "-d")
    try:
        deadline = time.monotonic() + 420
        missing = s.ready()
        while missing and time.monotonic() < deadline:
            time.sleep(3)
            missing = s.ready()
        assert not missing, f"stack not ready after 420 s: {missing}"
        print(f"[docker] stack (Hadoop {HADOOP_VERSION}) up and ready in {time.monotonic() - started:.0f} s")
        yield s
    finally:
        # kept in the checkout (git-ignored), not in pytest's temp folders, which later pytest runs rotate away: a
        # failure seen under load must still have its services' logs when someone looks
        logs = REPO / ".docker-logs" / time.strftime("%Y%m%dT%H%M%S")
        logs.mkdir(parents=True, exist_ok=True)
        for service in SERVICES:
            result = s.compose("logs", service, check=False, timeout=120)
            (logs / f"{service}.log").write_text(result.stdout + result.stderr)
        s.compose("down", "-v", check=False)
        print(f"[docker] service logs kept in {logs}")
