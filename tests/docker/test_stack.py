"""The provider installed from its wheel, on a pseudo-distributed deployment (docker/) of one Hadoop line
(HADOOP_VERSION) and Airflow 3.3: NameNode, DataNode, ResourceManager and two NodeManagers as separate daemons with
their own host names, Postgres, Redis, and Airflow split into api-server, scheduler, dag-processor, triggerer and
two Celery workers."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest

from airflow_provider_melon import rm
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from tests.docker.conftest import HADOOP_VERSION, NN_URL, RM_URL, http_json

pytestmark = pytest.mark.docker

DAG = "melon_mnist_pipeline"


class AmWatcher(threading.Thread):
    """Polls the RM (from the host) for the DAG run's train app and its AM status through the RM proxy; keeps
    every task host the AM reported."""

    def __init__(self, run_tag: str):
        super().__init__(daemon=True)
        self.run_tag = run_tag
        self.hosts: dict[str, set[str]] = {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                apps = (http_json(f"{RM_URL}/ws/v1/cluster/apps?applicationTags={self.run_tag}").get("apps") or {})
                for app in apps.get("app") or []:
                    if app["name"] == "mnist-mwms" and app["state"] == "RUNNING":
                        status = http_json(f"{RM_URL}/proxy/{app['id']}/status")
                        for task in status.get("tasks") or []:
                            if task.get("host"):
                                self.hosts.setdefault(f"{task['role']}:{task['index']}", set()).add(task["host"])
            except Exception:  # noqa: BLE001 - the AM may be starting or gone: next round
                pass
            self.stop.wait(2)


def failed_logs(api, run_id: str) -> str:
    """The run's task states and the last lines of each failed task's log: what a failed run is read by."""
    states = api.task_states(DAG, run_id)
    parts = [str(states)]
    for task, state in states.items():
        if state == "failed":
            try:
                log = api.task_log(DAG, run_id, task)
            except Exception as exc:  # noqa: BLE001 - the states still say what failed
                log = f"(no log: {exc})"
            parts.append(f"--- {task} ---\n" + "\n".join(log.splitlines()[-60:]))
    return "\n".join(parts)


def test_mnist_pipeline_on_the_deployment(stack):
    from airflow_provider_melon.submission import run_tag

    api = stack.api
    started = time.monotonic()
    run_id = api.trigger(DAG)
    watcher = AmWatcher(run_tag(run_id))
    watcher.start()
    try:
        run = api.wait_run(DAG, run_id, timeout=1500)
    finally:
        watcher.stop.set()
        watcher.join(10)
    assert run["state"] == "success", failed_logs(api, run_id)
    print(f"[docker] {DAG} succeeded in {time.monotonic() - started:.0f} s; train tasks ran on {watcher.hosts}")

    # the model is in HDFS (read from outside through the NameNode's published port)
    result = api.xcom(DAG, run_id, "publish")
    assert result["accuracy"] >= result["threshold"], result
    model = result["published"].removeprefix("hdfs://")
    listing = http_json(f"{NN_URL}/webhdfs/v1{model}?op=LISTSTATUS&user.name=airflow")
    assert "saved_model.pb" in {f["pathSuffix"] for f in listing["FileStatuses"]["FileStatus"]}

    # the training gang spanned both NodeManagers (chief and worker ask 2 GB each; a node has 3 GB), seen through
    # the RM (its web proxy to the AM status)
    assert set().union(*watcher.hosts.values()) == {"nodemanager-1", "nodemanager-2"}, watcher.hosts
    [train] = [a for a in stack.rm(f"/ws/v1/cluster/apps?applicationTags={run_tag(run_id)}")["apps"]["app"]
               if a["name"] == "mnist-mwms"]
    assert train["finalStatus"] == "SUCCEEDED"
    # it ran as the connection's user, and staged into that user's HDFS home
    assert train["user"] == "airflow", train["user"]
    cache = http_json(f"{NN_URL}/webhdfs/v1/user/airflow/.melon/cache?op=LISTSTATUS&user.name=airflow")
    assert cache["FileStatuses"]["FileStatus"], cache

    # every extra link of the train task opens a real page from outside
    links = api.api("GET", f"/dags/{DAG}/dagRuns/{quote(run_id, safe='')}/taskInstances/train/links")["extra_links"]
    opened = {}
    for name, url in links.items():
        if not url:
            continue  # no TensorBoard configured: no link
        with urllib.request.urlopen(url, timeout=30) as resp:
            body = resp.read().decode(errors="replace")
            opened[name] = (resp.status, resp.geturl())
        assert resp.status == 200 and train["id"] in body, (name, url, body[:500])
        assert not re.search(r"<title>[^<]*(error|not found)", body, re.I), (name, body[:500])
    assert set(opened) == {"YARN Application", "MeLoN AM Status"}, links
    print(f"[docker] extra links opened: {opened}")


#: the Java each Hadoop line runs its servers on (docker/build.sh builds each image on it)
JAVA_OF_LINE = {"3.3": "11", "3.4": "11", "3.5": "17"}


def test_the_cluster_runs_the_chosen_hadoop_line_on_its_java(stack):
    """The RM (from outside: its REST API and JMX) and a NodeManager's JAVA_HOME (what the containers it launches,
    the AM's among them, run on) are the line's Hadoop and Java."""
    java = JAVA_OF_LINE[HADOOP_VERSION.rsplit(".", 1)[0]]
    info = stack.rm("/ws/v1/cluster/info")["clusterInfo"]
    assert info["hadoopVersion"] == info["resourceManagerVersion"] == HADOOP_VERSION, info
    [runtime] = http_json(f"{RM_URL}/jmx?qry=java.lang:type=Runtime")["beans"]
    assert runtime["SpecVersion"] == java, runtime["SpecVersion"]
    out = stack.exec("nodemanager-1", "sh", "-c", "$JAVA_HOME/bin/java -version 2>&1")
    assert f'version "{java}.' in out, out
    print(f"[docker] Hadoop {info['hadoopVersion']} on Java {runtime['VmVersion']} ({runtime['VmVendor']})")


def test_doctor_is_all_green_on_the_deployment(stack):
    out = stack.exec("api-server", "melon", "doctor", "--json")
    findings = {f["check"]: f for f in json.loads(out)}
    print("[docker] melon doctor:\n" + "\n".join(f"  {f['status'].upper():<4} {c}: {f['detail']}"
                                                for c, f in findings.items()))
    assert {c: f["status"] for c, f in findings.items()} == {
        "resourcemanager": "ok", "resource-types": "ok", "scheduler": "ok", "nodes": "ok", "queue": "ok",
        "nodemanagers": "ok", "gpu-plugin": "ok", "placement": "ok", "hdfs": "ok", "datanodes": "ok", "am-jar": "ok",
        "auth": "ok", "hadoop-java": "ok"}, findings
    assert "scheduler plug-in" in findings["placement"]["detail"], findings["placement"]
    java = JAVA_OF_LINE[HADOOP_VERSION.rsplit(".", 1)[0]]
    assert f"Hadoop {HADOOP_VERSION}; NodeManagers on Java {java} (2 of 2" in findings["hadoop-java"]["detail"], \
        findings["hadoop-java"]
    assert "nodemanager-1:45454: 2 GPU(s), 32768 MiB" in findings["nodes"]["detail"]
    assert "nodemanager-2:45454: 2 GPU(s), 16384 MiB" in findings["nodes"]["detail"]


def test_melon_runs_in_the_api_server_as_an_operator_types_it(stack):
    """`melon --help` inside the api-server container: through `compose exec`, and in a login shell (`sh -l`,
    `bash -l`: /etc/profile sets its own PATH, without the venv's bin, so `melon` was "command not found")."""
    for cmd in (("melon", "--help"), ("sh", "-lc", "melon --help"), ("bash", "-lc", "command -v melon; melon --help")):
        out = stack.exec("api-server", *cmd)
        assert "usage: melon" in out and "doctor" in out, (cmd, out[-800:])


SUBMIT = """
import json, sys
from airflow_provider_melon.hooks.melon import MelonHook
from airflow_provider_melon.spec import JobSpec
print(json.dumps(MelonHook("yarn_default", "webhdfs_default").submit(JobSpec.from_dict(json.loads(sys.argv[1])))["app_id"]))
"""


def _submit(stack, job: dict) -> str:
    out = stack.exec("api-server", "python", "-c", SUBMIT, json.dumps(job))
    return json.loads(out.strip().splitlines()[-1])


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as exc:  # noqa: BLE001 - not there yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def test_a_shared_task_is_not_granted_where_an_exclusive_job_holds_the_gpus(stack):
    """An exclusive job holds one NodeManager's GPUs, which YARN itself cannot see in melon.io/gpu-memory (a stock RM
    may grant a share there, and the task exits 75). The scheduler plug-in on this RM (the wheel's jar in
    share/hadoop/yarn/lib, docs/scheduler-plugin.md) sees it: it turns that node down for the shared task, which
    runs on the other node on its first container. (No NodeManager is paused to steer it: with multi-node placement
    the RM grants on a node that stopped heartbeating until it expires, so a paused node would hold the AM.)"""
    try:
        filler = _submit(stack, {"name": "gpu-filler", "framework": "generic",
                                 "entrypoint": "python -c \"import time; time.sleep(600)\"",
                                 "roles": {"worker": {"memory": 256, "gpus": 2}}})
        _wait(lambda: (stack.rm(f"/ws/v1/cluster/apps/{filler}")["app"]["state"] == "RUNNING"
                       and http_json(f"{RM_URL}/proxy/{filler}/status")["tasks"][0]["state"] == "REGISTERED"),
              300, "the filler to hold a NodeManager's GPUs")
        held = http_json(f"{RM_URL}/proxy/{filler}/status")["tasks"][0]["host"]
        [other] = {"nodemanager-1", "nodemanager-2"} - {held}
        refused = http_json(f"{RM_URL}/jmx?qry={rm.STATS_MBEAN}")["beans"][0]["FitRefusals"]
        probe = _submit(stack, {"name": "fit-probe", "framework": "generic", "env": {"MELON_GPU_WAIT_S": "5"},
                                "entrypoint": "python -c \"print('probe ran')\"",
                                "roles": {"worker": {"memory": 256, "gpu_memory": "2GiB"}}})
        hosts = set()

        def finished():
            try:
                hosts.add(http_json(f"{RM_URL}/proxy/{probe}/status")["tasks"][0]["host"])
            except Exception:  # noqa: BLE001 - the AM is gone once the app ends
                pass
            app = stack.rm(f"/ws/v1/cluster/apps/{probe}")["app"]
            return app if app["state"] in TERMINAL_STATES else None

        app = _wait(finished, 300, "the probe to finish")
        assert app["finalStatus"] == "SUCCEEDED", app["diagnostics"]
        assert hosts - {None} == {other}, (held, hosts)
        # the plug-in looked at the filler's node first (no GPU memory free there: best fit) and turned it down
        assert http_json(f"{RM_URL}/jmx?qry={rm.STATS_MBEAN}")["beans"][0]["FitRefusals"] > refused
        task_log = stack.exec(other, "sh", "-c", f"cat /data/yarn/logs/{probe}/container_*/stdout")
        assert "probe ran" in task_log
        am_log = "".join(stack.exec(n, "sh", "-c", f"cat /data/yarn/logs/{probe}/container_*_000001/AppMaster.stdout"
                                    " 2>/dev/null || true") for n in ("nodemanager-1", "nodemanager-2"))
        assert "exit 75" not in am_log, am_log[-3000:]
        print(f"[docker] scheduler plug-in: worker:0 turned down on {held}, ran on {hosts}")
    finally:
        for app_id in [locals().get("filler"), locals().get("probe")]:
            if app_id:
                urllib.request.urlopen(urllib.request.Request(
                    f"{RM_URL}/ws/v1/cluster/apps/{app_id}/state?user.name=airflow", method="PUT",
                    data=b'{"state": "KILLED"}', headers={"Content-Type": "application/json"}), timeout=30).close()


def test_the_wheel_brings_the_ui_plugin(stack):
    """Installed from the wheel, the provider's UI plugin is served by the deployment's api-server (behind its
    login), and reads this cluster: two nodes with their own GPU sizes."""
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{stack.api.url}/melon/api/gpus", timeout=30)
    assert err.value.code == 401
    gpus = stack.api._http("GET", "/melon/api/gpus")
    sizes = {n["id"]: [g["total_mb"] for g in n["gpus"]] for n in gpus["nodes"]}
    assert sizes == {"nodemanager-1:45454": [16384, 16384], "nodemanager-2:45454": [8192, 8192]}, sizes
    page = urllib.request.urlopen(urllib.request.Request(f"{stack.api.url}/melon/gpus", headers={
        "Authorization": f"Bearer {stack.api.token()}"}), timeout=30).read().decode()
    assert "<title>MeLoN</title>" in page and "renderGpus" in page  # the page, with its script inlined
