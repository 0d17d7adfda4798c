"""Marking a running train task failed as the UI does (``PATCH .../taskInstances/{task_id}`` with ``new_state:
failed`` on Airflow's public REST API) kills its YARN application, on the real Airflow of the e2e session
(api-server, scheduler, dag-processor, triggerer) against the mini cluster:

* a *deferred* task: the triggerer drops its trigger and the trigger kills the application (Airflow 3.3+: through
  ``on_kill()``, after checking the task left DEFERRED; 3.0–3.2: in its cancellation path, see
  ``version_compat.TRIGGER_KILL_PATHS``);
* a task that polls in its worker (not deferred): the task's supervisor stops the task process and the operator's
  ``on_kill`` kills the application.
"""

from __future__ import annotations

import re

import pytest

from airflow_provider_melon.hadoop.app_state import LIVE_STATES
from airflow_provider_melon.submission import run_tag
from airflow_provider_melon.version_compat import AIRFLOW_VERSION, trigger_has_on_kill
from tests.waits import airflow_cause, causes, rm_cause, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DAG_ID = "melon_e2e_kill"


@pytest.fixture(scope="module")
def melon_hook_module(minicluster):
    from airflow_provider_melon.cli import melon_hook_for_cluster

    return melon_hook_for_cluster(minicluster.work_dir)


@pytest.fixture(scope="module")
def kill_run(airflow_stack, melon_hook_module):
    run_id = airflow_stack.trigger(DAG_ID)
    yield run_id
    for app in melon_hook_module.yarn.find_applications([f"airflow-dag:{DAG_ID}", run_tag(run_id)], match_all=True):
        if app["state"] in LIVE_STATES:  # a test that failed leaves no 10-minute job behind
            try:
                melon_hook_module.yarn.kill_application(app["id"])
            except Exception:  # noqa: BLE001 - best effort
                pass


def _ti(stack, run_id: str, task_id: str) -> dict:
    return next(t for t in stack.task_instances(DAG_ID, run_id) if t["task_id"] == task_id)


def _app_of(hook, run_id: str, task_id: str):
    apps = hook.yarn.find_applications(
        [f"airflow-dag:{DAG_ID}", f"airflow-task:{task_id}", run_tag(run_id)], match_all=True
    )
    return apps[0] if len(apps) == 1 and apps[0]["state"] == "RUNNING" else None


def _mark_failed_and_wait_killed(stack, hook, run_id: str, task_id: str, app_id: str) -> dict:
    cause = causes(airflow_cause(stack, DAG_ID, run_id, task_id), rm_cause(hook, app_id))
    stack.set_task_state(DAG_ID, run_id, task_id, "failed")
    assert _ti(stack, run_id, task_id)["state"] == "failed"
    app = wait_for(
        lambda: (lambda a: a if a["state"] not in LIVE_STATES else None)(hook.yarn.get_application(app_id)),
        120,
        f"YARN application {app_id} of {task_id} to end after the task was marked failed",
        cause=cause,
    )
    assert app["state"] == "KILLED", f"{app_id} ended {app['state']}/{app['finalStatus']}, not KILLED\n{cause()}"
    return app


def test_marking_a_deferred_train_task_failed_kills_its_app(kill_run, airflow_stack, melon_hook_module):
    stack, hook, task_id = airflow_stack, melon_hook_module, "deferred"
    cause = causes(airflow_cause(stack, DAG_ID, kill_run, task_id), rm_cause(hook))
    ti = wait_for(
        lambda: (lambda t: t if t["state"] == "deferred" and t.get("triggerer_job") else None)(
            _ti(stack, kill_run, task_id)
        ),
        300,
        "the train task deferred to the triggerer",
        every=1,
        cause=cause,
    )
    app = wait_for(lambda: _app_of(hook, kill_run, task_id), 120, "its YARN application RUNNING", cause=cause)
    # the trigger follows it (its first state line, "<state at deferral> -> RUNNING", is in its log) before the kill
    trigger_log = (
        stack.home
        / "logs"
        / f"dag_id={DAG_ID}"
        / f"run_id={kill_run}"
        / f"task_id={task_id}"
        / f"attempt={ti['try_number']}.log.trigger.{ti['triggerer_job']['id']}.log"
    )
    wait_for(
        lambda: trigger_log.exists() and f"YARN application {app['id']}: " in trigger_log.read_text(),
        240,
        "the trigger's first poll",
        cause=cause,
    )

    _mark_failed_and_wait_killed(stack, hook, kill_run, task_id, app["id"])
    # the RM shows KILLED before the triggerer's log handler has written the kill path's last lines: wait for them
    ended_re = rf"YARN application {re.escape(app['id'])} is ([A-Z_]+)"
    wait_for(
        lambda: (
            lambda text: (
                f"Killing YARN application {app['id']}" in text
                and any(s not in LIVE_STATES for s in re.findall(ended_re, text))
            )
        )(trigger_log.read_text()),
        60,
        "the kill's lines in the trigger log",
        cause=causes(cause, lambda: trigger_log.read_text()[-3000:]),
    )
    said = trigger_log.read_text()
    assert f"Killing YARN application {app['id']}" in said, said[-3000:]
    if trigger_has_on_kill():  # Airflow 3.3+: the triggerer's on_kill() path (this session's Airflow)
        assert "the deferred task was killed" in said, (AIRFLOW_VERSION, said[-3000:])
    else:
        assert "the task is no longer deferred (it is failed)" in said, (AIRFLOW_VERSION, said[-3000:])
    # the kill waited until the RM no longer showed the app live (KILLED, or FINAL_SAVING on its way there)
    ended = re.findall(ended_re, said)
    assert ended and ended[-1] not in LIVE_STATES, (ended, said[-3000:])
    # the state check before the kill (a trigger handed to another triggerer is not killed) read the real state
    assert "Could not read the state of task" not in said, said[-3000:]


def test_marking_a_polling_train_task_failed_kills_its_app(kill_run, airflow_stack, melon_hook_module):
    stack, hook, task_id = airflow_stack, melon_hook_module, "polling"
    cause = causes(airflow_cause(stack, DAG_ID, kill_run, task_id), rm_cause(hook))
    app = wait_for(
        lambda: _app_of(hook, kill_run, task_id), 300, "the polling task's YARN application RUNNING", cause=cause
    )
    # the operator follows it in its worker: the task is running (never deferred) and has announced the app
    wait_for(
        lambda: (
            _ti(stack, kill_run, task_id)["state"] == "running"
            and stack.xcom(DAG_ID, kill_run, task_id, key="app_id") == app["id"]
        ),
        120,
        "the task running and following its app",
        cause=cause,
    )

    _mark_failed_and_wait_killed(stack, hook, kill_run, task_id, app["id"])
    log = stack.task_log(DAG_ID, kill_run, task_id, try_number=_ti(stack, kill_run, task_id)["try_number"])
    assert f"Killing YARN application {app['id']}: the task was killed" in log, log[-3000:]
