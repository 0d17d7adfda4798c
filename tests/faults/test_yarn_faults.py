"""Hadoop-side faults during a job, on the fault suite's mini cluster (tests/faults/conftest.py): the RM restarted
(work-preserving recovery), a NodeManager lost, the AM killed, a task's container SIGKILLed."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from unittest import mock

import pytest

from airflow_provider_melon import minicluster as mc
from airflow_provider_melon.hooks.yarn import AsyncYarnHook
from airflow_provider_melon.operators.train import MelonTrainOperator
from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger

from .conftest import app_containers_prefix, container_group, sigkill_group, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIVE = {"NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING"}


def sleeper(seconds: float) -> str:
    return f"python -c \"import time; time.sleep({seconds}); print('slept {seconds}')\""


def all_registered(status: dict, n: int) -> bool:
    return sum(t["state"] == "REGISTERED" for t in status.get("tasks") or []) == n


def apps_named(hook, name: str) -> list[dict]:
    return [a for a in hook.yarn.list_applications() if a.get("name") == name]


def test_rm_restart_keeps_the_app_and_pollers_report_its_true_end(fault_jobs, fault_hook, fault_cluster, report,
                                                                  caplog):
    """The RM is down for 15 s (three polls of each poller), then back with the app recovered."""
    caplog.set_level(logging.WARNING)
    name = f"rm-restart-{int(time.time())}"
    app_id = fault_jobs.submit({"name": name, "framework": "generic", "entrypoint": sleeper(40),
                                "roles": {"worker": {"instances": 2, "memory": 256}}})
    fault_jobs.wait_status(app_id, lambda s: all_registered(s, 2), timeout=120)

    # the two pollers a DAG uses, following the app through the outage: the trigger and the operator's loop
    trigger = YarnApplicationTrigger(app_id=app_id, poll_interval=5, max_consecutive_failures=6)
    trigger._hook = AsyncYarnHook(rm_urls=[fault_cluster.rm_web_url], user=fault_cluster.user)
    op = MelonTrainOperator(task_id="t", job={"name": name, "entrypoint": "x"}, poll_interval=5,
                            max_consecutive_failures=6)
    op.__dict__["hook"] = fault_hook
    results: dict = {}

    def follow_trigger():
        async def first():
            gen = trigger.run()
            try:
                return await gen.__anext__()
            finally:
                await gen.aclose()
        results["trigger"] = asyncio.run(first()).payload

    def follow_operator():
        try:
            results["operator"] = op.poll_until_complete(app_id, {"ti": mock.Mock(map_index=-1), "run_id": "r"})
        except Exception as exc:  # noqa: BLE001 - asserted below
            results["operator"] = exc

    followers = [threading.Thread(target=follow_trigger), threading.Thread(target=follow_operator)]
    for f in followers:
        f.start()
    time.sleep(6)  # both have polled at least once
    t0 = time.monotonic()
    restart = mc.control(fault_cluster, "resourcemanager/restart?down_ms=15000")
    back = wait_for(lambda: fault_hook.yarn.get_application(app_id), 120, "the RM to answer for the app again")
    recovered_s = time.monotonic() - t0
    assert back["state"] in LIVE | {"FINISHED"}, back
    final = fault_jobs.wait(app_id, timeout=240)
    for f in followers:
        f.join(timeout=120)
    assert (final["state"], final["finalStatus"]) == ("FINISHED", "SUCCEEDED"), final["diagnostics"]
    assert results["trigger"]["status"] == "success" and results["trigger"]["final_status"] == "SUCCEEDED", results
    assert isinstance(results["operator"], dict) and results["operator"]["final_status"] == "SUCCEEDED", results
    attempts = fault_hook.yarn.app_attempts(app_id)
    assert len(attempts) == 1, attempts  # work-preserving: the same AM attempt carried on
    assert len(apps_named(fault_hook, name)) == 1
    # both pollers did meet the outage (their RM calls failed, were retried), and neither gave up
    failed_calls = [r.getMessage() for r in caplog.records if "failed" in r.getMessage() and app_id in r.getMessage()]
    assert failed_calls, "no poll met the outage"
    report("RM down 15 s, then restarted (work-preserving recovery)", recovered=True, seconds=recovered_s)
    print(f"RM restart {restart['seconds']} s; app answered again {recovered_s:.1f} s after the restart began")
