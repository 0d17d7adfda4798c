"""The MeLoN plugin's FastAPI app, mounted in Airflow's api-server under ``/melon``. Every route requires an
authenticated Airflow user (the UI's session cookie, or ``Authorization: Bearer <JWT>`` from ``POST /auth/token``):
plugin routes are not protected by Airflow on their own.

Pages (HTML, embedded in the UI as external views): ``/melon/gpus``, ``/melon/jobs``, ``/melon/fit``,
``/melon/ti?dag_id=&run_id=&task_id=&map_index=`` (the "YARN job" tab of a task instance).
JSON (the same data, for scripts): ``/melon/api/gpus``, ``/melon/api/jobs``, ``/melon/api/jobs/{app_id}``,
``/melon/api/ti``, ``/melon/api/fit?gpu_memory=6GiB&instances=4`` (or ``gpus=1``). Each takes ``conn_id``
(default ``yarn_default``). The RM is read through the provider's :class:`YarnHook`; the AMs' ``/status`` through
the RM's web proxy, several at once.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from typing import Any, Optional

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse

from airflow_provider_melon.plugin import views
from airflow_provider_melon.rm_json import as_dict, as_list

PAGES = ("gpus", "jobs", "fit", "ti")
RECENT_JOBS = 30


def _hook(conn_id: str):
    from airflow_provider_melon.hooks.yarn import YarnHook

    return YarnHook(conn_id, retries=1, timeout=(3.0, 10.0))


def _statuses(hook, app_ids: list[str]) -> dict[str, Optional[dict]]:
    if not app_ids:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(app_ids))) as pool:
        return dict(zip(app_ids, pool.map(_status_or_none(hook), app_ids)))


def _status_or_none(hook):
    def get(app_id: str) -> Optional[dict]:
        try:
            return hook.am_status(app_id)
        except Exception:  # noqa: BLE001 - an AM that is starting or gone shows no tasks
            return None
    return get


def _leaf_queues(scheduler: dict) -> list[dict]:
    leaves: list[dict] = []

    def walk(queue: dict) -> None:
        children = as_list(as_dict(queue.get("queues")).get("queue"))
        if not children and queue.get("queueName") not in (None, "root"):
            leaves.append(queue)
        for child in children:
            if isinstance(child, dict):
                walk(child)

    walk(scheduler)
    return leaves


def _melon_apps(hook, states: Optional[list[str]] = None) -> list[dict]:
    return hook.find_applications(["melon"], states=states)


def gpus_data(conn_id: str) -> dict:
    hook = _hook(conn_id)
    nodes = hook.nodes(["RUNNING"])
    running = _melon_apps(hook, ["RUNNING"])
    statuses = _statuses(hook, [a["id"] for a in running])
    return views.gpu_view(nodes, running, statuses, _leaf_queues(hook.scheduler()))


def jobs_data(conn_id: str) -> dict:
    hook = _hook(conn_id)
    apps = _melon_apps(hook)[:RECENT_JOBS]
    statuses = _statuses(hook, [a["id"] for a in apps if a.get("state") == "RUNNING"])
    return {"jobs": [views.job_view(a, statuses.get(a["id"]), hook.web_ui_url) for a in apps]}


def create_app() -> FastAPI:
    from airflow.api_fastapi.core_api.security import requires_authenticated

    app = FastAPI(title="MeLoN", description=__doc__, dependencies=[Depends(requires_authenticated())])

    @app.get("/api/gpus")
    def api_gpus(conn_id: str = "yarn_default") -> dict:
        return gpus_data(conn_id)

    @app.get("/api/jobs")
    def api_jobs(conn_id: str = "yarn_default") -> dict:
        return jobs_data(conn_id)

    @app.get("/api/jobs/{app_id}")
    def api_job(app_id: str, conn_id: str = "yarn_default") -> dict:
        hook = _hook(conn_id)
        app_json = hook.get_application(app_id)
        status = _statuses(hook, [app_id])[app_id] if app_json.get("state") == "RUNNING" else None
        return views.job_view(app_json, status, hook.web_ui_url)

    @app.get("/api/ti")
    def api_ti(dag_id: str, run_id: str, task_id: str, map_index: str = "-1", conn_id: str = "yarn_default") -> dict:
        from airflow_provider_melon.submission import airflow_tags

        # the UI leaves "{MAP_INDEX}" unreplaced on a task that is not mapped
        map_index = int(map_index) if map_index.lstrip("-").isdigit() else -1
        hook = _hook(conn_id)
        tags = [t for t in airflow_tags(dag_id, task_id, run_id, map_index) if t != "melon"]
        apps = hook.find_applications(tags, match_all=True)
        statuses = _statuses(hook, [a["id"] for a in apps if a.get("state") == "RUNNING"])
        return {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index,
                "jobs": [views.job_view(a, statuses.get(a["id"]), hook.web_ui_url) for a in apps]}

    @app.get("/api/fit")
    def api_fit(instances: int = Query(1, ge=1, le=10_000), gpu_memory: Optional[str] = None,
                gpus: Optional[int] = Query(None, ge=1), conn_id: str = "yarn_default") -> dict:
        from airflow_provider_melon.spec import parse_size_mb

        try:
            memory_mb = parse_size_mb(gpu_memory) if gpu_memory else 0
            hook = _hook(conn_id)
            nodes = hook.nodes(["RUNNING"])
            running = _melon_apps(hook, ["RUNNING"])
            now = views.gpu_view(nodes, running, _statuses(hook, [a["id"] for a in running]))
            return views.fit_view(nodes, now, instances, gpu_memory_mb=memory_mb, gpus=gpus or 0)
        except ValueError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None

    def page(name: str) -> HTMLResponse:
        shell = files("airflow_provider_melon.plugin").joinpath("static", "page.html").read_text()
        script = files("airflow_provider_melon.plugin").joinpath("static", "melon.js").read_text()
        return HTMLResponse(shell.replace("{{PAGE}}", name).replace("{{SCRIPT}}", script))

    for name in PAGES:
        app.add_api_route(f"/{name}", lambda name=name: page(name), methods=["GET"], response_class=HTMLResponse,
                          include_in_schema=False)
    return app


__all__: list[Any] = ["create_app", "gpus_data", "jobs_data"]
