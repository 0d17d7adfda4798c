"""Metrics of train tasks through Airflow's ``Stats`` (StatsD or OpenTelemetry, whichever the deployment set up in
``[metrics]``; nothing is sent where neither is on). Names and units: docs/lineage-and-metrics.md.

:func:`job_metrics` (pure) reads them from an ended application: the RM's report (queue wait: submitted to the AM's
launch) and the AM's final ``/status`` (the gang's formation, the tasks' GPU memory, their out-of-memory growths);
:func:`emit_job_metrics` sends them, :func:`reattached` counts a task that found its application running and
:func:`log_lag` times how late the job's output reached the task log.
Sending never fails a task.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from airflow_provider_melon.runtime.figures import finite_number

log = logging.getLogger(__name__)

PREFIX = "melon"
#: name -> (kind, unit): the metrics a train task sends (docs/metrics.md lists them)
METRICS = {
    f"{PREFIX}.queue_wait": ("timer", "ms"),
    f"{PREFIX}.submit_to_gang": ("timer", "ms"),
    f"{PREFIX}.gpu_memory.reserved": ("gauge", "MiB"),
    f"{PREFIX}.gpu_memory.used": ("gauge", "MiB"),
    f"{PREFIX}.oom_growths": ("counter", "growths"),
    f"{PREFIX}.reattaches": ("counter", "reattaches"),
    f"{PREFIX}.log_lag": ("timer", "ms"),
}


def job_metrics(app: Optional[dict], final_status: Optional[dict]) -> dict[str, float]:
    """The metrics of one ended application that its reports carry (a missing figure is left out):

    * ``queue_wait`` (ms): the RM's ``startedTime`` (submission) to ``launchTime`` (the AM's container started);
    * ``submit_to_gang`` (ms): that, plus the AM's wait until its whole gang was granted (``gang.waiting_s``, once
      ``gang.formed``);
    * ``gpu_memory.reserved`` / ``.used`` (MiB): over the tasks, the GPU memory each held at the end
      (``gpu_memory_mb``) and the most each used (``gpu_memory_peak_mb``);
    * ``oom_growths``: the tasks' out-of-memory growths, summed.
    """
    out: dict[str, float] = {}
    app = app if isinstance(app, dict) else {}
    started, launched = finite_number(app.get("startedTime")), finite_number(app.get("launchTime"))
    queue_wait = launched - started if started and launched and launched >= started else None
    if queue_wait is not None:
        out[f"{PREFIX}.queue_wait"] = queue_wait
    status = final_status if isinstance(final_status, dict) else {}
    gang_report = status.get("gang")
    gang: dict[str, Any] = gang_report if isinstance(gang_report, dict) else {}
    gang_wait = finite_number(gang.get("waiting_s"))
    if queue_wait is not None and gang.get("formed") is True and gang_wait is not None:
        out[f"{PREFIX}.submit_to_gang"] = queue_wait + gang_wait * 1000
    tasks = [t for t in status.get("tasks") or [] if isinstance(t, dict)]
    for name, key in (("reserved", "gpu_memory_mb"), ("used", "gpu_memory_peak_mb")):
        figures = [f for f in (finite_number(t.get(key)) for t in tasks) if f is not None]
        if figures:
            out[f"{PREFIX}.gpu_memory.{name}"] = sum(figures)
    growths = [finite_number(t.get("oom_growths")) for t in tasks]
    if any(g is not None for g in growths):
        out[f"{PREFIX}.oom_growths"] = sum(g for g in growths if g is not None)
    return out


def _stats():
    from airflow.providers.common.compat.sdk import Stats

    return Stats


def emit_job_metrics(app: Optional[dict], final_status: Optional[dict], tags: Optional[dict] = None) -> dict:
    """Send :func:`job_metrics` through Airflow's ``Stats``; returns what was sent. Never raises."""
    metrics = job_metrics(app, final_status)
    try:
        stats = _stats()
        for name, value in metrics.items():
            kind = METRICS[name][0]
            if kind == "timer":
                stats.timing(name, value, tags=tags)
            elif kind == "gauge":
                stats.gauge(name, value, tags=tags)
            elif value:
                stats.incr(name, int(value), tags=tags)
    except Exception as exc:  # noqa: BLE001 - metrics never fail a task
        log.warning("MeLoN metrics not sent: %s", exc)
    return metrics


def reattached(tags: Optional[dict] = None) -> None:
    """Count a task (a retry, a rescheduled task) that found its application running and followed it."""
    try:
        _stats().incr(f"{PREFIX}.reattaches", 1, tags=tags)
    except Exception as exc:  # noqa: BLE001
        log.warning("MeLoN metrics not sent: %s", exc)


def log_lag(seconds: Optional[float], tags: Optional[dict] = None) -> None:
    """Time the job log's lag (:meth:`LogFollower.take_lag`, seconds) after a poll that showed new lines; None
    (nothing new) sends nothing."""
    if seconds is None:
        return
    try:
        _stats().timing(f"{PREFIX}.log_lag", seconds * 1000, tags=tags)
    except Exception as exc:  # noqa: BLE001
        log.warning("MeLoN metrics not sent: %s", exc)


__all__ = ["METRICS", "emit_job_metrics", "job_metrics", "log_lag", "reattached"]
