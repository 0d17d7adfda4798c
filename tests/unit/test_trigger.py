"""YarnApplicationTrigger: serialize round trip, events, RM outage budget, timeout, kill semantics, progress.

The async hook is an ``AsyncMock`` with the public ``AsyncYarnHook`` methods; time is a fake clock that the
trigger's sleep advances, so poll intervals of the real minimum (5 s) cost nothing.
"""

from __future__ import annotations

import asyncio
import importlib
import types
from unittest import mock

import pytest

from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES, classify, duration_s, progress_line, task_summary
from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hooks.yarn import AsyncYarnHook
from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger
from airflow_provider_melon.version_compat import trigger_has_on_kill

APP = "application_1700000000000_0007"


def app(state, final="UNDEFINED", diagnostics="", **kw):
    out = {
        "id": APP,
        "state": state,
        "finalStatus": final,
        "diagnostics": diagnostics,
        "trackingUrl": f"http://rm:8088/proxy/{APP}/",
        "startedTime": 1_000_000,
        "finishedTime": 0,
        "elapsedTime": 0,
    }
    if state in TERMINAL_STATES:
        out.update(finishedTime=1_042_500, elapsedTime=42_500)
    out.update(kw)
    return out


class Clock:
    def __init__(self, start=1_000_000.0):
        self.now = start
        self.sleeps: list[float] = []

    def time(self):
        return self.now

    async def sleep(self, delay):
        self.sleeps.append(delay)
        self.now += delay


class _AsyncioOnClock:
    """The trigger module's ``asyncio`` with ``sleep`` on the test's fake clock (everything else is asyncio's)."""

    clock: "Clock | None" = None

    def __getattr__(self, name):
        return getattr(asyncio, name)

    async def sleep(self, delay):
        await self.clock.sleep(delay)


_ON_CLOCK = _AsyncioOnClock()


@pytest.fixture(autouse=True)
def _trigger_sleeps_on_the_fake_clock(monkeypatch):
    import airflow_provider_melon.triggers.yarn as trigger_module

    monkeypatch.setattr(trigger_module, "asyncio", _ON_CLOCK)
    yield
    _ON_CLOCK.clock = None


def make_trigger(responses=None, *, clock=None, am_status=None, **kw):
    """A trigger on a mocked AsyncYarnHook; ``responses`` feed get_application (values or exceptions)."""
    kw.setdefault("app_id", APP)
    kw.setdefault("yarn_conn_id", "yarn_test")
    kw.setdefault("poll_interval", 5)
    trig = YarnApplicationTrigger(**kw)
    hook = mock.AsyncMock(spec=AsyncYarnHook)
    # the AM status callable (absent from AsyncYarnHook today: the trigger then uses MelonHook in a thread)
    hook.am_status = (
        mock.AsyncMock(side_effect=am_status) if am_status is not None else mock.AsyncMock(return_value=None)
    )
    if responses is not None:
        hook.get_application.side_effect = list(responses)
    trig._hook = hook
    clock = clock or Clock()
    trig._now = clock.time
    trig._sleep_clock = clock
    _ON_CLOCK.clock = clock  # the trigger's own _sleep (its clamp to the deadline) sleeps on this clock
    trig._log = mock.Mock()
    return trig, hook


def logged(trig) -> list[str]:
    lines = []
    for level in ("info", "warning", "error"):
        for call in getattr(trig._log, level).call_args_list:
            fmt, *args = call.args
            lines.append(fmt % tuple(args) if args else fmt)
    return lines


async def collect(trig):
    return [event async for event in trig.run()]


# ---------------------------------------------------------------------------------------------- serialize


def test_serialize_round_trip_keeps_all_state():
    trig = YarnApplicationTrigger(
        app_id=APP,
        yarn_conn_id="yarn_x",
        poll_interval=7,
        deadline=1_700_000_123.5,
        cancel_on_kill=False,
        max_consecutive_failures=9,
        log_every_n=3,
        last_state="RUNNING",
        consecutive_failures=2,
        stream_progress=False,
        target_states=("RUNNING",),
        failure_states=("KILLED",),
        job_logs=True,
        log_chief="chief:0",
        log_lines_per_poll=50,
        log_max_bytes=4096,
        log_state={"resume": True},
        proxy_user="alice",
    )
    classpath, kwargs = trig.serialize()
    assert classpath == "airflow_provider_melon.triggers.yarn.YarnApplicationTrigger"
    assert kwargs == {
        "app_id": APP,
        "yarn_conn_id": "yarn_x",
        "poll_interval": 7.0,
        "deadline": 1_700_000_123.5,
        "cancel_on_kill": False,
        "max_consecutive_failures": 9,
        "log_every_n": 3,
        "last_state": "RUNNING",
        "consecutive_failures": 2,
        "tags": None,
        "target_states": ["RUNNING"],
        "failure_states": ["KILLED"],
        "stream_progress": False,
        "job_logs": True,
        "log_chief": "chief:0",
        "log_lines_per_poll": 50,
        "log_max_bytes": 4096,
        "log_state": {"resume": True},
        "proxy_user": "alice",
    }
    module, name = classpath.rsplit(".", 1)
    clone = getattr(importlib.import_module(module), name)(**kwargs)
    assert clone.serialize() == (classpath, kwargs)


def test_serialize_round_trip_through_airflow_serde():
    try:
        from airflow.sdk.serde import deserialize, serialize
    except ImportError:  # Airflow 3.0: serde is in airflow.serialization
        from airflow.serialization.serde import deserialize, serialize

    trig = YarnApplicationTrigger(tags=["Melon", "airflow-run:abc"], poll_interval=5, deadline=None)
    classpath, kwargs = trig.serialize()
    again = YarnApplicationTrigger(**deserialize(serialize(kwargs)))
    assert again.serialize() == (classpath, kwargs)


async def test_serialize_reflects_state_reached_while_running():
    trig, _ = make_trigger([app("ACCEPTED"), app("RUNNING"), app("FINISHED", "SUCCEEDED")])
    await collect(trig)
    assert trig.serialize()[1]["last_state"] == "FINISHED"


def test_poll_interval_minimum_and_target_required():
    with pytest.raises(ValueError, match="poll_interval"):
        YarnApplicationTrigger(app_id=APP, poll_interval=4.9)
    with pytest.raises(ValueError, match="app_id or tags"):
        YarnApplicationTrigger()


# ---------------------------------------------------------------------------------------------- events


async def test_success_event():
    trig, hook = make_trigger([app("ACCEPTED"), app("RUNNING"), app("FINISHED", "SUCCEEDED", "done")])
    events = await collect(trig)
    assert len(events) == 1
    payload = events[0].payload
    assert payload["status"] == "success"
    assert payload["app_id"] == APP
    assert payload["state"] == "FINISHED"
    assert payload["final_status"] == "SUCCEEDED"
    assert payload["duration_s"] == 42.5
    assert payload["diagnostics"] == "done"
    assert APP in payload["message"]
    assert hook.get_application.await_count == 3
    assert trig._sleep_clock.sleeps == [5, 5]
    hook.kill_application.assert_not_awaited()


@pytest.mark.parametrize(
    "final_app",
    [
        app("FINISHED", "FAILED", "task worker:1 on nm1 exited 3: Traceback ... ValueError"),
        app("FAILED", "FAILED", "task worker:1 on nm1 exited 3: Traceback ... ValueError"),
        app("KILLED", "KILLED", "task worker:1 on nm1 exited 3: Traceback ... ValueError"),
    ],
)
async def test_failure_event_carries_diagnostics(final_app):
    trig, _ = make_trigger([app("RUNNING"), final_app])
    [event] = await collect(trig)
    assert event.payload["status"] == "error"
    assert event.payload["final_status"] == final_app["finalStatus"]
    assert event.payload["state"] == final_app["state"]
    assert "worker:1 on nm1 exited 3" in event.payload["diagnostics"]
    assert "worker:1 on nm1 exited 3" in event.payload["message"]


async def test_timeout_event_at_deadline_without_killing():
    clock = Clock()
    trig, hook = make_trigger(None, clock=clock, deadline=clock.now + 12)
    hook.get_application.return_value = app("RUNNING")
    [event] = await collect(trig)
    assert event.payload["status"] == "timeout"
    assert event.payload["app_id"] == APP
    assert event.payload["state"] == "RUNNING"
    assert "timeout" in event.payload["message"]
    assert clock.now == pytest.approx(1_000_012)  # slept 5, 5, then the 2 s left: no overshoot
    assert clock.sleeps == [5, 5, 2]
    hook.kill_application.assert_not_awaited()  # the operator decides (cancel_on_kill)


async def test_target_state_running_for_sensors():
    trig, _ = make_trigger([app("ACCEPTED"), app("RUNNING")], target_states=("RUNNING",))
    [event] = await collect(trig)
    assert event.payload["status"] == "success"
    assert event.payload["state"] == "RUNNING"


async def test_finished_but_not_a_target_is_an_error():
    trig, _ = make_trigger([app("FINISHED", "SUCCEEDED")], target_states=("RUNNING",))
    [event] = await collect(trig)
    assert event.payload["status"] == "error"
    assert "not one of RUNNING" in event.payload["message"]


# ---------------------------------------------------------------------------------------------- RM outages


def outage(n):
    return [YarnApiError("Connection refused", url="http://rm:8088/ws/v1/cluster/apps/x")] * n


async def test_outage_within_budget_recovers():
    trig, hook = make_trigger(
        [app("RUNNING"), *outage(3), app("RUNNING"), app("FINISHED", "SUCCEEDED")], max_consecutive_failures=3
    )
    [event] = await collect(trig)
    assert event.payload["status"] == "success"
    assert hook.get_application.await_count == 6
    warnings = [line for line in logged(trig) if "failed (" in line]
    assert len(warnings) == 3 and "(3/3 in a row)" in warnings[-1]


async def test_budget_counts_consecutive_failures_only():
    trig, _ = make_trigger(
        [*outage(2), app("RUNNING"), *outage(2), app("FINISHED", "SUCCEEDED")], max_consecutive_failures=2
    )
    [event] = await collect(trig)
    assert event.payload["status"] == "success"


async def test_outage_beyond_budget_is_an_error_event():
    trig, hook = make_trigger([app("RUNNING"), *outage(4), app("FINISHED", "SUCCEEDED")], max_consecutive_failures=3)
    [event] = await collect(trig)
    assert event.payload["status"] == "error"
    assert "unreachable for 4 polls in a row" in event.payload["message"]
    assert "Connection refused" in event.payload["message"]
    assert event.payload["state"] == "RUNNING"  # the last state seen
    assert hook.get_application.await_count == 5
    hook.kill_application.assert_not_awaited()


async def test_unexpected_exception_also_counts_against_budget():
    trig, _ = make_trigger([RuntimeError("boom")] * 2, max_consecutive_failures=1)
    [event] = await collect(trig)
    assert event.payload["status"] == "error" and "boom" in event.payload["message"]


# ---------------------------------------------------------------------------------------------- kill / cleanup


async def test_on_kill_kills_when_cancel_on_kill():
    trig, hook = make_trigger(cancel_on_kill=True)
    await trig.on_kill()
    hook.kill_application.assert_awaited_once_with(APP)


async def test_on_kill_waits_until_the_rm_no_longer_shows_the_app_live():
    """The RM shows a kill in progress as RUNNING for a moment; the task's next try must not find it live."""
    trig, hook = make_trigger(cancel_on_kill=True)
    hook.get_state.side_effect = ["RUNNING", "RUNNING", "KILLED"]
    await trig.on_kill()
    assert hook.get_state.await_count == 3
    assert f"YARN application {APP} is KILLED" in logged(trig)


async def test_on_kill_keeps_app_when_cancel_on_kill_false():
    trig, hook = make_trigger(cancel_on_kill=False)
    await trig.on_kill()
    hook.kill_application.assert_not_awaited()


async def test_on_kill_swallows_kill_errors():
    trig, hook = make_trigger()
    hook.kill_application.side_effect = YarnApiError("gone", status=404)
    await trig.on_kill()  # must not raise
    assert any("Could not kill" in line for line in logged(trig))


async def test_cleanup_never_kills():
    trig, hook = make_trigger(cancel_on_kill=True)
    await trig.cleanup()
    hook.kill_application.assert_not_awaited()
    hook.close.assert_called_once()


@pytest.mark.skipif(not trigger_has_on_kill(), reason="Airflow < 3.3: the triggerer calls no BaseTrigger.on_kill()")
@pytest.mark.parametrize("user_action", [True, False], ids=["user-kill", "triggerer-stops"])
async def test_this_airflows_triggerer_calls_on_kill_on_a_user_kill_only(monkeypatch, user_action):
    """The installed Airflow's own TriggerRunner.run_trigger: a trigger cancelled for a user action (mark failed,
    clear) gets on_kill() — the application is killed —; one cancelled because the triggerer stops does not."""
    from airflow.jobs import triggerer_job_runner as runner_module

    from airflow_provider_melon.version_compat import trigger_has_on_kill

    monkeypatch.setenv("AIRFLOW_DISABLE_GREENBACK_PORTAL", "true")
    trig, hook = make_trigger([app("RUNNING")] * 100, clock=Clock())
    runner = runner_module.TriggerRunner()
    runner.triggers[1] = {"name": "melon", "events": 0}
    task = asyncio.ensure_future(runner.run_trigger(1, trig))
    runner.triggers[1]["task"] = task
    for _ in range(100):  # it polls
        if hook.get_application.await_count:
            break
        await asyncio.sleep(0)
    assert hook.get_application.await_count, "the trigger never polled"
    if user_action:
        runner.to_cancel.append(1)
        await runner.cancel_triggers()  # what the triggerer does for a user action on the task
    else:
        task.cancel()  # what it does when it stops
    with pytest.raises(asyncio.CancelledError):
        await task
    assert trigger_has_on_kill()
    assert hook.kill_application.await_count == (1 if user_action else 0), hook.kill_application.await_args_list


def _task_in_state(monkeypatch, trig, state):
    """The trigger's task instance, whose state the API server (``get_task_states``) reports as ``state``
    (an exception: the call fails)."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    trig.task_instance = types.SimpleNamespace(dag_id="d", task_id="train", run_id="r1", map_index=-1)
    calls = []

    def get_task_states(**kw):
        calls.append(kw)
        if isinstance(state, Exception):
            raise state
        return {"r1": {"train": state}}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(get_task_states))
    return calls


@pytest.mark.skipif(not trigger_has_on_kill(), reason="Airflow < 3.3: the triggerer calls no BaseTrigger.on_kill()")
@pytest.mark.parametrize(
    "state,killed",
    [("failed", True), ("success", True), (None, True), ("deferred", False), (RuntimeError("api down"), True)],
    ids=["marked-failed", "marked-success", "cleared", "handed-over", "state-unknown"],
)
async def test_on_kill_leaves_the_app_to_the_next_triggerer_while_the_task_is_still_deferred(
    monkeypatch, state, killed
):
    """Airflow 3.3 calls on_kill() also for a trigger it handed to another triggerer after a heartbeat lapse
    (apache/airflow#73454): the task is still deferred then, and the other trigger follows the app."""
    from airflow_provider_melon.version_compat import TRIGGER_ON_KILL_ALSO_ON_HANDOVER

    assert TRIGGER_ON_KILL_ALSO_ON_HANDOVER  # this Airflow (3.3.2) has the defect
    trig, hook = make_trigger(cancel_on_kill=True)
    calls = _task_in_state(monkeypatch, trig, state)
    await trig.on_kill()
    assert calls and calls[0]["run_ids"] == ["r1"] and calls[0]["task_ids"] == ["train"]
    assert hook.kill_application.await_count == (1 if killed else 0)
    if not killed:
        assert any("still deferred" in line for line in logged(trig)), logged(trig)


@pytest.mark.parametrize(
    "state,killed",
    [("failed", True), (None, True), ("deferred", False), (RuntimeError("api down"), False)],
    ids=["marked-failed", "cleared", "triggerer-stops", "state-unknown"],
)
async def test_below_3_3_a_cancelled_trigger_kills_once_the_task_left_deferred(monkeypatch, state, killed):
    """Airflow 3.0–3.2 cancel a trigger the same way for a user's kill and a triggerer stop, with no on_kill():
    the cancellation path asks the task's state (a clear leaves it None: that is a kill too)."""
    import airflow_provider_melon.triggers.yarn as trigger_module

    monkeypatch.setattr(trigger_module, "trigger_has_on_kill", lambda: False)
    trig, hook = make_trigger(cancel_on_kill=True)
    polled = asyncio.Event()

    async def get_application(app_id):  # the second poll waits (until the cancellation)
        if polled.is_set():
            await asyncio.Event().wait()
        polled.set()
        return app("RUNNING")

    hook.get_application.side_effect = get_application
    _task_in_state(monkeypatch, trig, state)
    task = asyncio.ensure_future(collect(trig))
    await asyncio.wait_for(polled.wait(), 10)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert hook.kill_application.await_count == (1 if killed else 0)


# ---------------------------------------------------------------------------------------------- tags mode


async def test_tags_mode_follows_newest_app_once_it_appears():
    trig, hook = make_trigger(app_id=None, tags=["airflow-run:abc", "airflow-task:train"])
    newest = app("RUNNING", id="application_1700000000000_0009")
    older = app("FINISHED", "FAILED", id="application_1700000000000_0003")
    hook.find_applications.side_effect = [[], [newest, older]]
    hook.get_application.side_effect = [app("FINISHED", "SUCCEEDED", id=newest["id"])]
    [event] = await collect(trig)
    assert event.payload["status"] == "success"
    assert event.payload["app_id"] == "application_1700000000000_0009"
    hook.find_applications.assert_awaited_with(["airflow-run:abc", "airflow-task:train"], match_all=True)
    hook.get_application.assert_awaited_once_with("application_1700000000000_0009")


# ---------------------------------------------------------------------------------------------- logging / progress

AM_STATUS = {
    "app_id": APP,
    "state": "RUNNING",
    "tasks": [
        {
            "role": "chief",
            "index": 0,
            "state": "RUNNING",
            "step": 120,
            "total": 400,
            "loss": 0.3125,
            "attempt": 0,
            "metrics": {"accuracy": 0.875},
        },
        {"role": "worker", "index": 0, "state": "RUNNING", "step": 118, "loss": 0.33, "attempt": 0},
        {"role": "worker", "index": 1, "state": "RUNNING", "step": 119, "loss": 0.32, "attempt": 1},
    ],
}


async def test_progress_streamed_every_n_polls_and_last_tasks_in_event():
    running = [app("RUNNING")] * 7
    statuses = [
        dict(AM_STATUS),
        dict(AM_STATUS, tasks=[dict(t, step=t["step"] + 100) for t in AM_STATUS["tasks"]]),
        None,
    ]
    trig, hook = make_trigger([*running, app("FINISHED", "SUCCEEDED")], am_status=statuses, log_every_n=3)
    [event] = await collect(trig)
    # asked on running polls 1, 4 and 7; the third time the AM is unreachable (None): nothing logged
    assert hook.am_status.await_count == 3
    progress = [line for line in logged(trig) if "AM RUNNING" in line]
    assert len(progress) == 2
    assert "chief[1] RUNNING=1 step=120/400 loss=0.3125 accuracy=0.875" in progress[0]
    assert "worker[2] RUNNING=2 step=119 loss=0.32 restarts=1" in progress[0]
    assert "step=220" in progress[1]
    assert event.payload["tasks"][0]["step"] == 220  # the last view the AM gave


async def test_state_changes_and_heartbeat_logged():
    trig, _ = make_trigger(
        [app("ACCEPTED"), *[app("RUNNING")] * 6, app("FINISHED", "SUCCEEDED")], log_every_n=3, stream_progress=False
    )
    await collect(trig)
    lines = logged(trig)
    assert any("- -> ACCEPTED" in line for line in lines)
    assert any("ACCEPTED -> RUNNING" in line for line in lines)
    assert any("RUNNING -> FINISHED" in line for line in lines)
    heartbeats = [line for line in lines if "still RUNNING" in line]
    assert [h.split("poll ")[1].split(",")[0] for h in heartbeats] == ["3", "6"]


async def test_no_am_progress_when_stream_progress_off():
    trig, hook = make_trigger(
        [app("RUNNING"), app("FINISHED", "SUCCEEDED")], am_status=[AM_STATUS], stream_progress=False
    )
    await collect(trig)
    hook.am_status.assert_not_awaited()


async def test_am_status_falls_back_to_melon_hook_in_a_thread():
    trig, hook = make_trigger()
    del hook.am_status  # an AsyncYarnHook without am_status
    with (
        mock.patch("airflow_provider_melon.hooks.melon.MelonHook.am_status", return_value=AM_STATUS) as fetch,
        mock.patch("airflow_provider_melon.hooks.melon.MelonHook.__init__", return_value=None),
    ):
        assert await trig.am_status() == AM_STATUS
    fetch.assert_called_once_with(APP)


# ---------------------------------------------------------------------------------------------- pure helpers


@pytest.mark.parametrize(
    "state,final,expected",
    [
        ("RUNNING", "UNDEFINED", None),
        ("ACCEPTED", "UNDEFINED", None),
        ("FINISHED", "SUCCEEDED", "success"),
        ("FINISHED", "FAILED", "error"),
        ("FINISHED", "KILLED", "error"),
        ("FAILED", "FAILED", "error"),
        ("KILLED", "KILLED", "error"),
    ],
)
def test_classify_defaults(state, final, expected):
    assert classify({"state": state, "finalStatus": final}) == expected


def test_duration_and_summary_helpers():
    assert duration_s({"elapsedTime": 1500}) == 1.5
    assert duration_s({"startedTime": 1000, "finishedTime": 4000, "elapsedTime": 0}) == 3.0
    assert duration_s({}) is None
    summary = task_summary(
        AM_STATUS["tasks"] + [{"role": "worker", "index": 2, "state": "FAILED", "exit_code": 3}],
        {"chief": 1, "worker": 3, "ps": 1},
    )
    assert summary["worker"] == {
        "instances": 3,
        "states": {"RUNNING": 2, "FAILED": 1},
        "step": 119,
        "total": None,
        "loss": 0.32,
        "metrics": {},
        "restarts": 1,
        "failed_exit_codes": [3],
    }
    assert (summary["chief"]["step"], summary["chief"]["total"], summary["chief"]["metrics"]) == (
        120,
        400,
        {"accuracy": 0.875},
    )
    assert "chief[1] RUNNING=1 step=120/400 loss=0.3125 accuracy=0.875" in progress_line(AM_STATUS)
    assert summary["ps"]["states"] == {}
    assert progress_line(None) is None
