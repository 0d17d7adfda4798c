"""The suite's one bounded wait, and the pictures its timeouts print.

``wait_for(predicate, timeout, what, cause=...)`` polls ``predicate`` until it returns something truthy; an
exception from it counts as "not yet" (a daemon restarting does not answer). At ``timeout`` the AssertionError says
what was awaited, what the last try saw, and ``cause()``: what the system under test shows at that moment, so a CI
failure names its cause the first time. The pictures:

* :func:`airflow_cause` — a DAG run's task instance states and a task's log tail (``AirflowApi.run_picture``);
* :func:`rm_cause` — the ResourceManager's picture of one application (``Jobs.picture``) or its live app list;
* :func:`hdfs_cause` — the HDFS listing of a path (or of its nearest existing parent).

Combine several with :func:`causes`. A picture never raises (it says it could not look).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Optional


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    every: float = 0.5,
    cause: Optional[Callable[[], str]] = None,
) -> Any:
    """``predicate()`` once truthy; at ``timeout`` an AssertionError with what the last try saw and ``cause()``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - shown on timeout
            value, last = None, exc
        else:
            last = value
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(every)
    message = f"timed out after {timeout:.0f}s waiting for {what}; last saw: {last!r}"[:2000]
    if cause is not None:
        message += "\n" + _safe(cause)
    raise AssertionError(message)


def _safe(picture: Callable[[], str]) -> str:
    try:
        return str(picture())
    except Exception as exc:  # noqa: BLE001 - a failure message must not fail
        return f"(picture unavailable: {exc!r})"


def causes(*pictures: Callable[[], str]) -> Callable[[], str]:
    """One cause from several pictures, each shown."""
    return lambda: "\n".join(_safe(p) for p in pictures)


def airflow_cause(stack, dag_id: str, run_id: Any, task_id: Optional[str] = None, lines: int = 25) -> Callable[[], str]:
    """The run's task instance states and the log tail of ``task_id`` (else of every task not succeeded).
    ``run_id`` may be a callable (the run is not known yet when the wait starts)."""

    def picture() -> str:
        rid = run_id() if callable(run_id) else run_id
        return stack.run_picture(dag_id, rid, task_id, lines=lines) if rid else f"(no run of {dag_id} yet)"

    return picture


def rm_picture(hook, app_id: str, cluster=None) -> str:
    """What the RM says of the app and of the cluster (and, with the mini ``cluster``, the AM's log tail)."""
    from airflow_provider_melon.dev import minicluster as mc

    try:
        app = hook.yarn.get_application(app_id)
        keys = ("state", "finalStatus", "diagnostics", "amContainerLogs", "amHostHttpAddress", "allocatedMB")
        metrics = hook.yarn.cluster_metrics()
        metric_keys = (
            "appsRunning",
            "appsPending",
            "availableMB",
            "allocatedMB",
            "activeNodes",
            "unhealthyNodes",
            "lostNodes",
        )
        live = hook.yarn.list_applications(states="NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING")
        text = (
            f"RM app {app_id}: {json.dumps({k: app.get(k) for k in keys})}\n"
            f"cluster: {json.dumps({k: metrics.get(k) for k in metric_keys})}\n"
            f"live apps (id, name, state, MB, GPUs used/reserved/pending): "
            f"{[(a['id'], a['name'], a['state'], a.get('allocatedMB'), _app_gpus(a)) for a in live]}\n"
            f"nodes (id, GPUs used of total): "
            f"{[(n['id'], n['gpus_used'], n['gpus']) for n in hook.yarn.node_gpu_summary()['nodes']]}\n"
        )
        if cluster is not None:
            text += "".join(
                f"{cid} {name} (tail):\n{log[-1200:]}\n"
                for name in ("AppMaster.stdout", "AppMaster.stderr")
                for cid, log in mc.container_logs(cluster.work_dir, app_id, name).items()
                if log.strip()
            )
        return text
    except Exception as exc:  # noqa: BLE001 - a failure message must not fail
        return f"(RM picture unavailable: {exc!r})"


def _app_gpus(app: dict) -> str:
    """``used/reserved/pending`` GPUs of an RM app (its ``resourceInfo``): a request the scheduler reserved on a
    full node, or one still pending, names why a free GPU went to nobody."""
    from airflow_provider_melon.hadoop.rm_json import GPU_RESOURCE, parse_resource

    usage = ((app.get("resourceInfo") or {}).get("resourceUsagesByPartition") or [{}])[0]
    return "/".join(
        str(parse_resource(usage.get(kind) or {})["resources"].get(GPU_RESOURCE, 0))
        for kind in ("used", "reserved", "pending")
    )


def rm_cause(hook, app_id: Any = None, cluster=None) -> Callable[[], str]:
    """The RM's picture of ``app_id`` (a value or a callable) when known (:func:`rm_picture`), else its
    applications (the newest 15)."""

    def picture() -> str:
        aid = app_id() if callable(app_id) else app_id
        if aid:
            return rm_picture(hook, aid, cluster)
        apps = sorted(hook.yarn.list_applications(), key=lambda a: int(a.get("startedTime") or 0))[-15:]
        return "RM apps (newest last): " + json.dumps(
            [
                (
                    a.get("id"),
                    a.get("name"),
                    a.get("state"),
                    a.get("finalStatus"),
                    str(a.get("diagnostics") or "")[:200],
                )
                for a in apps
            ]
        )

    return picture


def hdfs_cause(hook, path: str) -> Callable[[], str]:
    """The HDFS listing of ``path``, or of its nearest existing parent when it does not exist."""

    def picture() -> str:
        probe = path.rstrip("/") or "/"
        while probe not in ("", "/") and not hook.hdfs.status(probe, strict=False):
            probe = probe.rsplit("/", 1)[0] or "/"
        names = hook.hdfs.list(probe) if hook.hdfs.status(probe, strict=False).get("type") == "DIRECTORY" else []
        head = f"HDFS {path}" + ("" if probe == path.rstrip("/") else f" does not exist; nearest parent {probe}")
        return f"{head} holds: {names[:50]}"

    return picture
