"""`melon doctor` against real clusters: all green on the MeLoN-configured mini cluster; on a vanilla YARN (no GPU
resource types, memory-only calculator) with a wrong queue, no fs.defaultFS and a missing AM jar, every one of
those is named with its fix. (tests/docker/ runs it against the compose deployment.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from airflow_provider_melon import minicluster as mc

pytestmark = pytest.mark.integration

MELON = str(Path(sys.executable).parent / "melon")


def doctor(cluster, *args: str, extra: dict | None = None, env: dict | None = None) -> tuple[int, dict]:
    yarn_extra = {"fs_default_fs": cluster.fs_default_fs, **(extra or {})}
    host, port = cluster.nn_http
    run_env = dict(os.environ, **(env or {}))
    run_env["AIRFLOW_CONN_YARN_DEFAULT"] = json.dumps({"conn_type": "yarn", "host": cluster.rm_web_url,
                                                       "login": cluster.user, "extra": yarn_extra})
    run_env["AIRFLOW_CONN_WEBHDFS_DEFAULT"] = json.dumps({"conn_type": "webhdfs", "host": host, "port": port,
                                                         "login": cluster.user})
    result = subprocess.run([MELON, "doctor", "--json", *args], env=run_env, capture_output=True, text=True,
                            timeout=120)
    findings = {f["check"]: f for f in json.loads(result.stdout)}
    return result.returncode, findings


def test_doctor_is_all_green_on_a_melon_cluster(minicluster):
    rc, findings = doctor(minicluster)
    assert rc == 0, findings
    assert {name: f["status"] for name, f in findings.items()} == {
        "resourcemanager": "ok", "resource-types": "ok", "scheduler": "ok", "nodes": "ok", "queue": "ok",
        "hdfs": "ok", "am-jar": "ok", "auth": "ok"}
    assert "DominantResourceCalculator" in findings["scheduler"]["detail"]
    assert findings["nodes"]["detail"].count("2 GPU(s), 32768 MiB") == 2


@pytest.fixture(scope="module")
def vanilla_yarn():
    work = Path(tempfile.mkdtemp(prefix="melon-vanilla-"))
    base = int(os.environ.get("MELON_TEST_PORT_BASE", "19000")) + 500
    try:
        yield mc.start(work, port_base=base, melon_config=False, timeout=240)
    finally:
        mc.stop(work)
        shutil.rmtree(work, ignore_errors=True)


def test_doctor_names_each_misconfiguration(vanilla_yarn):
    rc, findings = doctor(vanilla_yarn, "--queue", "gpu", extra={"fs_default_fs": None},
                          env={"AIRFLOW__MELON__AM_JAR": "/nonexistent/melon-appmaster.jar"})
    assert rc == 1
    status = {name: f["status"] for name, f in findings.items()}
    assert status == {"resourcemanager": "ok", "resource-types": "fail", "scheduler": "fail", "nodes": "fail",
                      "queue": "fail", "hdfs": "fail", "am-jar": "fail", "auth": "ok"}, findings
    assert "melon.io/gpu-memory" in findings["resource-types"]["detail"]
    assert "resource-types.xml" in findings["resource-types"]["fix"]
    assert "DefaultResourceCalculator" in findings["scheduler"]["detail"]
    assert "DominantResourceCalculator" in findings["scheduler"]["fix"]
    assert "node-resources.xml" in findings["nodes"]["fix"]
    assert "no leaf queue 'gpu'" in findings["queue"]["detail"] and "root.default" in findings["queue"]["detail"]
    assert "fs_default_fs" in findings["hdfs"]["fix"]
    assert "/nonexistent/melon-appmaster.jar missing" in findings["am-jar"]["detail"]
