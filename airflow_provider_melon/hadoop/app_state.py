"""YARN application states, and how a wait for an application judges and reports it: the one vocabulary the
operator, the sensor, the trigger, the shared poller, the CLI, the doctor, the UI plugin and the staging clean-up
share (the wait itself: :mod:`~airflow_provider_melon.hadoop.watch`). Pure and Airflow-free: no I/O, no logging.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Iterable, Optional, Sequence, Union

from airflow_provider_melon.runtime.figures import finite_number

#: every state the ResourceManager reports an application in (``YarnApplicationState``), in the order of a life
STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING", "FINISHED", "FAILED", "KILLED")
#: the states of an application that has not ended
LIVE_STATES = STATES[:5]
#: the states of an application that has ended (its ``finalStatus`` says how)
TERMINAL_STATES = STATES[5:]
#: every state the MeLoN AM's ``/status`` reports a task in, in the order of a life (the Java AM's ``State`` enum,
#: whose RUNNING, SUCCEEDED, FAILED and KILLED are the job's own state there too)
AM_TASK_STATES = ("PENDING", "ALLOCATED", "RUNNING", "REGISTERED", "SUCCEEDED", "FAILED", "KILLED")
#: the states of a task that has ended (its container with it)
AM_TASK_ENDED = AM_TASK_STATES[4:]
DEFAULT_TARGET_STATES = ("FINISHED",)
DEFAULT_FAILURE_STATES = ("FAILED", "KILLED")
#: how long a kill path waits for the RM to report a killed application ended (the RM shows a kill in progress as
#: RUNNING for a moment, and a retry starting then must not find it live and reattach to it)
KILL_WAIT_S = 30.0


def timeout_seconds(value: Union[None, int, float, timedelta]) -> Optional[float]:
    """A wait's limit in seconds from seconds or a timedelta; None: no limit. ValueError when not positive."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise ValueError(f"timeout must be positive, got {value!r}")
    return seconds


def classify(
    app: dict[str, Any],
    target_states: Iterable[str] = DEFAULT_TARGET_STATES,
    failure_states: Iterable[str] = DEFAULT_FAILURE_STATES,
) -> Optional[str]:
    """``"error"``, ``"success"`` or None (keep waiting) for an RM ``app`` dict.

    Failure states are matched against the state *and*, once the application is terminal, its
    ``finalStatus`` (an AM that unregisters FAILED leaves the application FINISHED/FAILED). An application
    that ends in a state that is neither a target nor a failure is an error too: it can no longer get there.
    """
    state = str(app.get("state") or "").upper()
    final = str(app.get("finalStatus") or "").upper()
    failure = {s.upper() for s in failure_states}
    terminal = state in TERMINAL_STATES
    if state in failure or (terminal and final in failure):
        return "error"
    if state in {s.upper() for s in target_states}:
        return "success"
    if terminal:
        return "error"
    return None


def duration_s(app: dict[str, Any]) -> Optional[float]:
    """Seconds the application ran (RM ``elapsedTime``, else finished − started), None when unknown."""
    elapsed = finite_number(app.get("elapsedTime"))
    if elapsed:
        return round(elapsed / 1000.0, 3)
    started, finished = finite_number(app.get("startedTime")) or 0.0, finite_number(app.get("finishedTime")) or 0.0
    if started > 0 and finished >= started:
        return round((finished - started) / 1000.0, 3)
    return None


def _new_summary(instances: int) -> dict[str, Any]:
    return {
        "instances": instances,
        "states": {},
        "step": None,
        "total": None,
        "loss": None,
        "metrics": {},
        "restarts": 0,
        "failed_exit_codes": [],
    }


def task_summary(
    tasks: Optional[Sequence[dict[str, Any]]], roles: Optional[dict[str, int]] = None
) -> dict[str, dict[str, Any]]:
    """Per-role summary of the AM's task list: instances, count per state, the furthest task's step (of total),
    loss and metrics (what the job reported with ``airflow_provider_melon.runtime.report``), attempts, exits.

    ``roles`` (role → requested instances, from the job spec) fills in roles the AM did not report.
    """
    out: dict[str, dict[str, Any]] = {}
    for role, instances in (roles or {}).items():
        out[role] = _new_summary(int(instances))
    for task in tasks if isinstance(tasks, (list, tuple)) else []:
        if not isinstance(task, dict):
            continue
        role = str(task.get("role") or "?")
        entry = out.setdefault(role, _new_summary(0))
        if not roles:
            entry["instances"] += 1
        state = str(task.get("state") or "UNKNOWN")
        entry["states"][state] = entry["states"].get(state, 0) + 1
        step = finite_number(task.get("step"))
        if step is not None and (entry["step"] is None or step >= entry["step"]):
            entry["step"] = int(step)
            loss, total = finite_number(task.get("loss")), finite_number(task.get("total"))
            if loss is not None:
                entry["loss"] = loss
            if total:
                entry["total"] = int(total)
            if isinstance(task.get("metrics"), dict) and task["metrics"]:
                entry["metrics"] = {str(k): v for k, v in task["metrics"].items() if finite_number(v) is not None}
        attempt = finite_number(task.get("attempt"))
        if attempt:
            entry["restarts"] = max(entry["restarts"], int(attempt))
        code = task.get("exit_code")
        if isinstance(code, (int, str)) and code not in (None, "", 0, "0"):
            entry["failed_exit_codes"].append(code)
    return out


def task_progress(tasks: Optional[Sequence[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """``role:index`` → what that task reported last (``step``, ``total``, ``loss``, ``metrics``) and its ``state``,
    from the AM's task list; the per-task view beside :func:`task_summary`'s per-role one."""
    out: dict[str, dict[str, Any]] = {}
    for task in tasks if isinstance(tasks, (list, tuple)) else []:
        if not isinstance(task, dict):
            continue
        step, total = finite_number(task.get("step")), finite_number(task.get("total"))
        metrics: dict[str, Any] = task["metrics"] if isinstance(task.get("metrics"), dict) else {}
        out[f"{task.get('role') or '?'}:{task.get('index')}"] = {
            "state": str(task.get("state") or "UNKNOWN"),
            "step": None if step is None else int(step),
            "total": int(total) if total else None,
            "loss": finite_number(task.get("loss")),
            "metrics": {str(k): float(v) for k, v in metrics.items() if finite_number(v) is not None},
        }
    return out


def progress_line(status: Optional[dict[str, Any]]) -> Optional[str]:
    """One log line from the AM's ``/status`` JSON: per role the task states and the last step/loss."""
    if not status or not isinstance(status, dict):
        return None
    parts = []
    for role, entry in task_summary(status.get("tasks")).items():
        states = ",".join(f"{s}={n}" for s, n in sorted(entry["states"].items()))
        text = f"{role}[{entry['instances']}] {states}"
        if entry["step"] is not None:
            text += f" step={entry['step']}" + (f"/{entry['total']}" if entry["total"] else "")
        if entry["loss"] is not None:
            text += f" loss={entry['loss']:.4g}"
        for name, value in list(entry["metrics"].items())[:4]:
            text += f" {name}={value:.4g}"
        if entry["restarts"]:
            text += f" restarts={entry['restarts']}"
        parts.append(text)
    head = f"AM {status.get('state', '?')}"
    gang: dict[str, Any] = status["gang"] if isinstance(status.get("gang"), dict) else {}
    if gang.get("formed") is False and gang.get("hold_s") and gang.get("message"):
        head += f" ({str(gang['message'])[:200]})"  # waiting for the whole gang: granted/asked, holds given back
    return head + (" | " + " | ".join(parts) if parts else " | no tasks reported yet")


def make_event_payload(
    status: str, app_id: Optional[str], app: Optional[dict[str, Any]], message: str, tasks: Optional[list[Any]] = None
) -> dict[str, Any]:
    app = app or {}
    return {
        "status": status,
        "app_id": app_id,
        "state": app.get("state"),
        "final_status": app.get("finalStatus"),
        "diagnostics": str(app.get("diagnostics") or ""),
        "duration_s": duration_s(app),
        "tracking_url": app.get("trackingUrl"),
        "message": message,
        "tasks": tasks,
    }


def outcome_message(app_id: str, app: dict[str, Any], verdict: str, target_states: Iterable[str]) -> str:
    state, final = app.get("state"), app.get("finalStatus")
    if verdict == "success":
        return f"YARN application {app_id} reached {state} (final status {final})"
    diag = str(app.get("diagnostics") or "").strip()
    text = f"YARN application {app_id} ended {state}/{final}"
    if state not in TERMINAL_STATES or (state == "FINISHED" and final == "SUCCEEDED"):
        text = f"YARN application {app_id} is {state}/{final}, not one of {', '.join(target_states)}"
    return text + (f": {diag}" if diag else "")


def ended_event(app_id: Optional[str], app: dict[str, Any], verdict: Optional[str] = None) -> dict[str, Any]:
    """The event of an application found already ended (no wait): judged by ``verdict``, else by :func:`classify`
    with the default target (``error`` when that says nothing)."""
    verdict = verdict or classify(app) or "error"
    message = outcome_message(str(app_id), app, verdict, DEFAULT_TARGET_STATES)
    return make_event_payload(verdict, app_id, app, message)


def job_result(
    event: dict[str, Any],
    final_json: Optional[dict[str, Any]],
    status_json: Optional[dict[str, Any]],
    roles: Optional[dict[str, Any]],
    outputs: Optional[dict[str, Any]],
) -> dict[str, Any]:
    """A training task's result, from its final event: the task list from the AM's final ``/status`` (written to
    HDFS before it unregistered), else a live AM's ``status_json``, else the last one a poll saw (the event's, maybe a
    few seconds old); per role (:func:`task_summary`) and per task (:func:`task_progress`)."""
    tasks, source = None, "rm"
    if final_json and final_json.get("tasks"):
        tasks, source = final_json["tasks"], "am-final"
    elif status_json and status_json.get("tasks"):
        tasks, source = status_json["tasks"], "am"
    elif event.get("tasks"):
        tasks, source = event["tasks"], "am-last-seen"
    return {
        "app_id": event.get("app_id"),
        "final_status": event.get("final_status"),
        "state": event.get("state"),
        "tasks": task_summary(tasks, roles),
        "progress": task_progress(tasks),
        "task_source": source,
        "diagnostics": event.get("diagnostics") or "",
        "outputs": dict(outputs or {}),
        "tracking_url": event.get("tracking_url"),
        "duration_s": event.get("duration_s"),
    }


def kill_waiting(retrying: type) -> Any:
    """The wait after a kill, as a tenacity ``Retrying`` (or ``AsyncRetrying``) to call with the state getter: it
    reads the state until the application is no longer live, at most :data:`KILL_WAIT_S`; gives the last state."""
    import tenacity

    return retrying(
        stop=tenacity.stop_after_delay(KILL_WAIT_S),
        wait=tenacity.wait_fixed(0.5),
        retry=tenacity.retry_if_result(lambda state: state in LIVE_STATES),
        retry_error_callback=lambda last: last.outcome.result(),
    )


def killed_line(app_id: Optional[str], state: Optional[str]) -> tuple[str, str, tuple[Any, ...]]:
    """The line after that wait: the state the RM reports, with a warning while it still shows it live."""
    if state in LIVE_STATES:
        return "warning", "YARN application %s still shows %s %.0f s after the kill", (app_id, state, KILL_WAIT_S)
    return "info", "YARN application %s is %s", (app_id, state)


__all__ = [
    "DEFAULT_FAILURE_STATES",
    "DEFAULT_TARGET_STATES",
    "LIVE_STATES",
    "STATES",
    "TERMINAL_STATES",
    "classify",
    "duration_s",
    "KILL_WAIT_S",
    "ended_event",
    "job_result",
    "kill_waiting",
    "killed_line",
    "make_event_payload",
    "outcome_message",
    "progress_line",
    "task_progress",
    "task_summary",
]
