"""The shared RM poller against the real mini cluster: K triggers following K real MeLoN jobs in one event loop
cost one RM list request per cycle (counted by a loopback proxy in front of the RM), not K, and every trigger
fires when its job ends."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_melon.hooks.yarn import AsyncYarnHook
from airflow_provider_melon.triggers.poller import RmPoller
from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger
from tests.counting_proxy import CountingProxy

pytestmark = pytest.mark.integration

K = 4


def _job(seconds: int) -> dict:
    return {
        "name": f"poller-live-{seconds}s",
        "framework": "generic",
        "entrypoint": f'python -c "import time; time.sleep({seconds})"',
        "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
    }


def test_k_triggers_share_one_list_call_per_cycle_and_all_fire(minicluster, jobs):
    app_ids = [jobs.submit(_job(8 + 6 * i)) for i in range(K)]  # they end at different cycles
    with CountingProxy(minicluster.rm_web_url) as proxy:

        async def scenario():
            triggers = []
            for app_id in app_ids:
                trig = YarnApplicationTrigger(app_id=app_id, poll_interval=5, stream_progress=False)
                trig._hook = AsyncYarnHook(rm_urls=[proxy.url], user=minicluster.user)
                triggers.append(trig)

            async def first_event(trig):
                gen = trig.run()
                try:
                    return (await gen.__anext__()).payload
                finally:
                    await gen.aclose()
                    await trig.cleanup()

            followers = asyncio.gather(*(first_event(t) for t in triggers))
            await asyncio.sleep(0.5)
            poller = RmPoller.for_hook(triggers[0].hook)  # the one poller all four use
            events = await asyncio.wait_for(followers, 300)
            return events, dict(poller.stats)

        events, stats = asyncio.run(scenario())
        counts = proxy.snapshot()
    assert [e["status"] for e in events] == ["success"] * K
    assert [e["app_id"] for e in events] == app_ids and all(e["final_status"] == "SUCCEEDED" for e in events)
    # every RM request of the triggers is the poller's: one list per cycle (or one GET when a single app is due),
    # plus one GET per application once it is no longer in the live list
    assert counts["list"] == stats["list_calls"] and counts["app"] == stats["single_gets"]
    assert stats["cycles"] >= 3
    assert counts["list"] + counts["app"] <= stats["cycles"] + K, (counts, stats)
    # ... while the triggers got a report per cycle each: per-trigger polling would have cost one request per report
    assert stats["answered"] >= 2 * (counts["list"] + counts["app"]), (counts, stats)
