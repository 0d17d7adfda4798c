"""Airflow's triggerer killed (SIGKILL) while a train task is deferred: the YARN application keeps running, the task
stays deferred, and a new triggerer resumes the trigger; the task succeeds, with one application, and the job's
output reaches the task log once: the new trigger goes on from the offsets the old one saved (an XCom), not from
the ones its kwargs had when the task deferred."""

from __future__ import annotations

import json
import re
import time

import pytest

from airflow_provider_melon.submission import run_tag
from airflow_provider_melon.triggers.yarn import LOG_STATE_XCOM_KEY

from .conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAG_ID, TASK_ID = "melon_fault_probe", "train"


def _ti(stack, run_id: str) -> dict:
    """The train task instance; ``{}`` while the api-server does not answer (a loaded machine: not the fault)."""
    try:
        tis = stack.task_instances(DAG_ID, run_id)
    except OSError:  # timeouts included
        return {}
    [ti] = [t for t in tis if t["task_id"] == TASK_ID]
    return ti


def test_triggerer_killed_while_a_train_task_is_deferred(airflow_stack, melon_hook, report):
    stack = airflow_stack
    run_id = stack.trigger(DAG_ID, conf={"seconds": 60})
    ti = wait_for(lambda: (lambda t: t if t.get("state") == "deferred" and t.get("triggerer_job") else None)(
        _ti(stack, run_id)), 300, "the train task deferred to a triggerer", every=1)
    first = ti["triggerer_job"]["id"]
    [app] = melon_hook.yarn.find_applications([f"airflow-dag:{DAG_ID}", run_tag(run_id)], match_all=True)

    def saved_seq():
        try:
            value = stack.xcom(DAG_ID, run_id, TASK_ID, LOG_STATE_XCOM_KEY)
            return (json.loads(value) if isinstance(value, str) else value)["state"]["seq"]
        except Exception:  # noqa: BLE001 - not saved yet
            return None
    seq = wait_for(saved_seq, 240, "the trigger to save job log offsets", every=0.5)
    wait_for(lambda: (saved_seq() or 0) > seq, 60, "the next save", every=0.3)  # a poll ended just now

    stack.kill_component("triggerer")
    t0 = time.monotonic()
    time.sleep(10)  # no triggerer at all for a while: nothing fails, the application runs on
    assert wait_for(lambda: _ti(stack, run_id).get("state"), 60, "the task's state") == "deferred"
    assert melon_hook.yarn.get_application(app["id"])["state"] == "RUNNING"

    stack.start_component("triggerer")
    def taken_over():
        t = _ti(stack, run_id)
        return t if (t.get("triggerer_job") or {}).get("id") not in (None, first) or t.get("state") == "success" \
            else None

    resumed = wait_for(taken_over, 240, "a new triggerer to take the trigger over", every=1)
    picked_up_s = time.monotonic() - t0
    run = stack.wait_run(DAG_ID, run_id, timeout=300)
    assert run["state"] == "success", stack.task_states(DAG_ID, run_id)
    apps = melon_hook.yarn.find_applications([f"airflow-dag:{DAG_ID}", run_tag(run_id)], match_all=True)
    assert [a["id"] for a in apps] == [app["id"]] and apps[0]["finalStatus"] == "SUCCEEDED", apps
    second = (resumed.get("triggerer_job") or {}).get("id")
    if second is not None:  # the new triggerer's own log of this trigger
        log = (stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / f"task_id={TASK_ID}"
               / f"attempt=1.log.trigger.{second}.log")
        assert "reached FINISHED" in log.read_text(), log
        assert "goes on where the previous trigger left it" in log.read_text(), log
    assert second != first
    task_log = stack.task_log(DAG_ID, run_id, TASK_ID)
    shown = [int(n) for n in re.findall(r"worker:0 \| probe (\d+)\b", task_log)]
    assert shown == list(range(60)), f"every job line once, in order, across the triggerer crash: {shown}"
    assert task_log.count("worker:0 | probe done") == 1
    report("Airflow triggerer SIGKILLed while a train task was deferred", recovered=True, seconds=picked_up_s,
           duplicate_apps=len(apps) - 1, where="mini cluster + real Airflow")
    print(f"triggerer {first} killed; triggerer {second} took the trigger over {picked_up_s:.1f} s later")
