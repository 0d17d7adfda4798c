"""`melon doctor` against real clusters: all green on the MeLoN-configured mini cluster, from Airflow connections
and from the job commands' --rm/--webhdfs/--user; on a vanilla YARN (no GPU resource types; the calculator in
yarn-site.xml, so Hadoop's stock capacity-scheduler.xml's memory-only one wins) with a wrong queue, no fs.defaultFS
and a missing AM jar, every one of those is named with its fix; with the GPU resource types declared too, that RM
does not start, and the doctor names the calculator among the causes; a
NameNode at a wrong port is "unreachable", not "not writable"; a NodeManager stopped through the launcher's controls
is named unreachable; `--submit-test` runs a real job and reads the nodes' Java, job Python, pynvml and framework
from its tasks, and names a job Python without pynvml. (tests/docker/ runs it against the compose deployment;
tests/integration/test_gpu_plugin_live.py covers YARN's GPU plugin.)"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from airflow_provider_melon import __version__
from airflow_provider_melon.cli.doctor import CALCULATOR_FIX, CALCULATOR_KEY, DRC
from airflow_provider_melon.dev import minicluster as mc
from tests.conftest import port_base

pytestmark = pytest.mark.integration

MELON = str(Path(sys.executable).parent / "melon")


GREEN = {
    "resourcemanager": "ok",
    "resource-types": "ok",
    "scheduler": "ok",
    "nodes": "ok",
    "queue": "ok",
    "nodemanagers": "ok",
    "gpu-plugin": "ok",
    "placement": "ok",
    "hdfs": "ok",
    "datanodes": "ok",
    "am-jar": "ok",
    "auth": "ok",
    "hadoop-java": "ok",
}
SUBMIT_STEPS = [
    "submit-test:stage",
    "submit-test:submit",
    "submit-test:am",
    "submit-test:containers",
    "submit-test:output",
    "submit-test:logs",
    "submit-test:java",
    "submit-test:pynvml",
    "submit-test:framework",
]


def melon_doctor(*args: str, env: dict | None = None, timeout: float = 120) -> tuple[int, dict, str]:
    result = subprocess.run(
        [MELON, "doctor", "--json", *args], env=env or dict(os.environ), capture_output=True, text=True, timeout=timeout
    )
    try:
        findings = {f["check"]: f for f in json.loads(result.stdout)}
    except ValueError:
        raise AssertionError(f"doctor printed no JSON (rc {result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.returncode, findings, result.stderr


def doctor(
    cluster, *args: str, extra: dict | None = None, env: dict | None = None, timeout: float = 120
) -> tuple[int, dict]:
    yarn_extra = {"fs_default_fs": cluster.fs_default_fs, **(extra or {})}
    host, port = cluster.nn_http
    run_env = dict(os.environ, **(env or {}))
    run_env["AIRFLOW_CONN_YARN_DEFAULT"] = json.dumps(
        {"conn_type": "yarn", "host": cluster.rm_web_url, "login": cluster.user, "extra": yarn_extra}
    )
    run_env["AIRFLOW_CONN_WEBHDFS_DEFAULT"] = json.dumps(
        {"conn_type": "webhdfs", "host": host, "port": port, "login": cluster.user}
    )
    rc, findings, _ = melon_doctor(*args, env=run_env, timeout=timeout)
    return rc, findings


def test_doctor_is_all_green_on_a_melon_cluster(minicluster):
    rc, findings = doctor(minicluster)
    assert rc == 0, findings
    assert {name: f["status"] for name, f in findings.items()} == GREEN
    assert "DominantResourceCalculator" in findings["scheduler"]["detail"]
    assert findings["nodes"]["detail"].count("2 GPU(s), 32768 MiB") == 2
    assert "web port of 2 NodeManager(s) reachable" in findings["nodemanagers"]["detail"]
    assert "1 DataNode(s) reachable" in findings["datanodes"]["detail"]
    assert f"scheduler plug-in {__version__} is the CapacityScheduler's node order" in findings["placement"]["detail"]

    # the mini cluster's Hadoop (the launcher's jars) and the Java its NodeManagers run on (the launcher's JVM,
    # read from each NM's /jmx), against the packaged AM jar's class version
    java = _java_feature_release()
    detail = findings["hadoop-java"]["detail"]
    assert f"Hadoop {_launcher_hadoop_version()};" in detail, detail
    assert f"NodeManagers on Java {java} (2 of 2 read from their /jmx)" in detail, detail
    assert "the AM jar is Java 8 bytecode (class major 52): runs there" in detail, detail


def _java_feature_release() -> int:
    """The feature release of the `java` the launcher runs on (minicluster.py starts it from PATH)."""
    out = subprocess.run(
        ["java", "-XshowSettings:properties", "-version"], capture_output=True, text=True, timeout=60
    ).stderr
    spec = next(
        line.split("=", 1)[1].strip()
        for line in out.splitlines()
        if line.strip().startswith("java.specification.version")
    )
    return int(spec.split(".")[-1]) if spec.startswith("1.") else int(spec)


def _launcher_hadoop_version() -> str:
    """The Hadoop version of the launcher's classpath (hadoop-common-<version>.jar)."""
    import re

    jars = mc.launcher_classpath().split(os.pathsep)
    return next(m.group(1) for j in jars if (m := re.search(r"hadoop-common-(\d+\.\d+\.\d+)\.jar$", j)))


def test_doctor_takes_the_job_commands_cluster_options(minicluster):
    """No Airflow connection: --rm/--webhdfs/--user as `melon submit` takes them (fs.defaultFS from the RM)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    rc, findings, err = melon_doctor(
        "--rm", minicluster.rm_web_url, "--webhdfs", minicluster.webhdfs_url, "--user", minicluster.user, env=env
    )
    assert rc == 0, (findings, err)
    assert {name: f["status"] for name, f in findings.items()} == GREEN
    assert f"writable as {minicluster.user}" in findings["hdfs"]["detail"]
    port = minicluster.fs_default_fs.rsplit(":", 1)[1]  # the RM names the NameNode localhost:<port>
    assert f":{port} reachable through WebHDFS" in findings["hdfs"]["detail"], findings["hdfs"]


def test_doctor_reports_an_unreachable_namenode_as_unreachable(minicluster):
    """A wrong WebHDFS port (nothing listens there): the NameNode is unreachable, not "not writable"."""
    with socket.socket() as s:  # a free loopback port: nothing listens on it once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, findings, err = melon_doctor(
        "--rm", minicluster.rm_web_url, "--webhdfs", f"http://127.0.0.1:{port}", "--user", minicluster.user
    )
    assert rc == 1, (findings, err)
    hdfs = findings["hdfs"]
    assert hdfs["status"] == "fail"
    assert "NameNode unreachable" in hdfs["detail"] and f"127.0.0.1:{port}" in hdfs["detail"], hdfs
    assert "connection refused" in hdfs["detail"], hdfs
    assert "mkdir" not in hdfs["fix"] and "dfs.namenode.http-address" in hdfs["fix"], hdfs
    assert findings["datanodes"]["status"] == "warn"
    assert findings["resourcemanager"]["status"] == "ok"


def submit_test(cluster, *args: str) -> tuple[int, dict]:
    """``melon doctor --submit-test`` with the connections an admin would give this cluster (its AM classpath,
    job Python and container environment: mc.airflow_connections)."""
    env = dict(os.environ)
    for conn_id, conn in mc.airflow_connections(cluster, sys.executable).items():
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)
    rc, findings, err = melon_doctor("--submit-test", "--timeout", "240", *args, env=env, timeout=600)
    return rc, findings


def test_doctor_submit_test_runs_a_job_through_the_real_path(minicluster):
    rc, findings = submit_test(minicluster)
    assert rc == 0, findings
    steps = [c for c in findings if c.startswith("submit-test:")]
    assert steps == SUBMIT_STEPS, findings
    assert all(findings[c]["status"] == "ok" for c in steps), findings
    assert "application_" in findings["submit-test:submit"]["detail"]
    assert "stdout of 2 task(s) read" in findings["submit-test:logs"]["detail"], findings["submit-test:logs"]
    # what the tasks saw on their nodes: this JDK (17+), the connection's job Python with pynvml and TensorFlow
    java = findings["submit-test:java"]["detail"]
    assert 'version "' in java, java
    assert sys.executable in findings["submit-test:pynvml"]["detail"]
    assert "pynvml present" in findings["submit-test:pynvml"]["detail"]
    assert "tensorflow 2." in findings["submit-test:framework"]["detail"]


@pytest.mark.skipif(not Path("/usr/bin/python3").is_file(), reason="no /usr/bin/python3 to use as a bare job Python")
def test_doctor_submit_test_names_a_job_python_without_pynvml(minicluster):
    bare = "/usr/bin/python3"
    probe = subprocess.run([bare, "-c", "import pynvml"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{bare} has pynvml: not a bare job Python here")
    rc, findings = submit_test(minicluster, "--python", bare)
    assert rc == 1, findings
    assert findings["submit-test:containers"]["status"] == "ok", findings
    pynvml = findings["submit-test:pynvml"]
    assert pynvml["status"] == "fail" and bare in pynvml["detail"] and "pynvml" in pynvml["detail"], pynvml
    assert "nvidia-ml-py" in pynvml["fix"]
    assert findings["submit-test:framework"]["status"] == "fail"
    assert "neither TensorFlow nor PyTorch" in findings["submit-test:framework"]["detail"]


#: the calculator where these docs once put it: in yarn-site.xml (the RM's /conf shows it), while the
#: CapacityScheduler reads capacity-scheduler.xml after it (the launcher's classpath holds Hadoop's stock one)
CALCULATOR_IN_YARN_SITE = {"set_calculator": False, "yarn_site": {CALCULATOR_KEY: DRC}}
DEFAULT_CALCULATOR = "org.apache.hadoop.yarn.util.resource.DefaultResourceCalculator"


@pytest.fixture(scope="module")
def vanilla_yarn():
    work = Path(tempfile.mkdtemp(prefix="melon-vanilla-"))
    base = port_base("MELON_TEST_PORT_BASE") + 500
    try:
        yield mc.start(work, port_base=base, melon_config=False, timeout=420, **CALCULATOR_IN_YARN_SITE)
    finally:
        mc.stop(work)
        shutil.rmtree(work, ignore_errors=True)


def test_doctor_names_each_misconfiguration(vanilla_yarn):
    rc, findings = doctor(
        vanilla_yarn,
        "--queue",
        "gpu",
        extra={"fs_default_fs": None},
        env={"AIRFLOW__MELON__AM_JAR": "/nonexistent/melon-appmaster.jar"},
    )
    assert rc == 1
    status = {name: f["status"] for name, f in findings.items()}
    assert status == {
        "resourcemanager": "ok",
        "resource-types": "fail",
        "scheduler": "fail",
        "nodes": "fail",
        "queue": "fail",
        "nodemanagers": "ok",
        "gpu-plugin": "ok",
        "placement": "warn",
        "hdfs": "fail",
        "datanodes": "warn",
        "am-jar": "fail",
        "auth": "ok",
        "hadoop-java": "warn",
    }, findings
    assert "melon.io/gpu-memory" in findings["resource-types"]["detail"]
    assert "resource-types.xml" in findings["resource-types"]["fix"]
    # the scheduler runs on the stock file's calculator (the launcher's own word), though the RM's /conf names the
    # Dominant one: the doctor tells it from the scheduler's ApplicationMaster limit
    assert vanilla_yarn.details["resource_calculator"] == DEFAULT_CALCULATOR
    scheduler = findings["scheduler"]
    assert "on the DefaultResourceCalculator" in scheduler["detail"] and "memory only" in scheduler["detail"]
    assert "yarn-site.xml names DominantResourceCalculator" in scheduler["detail"], scheduler
    assert scheduler["fix"] == CALCULATOR_FIX
    assert "node-resources.xml" in findings["nodes"]["fix"]
    assert "no leaf queue 'gpu'" in findings["queue"]["detail"] and "root.default" in findings["queue"]["detail"]
    assert "fs_default_fs" in findings["hdfs"]["fix"]
    assert "/nonexistent/melon-appmaster.jar missing" in findings["am-jar"]["detail"]
    assert "has not loaded MeLoN's scheduler plug-in" in findings["placement"]["detail"]
    assert "docs/scheduler-plugin.md" in findings["placement"]["fix"]


def test_doctor_names_a_stopped_nodemanager(vanilla_yarn):
    """A NodeManager crashed through the launcher's controls: the RM still lists it RUNNING (it expires later), its
    web port no longer answers; doctor names it (runs last: it spends the vanilla cluster's NodeManager)."""
    nodes = {
        n["id"]: n["nodeHTTPAddress"]
        for n in mc.nodes_ready(vanilla_yarn.rm_web_url, vanilla_yarn.user, 0, require_gpu=False)
    }
    assert len(nodes) == 2, nodes
    mc.control(vanilla_yarn, "nodemanagers/0/crash")
    rc, findings = doctor(vanilla_yarn)
    assert rc == 1
    nms = findings["nodemanagers"]
    assert nms["status"] == "fail", nms
    down = [addr for addr in nodes.values() if f"{addr} (" in nms["detail"].split("(reachable")[0]]
    assert len(down) == 1, (nodes, nms)
    assert "reachable: " in nms["detail"] and "8042" in nms["fix"]


def test_with_gpu_resource_types_the_stock_capacity_scheduler_xml_keeps_the_rm_down(tmp_path):
    """The same calculator in yarn-site.xml on a cluster that declares the GPU resource types: the CapacityScheduler
    does not start on the stock file's DefaultResourceCalculator, so neither does the RM; the doctor fails, and its
    fix names that cause and the calculator's one place, capacity-scheduler.xml."""
    base = port_base("MELON_TEST_PORT_BASE") + 600
    with pytest.raises(mc.MiniClusterError, match="RM uses DefaultResourceCalculator which used only memory"):
        mc.start(tmp_path / "stock", port_base=base, timeout=300, **CALCULATOR_IN_YARN_SITE)
    rm = f"http://127.0.0.1:{mc.ports_from_base(base)['rm-web-port']}"
    nn = f"http://127.0.0.1:{mc.ports_from_base(base)['nn-http-port']}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    rc, findings, _ = melon_doctor("--rm", rm, "--webhdfs", nn, "--user", "melon", env=env)
    assert rc == 1 and findings["resourcemanager"]["status"] == "fail", findings
    assert CALCULATOR_FIX in findings["resourcemanager"]["fix"], findings["resourcemanager"]
