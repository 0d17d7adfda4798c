"""The docker/ deployment, started for the session with compose (project ``melon-test``) and torn down after.

Run by `make docker-test` (docker/test.sh builds the images first and exports MELON_COMPOSE_CMD and, for podman,
CONTAINERS_CONF). From the host the tests reach the stack only through the ports it publishes on 127.0.0.1:
Airflow 28080, the RM 28088, the NameNode 29870; anything else goes through `compose exec` inside it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from airflow_provider_melon.local_airflow import AirflowApi

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
PROJECT = "melon-test"
AIRFLOW_URL = "http://127.0.0.1:28080"
RM_URL = "http://127.0.0.1:28088"
NN_URL = "http://127.0.0.1:29870"


def http_json(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


class Stack:
    def __init__(self):
        self.compose_cmd = shlex.split(os.environ.get("MELON_COMPOSE_CMD", "podman-compose"))
        env = dict(line.strip().split("=", 1) for line in (DOCKER / ".env").read_text().splitlines() if "=" in line)
        self.api = AirflowApi(AIRFLOW_URL, "admin", env["MELON_ADMIN_PASSWORD"])

    def compose(self, *args: str, timeout: float = 600, check: bool = True, **kw) -> subprocess.CompletedProcess:
        result = subprocess.run([*self.compose_cmd, "-p", PROJECT, "-f", str(DOCKER / "compose.yaml"), *args],
                                cwd=DOCKER, capture_output=True, text=True, timeout=timeout, **kw)
        if check and result.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    def exec(self, service: str, *cmd: str, input: str | None = None, timeout: float = 300) -> str:
        return self.compose("exec", "-T", service, *cmd, input=input, timeout=timeout).stdout

    def rm(self, path: str):
        return http_json(f"{RM_URL}{path}")

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
        except Exception as exc:  # noqa: BLE001 - not up yet
            return f"{type(exc).__name__}: {exc}"
        return None


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    if not (DOCKER / ".env").is_file():
        pytest.skip("docker/.env missing: run `make docker-test` (docker/build.sh writes it)")
    s = Stack()
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
        print(f"[docker] stack up and ready in {time.monotonic() - started:.0f} s")
        yield s
    finally:
        logs = tmp_path_factory.mktemp("stack-logs")
        for service in ("namenode", "datanode", "resourcemanager", "nodemanager-1", "nodemanager-2", "api-server",
                        "scheduler", "dag-processor", "triggerer", "postgres"):
            result = s.compose("logs", service, check=False, timeout=120)
            (logs / f"{service}.log").write_text(result.stdout + result.stderr)
        s.compose("down", "-v", check=False)
        print(f"[docker] service logs kept in {logs}")
