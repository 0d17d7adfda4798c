"""The one watch (hadoop/watch.py) driven on its own, on a fake clock: the rules the callers' tests do not reach
one by one (the CLI's hiccups by time, the deadline checked after a look, the sync driver and an awaitable)."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hadoop.watch import Watch, WatchPolicy, adrive, drive, watch

APP = "application_1_0001"


def app(state, final="UNDEFINED"):
    return {"id": APP, "state": state, "finalStatus": final}


class Clock:
    def __init__(self):
        self.now, self.sleeps = 1000.0, []

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def io(clock, answers, **more):
    answers = iter(answers)

    def get():
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return {"now": lambda: clock.now, "get": get, "sleep": clock.sleep, **more}


def away():
    return YarnApiError("Connection refused")  # no HTTP status: the RM is not answering


def cli_policy(**kw):
    return WatchPolicy(10, transient=lambda exc: isinstance(exc, YarnApiError), grace_s=25, look_at_deadline=True, **kw)


def test_an_rm_away_is_ridden_out_for_the_grace_then_raised():
    clock = Clock()
    outcome = drive(
        watch(Watch(APP, cli_policy())), io(clock, [app("RUNNING"), away(), away(), app("KILLED", "KILLED")])
    )
    assert outcome.verdict == "error" and outcome.app["state"] == "KILLED"
    clock = Clock()
    with pytest.raises(YarnApiError, match="refused"):  # away at 10, 20, 30, 40 s: past the 25 s grace at 40
        drive(watch(Watch(APP, cli_policy())), io(clock, [app("RUNNING"), *[away() for _ in range(4)]]))
    assert clock.sleeps == [10, 10, 10, 10]


def test_an_error_before_the_first_answer_is_raised_at_once():
    clock = Clock()
    with pytest.raises(YarnApiError):
        drive(watch(Watch(APP, cli_policy())), io(clock, [away()]))
    assert clock.sleeps == []


def test_a_deadline_checked_after_each_look_still_looks_once_and_does_not_overshoot():
    clock = Clock()
    outcome = drive(watch(Watch(APP, cli_policy(deadline=clock.now))), io(clock, [app("RUNNING")]))
    assert outcome.verdict == "timeout" and outcome.app["state"] == "RUNNING" and clock.sleeps == []
    clock = Clock()
    outcome = drive(watch(Watch(APP, cli_policy(deadline=clock.now + 25))), io(clock, [app("RUNNING")] * 4))
    assert outcome.verdict == "timeout" and clock.sleeps == [10, 10, 5]  # and a last look at the deadline


def test_a_report_already_read_is_the_first_look():
    clock, seen = Clock(), []
    outcome = drive(watch(Watch(APP, cli_policy()), app("FINISHED", "SUCCEEDED")), io(clock, [], seen=seen.append))
    assert outcome.verdict == "success" and seen == [app("FINISHED", "SUCCEEDED")] and clock.sleeps == []


def test_the_sync_driver_refuses_an_awaitable_and_the_async_one_awaits_it():
    clock = Clock()

    async def pause(seconds):
        await asyncio.sleep(0)
        clock.sleep(seconds)

    answers = [app("RUNNING"), app("FINISHED", "SUCCEEDED")]
    with pytest.raises(RuntimeError, match="awaitable"):
        drive(watch(Watch(APP, cli_policy())), io(clock, answers, sleep=pause))
    clock = Clock()
    outcome = asyncio.run(adrive(watch(Watch(APP, cli_policy())), io(clock, answers, sleep=pause)))
    assert outcome.verdict == "success" and clock.sleeps == [10]


def test_a_failed_look_ridden_out_hands_the_caller_the_last_report():
    """`melon logs -f` reads the logs on while the RM restarts: its hook gets the last report after each failed look."""
    clock, seen = Clock(), []
    answers = [app("RUNNING"), away(), app("FINISHED", "SUCCEEDED")]
    outcome = drive(watch(Watch(APP, cli_policy())), io(clock, answers, seen=lambda a: seen.append(a["state"])))
    assert outcome.verdict == "success" and seen == ["RUNNING", "RUNNING", "FINISHED"]
