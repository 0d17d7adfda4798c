"""Train-task metrics through Airflow's ``Stats``, read from a real StatsD listener: a UDP socket on loopback that
this test opens, named in ``[metrics]`` as a deployment names its StatsD server. Airflow's Stats is set up once per
process from its configuration, so the sending side runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from airflow_provider_melon.operators.metrics import METRICS, job_metrics

pytest.importorskip("statsd", reason="Airflow's StatsD backend (apache-airflow[statsd]) is in the test extra")

#: the RM's report of an ended application and its AM's final /status (the fields metrics.py reads)
APP = {"id": "application_1700000000000_0007", "startedTime": 1_700_000_000_000, "launchTime": 1_700_000_004_500}
FINAL = {
    "gang": {"formed": True, "waiting_s": 2.25},
    "tasks": [
        {"role": "chief", "gpu_memory_mb": 6144, "gpu_memory_peak_mb": 5000, "oom_growths": 1},
        {"role": "worker", "gpu_memory_mb": 4096, "gpu_memory_peak_mb": 3500, "oom_growths": 0},
        {"role": "ps", "gpu_memory_mb": None, "gpu_memory_peak_mb": None, "oom_growths": 0},
    ],
}

SENDER = """
import json, sys
from airflow_provider_melon.operators.metrics import emit_job_metrics, log_lag, reattached
app, final = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps(emit_job_metrics(app, final, tags={"dag_id": "d", "task_id": "t"})))
reattached(tags={"dag_id": "d", "task_id": "t"})
log_lag(None, tags={"dag_id": "d", "task_id": "t"})  # a poll that showed nothing new: nothing sent
log_lag(1.25, tags={"dag_id": "d", "task_id": "t"})
"""


def test_job_metrics_reads_the_reports():
    assert job_metrics(APP, FINAL) == {
        "melon.queue_wait": 4500.0,
        "melon.submit_to_gang": 6750.0,
        "melon.gpu_memory.reserved": 10240.0,
        "melon.gpu_memory.used": 8500.0,
        "melon.oom_growths": 1.0,
    }
    # a gang not formed, an RM without launchTime: those figures are left out, not guessed
    assert job_metrics({"startedTime": 1}, {"gang": {"formed": False, "waiting_s": 9}}) == {}


def test_metrics_reach_a_statsd_listener(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(30)
        port = listener.getsockname()[1]
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(tmp_path),
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        }
        sent = subprocess.run(
            [sys.executable, "-c", SENDER, json.dumps(APP), json.dumps(FINAL)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert sent.returncode == 0, sent.stderr[-3000:]
        packets: list[str] = []  # ours; Airflow sends its own metrics (airflow.serde...) too
        deadline = time.monotonic() + 30
        while len(packets) < 7 and time.monotonic() < deadline:  # UDP on loopback: bounded by the timeout
            packets += [p for p in listener.recv(65535).decode().splitlines() if p.startswith("airflow.melon.")]
    got = {}
    for packet in packets:
        name, _, rest = packet.partition(":")
        value, _, kind = rest.partition("|")
        got[name] = (float(value), kind.split("|")[0])
    assert got == {
        "airflow.melon.queue_wait": (4500.0, "ms"),
        "airflow.melon.submit_to_gang": (6750.0, "ms"),
        "airflow.melon.gpu_memory.reserved": (10240.0, "g"),
        "airflow.melon.gpu_memory.used": (8500.0, "g"),
        "airflow.melon.oom_growths": (1.0, "c"),
        "airflow.melon.reattaches": (1.0, "c"),
        "airflow.melon.log_lag": (1250.0, "ms"),
    }, packets
    assert {name.removeprefix("airflow.") for name in got} == set(METRICS)


OPERATOR = """
import json, sys, types
from airflow_provider_melon.operators.train import MelonTrainOperator
app, final, code = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
op = MelonTrainOperator(task_id="train", yarn_conn_id="yarn_metrics",
                        job={"name": "m", "code": code, "entrypoint": "python t.py", "roles": {"worker": {}}})
op._spec = op.load_spec()
ti = types.SimpleNamespace(dag_id="metrics_dag", task_id="train", run_id="manual__1", map_index=-1)
context = {"ti": ti, "run_id": "manual__1"}
# the cluster's answers (RM report, AM final status), as the operator's own readers return them
op._get_app_or_none = lambda app_id: dict(app)
op._final_statuses[app["id"]] = final
op._link_am_status_to_app_page = lambda context, app_id: None
op.hook.record_run = lambda *args, **kwargs: None  # the memory history (HDFS) is not under test
op.find_existing = lambda tags: {"id": app["id"], "state": "RUNNING", "finalStatus": "UNDEFINED"}
op._announce = lambda context, app_id, app: None
assert op._attach_or_submit(context)[0] == app["id"]  # a retry that finds its application running
# a poll of the job log that showed new lines 0.5 s after their write (the follower's measure: test_logs.py)
follower = types.SimpleNamespace(poll=lambda *args, **kwargs: [], take_lag=lambda: 0.5)
op._stream_job_logs(follower, None, dict(app), tags=op._metric_tags(context))
op._ended(context, app["id"])
"""


def test_a_train_task_sends_its_metrics_when_its_application_ends_and_counts_a_reattach(tmp_path):
    (tmp_path / "code").mkdir()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(30)
        port = listener.getsockname()[1]
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(tmp_path),
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW_CONN_YARN_METRICS": json.dumps({"conn_type": "yarn", "host": "http://rm.invalid:8088"}),
        }
        ran = subprocess.run(
            [sys.executable, "-c", OPERATOR, json.dumps(APP), json.dumps(FINAL), str(tmp_path / "code")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
        names: list[str] = []
        deadline = time.monotonic() + 30
        while len(names) < len(METRICS) and time.monotonic() < deadline:
            names += [
                p.partition(":")[0]
                for p in listener.recv(65535).decode().splitlines()
                if p.startswith("airflow.melon.")
            ]
    assert sorted(names) == sorted(f"airflow.{name}" for name in METRICS), names
