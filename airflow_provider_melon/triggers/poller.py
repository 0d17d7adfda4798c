"""One ResourceManager poller shared by the YARN triggers of a process: one RM list call per cycle, not one call
per deferred task, on its own threads. ``docs/internals.md``, "Many deferred jobs, one triggerer", describes the
cycles, the errors and the threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from airflow_provider_melon.hadoop.app_state import LIVE_STATES
from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.version_compat import run_in_thread

log = logging.getLogger(__name__)

#: RM states of an application that has not ended (the list call's ``states`` filter).
#: The tag every MeLoN submission carries (``submission.py``): the list call's ``applicationTags`` filter.
LIST_TAG = "melon"
#: Threads of a poller's own executor (one list call, plus the single GETs of applications not in the list).
MAX_WORKERS = 4
#: Waiters woken at once; the poller yields to the loop between chunks, so hundreds of triggers woken by one
#: cycle do not hold the loop in one stretch.
FAN_OUT_CHUNK = 50
#: Parts of each application the list call leaves out (``deSelects``, Hadoop 3.1+): the triggers read none of
#: them, and they are half of an ACCEPTED application's JSON (its AM resource request).
DESELECTS = "resourceRequests,resourceInfo,timeouts"


@dataclass
class _Waiter:
    app_id: str
    interval: float
    not_before: float
    future: asyncio.Future = field(repr=False)


class RmPoller:
    """Fetches the reports of the applications its waiters follow, one shared RM round per cycle.

    Use :meth:`for_hook` (one poller per event loop and RM identity) rather than the constructor.

    :param hook_factory: builds the sync :class:`YarnHook` the poller calls (in its executor threads).
    :param list_tag: tag of the list call (None: list every live application).
    :param clock: monotonic seconds (tests may replace it).
    """

    _registry: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, RmPoller]]" = weakref.WeakKeyDictionary()

    def __init__(
        self,
        hook_factory: Callable[[], YarnHook],
        *,
        list_tag: Optional[str] = LIST_TAG,
        max_workers: int = MAX_WORKERS,
        clock: Callable[[], float] = time.monotonic,
        on_idle: Optional[Callable[["RmPoller"], None]] = None,
    ) -> None:
        self._hook_factory = hook_factory
        self._hook: Optional[YarnHook] = None
        self.list_tag = list_tag
        self.max_workers = max(1, int(max_workers))
        self._clock = clock
        self._on_idle = on_idle
        self._waiters: list[_Waiter] = []
        self._wake = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._last_cycle: Optional[float] = None
        self._period = 0.0  # the latest cycle length
        #: Counters for benchmarks and tests: cycles run, list calls, single GETs, reports handed to waiters.
        self.stats = {"cycles": 0, "list_calls": 0, "single_gets": 0, "answered": 0}

    # ---- registry -------------------------------------------------------------------------------------
    @classmethod
    def for_hook(cls, hook: Any) -> "RmPoller":
        """The poller of the running event loop for ``hook``'s RM identity (an :class:`AsyncYarnHook`: its
        connection id and explicit settings), created on first use."""
        loop = asyncio.get_running_loop()
        key = identity(hook)
        pollers = cls._registry.setdefault(loop, {})
        poller = pollers.get(key)
        if poller is None:
            kwargs = dict(getattr(hook, "_kwargs", {}) or {})
            conn_id = hook.yarn_conn_id

            def forget(p: "RmPoller", _pollers=pollers, _key=key) -> None:
                if _pollers.get(_key) is p:
                    del _pollers[_key]

            poller = pollers[key] = cls(lambda: YarnHook(conn_id, **kwargs), on_idle=forget)
        return poller

    @property
    def last_cycle(self) -> Optional[float]:
        """When the latest cycle started (the poller's clock): a waiter that asks for its next report at
        ``last_cycle + interval`` keeps the cycles at a fixed rate, whatever the RM's answer time."""
        return self._last_cycle

    @property
    def watched(self) -> set[str]:
        """Applications some trigger is waiting for now."""
        return {w.app_id for w in self._waiters if not w.future.done()}

    # ---- the waiters' side --------------------------------------------------------------------------------
    async def report(self, app_id: str, interval: float, not_before: Optional[float] = None) -> dict:
        """The RM report (as :meth:`YarnHook.get_application` gives it) of ``app_id`` from the first cycle at or
        after ``not_before`` (monotonic seconds; default now). Raises that cycle's error for the application."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(
            app_id, float(interval), self._clock() if not_before is None else float(not_before), loop.create_future()
        )
        self._waiters.append(waiter)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="melon-rm-poller")
        try:
            return await waiter.future
        finally:
            if waiter in self._waiters:  # cancelled before its cycle: unsubscribe
                self._waiters.remove(waiter)
                self._wake.set()  # the cycle may no longer be needed (or due so soon)

    # ---- the cycle ------------------------------------------------------------------------------------------
    def _next_cycle_at(self) -> Optional[float]:
        pending = [w for w in self._waiters if not w.future.done()]
        if not pending:
            return None
        period = min(w.interval for w in pending)
        due = min(w.not_before for w in pending)
        if self._last_cycle is not None:
            due = max(due, self._last_cycle + period)
        return due

    async def _run(self) -> None:
        try:
            while True:
                self._waiters = [w for w in self._waiters if not w.future.done()]
                at = self._next_cycle_at()
                if at is None:
                    # the triggers just answered come back for their next report once they have handled this
                    # one: wait for them (up to a cycle) before going idle, so they find this poller again
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), max(1.0, self._period))
                    except asyncio.TimeoutError:
                        return
                    continue
                delay = at - self._clock()
                if delay > 0:
                    self._wake.clear()
                    try:  # a new waiter may be due earlier (or be the first): recompute then
                        await asyncio.wait_for(self._wake.wait(), delay)
                    except asyncio.TimeoutError:
                        pass
                    continue
                self._last_cycle = now = self._clock()
                period = self._period = min(w.interval for w in self._waiters if not w.future.done())
                # answered by this cycle: every waiter due before the next one would run
                batch = [w for w in self._waiters if not w.future.done() and w.not_before < now + period]
                await self._cycle(batch)
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None
            if self._on_idle is not None and not any(not w.future.done() for w in self._waiters):
                self._on_idle(self)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                self.max_workers, thread_name_prefix="melon-rm-poller"
            )

        def run() -> Any:
            if self._hook is None:
                self._hook = self._hook_factory()
            return fn(self._hook, *args, **kwargs)

        return await run_in_thread(run, executor=self._executor)  # version_compat: its SDK calls

    async def _cycle(self, batch: list[_Waiter]) -> None:
        self.stats["cycles"] += 1
        ids = sorted({w.app_id for w in batch})
        reports: dict[str, Any] = {}
        if len(ids) > 1:
            self.stats["list_calls"] += 1
            try:
                listed = await self._call(
                    YarnHook.list_applications,
                    states=list(LIVE_STATES),
                    applicationTags=self.list_tag,
                    deSelects=DESELECTS,
                )
            except Exception as exc:  # noqa: BLE001 - every waiter of the cycle counts a failed poll
                log.debug("RM list call failed: %s", exc)
                reports = {app_id: exc for app_id in ids}
            else:
                wanted = set(ids)
                for app in listed:
                    if app.get("id") in wanted and isinstance(app.get("state"), str) and app["state"]:
                        reports[app["id"]] = app
        missing = [app_id for app_id in ids if app_id not in reports]
        if missing:
            self.stats["single_gets"] += len(missing)
            results = await asyncio.gather(
                *(self._call(YarnHook.get_application, app_id) for app_id in missing), return_exceptions=True
            )
            reports.update(zip(missing, results))
        self.stats["answered"] += len(batch)
        for i, waiter in enumerate(batch):
            if i and i % FAN_OUT_CHUNK == 0:
                await asyncio.sleep(0)  # let the woken triggers (and everyone else) run before waking more
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            if waiter.future.done():
                continue
            result = reports[waiter.app_id]
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                waiter.future.set_exception(result)
            else:
                waiter.future.set_result(dict(result))


def identity(hook: Any) -> tuple:
    """The RM identity of an :class:`AsyncYarnHook`: its connection id (RM addresses, user and auth of that
    connection) and the explicit settings that override them."""
    kwargs = getattr(hook, "_kwargs", {}) or {}
    return (hook.yarn_conn_id,) + tuple(sorted((k, repr(v)) for k, v in kwargs.items()))


__all__ = ["LIST_TAG", "MAX_WORKERS", "RmPoller", "identity"]
