"""What the MeLoN UI pages show, built from the ResourceManager's JSON and the MeLoN AMs' ``/status``.

Pure, no I/O, so every figure on the pages is unit-tested against recorded responses: :func:`gpu_view` (per node
and GPU), :func:`job_view` (one application) and :func:`fit_view` (would a role fit). Everything an AM serves was
written by whoever submitted the application, so every value is coerced and checked before it is shown.
``docs/internals.md``, "The UI pages' data", says what each view holds and how untrusted input is handled.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional
from urllib.parse import quote, urlsplit

from airflow_provider_melon.gpu import preflight
from airflow_provider_melon.hadoop.app_state import AM_TASK_ENDED, LIVE_STATES
from airflow_provider_melon.hadoop.rm_json import GPU_MEMORY_RESOURCE, GPU_RESOURCE, as_dict, as_list, split_tags
from airflow_provider_melon.runtime.figures import finite_number


def number(value: Any) -> Optional[float]:
    """:func:`~airflow_provider_melon.runtime.figures.finite_number`, an int where the JSON gave a whole number (an
    int, or a string such as ``"4096"``): never a string into the page's arithmetic, no ``4096.0`` on it."""
    figure = finite_number(value)
    if figure is None or isinstance(value, float) or not figure.is_integer():
        return figure
    return int(figure)


def integer(value: Any) -> Optional[int]:
    n = number(value)
    return int(n) if n is not None else None


def text(value: Any, limit: int = 500) -> Optional[str]:
    """A scalar as a plain string (cut at ``limit``), None for anything else."""
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value)[:limit]


def http_url(value: Any) -> Optional[str]:
    """``value`` if it is an absolute http(s) URL, else None (no ``javascript:``, ``data:``, relative links)."""
    if not isinstance(value, str):
        return None
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    return value.strip() if parts.scheme.lower() in ("http", "https") and parts.netloc else None


def _gpu_indices(label: Any) -> list[int]:
    """The AM's ``gpu`` label of a task (``"1"``, ``"0,1"``; None on CPU) as indices."""
    if label in (None, "", "cpu"):
        return []
    out = []
    for part in str(label).split(","):
        try:
            out.append(int(part))
        except ValueError:
            continue
    return out


def tags_of(app: dict) -> dict[str, str]:
    """``airflow-dag:x`` style tags of an application as ``{"dag": "x", "task": ..., "run": ..., "map": ...}``."""
    out = {}
    for tag in split_tags(app.get("applicationTags")):
        if tag.startswith("airflow-") and ":" in tag:
            key, value = tag[len("airflow-") :].split(":", 1)
            out[key] = value
    return out


def ti_url(labels: Optional[dict]) -> Optional[str]:
    """The Airflow UI page of the task instance ``labels`` names (relative to the UI's base), if known; only ever
    called with a proven attribution."""
    labels = labels or {}
    dag_id, run_id, task_id = labels.get("dag_id"), labels.get("run_id"), labels.get("task_id")
    if not (dag_id and run_id and task_id):
        return f"dags/{quote(str(dag_id))}" if dag_id else None
    url = f"dags/{quote(str(dag_id))}/runs/{quote(str(run_id), safe='')}/tasks/{quote(str(task_id))}"
    map_index = labels.get("map_index")
    if map_index not in (None, -1, "-1"):
        url += f"/mapped/{map_index}"
    return url


ANONYMOUS_REF = dict.fromkeys(
    ("task", "state", "app_id", "app_name", "user", "dag_id", "task_id", "run_id", "map_index", "ti_url")
)


def _task_ref(app: dict, task: dict, ti: Optional[dict], visible: bool) -> dict:
    """One task on a GPU; ``visible`` False (the viewer may not see the app's DAG): only the memory it holds."""
    expected = integer(task.get("expected_gpu_memory_mb")) or integer(task.get("gpu_memory_mb")) or 0
    amounts = {
        "expected_mb": expected,
        # what it registered: what the node's ledger holds for it (its slot), not less than it expects
        "held_mb": max(integer(task.get("gpu_memory_mb")) or 0, expected),
        "used_mb": integer(task.get("gpu_memory_used_mb")),
        "exclusive_gpus": integer(task.get("gpus")) or 0,
    }
    if not visible:
        return {"anonymous": True, **ANONYMOUS_REF, **amounts}
    ti = ti or {}
    return {
        "app_id": text(app.get("id")),
        "app_name": text(app.get("name")),
        "user": text(app.get("user")),
        "task": _task_name(task),
        "state": text(task.get("state")),
        **amounts,
        "dag_id": ti.get("dag_id"),
        "task_id": ti.get("task_id"),
        "run_id": ti.get("run_id"),
        "map_index": ti.get("map_index"),
        "ti_url": ti_url(ti) if ti else None,
    }


def _task_name(task: dict) -> str:
    return f"{text(task.get('role'), 100)}:{integer(task.get('index'))}"


def gpu_view(
    nodes: Iterable[dict],
    apps: Iterable[dict],
    statuses: dict[str, Optional[dict]],
    leaf_queues: Iterable[dict] = (),
    *,
    tis: Optional[dict[str, dict]] = None,
    visible: Optional[set[str]] = None,
) -> dict:
    """``nodes`` as ``YarnHook.nodes()`` normalises them, ``apps`` the running MeLoN applications and
    ``statuses`` their AM ``/status`` by app id (None where the AM does not answer). ``tis``: the task instance
    each app is proven to belong to; ``visible``: the app ids the viewer may see (None: all) — the others' tasks
    show as anonymous reservations (memory only)."""
    tis = tis or {}
    apps_by_id = {a.get("id"): a for a in apps}
    placed: dict[tuple[str, int], list[dict]] = {}
    off_gpu: dict[str, list[dict]] = {}
    mps_nodes: set[str] = set()
    for app_id, status in statuses.items():
        if not status or app_id not in apps_by_id:
            continue
        for task in as_list(status.get("tasks")):
            if not isinstance(task, dict) or task.get("state") in AM_TASK_ENDED:
                continue
            node_id = text(task.get("node_id")) or ""
            if task.get("mps") is True:
                mps_nodes.add(node_id)
            ref = _task_ref(apps_by_id[app_id], task, tis.get(app_id), visible is None or app_id in visible)
            indices = _gpu_indices(task.get("gpu"))
            if not indices:
                if ref["expected_mb"] or ref["exclusive_gpus"]:
                    off_gpu.setdefault(node_id, []).append(ref)  # asked for a GPU, not placed on one (yet)
                continue
            for i in indices:
                placed.setdefault((node_id, i), []).append(ref)
    out_nodes: list[dict[str, Any]] = []
    for node in nodes:
        node_id = str(node.get("id"))
        total = node["totalResource"]["resources"]
        used = node["usedResource"]["resources"]
        count = int(total.get(GPU_RESOURCE, 0) or 0)
        memory = int(total.get(GPU_MEMORY_RESOURCE, 0) or 0)
        per_gpu = memory // count if count else memory
        gpus: list[dict[str, Any]] = []
        for i in range(count if count else (1 if memory else 0)):
            tasks = placed.get((node_id, i), [])
            reserved = sum(per_gpu if t["exclusive_gpus"] else t["held_mb"] for t in tasks)
            used_values = [t["used_mb"] for t in tasks if t["used_mb"] is not None]
            gpus.append(
                {
                    "index": i,
                    "total_mb": per_gpu,
                    "reserved_mb": min(reserved, per_gpu) if tasks else 0,
                    "free_mb": max(per_gpu - reserved, 0),
                    "used_mb": sum(used_values) if used_values else None,
                    "tasks": tasks,
                }
            )
        out_nodes.append(
            {
                "id": node_id,
                "host": node.get("nodeHostName"),
                "state": node.get("state"),
                "mps": node_id in mps_nodes,
                "gpus": gpus,
                "gpu_count": count,
                "gpu_memory_mb": memory,
                "yarn_gpu_memory_used_mb": int(used.get(GPU_MEMORY_RESOURCE, 0) or 0),
                "yarn_gpus_used": int(used.get(GPU_RESOURCE, 0) or 0),
                "waiting_for_a_gpu": off_gpu.get(node_id, []),
            }
        )
    queues = []
    for q in leaf_queues:
        cap = _resource_values(as_dict(q.get("maxEffectiveCapacity")))
        use = _resource_values(as_dict(q.get("resourcesUsed")))
        queues.append(
            {
                "name": q.get("queuePath") or q.get("queueName"),
                "state": q.get("state"),
                "gpu_memory_mb": cap.get(GPU_MEMORY_RESOURCE, 0),
                "gpu_memory_used_mb": use.get(GPU_MEMORY_RESOURCE, 0),
                "gpu_memory_headroom_mb": max(cap.get(GPU_MEMORY_RESOURCE, 0) - use.get(GPU_MEMORY_RESOURCE, 0), 0),
                "gpus": cap.get(GPU_RESOURCE, 0),
                "gpus_used": use.get(GPU_RESOURCE, 0),
            }
        )
    totals = {
        "nodes": len(out_nodes),
        "gpus": sum(len(n["gpus"]) for n in out_nodes),
        "gpu_memory_mb": sum(n["gpu_memory_mb"] for n in out_nodes),
        "reserved_mb": sum(g["reserved_mb"] for n in out_nodes for g in n["gpus"]),
        "tasks_on_gpus": sum(len(g["tasks"]) for n in out_nodes for g in n["gpus"]),
    }
    return {"nodes": out_nodes, "queues": queues, "totals": totals}


def _resource_values(resource: dict) -> dict[str, int]:
    from airflow_provider_melon.hadoop.rm_json import parse_resource

    return {k: int(v) for k, v in parse_resource(resource)["resources"].items()}


def job_view(
    app: dict, status: Optional[dict], web_ui_url: str, tensorboard: Optional[str] = None, *, ti: Optional[dict] = None
) -> dict:
    """One MeLoN application for the Jobs page (``status`` None: the AM is not serving, e.g. it has ended).
    ``ti``: the task instance the app is proven to belong to (``dag_id``, ``task_id``, ``run_id``, ``map_index``);
    without it the job names no DAG and links to no task instance or label-supplied TensorBoard."""
    labels = as_dict((status or {}).get("labels"))
    tasks, series = [], []
    for task in as_list((status or {}).get("tasks")):
        if not isinstance(task, dict):
            continue
        name = _task_name(task)
        tasks.append(
            {
                "task": name,
                "state": text(task.get("state")),
                "host": text(task.get("host")),
                "gpu": text(task.get("gpu"), 50),
                "attempt": integer(task.get("attempt")),
                "exit_code": integer(task.get("exit_code")),
                "step": integer(task.get("step")),
                "loss": number(task.get("loss")),
                "expected_mb": integer(task.get("expected_gpu_memory_mb")),
                "used_mb": integer(task.get("gpu_memory_used_mb")),
                "initial_mb": integer(task.get("initial_gpu_memory_mb")),
                "peak_mb": integer(task.get("gpu_memory_peak_mb")),
                "oom_growths": integer(task.get("oom_growths")),
            }
        )
        points = [
            {"t": number(p[0]), "step": number(p[1]), "loss": number(p[2])}
            for p in as_list(task.get("history"))
            if isinstance(p, list) and len(p) == 3
        ]
        points = [p for p in points if p["step"] is not None]
        if points:
            series.append({"task": name, "points": points})
    app_id = str(app.get("id"))
    base = web_ui_url.rstrip("/")
    links = {"YARN application": f"{base}/cluster/app/{quote(app_id)}"}
    if app.get("state") in LIVE_STATES:
        links["ApplicationMaster"] = f"{base}/proxy/{quote(app_id)}/"
    if http_url(app.get("amContainerLogs")):  # the RM shows the AM's logs to the connection's user
        links["AM logs"] = am_logs_link(app_id)
    tensorboard = http_url(tensorboard) or (http_url(labels.get("tensorboard")) if ti else None)
    if not tensorboard and app.get("state") in LIVE_STATES and as_dict(as_dict(status).get("tensorboard")).get("url"):
        tensorboard = f"{base}/proxy/{quote(app_id)}/tensorboard/"  # the job's own, served through the AM
    if tensorboard:
        links["TensorBoard"] = tensorboard
    started, finished = integer(app.get("startedTime")) or 0, integer(app.get("finishedTime")) or 0
    gang = as_dict(as_dict(status).get("gang"))
    waiting = text(gang.get("message")) if gang.get("hold_s") and gang.get("formed") is False else None
    ti = ti or {}
    return {
        "id": app_id,
        "name": text(app.get("name")),
        "state": text(app.get("state")),
        "final_status": text(app.get("finalStatus")),
        "user": text(app.get("user")),
        "queue": text(app.get("queue")),
        "progress": number(app.get("progress")) or 0.0,
        "started": started or None,
        "finished": finished or None,
        "elapsed_s": round((number(app.get("elapsedTime")) or 0) / 1000, 1),
        "diagnostics": (text(app.get("diagnostics")) or "").strip(),
        "dag_id": ti.get("dag_id"),
        "task_id": ti.get("task_id"),
        "run_id": ti.get("run_id"),
        "map_index": ti.get("map_index"),
        "ti_url": ti_url(ti) if ti else None,
        "tasks": tasks,
        "series": series,
        "links": links,
        "gang_waiting": waiting,  # where gang formation stands while the AM holds or backs off (None once formed)
        # where each gpu_memory: auto figure came from (the submitting task's label: shown only with its proof)
        "gpu_memory_note": text(labels.get("gpu_memory"), 500) if ti else None,
    }


def am_logs_link(app_id: str) -> str:
    """The AM logs of ``app_id`` as the plugin serves them, relative to its pages (``/melon/``): the api-server
    reads them from the NodeManager, so the link never names a NodeManager's host (``amContainerLogs`` does, by
    its cluster-internal name: ``nodemanager-1:8042``)."""
    return f"api/jobs/{quote(app_id, safe='')}/logs"


def fit_view(nodes: Iterable[dict], gpu_view_now: dict, instances: int, gpu_memory_mb: int = 0, gpus: int = 0) -> dict:
    """Would ``instances`` tasks of ``gpu_memory_mb`` (shared) or ``gpus`` (exclusive) fit: ever (pre-flight on
    capacity) and now (on the free memory of each GPU, from :func:`gpu_view`)."""
    from airflow_provider_melon.spec import RoleSpec

    if instances < 1:
        raise ValueError("instances must be at least 1")
    if bool(gpu_memory_mb) == bool(gpus):
        raise ValueError("give either gpu_memory or gpus")
    role = RoleSpec(instances=instances, gpu_memory=f"{gpu_memory_mb}MiB" if gpu_memory_mb else None, gpus=gpus or None)
    report = preflight.check(list(nodes), {"worker": role})
    now = 0
    per_gpu = []
    for node in gpu_view_now["nodes"]:
        for gpu in node["gpus"]:
            if gpu_memory_mb:
                fits = gpu["free_mb"] // gpu_memory_mb if gpu_memory_mb <= gpu["free_mb"] else 0
            else:
                fits = 1 if not gpu["tasks"] else 0
            per_gpu.append({"node": node["id"], "gpu": gpu["index"], "free_mb": gpu["free_mb"], "tasks_fit": fits})
            now += fits
    if gpus:
        free_by_node: dict[str, int] = {}
        for g in per_gpu:
            free_by_node[g["node"]] = free_by_node.get(g["node"], 0) + g["tasks_fit"]
        now = sum(n // gpus for n in free_by_node.values())
    want = f"{instances} task(s) of {gpu_memory_mb} MiB" if gpu_memory_mb else f"{instances} task(s) of {gpus} GPU(s)"
    return {
        "request": {"instances": instances, "gpu_memory_mb": gpu_memory_mb, "gpus": gpus},
        "ever": {"fits": report.ok, "message": report.message},
        "now": {
            "fits": now >= instances,
            "tasks_that_fit": now,
            "message": (
                f"{want}: {min(now, instances)} of {instances} fit on the GPUs' free memory now"
                + ("" if now >= instances else "; the rest would wait for running tasks to end")
            ),
            "per_gpu": per_gpu,
        },
    }


__all__ = [
    "am_logs_link",
    "fit_view",
    "gpu_view",
    "http_url",
    "integer",
    "job_view",
    "number",
    "tags_of",
    "text",
    "ti_url",
]
