"""The triggerer killed while a train task is deferred, with Airflow's real remote logging (the HDFS task handler
of ``apache-airflow-providers-apache-hdfs``, into the mini cluster's HDFS over WebHDFS): Airflow uploads a
trigger's log only when the trigger ends, so what the killed trigger printed never reaches the remote task log —
and here its triggerer's disk is "lost" too (its local trigger log is deleted). The new trigger goes on from the
offsets the task log is known to hold, not from what the dead one printed: every job line is in the uploaded
logs at least once, in order, repeats marked.

Run in its own Airflow (``remote_log_stack``): remote logging is an Airflow-wide setting."""

from __future__ import annotations

import json
import sys
import uuid

import pytest

from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.dev.local_airflow import LocalAirflow
from airflow_provider_melon.submission import run_tag
from airflow_provider_melon.triggers.yarn import LOG_STATE_XCOM_KEY
from tests.conftest import REPO
from tests.waits import airflow_cause, causes, hdfs_cause, rm_cause, wait_for

from .test_triggerer_fault import DAG_ID, SUCCESSOR_ENV, TASK_ID, _ti, _wait_ti, events, job_lines

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LINES = 60


@pytest.fixture(scope="module")
def remote_log_stack(minicluster, tmp_path_factory):
    import shutil

    home = tmp_path_factory.mktemp("airflow-remote-logs")
    dags = home / "dags"
    shutil.copytree(REPO / "tests" / "e2e" / "dags", dags)  # the fault probe DAG
    env = mc.airflow_env(minicluster, home, dags, sys.executable)
    remote = f"/user/{minicluster.user}/airflow-remote-logs/{uuid.uuid4().hex[:12]}"
    env.update(
        {
            "AIRFLOW__LOGGING__REMOTE_LOGGING": "True",
            "AIRFLOW__LOGGING__REMOTE_BASE_LOG_FOLDER": f"hdfs://{remote}",
            "AIRFLOW__LOGGING__REMOTE_LOG_CONN_ID": "webhdfs_default",
            "AIRFLOW__LOGGING__DELETE_LOCAL_LOGS": "False",
        }
    )
    stack = LocalAirflow(env, parallelism=2)
    stack.remote = remote
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def test_remote_logging_restore_point_is_what_the_task_log_holds(remote_log_stack, melon_hook):
    stack = remote_log_stack
    # HDFS refuses ':' in a path, and Airflow's own run ids (manual__2026-12-01T10:00:00+00:00) have it: the
    # remote handler could not upload a single log of such a run (docs/deferred-tasks.md says so)
    run_id = stack.trigger(DAG_ID, conf={"lines": LINES, "per_second": 1}, run_id=f"remote-logs-{uuid.uuid4().hex[:8]}")
    ti = _wait_ti(
        stack,
        run_id,
        lambda t: t.get("state") == "deferred" and t.get("triggerer_job"),
        300,
        "the train task deferred to a triggerer",
    )
    [app] = melon_hook.yarn.find_applications([f"airflow-dag:{DAG_ID}", run_tag(run_id)], match_all=True)
    cause = causes(airflow_cause(stack, DAG_ID, run_id, TASK_ID), rm_cause(melon_hook, app["id"]))

    def saved() -> dict:
        value = stack.xcom(DAG_ID, run_id, TASK_ID, LOG_STATE_XCOM_KEY)
        return json.loads(value) if isinstance(value, str) else value

    # the first trigger streams and saves (its state moves; what the task log holds does not)
    first_saved = wait_for(
        lambda: (lambda s: s if s["state"]["seq"] >= 2 else None)(saved()),
        240,
        "the first trigger to stream and save job log offsets",
        every=0.5,
        cause=cause,
    )
    assert first_saved["durable"]["seq"] < first_saved["state"]["seq"], first_saved
    first = ti["triggerer_job"]["id"]
    stack.kill_component("triggerer")
    # the triggerer's host is lost: its trigger log was never uploaded, and its local copy is gone too
    task_dir = stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / f"task_id={TASK_ID}"
    dead_log = task_dir / f"attempt=1.log.trigger.{first}.log"
    printed = job_lines(dead_log.read_text()) if dead_log.exists() else []
    assert printed, f"the killed trigger printed no job line: {dead_log}"
    dead_log.unlink()
    stack.start_component("triggerer", env=SUCCESSOR_ENV)  # takes the trigger over 10 s after the last beat, not 30
    _wait_ti(
        stack,
        run_id,
        lambda t: (t.get("triggerer_job") or {}).get("id") not in (None, first) or t.get("state") == "success",
        240,
        f"a new triggerer to take the trigger over from {first}",
    )
    run = stack.wait_run(DAG_ID, run_id, timeout=600)
    assert run["state"] == "success", stack.run_picture(DAG_ID, run_id, TASK_ID)

    # what the remote task log holds: the task's own log and the trigger logs uploaded as their triggers ended
    remote_dir = f"{stack.remote}/dag_id={DAG_ID}/run_id={run_id}/task_id={TASK_ID}"
    names = wait_for(
        lambda: [n for n in melon_hook.hdfs.list(remote_dir) if ".log.trigger." in n],
        120,
        "the new trigger's log uploaded to HDFS",
        cause=hdfs_cause(melon_hook, remote_dir),
    )
    assert f"attempt=1.log.trigger.{first}.log" not in names, names  # the dead one's never was

    def remote_text(name: str) -> str:
        with melon_hook.hdfs.read(f"{remote_dir}/{name}") as reader:
            return reader.read().decode(errors="replace")

    # the task's own log, uploaded again once it has resumed and read the rest of the job log (triggers/yarn.py)
    wait_for(
        lambda: "SUCCEEDED in" in remote_text("attempt=1.log"),
        120,
        "the resumed task's log uploaded to HDFS",
        cause=hdfs_cause(melon_hook, remote_dir),
    )
    uploaded = {name: remote_text(name) for name in sorted(melon_hook.hdfs.list(remote_dir))}
    trigger_text = "".join(text for name, text in uploaded.items() if ".log.trigger." in name)
    assert "goes on from the offsets the task log is known to hold" in trigger_text, events(trigger_text)
    shown = job_lines(trigger_text + uploaded["attempt=1.log"])  # the triggers' lines, then the resumed task's rest
    missing = sorted(set(range(LINES)) - {n for n, _ in shown})
    assert not missing, (
        f"job lines missing from the uploaded task log (the killed trigger printed "
        f"{[n for n, _ in printed]}): {missing}"
    )
    first_seen = list(dict.fromkeys(n for n, _ in shown))
    assert first_seen == list(range(LINES)), f"job lines out of order: {first_seen}"
    plain = [n for n, marked in shown if not marked]
    assert plain == sorted(set(plain)), f"a line came again unmarked: {plain}"
    # the lines the dead trigger had printed come again marked (a reader of its disk drops them by offset)
    assert {n for n, _ in printed} <= {n for n, marked in shown if marked}, (printed, shown)
    assert _ti(stack, run_id)["state"] == "success"
