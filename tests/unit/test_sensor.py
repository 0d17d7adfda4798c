"""YarnApplicationSensor: target/failure states, by id and by tags, deferrable mode with the shared trigger."""

from __future__ import annotations

from unittest import mock

import pytest

from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.sensors.yarn import YarnApplicationSensor
from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger
from airflow_provider_melon.version_compat import AirflowException, AirflowSensorTimeout

APP = "application_1700000000000_0005"


def app(state, final="UNDEFINED", app_id=APP, diagnostics=""):
    return {"id": app_id, "state": state, "finalStatus": final, "diagnostics": diagnostics}


@pytest.fixture
def rm():
    with (
        mock.patch.object(YarnHook, "get_application", autospec=True) as get_app,
        mock.patch.object(YarnHook, "find_applications", autospec=True, return_value=[]) as find,
    ):
        yield mock.Mock(get_app=get_app, find=find)


def ctx():
    return {"ti": mock.Mock()}


def sensor(**kw):
    kw.setdefault("task_id", "wait")
    kw.setdefault("yarn_conn_id", "yarn_test")
    return YarnApplicationSensor(**kw)


# ---------------------------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("kw", [{}, {"application_id": APP, "tags": ["a"]}])
def test_exactly_one_of_id_or_tags(kw):
    with pytest.raises(ValueError, match="exactly one of application_id or tags"):
        sensor(**kw)


def test_poll_interval_minimum():
    with pytest.raises(ValueError, match="poll_interval"):
        sensor(application_id=APP, poll_interval=2)


def test_state_in_both_lists_rejected():
    with pytest.raises(ValueError, match="KILLED"):
        sensor(application_id=APP, target_states=("FINISHED", "KILLED"))


@pytest.mark.parametrize("rendered", ["", None])
def test_an_application_id_rendered_empty_is_refused_naming_the_field(rm, rendered):
    """A templated id (an upstream XCom) that renders empty: the sensor says so, never looks anything up (before:
    ``TypeError: can only join an iterable`` from the tags path)."""
    s = sensor(application_id="{{ ti.xcom_pull(task_ids='submit', key='app_id') }}")
    s.application_id = rendered  # what template rendering left
    with pytest.raises(ValueError, match="application_id"):
        s.poke(ctx())
    rm.get_app.assert_not_called()
    rm.find.assert_not_called()


# ---------------------------------------------------------------------------------------------- by id


def test_by_id_waits_until_finished(rm):
    s = sensor(application_id=APP)
    context = ctx()
    rm.get_app.side_effect = [app("ACCEPTED"), app("RUNNING"), app("FINISHED", "SUCCEEDED")]
    assert s.poke(context) is False
    assert s.poke(context) is False
    assert s.poke(context) is True
    rm.get_app.assert_called_with(mock.ANY, APP)
    context["ti"].xcom_push.assert_called_once_with(key="app_id", value=APP)


@pytest.mark.parametrize(
    "failed",
    [
        app("FAILED", "FAILED", diagnostics="AM container exited 1"),
        app("KILLED", "KILLED", diagnostics="AM container exited 1"),
        app("FINISHED", "FAILED", diagnostics="AM container exited 1"),
    ],
)
def test_by_id_failure_states_raise_with_diagnostics(rm, failed):
    rm.get_app.return_value = failed
    with pytest.raises(AirflowException, match="AM container exited 1"):
        sensor(application_id=APP).poke(ctx())


def test_custom_target_state_running(rm):
    s = sensor(application_id=APP, target_states=("RUNNING",))
    rm.get_app.side_effect = [app("ACCEPTED"), app("RUNNING")]
    assert s.poke(ctx()) is False
    assert s.poke(ctx()) is True


def test_terminal_state_that_is_not_a_target_fails(rm):
    rm.get_app.return_value = app("FINISHED", "SUCCEEDED")
    with pytest.raises(AirflowException, match="not one of RUNNING"):
        sensor(application_id=APP, target_states=("RUNNING",)).poke(ctx())


def test_custom_failure_states_narrower(rm):
    # only KILLED counts as a failure: a FINISHED/FAILED app is still "FINISHED" here
    rm.get_app.return_value = app("FINISHED", "FAILED")
    assert sensor(application_id=APP, failure_states=("KILLED",)).poke(ctx()) is True


# ---------------------------------------------------------------------------------------------- by tags


def test_by_tags_waits_for_an_app_then_uses_the_newest(rm):
    s = sensor(tags="airflow-dag:etl, airflow-task:export")
    assert s.tags == ["airflow-dag:etl", "airflow-task:export"]
    rm.find.side_effect = [
        [],
        [app("RUNNING", app_id="application_1_0009"), app("FINISHED", "FAILED", app_id="application_1_0002")],
        [
            app("FINISHED", "SUCCEEDED", app_id="application_1_0009"),
            app("FINISHED", "FAILED", app_id="application_1_0002"),
        ],
    ]
    context = ctx()
    assert s.poke(context) is False  # none yet
    assert s.poke(context) is False  # newest is RUNNING (the older FAILED one is ignored)
    assert s.poke(context) is True
    rm.find.assert_called_with(mock.ANY, ["airflow-dag:etl", "airflow-task:export"], match_all=True)
    rm.get_app.assert_not_called()
    context["ti"].xcom_push.assert_called_once_with(key="app_id", value="application_1_0009")


def test_by_tags_newest_failed_raises(rm):
    rm.find.return_value = [app("KILLED", "KILLED", app_id="application_1_0009", diagnostics="killed by user")]
    with pytest.raises(AirflowException, match="killed by user"):
        sensor(tags=["x"]).poke(ctx())


# ---------------------------------------------------------------------------------------------- deferrable


def test_deferrable_defers_with_the_shared_trigger(rm):
    from airflow_provider_melon.version_compat import TaskDeferred

    rm.find.return_value = []
    s = sensor(
        tags=["airflow-run:abc"],
        deferrable=True,
        poll_interval=20,
        timeout=600,
        target_states=("RUNNING",),
        failure_states=("FAILED", "KILLED"),
    )
    with mock.patch("airflow_provider_melon.sensors.yarn.time.time", return_value=1000.0):
        with pytest.raises(TaskDeferred) as deferred:
            s.execute(ctx())
    trig = deferred.value.trigger
    assert isinstance(trig, YarnApplicationTrigger)
    kwargs = trig.serialize()[1]
    assert kwargs["tags"] == ["airflow-run:abc"] and kwargs["app_id"] is None
    assert kwargs["target_states"] == ["RUNNING"] and kwargs["failure_states"] == ["FAILED", "KILLED"]
    assert kwargs["cancel_on_kill"] is False  # the sensor does not own the application
    assert kwargs["deadline"] == 1600.0 and kwargs["poll_interval"] == 20.0
    assert deferred.value.method_name == "execute_complete"


def test_deferrable_finishes_at_once_when_already_there(rm):
    rm.get_app.return_value = app("FINISHED", "SUCCEEDED")
    assert sensor(application_id=APP, deferrable=True).execute(ctx()) is None  # no TaskDeferred


def test_execute_complete_events():
    s = sensor(application_id=APP, deferrable=True)
    context = ctx()
    s.execute_complete(context, {"status": "success", "app_id": APP, "message": "ok"})
    context["ti"].xcom_push.assert_called_once_with(key="app_id", value=APP)
    with pytest.raises(AirflowException, match="ended FINISHED/FAILED: boom"):
        s.execute_complete(
            context,
            {"status": "error", "app_id": APP, "message": f"YARN application {APP} ended FINISHED/FAILED: boom"},
        )
    with pytest.raises(AirflowSensorTimeout, match="timeout"):
        s.execute_complete(context, {"status": "timeout", "app_id": APP, "message": "hit the timeout"})
