"""The CeleryExecutor of the docker/ stack: a Celery worker container that dies mid-job, and a triggerer that
restarts, while their train tasks' YARN applications run (the probe DAG tests/docker/dags/melon_celery_probe.py).

* ``train_sync`` (not deferred) follows its application from its worker. That worker's container is killed
  (SIGKILL: no on_kill, no goodbye); the scheduler sees the task instance's heartbeat stop, fails the try and
  queues the retry, which only the other worker can take. The retry must reattach to the same application: one
  application with the task instance's identity tag, SUCCEEDED, its output in HDFS.
* ``train_deferred`` waits in the triggerer. The triggerer's container is killed and started again; the task
  stays deferred (no new try), the new triggerer resumes the trigger, the task succeeds on that one application.

From outside through the stack's 127.0.0.1 ports only (Airflow's REST API, the RM, the NameNode), and compose for
kill/start.
"""

from __future__ import annotations

import time

import pytest

from airflow_provider_melon.hadoop.app_state import LIVE_STATES
from airflow_provider_melon.submission import identity_tag
from tests.docker.conftest import CELERY_WORKERS, NN_URL, http_json

pytestmark = pytest.mark.docker

DAG_ID = "melon_celery_probe"


def _wait(what: str, timeout: float, check, picture):
    """``check()``'s first truthy value; on timeout fails with ``picture()`` (what Airflow and YARN show)."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception as exc:  # noqa: BLE001 - a component restarting: next round
            value = None
            last_error = exc
        else:
            last_error = None
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last error: {last_error!r}; "
                         f"{picture()}")


def test_a_dead_worker_s_retry_reattaches_and_a_deferred_task_survives_a_triggerer_restart(stack):
    api = stack.api
    run_id = api.trigger(DAG_ID)
    # the deployment part of the identity tag, as the workers compute it from their own configuration
    deployment = stack.exec("worker-1", "python", "-c", "from airflow_provider_melon.submission import "
                            "deployment_id; print(deployment_id())").strip().splitlines()[-1]
    tags = {t: identity_tag(deployment, DAG_ID, t, run_id) for t in ("train_sync", "train_deferred")}

    def tis() -> dict[str, dict]:
        return {ti["task_id"]: ti for ti in api.task_instances(DAG_ID, run_id)}

    def apps(task_id: str) -> list[dict]:
        return (stack.rm(f"/ws/v1/cluster/apps?applicationTags={tags[task_id]}").get("apps") or {}).get("app") or []

    def picture() -> str:
        try:
            seen = {t: {k: ti.get(k) for k in ("state", "try_number", "hostname")} for t, ti in tis().items()}
        except Exception as exc:  # noqa: BLE001
            seen = f"(Airflow did not answer: {exc})"
        yarn = {t: [(a["id"], a["state"], a["finalStatus"]) for a in apps(t)] for t in tags}
        return f"task instances {seen}; YARN apps by identity tag {yarn}; celery workers {stack.celery_workers()}"

    def running(task_id: str, ti_state: str):
        ti = tis()[task_id]
        live = [a for a in apps(task_id) if a["state"] == "RUNNING"]
        return (ti, live[0]) if ti["state"] == ti_state and ti["hostname"] and live else None

    # 1. both applications run: train_sync followed by its worker, train_deferred's trigger in the triggerer
    sync_ti, sync_app = _wait("train_sync running on a worker with its app RUNNING", 300,
                              lambda: running("train_sync", "running"), picture)
    _, deferred_app = _wait("train_deferred deferred with its app RUNNING", 300,
                            lambda: running("train_deferred", "deferred"), picture)
    # the first try follows the app (its first poll line comes after the app id is in the task state store)
    _wait("train_sync's first try to poll its app", 180,
          lambda: f"YARN application {sync_app['id']}" in api.task_log(DAG_ID, run_id, "train_sync"), picture)
    victim = sync_ti["hostname"].split(".")[0]
    assert victim in CELERY_WORKERS, sync_ti
    [survivor] = [w for w in CELERY_WORKERS if w != victim]
    triggerer_before = api.triggerer_job_ids()
    print(f"[docker] train_sync try 1 on {victim} follows {sync_app['id']}; train_deferred waits on "
          f"{deferred_app['id']} in triggerer job(s) {triggerer_before}")

    try:
        # 2. the worker's container dies, and so does the triggerer's, which then comes back
        stack.compose("kill", "-s", "KILL", victim)
        stack.compose("kill", "-s", "KILL", "triggerer")
        stack.compose("start", "triggerer")
        assert stack.rm(f"/ws/v1/cluster/apps/{sync_app['id']}")["app"]["state"] in LIVE_STATES  # YARN's app lives on

        # 3. the retry runs on the other worker and follows the same application
        retry = _wait(f"train_sync's retry running on {survivor}", 420,
                      lambda: (lambda ti: ti if ti["try_number"] >= 2 and ti["state"] in ("running", "success")
                               and ti["hostname"] else None)(tis()["train_sync"]), picture)
        app_state_at_retry = stack.rm(f"/ws/v1/cluster/apps/{sync_app['id']}")["app"]["state"]
        # the new triggerer took over the deferred task's trigger, which kept its try
        _wait("a new triggerer", 180, lambda: set(api.triggerer_job_ids()) - set(triggerer_before), picture)
        run = api.wait_run(DAG_ID, run_id, timeout=600)
    finally:
        stack.compose("start", victim, check=False)
        stack.compose("start", "triggerer", check=False)

    final = tis()
    assert run["state"] == "success", picture()
    assert retry["hostname"].split(".")[0] == survivor, retry
    assert final["train_sync"]["try_number"] == 2 and final["train_sync"]["hostname"].split(".")[0] == survivor, \
        final["train_sync"]
    assert final["train_deferred"]["try_number"] == 1, final["train_deferred"]  # survived: no new try
    retry_log = api.task_log(DAG_ID, run_id, "train_sync", try_number=2)
    assert sync_app["id"] in retry_log and ("Reconnecting to existing job" in retry_log or "found by tags" in retry_log), \
        retry_log[-3000:]
    slug = None
    for task_id, first in (("train_sync", sync_app), ("train_deferred", deferred_app)):
        found = apps(task_id)
        # exactly one application per task instance: the retry (and the new triggerer) reattached, none resubmitted
        assert [a["id"] for a in found] == [first["id"]], (task_id, found)
        assert found[0]["finalStatus"] == "SUCCEEDED", (task_id, found[0].get("diagnostics"))
        if slug is None:
            from airflow_provider_melon.hadoop.hdfs_io import run_slug

            slug = run_slug(run_id)
        listing = http_json(f"{NN_URL}/webhdfs/v1/user/airflow/melon-celery-probe/{slug}/{task_id}"
                            "?op=LISTSTATUS&user.name=airflow")["FileStatuses"]["FileStatus"]
        assert {f["pathSuffix"]: f["length"] for f in listing}.get("done.txt") == len(task_id), (task_id, listing)
    print(f"[docker] worker {victim} killed: train_sync's try 2 on {survivor} reattached to {sync_app['id']} "
          f"({app_state_at_retry} when it started); triggerer restarted: train_deferred finished on "
          f"{deferred_app['id']} in try 1")
