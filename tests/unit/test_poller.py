"""RmPoller: one RM list call per cycle shared by the triggers of a process (fan-out, single-GET fallback,
errors retried next cycle, unsubscribe on cancel) and a hanging RM that leaves the event loop and its default
executor free. The RM is requests_mock (a real AsyncYarnHook/YarnHook in front of it), except for the hanging
one: a loopback socket that accepts and never answers.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time

import pytest
import requests_mock as rm_mock

from airflow_provider_melon.hadoop.app_state import LIVE_STATES
from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hooks.yarn import AsyncYarnHook
from airflow_provider_melon.triggers.poller import RmPoller
from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger

RM = "http://rm-poller.test:8088"
APPS = RM + "/ws/v1/cluster/apps"


def app(n: int, state: str = "RUNNING", final: str = "UNDEFINED") -> dict:
    return {
        "id": f"application_1700000000000_{n:04d}",
        "state": state,
        "finalStatus": final,
        "applicationTags": "melon",
        "diagnostics": "",
    }


def aid(n: int) -> str:
    return app(n)["id"]


def hook(**kw) -> AsyncYarnHook:
    kw.setdefault("retries", 0)
    kw.setdefault("backoff", 0)
    return AsyncYarnHook(rm_urls=[RM], user="alice", **kw)


def list_calls(m) -> list:
    return [r for r in m.request_history if r.path == "/ws/v1/cluster/apps"]


def single_calls(m) -> list:
    return [r for r in m.request_history if r.path.startswith("/ws/v1/cluster/apps/")]


async def test_one_list_call_fans_out_to_every_waiter():
    with rm_mock.Mocker() as m:
        m.get(APPS, json={"apps": {"app": [app(1), app(2, "ACCEPTED"), app(3), app(9)]}})
        poller = RmPoller.for_hook(hook())
        reports = await asyncio.gather(*(poller.report(aid(n), 5) for n in (1, 2, 3)))
    assert [r["id"] for r in reports] == [aid(1), aid(2), aid(3)]
    assert reports[1]["state"] == "ACCEPTED"
    assert len(m.request_history) == 1  # one RM request for three triggers
    query = list_calls(m)[0].qs
    assert query["states"] == [",".join(LIVE_STATES).lower()] and query["applicationtags"] == ["melon"]
    assert query["user.name"] == ["alice"]  # the hook's identity
    assert query["deselects"] == ["resourcerequests,resourceinfo,timeouts"]  # the parts no trigger reads
    assert poller.stats == {"cycles": 1, "list_calls": 1, "single_gets": 0, "answered": 3}


async def test_apps_missing_from_the_list_get_their_own_get():
    """An application that ended (no longer live) or is not a MeLoN one (no tag) still gets its full report."""
    with rm_mock.Mocker() as m:
        m.get(APPS, json={"apps": {"app": [app(1)]}})
        m.get(f"{APPS}/{aid(2)}", json={"app": app(2, "FINISHED", "SUCCEEDED")})
        m.get(f"{APPS}/{aid(3)}", json={"app": {**app(3, "ACCEPTED"), "applicationTags": "external"}})
        poller = RmPoller.for_hook(hook())
        one, two, three = await asyncio.gather(*(poller.report(aid(n), 5) for n in (1, 2, 3)))
    assert (one["state"], two["state"], two["finalStatus"], three["state"]) == (
        "RUNNING",
        "FINISHED",
        "SUCCEEDED",
        "ACCEPTED",
    )
    assert len(list_calls(m)) == 1 and sorted(r.path.rsplit("/", 1)[1] for r in single_calls(m)) == [aid(2), aid(3)]


async def test_a_single_app_is_one_get_not_a_list():
    with rm_mock.Mocker() as m:
        m.get(f"{APPS}/{aid(1)}", json={"app": app(1)})
        report = await RmPoller.for_hook(hook()).report(aid(1), 5)
    assert report["state"] == "RUNNING" and [r.path for r in m.request_history] == [f"/ws/v1/cluster/apps/{aid(1)}"]


async def test_list_error_reaches_every_waiter_and_the_next_cycle_retries():
    with rm_mock.Mocker() as m:
        m.get(APPS, [{"status_code": 503, "text": "down"}, {"json": {"apps": {"app": [app(1), app(2)]}}}])
        poller = RmPoller.for_hook(hook())
        first = await asyncio.gather(*(poller.report(aid(n), 0.05) for n in (1, 2)), return_exceptions=True)
        assert all(isinstance(r, YarnApiError) and r.status == 503 for r in first)
        second = await asyncio.gather(*(poller.report(aid(n), 0.05) for n in (1, 2)))
    assert [r["state"] for r in second] == ["RUNNING", "RUNNING"] and len(list_calls(m)) == 2
    assert not single_calls(m)  # a failed list is a failed poll, not N single GETs


async def test_staggered_waiters_share_cycles():
    """Triggers that poll in loops of their own (each waits for the next cycle after its report) still cost one
    list call per cycle, not one per trigger."""
    with rm_mock.Mocker() as m:
        m.get(APPS, json={"apps": {"app": [app(n) for n in range(20)]}})
        m.get(re.compile(re.escape(APPS) + "/"), json={"app": app(0)})  # a cycle with only one trigger due
        poller = RmPoller.for_hook(hook())

        async def follow(n: int) -> int:
            await asyncio.sleep(n * 0.003)  # triggers start at different moments
            due = None
            for _ in range(4):
                await poller.report(aid(n), 0.1, due)
                due = time.monotonic() + 0.1
            return n

        assert await asyncio.gather(*(follow(n) for n in range(20))) == list(range(20))
    assert len(m.request_history) <= 6, [r.url for r in m.request_history]  # 4 rounds of 20 polls
    assert poller.stats["cycles"] == len(m.request_history)  # one RM request per cycle


async def test_cancelled_waiter_unsubscribes_and_idle_poller_leaves_the_registry():
    with rm_mock.Mocker() as m:
        m.get(APPS, json={"apps": {"app": [app(1)]}})
        h = hook()
        poller = RmPoller.for_hook(h)
        waiter = asyncio.ensure_future(poller.report(aid(1), 5, time.monotonic() + 60))
        await asyncio.sleep(0.05)
        assert poller.watched == {aid(1)}
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert poller.watched == set()
        await asyncio.sleep(1.3)  # idle after a grace of a cycle (at least 1 s)
        assert poller._task.done() and not poller._waiters
        assert RmPoller.for_hook(h) is not poller  # the idle one is gone; a new trigger gets a fresh one
    assert not m.request_history  # nobody was due: no RM call


async def test_pollers_are_per_rm_identity():
    a, b, other_user = hook(), hook(), AsyncYarnHook(rm_urls=[RM], user="bob", retries=0, backoff=0)
    assert RmPoller.for_hook(a) is RmPoller.for_hook(b)
    assert RmPoller.for_hook(a) is not RmPoller.for_hook(other_user)


@pytest.fixture
def hanging_rm():
    """A loopback RM that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(256)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


async def test_hanging_rm_never_starves_the_loop_or_its_default_executor(hanging_rm):
    """50 triggers follow their apps through a hanging RM: the loop keeps ticking, asyncio.to_thread (the default
    executor the triggerer's other work needs) answers at once, the poller holds at most its own few threads, and
    every trigger gets its error event once its budget is spent."""
    triggers = []
    for n in range(50):
        trig = YarnApplicationTrigger(app_id=aid(n), poll_interval=5, max_consecutive_failures=0)
        trig._hook = AsyncYarnHook(rm_urls=[hanging_rm], user="alice", retries=0, backoff=0, timeout=(1.0, 1.5))
        triggers.append(trig)

    async def first_event(trig):
        gen = trig.run()
        try:
            return (await gen.__anext__()).payload
        finally:
            await gen.aclose()

    followers = [asyncio.ensure_future(first_event(t)) for t in triggers]
    ticks, started = 0, time.monotonic()
    while time.monotonic() - started < 1.0:
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks >= 20  # the loop was never blocked for long (100 on an idle host; a busy one ticks less)
    t0 = time.monotonic()
    assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 1.0) == "free"
    assert time.monotonic() - t0 < 0.9  # the default executor is not held by RM calls (they hang 1.5 s each)
    poller_threads = [t for t in threading.enumerate() if t.name.startswith("melon-rm-poller")]
    assert 1 <= len(poller_threads) <= 4
    events = await asyncio.wait_for(asyncio.gather(*followers), 30)
    assert {e["status"] for e in events} == {"error"}
    assert all("ReadTimeout" in e["message"] for e in events)


async def test_triggers_share_the_poller_and_fire_on_completion(monkeypatch):
    """Real triggers (no stand-ins) on one RM: one list call per cycle, and each fires when its app ends; the same
    poller serves every cycle (it does not go idle between two cycles while its triggers handle their reports)."""
    ids = [aid(n) for n in range(5)]
    pollers = set()
    for_hook = RmPoller.for_hook.__func__

    def spy(cls, h):
        poller = for_hook(cls, h)
        pollers.add(id(poller))
        return poller

    monkeypatch.setattr(RmPoller, "for_hook", classmethod(spy))
    with rm_mock.Mocker() as m:
        running = {"json": {"apps": {"app": [app(n) for n in range(5)]}}}
        m.get(
            APPS,
            [
                running,
                running,
                {"json": {"apps": {"app": [app(n) for n in range(1, 5)]}}},
                {"json": {"apps": {"app": []}}},
            ],
        )
        m.get(f"{APPS}/{ids[0]}", json={"app": app(0, "FINISHED", "SUCCEEDED")})
        for n in range(1, 5):
            m.get(f"{APPS}/{ids[n]}", json={"app": app(n, "KILLED", "KILLED")})
        triggers = []
        for app_id in ids:
            trig = YarnApplicationTrigger(app_id=app_id, poll_interval=5, stream_progress=False)
            trig._hook = hook()
            trig.poll_interval = 0.05  # below the 5 s floor, for the test only
            triggers.append(trig)

        async def first_event(trig):
            return (await trig.run().__anext__()).payload

        events = await asyncio.wait_for(asyncio.gather(*(first_event(t) for t in triggers)), 30)
    assert [e["status"] for e in events] == ["success"] + ["error"] * 4
    assert [e["state"] for e in events] == ["FINISHED"] + ["KILLED"] * 4
    assert len(list_calls(m)) == 4  # 4 cycles, 5 triggers
    assert len(pollers) == 1
    assert sorted(r.path.rsplit("/", 1)[1] for r in single_calls(m)) == sorted(ids)  # once each, when it ended


async def test_old_per_trigger_polling_stays_reachable():
    with rm_mock.Mocker() as m:
        m.get(f"{APPS}/{aid(1)}", json={"app": app(1, "FINISHED", "SUCCEEDED")})
        trig = YarnApplicationTrigger(app_id=aid(1), poll_interval=5)
        trig._hook = hook()
        trig.coalesce_polls = False
        event = await trig.run().__anext__()
    assert event.payload["status"] == "success" and not list_calls(m)


async def test_cycles_keep_a_fixed_rate_when_the_rm_is_slow():
    """Waiters that ask for their next report at ``last_cycle + interval`` (as the trigger does) get cycles one
    interval apart, not interval + the RM's answer time."""
    starts: list[float] = []

    def slow_list(request, context):
        starts.append(time.monotonic())
        time.sleep(0.4)  # the RM takes 0.4 s to answer
        return {"apps": {"app": [app(1), app(2)]}}

    with rm_mock.Mocker() as m:
        m.get(APPS, json=slow_list)
        poller = RmPoller.for_hook(hook())

        async def follow(n: int) -> None:
            due = None
            for _ in range(5):
                await poller.report(aid(n), 0.5, due)
                due = poller.last_cycle + 0.5

        await asyncio.gather(follow(1), follow(2))
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert len(starts) == 5 and sorted(gaps)[len(gaps) // 2] < 0.75, gaps  # 0.9 s if the answer time added up
