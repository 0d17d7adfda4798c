"""YarnApplicationTrigger: waits in the triggerer for a YARN application to end (the one watch of
:mod:`~airflow_provider_melon.hadoop.watch`, on the event loop), with its progress and the job's own output in the
log, and yields one :class:`TriggerEvent` with the outcome; :class:`LogCheckpoint` keeps the job log's offsets across
triggerer restarts. ``docs/internals.md`` ("Waiting in the triggerer" and "The job's output in the task log") says
how it works.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, AsyncIterator, Awaitable, Optional, Sequence

import tenacity
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_melon.hadoop.app_state import (
    DEFAULT_FAILURE_STATES,
    DEFAULT_TARGET_STATES,
    kill_waiting,
    killed_line,
)
from airflow_provider_melon.hadoop.log_follower import DEFAULT_LINES_PER_POLL, DEFAULT_MAX_BYTES, LogFollower
from airflow_provider_melon.hadoop.watch import IO, Watch, WatchPolicy, adrive, emit, watch
from airflow_provider_melon.hooks.yarn import AsyncYarnHook
from airflow_provider_melon.operators import metrics
from airflow_provider_melon.version_compat import (
    TRIGGER_ON_KILL_ALSO_ON_HANDOVER,
    remote_logging,
    run_in_thread,
    trigger_has_on_kill,
)

MIN_POLL_INTERVAL = 5.0
#: In a trigger's event: the rest of the job log is the resumed task's to read (from the event's ``log_state``).
FINAL_LOGS_KEY = "final_logs"
#: XCom (of the deferred task instance) holding the job log follower's state, for a triggerer that crashed.
LOG_STATE_XCOM_KEY = "melon_job_log_state"
#: Longest wait for that XCom (read or write) through the triggerer.
RESTORE_WAIT_S = 120.0
#: Longest wait for the task instance's state on a kill path (Airflow 3.3 bounds on_kill by 30 s, the kill included)
TASK_STATE_WAIT_S = 10.0
_UNKNOWN = object()  # a task state that could not be read
#: Longest wait for the last save of the offsets the uploaded task log holds, as a trigger ends
CLEANUP_SAVE_WAIT_S = 10.0


class LogCheckpoint:
    """The job log's offsets of a deferred task in an XCom of its task instance, for a trigger that a crashed
    triggerer re-created (``docs/internals.md``, "Across triggerer restarts"). Never raises but for cancellation."""

    def __init__(self, ti: Any, log: Any) -> None:
        self.log = log
        run_id, map_index = getattr(ti, "run_id", None), getattr(ti, "map_index", None)
        ids = {"dag_id": getattr(ti, "dag_id", None), "task_id": getattr(ti, "task_id", None), "run_id": run_id}
        #: the XCom's task instance (None: no task instance, nothing saved or read)
        self.ids = dict(ids, map_index=-1 if map_index is None else int(map_index)) if run_id else None
        #: remote logging: the follower state the *task log* is known to hold (None: local logs, not tracked)
        self.durable: Optional[dict[str, Any]] = None
        self._saved: Optional[str] = None
        self._reading: Optional[asyncio.Future[Any]] = None

    def begin(self, read: Awaitable[Any]) -> None:
        """Read the saved offsets beside the poll loop (a triggerer's first XCom call can take long)."""
        self._reading = asyncio.ensure_future(read)

    def cancel(self) -> None:
        if self._reading is not None and not self._reading.done():
            self._reading.cancel()

    async def ready(self, wait: bool) -> bool:
        """Whether the saved offsets have been read (or given up on); ``wait``: for at most RESTORE_WAIT_S."""
        if self._reading is not None:
            if not self._reading.done() and not wait:
                return False
            try:
                await asyncio.wait_for(asyncio.shield(self._reading), RESTORE_WAIT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - go on from the serialized offsets
                self.log.debug("saved job log offsets not read: %s", exc)
            self._reading = None
        return True

    async def save(self, app_id: Optional[str], floor: dict[str, Any]) -> None:
        """The follower's floor (one batch behind) into the XCom when it moved."""
        value: dict[str, Any] = {"app_id": app_id, "state": floor}
        if self.durable is not None:
            value["durable"] = self.durable
        text = json.dumps(value, sort_keys=True)
        if self.ids is None or text == self._saved:
            return
        try:
            from airflow_provider_melon.version_compat import XCom

            await asyncio.wait_for(XCom.aset(key=LOG_STATE_XCOM_KEY, value=value, **self.ids), RESTORE_WAIT_S)
            self._saved = text
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a triggerer crash would repeat some lines; nothing worse
            self.log.debug("could not save the job log offsets of %s: %s", app_id, exc)

    async def load(self, app_id: Optional[str], current: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        """The follower state to go on from when the saved one is later than ``current``, else None."""
        if self.ids is None:
            return None
        try:
            from airflow_provider_melon.version_compat import XCom

            saved = await asyncio.wait_for(XCom.aget_one(key=LOG_STATE_XCOM_KEY, **self.ids), RESTORE_WAIT_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            self.log.debug("could not read the saved job log offsets of %s: %s", app_id, exc)
            return None
        if not isinstance(saved, dict) or saved.get("app_id") != app_id or not isinstance(saved.get("state"), dict):
            return None
        if int(saved["state"].get("seq") or 0) <= int((current or {}).get("seq") or 0):
            return None  # (the later of two states of one follower has the larger seq)
        self._saved = None
        durable = saved.get("durable") if self.durable is not None else None
        if isinstance(durable, dict):
            # remote logging: what the dead trigger printed never reached the task log; go on from what did
            self.durable = durable
            self.log.info(
                "Job log of %s goes on from the offsets the task log is known to hold (remote logging: the previous "
                "trigger's own lines were not uploaded): the lines since are shown again, marked re-shown",
                app_id,
            )
            return LogFollower.resume_from(durable, saved["state"])
        self.log.info(
            "Job log of %s goes on from the offsets the previous trigger saved (the triggerer restarted): its last "
            "batch of lines is shown again, marked re-shown",
            app_id,
        )
        return dict(saved["state"])

    async def close(self, app_id: Optional[str], floor: dict[str, Any]) -> None:
        """As a trigger ends with remote logging: Airflow uploads its log next, so the offsets it logged (one batch
        behind, as every save) are then in the task log, and saved as such for a successor."""
        if self.durable is not None and self.ids is not None and (self._reading is None or self._reading.done()):
            self.durable = floor
            try:
                await asyncio.wait_for(self.save(app_id, floor), CLEANUP_SAVE_WAIT_S)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass


class YarnApplicationTrigger(BaseTrigger):
    """Waits for a YARN application to reach a target (or failure) state; see the module docstring.

    :param app_id: the application to follow (or ``tags``).
    :param tags: follow the newest application carrying all these tags (when ``app_id`` is None).
    :param yarn_conn_id: Airflow connection of the ResourceManager.
    :param poll_interval: seconds between polls (at least 5).
    :param deadline: epoch seconds after which a ``timeout`` event is emitted (None: no limit).
    :param cancel_on_kill: ``on_kill()`` kills the application.
    :param max_consecutive_failures: failed polls in a row tolerated (RM outage) before an ``error`` event.
    :param log_every_n: heartbeat and AM progress lines every N polls.
    :param last_state: the state last logged (so a re-created trigger does not log it again).
    :param consecutive_failures: failed polls so far (serialized with the rest of the state).
    :param target_states / failure_states: see :func:`classify`.
    :param stream_progress: log the AM's task progress while the application runs.
    :param job_logs: stream the chief's and failing tasks' stdout/stderr into the log (module docstring).
    :param log_chief: ``role:index`` of the task that decides success (None: derived from the AM's task list).
    :param log_lines_per_poll / log_max_bytes: caps of the job log lines per poll and bytes per task run.
    :param log_state: the log follower's state (offsets) to resume from (serialized with the rest).
    """

    def __init__(
        self,
        app_id: Optional[str] = None,
        yarn_conn_id: str = "yarn_default",
        poll_interval: float = 10.0,
        deadline: Optional[float] = None,
        cancel_on_kill: bool = True,
        max_consecutive_failures: int = 5,
        log_every_n: int = 6,
        last_state: Optional[str] = None,
        consecutive_failures: int = 0,
        tags: Optional[Sequence[str]] = None,
        target_states: Sequence[str] = DEFAULT_TARGET_STATES,
        failure_states: Sequence[str] = DEFAULT_FAILURE_STATES,
        stream_progress: bool = True,
        job_logs: bool = False,
        log_chief: Optional[str] = None,
        log_lines_per_poll: int = DEFAULT_LINES_PER_POLL,
        log_max_bytes: int = DEFAULT_MAX_BYTES,
        log_state: Optional[dict] = None,
        proxy_user: Optional[str] = None,
    ) -> None:
        super().__init__()
        if not app_id and not tags:
            raise ValueError("YarnApplicationTrigger needs app_id or tags")
        if float(poll_interval) < MIN_POLL_INTERVAL:
            raise ValueError(f"poll_interval must be at least {MIN_POLL_INTERVAL:g} s, got {poll_interval!r}")
        self.app_id = app_id
        self.yarn_conn_id = yarn_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = float(deadline) if deadline is not None else None
        self.cancel_on_kill = bool(cancel_on_kill)
        self.max_consecutive_failures = max(0, int(max_consecutive_failures))
        self.log_every_n = max(1, int(log_every_n))
        self.last_state = last_state
        self.consecutive_failures = int(consecutive_failures)
        self.tags = list(tags) if tags else None
        self.target_states = tuple(target_states)
        self.failure_states = tuple(failure_states)
        self.stream_progress = bool(stream_progress)
        self.job_logs = bool(job_logs)
        self.log_chief = log_chief
        self.log_lines_per_poll = int(log_lines_per_poll)
        self.log_max_bytes = int(log_max_bytes)
        self.log_state = log_state
        #: the tenant the task runs as (doAs on every RM call: polling, logs, the kill on cancel)
        self.proxy_user = proxy_user
        self._follower: Optional[LogFollower] = None
        self._checkpoint: Optional[LogCheckpoint] = None
        self._watch: Optional[Watch] = None
        self._melon_hook: Any = None
        self._poll_due: Optional[float] = None  # monotonic time of the next shared poll (None: now)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "app_id": self.app_id,
                "yarn_conn_id": self.yarn_conn_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "cancel_on_kill": self.cancel_on_kill,
                "max_consecutive_failures": self.max_consecutive_failures,
                "log_every_n": self.log_every_n,
                "last_state": self.last_state,
                "consecutive_failures": self._watch.failures if self._watch else self.consecutive_failures,
                "tags": list(self.tags) if self.tags else None,
                "target_states": list(self.target_states),
                "failure_states": list(self.failure_states),
                "stream_progress": self.stream_progress,
                "job_logs": self.job_logs,
                "log_chief": self.log_chief,
                "log_lines_per_poll": self.log_lines_per_poll,
                "log_max_bytes": self.log_max_bytes,
                "log_state": self._follower.state() if self._follower is not None else self.log_state,
                "proxy_user": self.proxy_user,
            },
        )

    # ---- hooks (overridable in one place) -----------------------------------------------------------------
    @property
    def hook(self) -> AsyncYarnHook:
        if getattr(self, "_hook", None) is None:
            self._hook = AsyncYarnHook(
                self.yarn_conn_id, **({"proxy_user": self.proxy_user} if self.proxy_user else {})
            )
        return self._hook

    async def am_status(self) -> Optional[dict]:
        """The AM's ``/status`` JSON (None while unreachable): the async hook's ``am_status`` when it has one,
        else ``MelonHook.am_status`` in a worker thread. Never raises."""
        try:
            fetch = getattr(self.hook, "am_status", None)
            if fetch is not None:
                return await fetch(self.app_id)
            return await run_in_thread(self._sync_am_status, self.app_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - progress is best effort
            self.log.debug("AM status of %s unavailable: %s", self.app_id, exc)
            return None

    @property
    def follower(self) -> LogFollower:
        if self._follower is None:
            self._follower = LogFollower(
                self.log_chief,
                lines_per_poll=self.log_lines_per_poll,
                max_bytes=self.log_max_bytes,
                state=self.log_state,
            )
        return self._follower

    @property
    def checkpoint(self) -> LogCheckpoint:
        if self._checkpoint is None:
            self._checkpoint = LogCheckpoint(self.task_instance, self.log)
        return self._checkpoint

    async def _stream_job_logs(self, status: Optional[dict], app: Optional[dict]) -> None:
        """The job's new output lines into the log (never raises but for cancellation). Skips the poll while the
        saved offsets are being read."""
        if not await self.checkpoint.ready(wait=False):
            return
        lines = await self.follower.apoll(self.hook, status, app=app)
        if lines and self.checkpoint.ids is not None:
            await self.checkpoint.save(self.app_id, self.follower.floor())  # before the lines: its marks cover them
        for line in lines:
            self.log.info("%s", line)
        ti = getattr(self, "task_instance", None)
        tags = {"dag_id": ti.dag_id, "task_id": ti.task_id} if ti is not None else None
        metrics.log_lag(self.follower.take_lag(), tags)

    async def _restore_log_state(self) -> None:
        """Go on from the saved offsets when they are later than the serialized ones (a crashed triggerer)."""
        state = await self.checkpoint.load(self.app_id, self.log_state) if self.job_logs else None
        if state is not None:
            self.log_state, self._follower = state, None

    def _sync_am_status(self, app_id: str) -> Optional[dict]:
        if self._melon_hook is None:
            from airflow_provider_melon.hooks.melon import MelonHook

            self._melon_hook = MelonHook(self.yarn_conn_id, yarn_hook=self.hook.sync_hook, proxy_user=self.proxy_user)
        return self._melon_hook.am_status(app_id)

    # ---- the loop -----------------------------------------------------------------------------------------
    def _now(self) -> float:
        return time.time()

    def _remaining(self) -> Optional[float]:
        return None if self.deadline is None else self.deadline - self._now()

    async def _sleep(self) -> None:
        if self.app_id is not None and self._shares_poller():
            return  # the wait for the shared poller's next cycle is the pause between polls
        remaining = self._remaining()
        delay = self.poll_interval if remaining is None else max(0.0, min(self.poll_interval, remaining))
        await asyncio.sleep(delay)

    # ---- the shared poller (triggers/poller.py) ------------------------------------------------------------
    #: Follow the application through the process's shared :class:`RmPoller` (one RM list call per cycle for
    #: all the triggers of the process) rather than a ``GET /apps/{id}`` per trigger per interval. A process-wide
    #: choice, not serialized; only a plain :class:`AsyncYarnHook` (a hook from a connection, or one with
    #: explicit settings) shares; a stand-in hook (tests) polls on its own.
    coalesce_polls: bool = True

    def _shares_poller(self) -> bool:
        return self.coalesce_polls and type(self.hook) is AsyncYarnHook

    async def _get_application(self) -> Optional[dict]:
        """This poll's RM report: the newest application with the tags (None: none yet), the trigger's own GET, or
        the shared poller's next cycle (None when the deadline came first)."""
        app_id, tags = self.app_id, self.tags or []
        if app_id is None:  # the newest application with every tag (newest first; one without an id cannot be followed)
            apps = await self.hook.find_applications(tags, match_all=True)
            app = next((a for a in apps if isinstance(a.get("id"), str) and a["id"]), None)
            if app is not None:
                self.app_id = app["id"]
                self.log.info("Following YARN application %s (newest with tags %s)", self.app_id, ", ".join(tags))
            return app
        if not self._shares_poller():
            return await self.hook.get_application(app_id)
        from airflow_provider_melon.triggers.poller import RmPoller

        poller = RmPoller.for_hook(self.hook)
        remaining = self._remaining()
        try:
            return await asyncio.wait_for(
                poller.report(app_id, self.poll_interval, self._poll_due),
                None if remaining is None else max(0.0, remaining),
            )
        except asyncio.TimeoutError:
            if self.deadline is not None and self.deadline <= self._now():
                return None
            raise
        finally:  # the next report: one interval after this cycle started (fixed-rate cycles)
            self._poll_due = (poller.last_cycle or time.monotonic()) + self.poll_interval

    async def run(self) -> AsyncIterator[TriggerEvent]:
        policy = WatchPolicy(
            self.poll_interval,
            self.deadline,
            max_failures=self.max_consecutive_failures,
            log_every_n=self.log_every_n,
            stream_progress=self.stream_progress,
            follow_tasks=self.job_logs,
            job_logs=self.job_logs,
            target_states=self.target_states,
            failure_states=self.failure_states,
        )
        w = self._watch = Watch(
            self.app_id, policy, last_state=self.last_state, failures=self.consecutive_failures, tags=self.tags
        )
        if self.job_logs and self.checkpoint.ids is not None:
            if remote_logging():
                self.checkpoint.durable = self.follower.state()  # what this trigger starts from is in the task log
            self.checkpoint.begin(self._restore_log_state())
        io: IO = {
            "now": self._now,
            "get": self._get_application,
            "seen": lambda app: setattr(self, "last_state", w.last_state),  # (serialize)
            "status": self.am_status,  # job logs: every running poll (the tasks' containers)
            # at the end, the event carries the offsets to go on from
            "logs": lambda status, app, final: (
                self.checkpoint.ready(wait=True) if final else self._stream_job_logs(status, app)
            ),
            "emit": lambda lines: emit(self.log, lines),
            "sleep": lambda seconds: self._sleep(),
        }
        try:
            outcome = await adrive(watch(w), io)
            (self.log.info if outcome.verdict == "success" else self.log.error)(outcome.message)
            payload = outcome.event()
            if self.job_logs:  # final_logs: the rest of the job log is the resumed task's, from these offsets
                payload.update({"log_state": self.follower.state(), FINAL_LOGS_KEY: outcome.final_logs})
            yield TriggerEvent(payload)
        except asyncio.CancelledError:
            if self._checkpoint is not None:
                self._checkpoint.cancel()
            # Below Airflow 3.3 there is no on_kill(): kill here if the task is no longer deferred (the user
            # acted on it), not when the triggerer merely stops or moves this trigger (version_compat).
            if self.cancel_on_kill and self.app_id and not trigger_has_on_kill():
                state = await self._task_state()
                if state is not _UNKNOWN and state != "deferred":
                    await self._kill(f"the task is no longer deferred (it is {state or 'cleared'})")
            raise

    # ---- kill ---------------------------------------------------------------------------------------------
    async def _kill(self, why: str) -> None:
        """Kill the application and wait (at most :data:`KILL_WAIT_S`) until the RM reports it ended, as the
        operator's kill does: the task's next try must not find it live and reattach to it. Never raises."""
        self.log.info("Killing YARN application %s: %s", self.app_id, why)
        try:
            await self.hook.kill_application(str(self.app_id))  # (callers check it is set)
        except Exception as exc:  # noqa: BLE001 - reported, never raised from a kill path
            self.log.warning("Could not kill YARN application %s: %s", self.app_id, exc)
            return
        try:
            state = await kill_waiting(tenacity.AsyncRetrying)(self.hook.get_state, self.app_id)
        except Exception as exc:  # noqa: BLE001
            self.log.warning("Could not read YARN application %s after the kill: %s", self.app_id, exc)
            return
        emit(self.log, [killed_line(self.app_id, state)])

    async def on_kill(self) -> None:
        """Airflow 3.3+: the triggerer says the user marked the deferred task failed/success or cleared it. It says
        the same of a trigger handed to another triggerer while this one's heartbeat lapsed (apache/airflow#73454;
        ``version_compat.TRIGGER_ON_KILL_ALSO_ON_HANDOVER``): the application is killed unless the task is still
        deferred (then another trigger follows it). A state that cannot be read trusts the triggerer's word."""
        if not self.cancel_on_kill:
            self.log.info("cancel_on_kill is off: leaving YARN application %s running", self.app_id)
            return
        if not self.app_id:
            return
        if TRIGGER_ON_KILL_ALSO_ON_HANDOVER and await self._task_state() == "deferred":
            self.log.info(
                "Not killing YARN application %s: the triggerer dropped this trigger but the task is still "
                "deferred (the trigger was handed to another triggerer)",
                self.app_id,
            )
            return
        await self._kill("the deferred task was killed")

    async def cleanup(self) -> None:
        """Every exit (triggerer restart included): release local resources; never kill the application. With
        remote logging, Airflow uploads this trigger's log once it has ended (after this): the offsets it logged are
        then in the task log, and saved as such (one batch behind, as every save), for a successor."""
        if self._checkpoint is not None and self._follower is not None:
            await self._checkpoint.close(self.app_id, self._follower.floor())
        hook = getattr(self, "_hook", None)
        if hook is not None:
            hook.close()

    async def _task_state(self) -> Any:
        """This trigger's task instance's state as the API server has it now (``"deferred"``, ``"failed"``, None
        after a clear…), or :data:`_UNKNOWN` (no task instance, the call failed)."""
        ti = self.task_instance
        if ti is None:
            return _UNKNOWN
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            states = await asyncio.wait_for(
                run_in_thread(
                    RuntimeTaskInstance.get_task_states,
                    dag_id=ti.dag_id,
                    task_ids=[ti.task_id],
                    run_ids=[ti.run_id],
                    map_index=getattr(ti, "map_index", None),
                ),
                TASK_STATE_WAIT_S,
            )
            state = states[ti.run_id][ti.task_id]
        except Exception as exc:  # noqa: BLE001 - unknown
            self.log.warning("Could not read the state of task %s.%s (%s): %s", ti.dag_id, ti.task_id, ti.run_id, exc)
            return _UNKNOWN
        return None if state is None else str(getattr(state, "value", state)).lower()
