"""YarnApplicationTrigger against the real RM and AM: events, AM progress, and the triggerer's two exits
(cancelled by a restart: cleanup() leaves the app running; the task killed: on_kill() kills it)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from airflow_provider_melon.hadoop.app_state import LIVE_STATES
from airflow_provider_melon.hooks.yarn import AsyncYarnHook
from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger
from tests.counting_proxy import CountingProxy

pytestmark = pytest.mark.integration


def _job(seconds: float, code: int = 0) -> dict:
    return {
        "name": f"trigger-live-{seconds:g}s-rc{code}",
        "framework": "generic",
        "entrypoint": f'python -c "import sys, time; time.sleep({seconds}); sys.exit({code})"',
        "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1, "gpu_memory": "1GiB"}},
    }


def _trigger(minicluster, app_id: str, **kw) -> YarnApplicationTrigger:
    trigger = YarnApplicationTrigger(app_id=app_id, poll_interval=5, log_every_n=1, **kw)
    trigger._hook = AsyncYarnHook(rm_urls=[minicluster.rm_web_url], user=minicluster.user)  # no Airflow connection
    return trigger


async def _first_event(trigger: YarnApplicationTrigger, timeout: float):
    gen = trigger.run()
    try:
        return await asyncio.wait_for(gen.__anext__(), timeout)
    finally:
        await gen.aclose()
        await trigger.cleanup()


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_success_and_failure_events_with_progress(minicluster, jobs):
    ok, bad = jobs.submit(_job(10)), jobs.submit(_job(1, code=3))  # 10 s: two RUNNING polls at least
    trigger, seen = _trigger(minicluster, ok), _Lines()
    trigger._log = logging.getLogger("test_trigger_live")  # the trigger's own lines, as the triggerer logs them
    trigger._log.setLevel(logging.INFO)
    trigger._log.addHandler(seen)
    event = asyncio.run(_first_event(trigger, timeout=180))
    assert event.payload["status"] == "success" and event.payload["app_id"] == ok
    assert event.payload["final_status"] == "SUCCEEDED" and event.payload["duration_s"] > 0
    # AM-reported task progress reached the log while the app ran
    assert any(line.startswith(f"{ok}: AM RUNNING | worker[1] ") for line in seen.lines), seen.lines
    assert f"YARN application {ok} reached FINISHED (final status SUCCEEDED)" in seen.lines, seen.lines

    event = asyncio.run(_first_event(_trigger(minicluster, bad), timeout=180))
    assert event.payload["status"] == "error" and event.payload["final_status"] == "FAILED"
    assert "exited 3" in event.payload["message"]


def test_timeout_event_leaves_the_app_to_the_operator(minicluster, jobs):
    app_id = jobs.submit(_job(120))
    event = asyncio.run(_first_event(_trigger(minicluster, app_id, deadline=time.time() + 8), timeout=60))
    assert event.payload["status"] == "timeout" and event.payload["app_id"] == app_id
    assert jobs.app(app_id)["state"] in LIVE_STATES


def test_cancel_then_cleanup_keeps_the_app_and_on_kill_kills_it(minicluster, jobs):
    app_id = jobs.submit(_job(120))
    jobs.wait(app_id, timeout=120, states={"RUNNING"})

    async def scenario():
        trigger = _trigger(minicluster, app_id)
        task = asyncio.ensure_future(trigger.run().__anext__())
        for _ in range(600):  # its first poll, within 120 s
            if trigger.last_state is not None or task.done():
                break
            await asyncio.sleep(0.2)
        assert trigger.last_state == "RUNNING", f"no poll in 120 s ({task})"
        task.cancel()  # what the triggerer does when it stops or moves this trigger
        with pytest.raises(asyncio.CancelledError):
            await task
        await trigger.cleanup()
        still = jobs.app(app_id)["state"]
        killer = _trigger(minicluster, app_id)  # a fresh trigger from the serialized state, as Airflow 3.3 has
        t0 = time.monotonic()
        await killer.on_kill()
        return still, t0

    still, t0 = asyncio.run(scenario())
    assert still == "RUNNING", "cleanup() must never kill the application"
    assert jobs.wait(app_id, timeout=10, states={"KILLED"})["state"] == "KILLED"
    assert time.monotonic() - t0 <= 10


def test_on_kill_respects_cancel_on_kill_false(minicluster, jobs):
    """Counted at the RM's door (a proxy in front of it): on_kill() with cancel_on_kill off sends no kill at all;
    the same call with it on, through the same proxy, sends one (so the count can see a kill)."""
    app_id = jobs.submit(_job(60))
    jobs.wait(app_id, timeout=120, states={"RUNNING"})
    with CountingProxy(minicluster.rm_web_url) as proxy:

        def through_proxy(**kw):
            trigger = _trigger(minicluster, app_id, **kw)
            trigger._hook = AsyncYarnHook(rm_urls=[proxy.url], user=minicluster.user)
            return trigger

        asyncio.run(through_proxy(cancel_on_kill=False).on_kill())
        kept = proxy.snapshot()
        assert jobs.app(app_id)["state"] == "RUNNING"
        asyncio.run(through_proxy(cancel_on_kill=True).on_kill())
        killed = proxy.snapshot()
    assert kept["kill"] == 0, f"on_kill() with cancel_on_kill=False sent {kept['kill']} kill request(s): {kept}"
    assert killed["kill"] == 1, killed
    assert jobs.wait(app_id, timeout=10, states={"KILLED"})["state"] == "KILLED"
