"""The one watch of a YARN application until it ends, for every caller: the operator's synchronous wait, the
trigger's deferred one, ``melon wait``/``kill``/``submit --wait``/``logs -f`` and ``melon doctor --submit-test``.
:func:`watch` decides without I/O; :func:`drive` and :func:`adrive` do its I/O (and a log follower's poll's)
through the caller's functions; :class:`WatchPolicy` holds what differs between the callers. ``docs/internals.md``, "Watching an application",
says how it works.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterable, Mapping, Optional, TypeVar

from airflow_provider_melon.hadoop.app_state import (
    DEFAULT_FAILURE_STATES,
    DEFAULT_TARGET_STATES,
    TERMINAL_STATES,
    classify,
    make_event_payload,
    outcome_message,
    progress_line,
)

#: a log line: (logger method, format, args)
LogLine = tuple[str, str, tuple[Any, ...]]
#: one I/O request of a watch: the name of the caller's function, then its arguments
Call = tuple[Any, ...]
#: the caller's functions by name: now, get, seen, status, logs, emit, sleep (async ones are awaited by adrive)
IO = Mapping[str, Callable[..., Any]]
T = TypeVar("T")


@dataclass(frozen=True)
class WatchPolicy:
    """What differs between the callers of a watch.

    ``max_failures``: failed polls in a row ridden out, then the watch ends with ``error``; or, with ``transient``
    set, an error it accepts is ridden out for ``grace_s`` once the application answered, any other is raised.
    ``look_at_deadline``: the deadline is checked after each look rather than before it (a look always happens).
    ``follow_tasks``: the AM's ``/status`` is read every running poll; ``job_logs``: the job's output is followed.
    """

    poll_interval: float
    deadline: Optional[float] = None
    max_failures: int = 0
    transient: Optional[Callable[[BaseException], bool]] = None
    grace_s: float = 0.0
    look_at_deadline: bool = False
    log_every_n: int = 1
    stream_progress: bool = False
    follow_tasks: bool = False
    job_logs: bool = False
    target_states: tuple[str, ...] = DEFAULT_TARGET_STATES
    failure_states: tuple[str, ...] = DEFAULT_FAILURE_STATES


@dataclass
class Outcome:
    """How a watch ended: ``success``, ``error`` or ``timeout``, with the last report and task list seen."""

    verdict: str
    message: str
    app_id: Optional[str]
    app: Optional[dict[str, Any]]
    tasks: Optional[list[Any]]
    final_logs: bool = False

    def event(self) -> dict[str, Any]:
        return make_event_payload(self.verdict, self.app_id, self.app, self.message, self.tasks)


class Watch:
    """The state of one watch: the last state and report, the failed polls in a row, the polls so far."""

    def __init__(
        self,
        app_id: Optional[str],
        policy: WatchPolicy,
        *,
        last_state: Optional[str] = None,
        failures: int = 0,
        tags: Optional[Iterable[str]] = None,
    ) -> None:
        self.app_id, self.policy, self.last_state, self.failures = app_id, policy, last_state, failures
        self.tags = list(tags or [])
        self.app: Optional[dict[str, Any]] = None
        self.tasks: Optional[list[Any]] = None
        self.looks = self.polls = self.running_polls = 0
        self.trouble_since: Optional[float] = None

    def pause(self, now: float) -> float:
        """The sleep before the next look: the poll interval, cut to the deadline."""
        deadline, interval = self.policy.deadline, self.policy.poll_interval
        return interval if deadline is None else max(0.0, min(interval, deadline - now))

    def expired(self, now: float) -> bool:
        return self.policy.deadline is not None and self.policy.deadline - now <= 0

    def end(self, verdict: str, message: str, final_logs: bool = False) -> Outcome:
        return Outcome(verdict, message, self.app_id, self.app, self.tasks, final_logs)

    def timed_out(self) -> Outcome:
        name = self.app_id or "(tags " + ",".join(self.tags) + ")"
        return self.end(
            "timeout",
            f"YARN application {name} did not finish before the task's timeout (last state {self.last_state})",
        )

    def failed(self, exc: Exception, now: float) -> tuple[Optional[Outcome], list[LogLine]]:
        """A poll that failed: the outcome when the hiccups allowed are spent, else the lines to log; raises
        ``exc`` when the policy passes it on."""
        p = self.policy
        if p.transient is not None:
            self.trouble_since = now if self.trouble_since is None else self.trouble_since
            if not self.polls or not p.transient(exc) or now - self.trouble_since > p.grace_s:
                raise exc
            return None, []
        self.failures += 1
        if self.failures > p.max_failures:
            message = (
                f"YARN RM unreachable for {self.failures} polls in a row (budget {p.max_failures}) while "
                f"following {self.app_id}: {exc}"
            )
            return self.end("error", message), []
        args = (self.app_id, self.failures, p.max_failures, exc)
        return None, [("warning", "Polling YARN application %s failed (%d/%d in a row): %s", args)]

    def answered(self, app: Optional[dict[str, Any]]) -> list[LogLine]:
        """The RM answered (no application with the tags yet: None): the hiccups start again."""
        self.failures, self.trouble_since = 0, None
        self.polls += 1
        if app is None:
            if self.app_id is None and (self.polls - 1) % self.policy.log_every_n == 0:
                return [("info", "No YARN application with tags %s yet", (", ".join(self.tags),))]
            return []
        self.app, self.app_id = app, self.app_id or app.get("id")
        state = app.get("state")
        if state != self.last_state:
            change = (self.app_id, self.last_state or "-", state, app.get("finalStatus"))
            self.last_state = state
            return [("info", "YARN application %s: %s -> %s (final status %s)", change)]
        if self.polls % self.policy.log_every_n == 0:
            args = (self.app_id, state, self.polls, app.get("progress", "?"))
            return [("info", "YARN application %s still %s (poll %d, progress %s%%)", args)]
        return []

    def progress_due(self, state: Optional[str]) -> bool:
        self.running_polls += state == "RUNNING"
        due = (self.running_polls - 1) % self.policy.log_every_n == 0
        return self.policy.stream_progress and state == "RUNNING" and due

    def status(self, status: Any, progress_due: bool) -> list[LogLine]:
        """The AM's ``/status`` read this poll: its task list kept, the progress line when due."""
        if not isinstance(status, dict) or not status:
            return []
        self.tasks = status.get("tasks") or self.tasks
        line = progress_line(status) if progress_due else None
        return [("info", "%s: %s", (self.app_id, line))] if line else []


def watch(w: Watch, first: Optional[dict[str, Any]] = None) -> Generator[Call, Any, Outcome]:
    """The watch of ``w``'s application (``first``: a report already read) as the calls to make; see the module
    docstring. Ends with the :class:`Outcome`."""
    p = w.policy
    while True:
        if w.looks:
            yield ("sleep", w.pause((yield ("now",))))
        if not p.look_at_deadline and w.expired((yield ("now",))):
            return w.timed_out()
        w.looks += 1
        try:
            app = first if first is not None else (yield ("get",))
        except Exception as exc:  # noqa: BLE001 - the policy says which failures a watch rides out
            outcome, lines = w.failed(exc, (yield ("now",)))
            if outcome is not None:
                return outcome
            yield ("emit", lines)
            if w.app is not None:  # ridden out: the caller goes on with the last report (`logs -f` reads on)
                yield ("seen", w.app)
            continue
        first = None
        lines = w.answered(app)
        if app is not None:
            yield ("seen", app)
        yield ("emit", lines)
        if app is not None:
            state = app.get("state")
            due = w.progress_due(state)
            if due or (p.follow_tasks and state == "RUNNING"):
                status = yield ("status",)
                yield ("emit", w.status(status, due))
                if p.job_logs:
                    yield ("logs", status, app, False)
            verdict = classify(app, p.target_states, p.failure_states)
            if verdict is not None:
                final_logs = p.job_logs and state in TERMINAL_STATES
                if final_logs:  # the rest of the job log, read once
                    yield ("logs", None, app, True)
                return w.end(verdict, outcome_message(str(w.app_id), app, verdict, p.target_states), final_logs)
        if p.look_at_deadline and w.expired((yield ("now",))):
            return w.timed_out()


def drive(plan: Generator[Call, Any, T], io: IO) -> T:
    """Run ``plan`` (:func:`watch`, a log follower's poll) with synchronous I/O: :func:`adrive`, which never
    suspends when no function returns an awaitable, run to its end in one step."""
    runner = adrive(plan, io)
    try:
        runner.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result
    runner.close()
    raise RuntimeError("a synchronous watch was handed an awaitable")


async def adrive(plan: Generator[Call, Any, T], io: IO) -> T:
    """Run ``plan`` with ``io``'s functions, awaiting what they return when awaitable; a function ``io`` lacks
    does nothing. An error of a function goes into ``plan``, which decides."""
    reply: Any = None
    error: Optional[Exception] = None
    while True:
        try:
            call = plan.throw(error) if error is not None else plan.send(reply)
        except StopIteration as stop:
            result: T = stop.value
            return result
        fn, error = io.get(call[0]), None
        try:
            reply = fn(*call[1:]) if fn is not None else None
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:  # noqa: BLE001 - into the watch, which decides
            error = exc


def emit(logger: Any, lines: Iterable[LogLine]) -> None:
    """Log ``lines`` on ``logger``."""
    for level, fmt, args in lines:
        getattr(logger, level)(fmt, *args)


__all__ = ["IO", "LogLine", "Outcome", "Watch", "WatchPolicy", "adrive", "drive", "emit", "watch"]
