"""Reattach identity on the tenants cluster: an application found by alice's task instance's tags is alice's only if
it is a MeLoN application of alice's that no earlier try of the task killed. Bob plants SUCCEEDED applications
carrying every tag of alice's task instance (the identity tag included: run ids are predictable); alice's operator
(``run_as="alice"``, the service user's connection acting for her) must train her own and say why it skipped his.

The operator runs in this process against the real RM and NameNode; only its Airflow surroundings (the task
instance's XCom, the task state store) are stand-ins.
"""

from __future__ import annotations

import threading
from unittest import mock

import pytest

from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.operators.train import MelonTrainOperator
from airflow_provider_melon.submission import airflow_tags, deployment_id
from tests.integration.test_tenants_live import T, _wait_state, tenants, tenants_cluster  # noqa: F401 - fixtures
from tests.unit.test_operator import FakeStore
from tests.waits import wait_for

pytestmark = pytest.mark.integration

DAG_ID, RUN_ID = "alice_pipeline", "scheduled__2026-03-01T00:00:00+00:00"  # a scheduled run id: predictable
ALICE_QUEUE, BOB_QUEUE = T["queues"]["alice"][0], T["queues"]["bob"][0]


def alice_task(tenants, task_id: str, seconds: int = 1) -> MelonTrainOperator:
    spec = tenants.spec("alice-train", ALICE_QUEUE, seconds=seconds)
    op = MelonTrainOperator(
        task_id=task_id,
        job=spec.to_dict(),
        run_as="alice",
        deferrable=False,
        poll_interval=5,
        preflight=False,
        job_logs=False,
    )
    op.__dict__["hook"] = tenants.hook("alice")  # what run_as="alice" builds from the service user's connection
    return op


def context(task_id: str, store=None) -> dict:
    ti = mock.Mock(dag_id=DAG_ID, task_id=task_id, run_id=RUN_ID, map_index=-1, stats_tags={})
    ctx = {"ti": ti, "run_id": RUN_ID}
    if store is not None:
        ctx["task_state_store"] = store
    return ctx


def plant(tenants, task_id: str, app_type: str = "MELON") -> str:
    """Bob submits a short MeLoN job carrying every tag of alice's task instance (of ``app_type`` in YARN) and
    waits until it has SUCCEEDED."""
    bob = tenants.hook("bob")
    tags = airflow_tags(DAG_ID, task_id, RUN_ID, deployment=deployment_id())
    submit = bob.yarn.submit_application
    with mock.patch.object(
        bob.yarn, "submit_application", side_effect=lambda ctx: submit(dict(ctx, **{"application-type": app_type}))
    ):
        app_id = bob.submit(tenants.spec("bob-planted", BOB_QUEUE, seconds=1), tags=tags)["app_id"]
    tenants.submitted.append(app_id)
    app = _wait_state(bob, app_id, TERMINAL_STATES, timeout=240)
    assert (app["user"], app["applicationType"], app["finalStatus"]) == ("bob", app_type, "SUCCEEDED"), app
    assert set(tags) <= set(app["applicationTagList"]), app
    return app_id


@pytest.mark.parametrize(
    "app_type,why", [("MELON", "it belongs to user 'bob', not 'alice'"), ("SPARK", "its type is 'SPARK', not MELON")]
)
def test_bob_plants_a_succeeded_app_with_alices_tags(tenants, attack, capsys, app_type, why):
    task_id = f"train_{app_type.lower()}"
    planted = plant(tenants, task_id, app_type)
    with attack(
        f"bob plants a FINISHED/SUCCEEDED {app_type} app with alice's task instance's tags",
        expected=f"alice trains her own app; bob's skipped: {why}",
    ) as row:
        result = alice_task(tenants, task_id).execute(context(task_id))
        tenants.submitted.append(result["app_id"])
        out = capsys.readouterr().out
        said = [line for line in out.splitlines() if planted in line]
        skipped = [line for line in said if f"Not reattaching to YARN application {planted}" in line]
        own = tenants.hook("alice").yarn.get_application(result["app_id"])
        if result["app_id"] == planted:
            row.got = f"alice reattached to bob's {planted}"
        elif (own["user"], own["finalStatus"]) != ("alice", "SUCCEEDED"):
            row.got = f"alice's own app is {own['user']}'s, {own['finalStatus']}"
        elif not skipped:
            row.got = f"alice trains her own app; no line says why bob's was skipped: {said}"
        else:
            row.got = (
                "alice trains her own app; bob's skipped: "
                + skipped[0].split("found by tags: ", 1)[-1].split(" [airflow", 1)[0]
            )


def _record(ended: list, fn, *args) -> None:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - the killed try fails: what we wait for
        ended.append(exc)
    else:
        ended.append(AssertionError("the killed try succeeded"))


def test_an_app_this_task_killed_is_never_reattached_to(tenants, attack, capsys):
    task_id = "train_killed"
    store = FakeStore()  # the task state store both tries share (Airflow 3.3)
    first = alice_task(tenants, task_id, seconds=300)
    ended: list[BaseException] = []
    try_one = threading.Thread(target=lambda: _record(ended, first.execute, context(task_id, store)), daemon=True)
    try_one.start()
    killed = wait_for(lambda: store.get(first.external_id_key), 240, "the first try to store its app id")
    tenants.submitted.append(killed)
    _wait_state(tenants.hook("alice"), killed, ("RUNNING",), timeout=240)
    first.on_kill()  # the user marks the try failed: the worker's on_kill kills its app; the retry starts at once
    with attack(
        "the next try finds the app the previous try killed (by tags and in the task state store)",
        expected="a new app of alice's, SUCCEEDED",
    ) as row:
        second = alice_task(tenants, task_id)
        result = second.execute(context(task_id, store))
        tenants.submitted.append(result["app_id"])
        out = capsys.readouterr().out
        own = tenants.hook("alice").yarn.get_application(result["app_id"])
        state = tenants.hook("alice").yarn.get_state(killed)
        row.got = (
            f"reattached to the killed {killed} ({state})"
            if result["app_id"] == killed
            else f"a new app of {own['user']}'s, {own['finalStatus']}"
        )
    try_one.join(120)
    assert not try_one.is_alive() and ended, "the first try did not end after its app was killed"
    assert store.values["melon_killed_app_ids"] == [killed]
    assert f"Not reconnecting to YARN application {killed}: an earlier try of this task killed it" in out
