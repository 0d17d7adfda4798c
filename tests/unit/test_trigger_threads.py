"""version_compat.run_in_thread: on Airflow 3.0/3.1 a trigger's worker thread is asgiref's, so a sync SDK call in it
(asgiref's async_to_sync, as the 3.0/3.1 triggerer's comms do) runs on the triggerer's own event loop. From a plain
thread (asyncio.to_thread) it ran on a second loop: the runner's reads interleaved ("Response read out of order")
and the triggerer's runner died with several deferred tasks (seen by make compat on 3.0.6 and 3.1.8)."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest
from asgiref.sync import async_to_sync

from airflow_provider_melon import version_compat as vc


async def _loop_of_a_sync_sdk_call() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def _sdk_call_in_thread() -> asyncio.AbstractEventLoop:
    """What the 3.0/3.1 TriggerCommsDecoder.send does: async_to_sync of the comms coroutine."""
    return async_to_sync(_loop_of_a_sync_sdk_call)()


@pytest.mark.parametrize("executor", [None, "own"])
def test_below_3_2_the_sdk_call_of_a_trigger_thread_runs_on_the_main_loop(monkeypatch, executor):
    monkeypatch.setattr(vc, "TRIGGER_THREADS_THROUGH_ASGIREF", True)
    pool = concurrent.futures.ThreadPoolExecutor(2) if executor else None

    async def main():
        return asyncio.get_running_loop(), await vc.run_in_thread(_sdk_call_in_thread, executor=pool)

    try:
        main_loop, used = asyncio.run(main())
    finally:
        if pool:
            pool.shutdown()
    assert used is main_loop


def test_a_plain_thread_would_run_it_on_a_second_loop(monkeypatch):
    """The 3.0/3.1 failure's mechanism, so the test above can fail: asyncio.to_thread is a plain thread."""
    monkeypatch.setattr(vc, "TRIGGER_THREADS_THROUGH_ASGIREF", False)

    async def main():
        return asyncio.get_running_loop(), await vc.run_in_thread(_sdk_call_in_thread)

    main_loop, used = asyncio.run(main())
    assert used is not main_loop


def test_the_flag_follows_the_airflow_line():
    assert vc.TRIGGER_THREADS_THROUGH_ASGIREF is (not vc.AIRFLOW_V_3_2_PLUS)


def test_arguments_and_errors_pass_through(monkeypatch):
    for flag in (True, False):
        monkeypatch.setattr(vc, "TRIGGER_THREADS_THROUGH_ASGIREF", flag)
        assert asyncio.run(vc.run_in_thread(lambda a, b=0: a + b, 2, b=3)) == 5

        def boom():
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            asyncio.run(vc.run_in_thread(boom))
