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
        "hdfs": "ok", "am-jar": "ok", "auth": "ok", "hadoop-java": "ok"}
    assert "DominantResourceCalculator" in findings["scheduler"]["detail"]
    assert findings["nodes"]["detail"].count("2 GPU(s), 32768 MiB") == 2
    # the mini cluster's Hadoop (the launcher's jars) and the Java its NodeManagers run on (the launcher's JVM,
    # read from each NM's /jmx), against the packaged AM jar's class version
    java = _java_feature_release()
    detail = findings["hadoop-java"]["detail"]
    assert f"Hadoop {_launcher_hadoop_version()};" in detail, detail
    assert f"NodeManagers on Java {java} (2 of 2 read from their /jmx)" in detail, detail
    assert "the AM jar is Java 8 bytecode (class major 52): runs there" in detail, detail


def _java_feature_release() -> int:
    """The feature release of the `java` the launcher runs on (minicluster.py starts it from PATH)."""
    out = subprocess.run(["java", "-XshowSettings:properties", "-version"], capture_output=True, text=True,
                         timeout=60).stderr
    spec = next(line.split("=", 1)[1].strip() for line in out.splitlines()
                if line.strip().startswith("java.specification.version"))
    return int(spec.split(".")[-1]) if spec.startswith("1.") else int(spec)


def _launcher_hadoop_version() -> str:
    """The Hadoop version of the launcher's classpath (hadoop-common-<version>.jar)."""
    import re

    jars = mc.launcher_classpath().split(os.pathsep)
    return next(m.group(1) for j in jars if (m := re.search(r"hadoop-common-(\d+\.\d+\.\d+)\.jar$", j)))


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
                      "queue": "fail", "hdfs": "fail", "am-jar": "fail", "auth": "ok", "hadoop-java": "warn"}, findings
    assert "melon.io/gpu-memory" in findings["resource-types"]["detail"]
    assert "resource-types.xml" in findings["resource-types"]["fix"]
    assert "DefaultResourceCalculator" in findings["scheduler"]["detail"]
    assert "DominantResourceCalculator" in findings["scheduler"]["fix"]
    assert "node-resources.xml" in findings["nodes"]["fix"]
    assert "no leaf queue 'gpu'" in findings["queue"]["detail"] and "root.default" in findings["queue"]["detail"]
    assert "fs_default_fs" in findings["hdfs"]["fix"]
    assert "/nonexistent/melon-appmaster.jar missing" in findings["am-jar"]["detail"]
