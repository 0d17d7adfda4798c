"""The MeLoN plugin's FastAPI app, mounted in Airflow's api-server under ``/melon``.

It serves the GPU, jobs, fit and task-instance pages embedded in the Airflow UI, the same data as JSON under
``/melon/api/``, and the AM's logs read from the NodeManager. Every route requires an authenticated Airflow user,
because Airflow does not protect plugin routes on its own, and each job is shown only to users who may read the
DAG it is proven to belong to. ``docs/internals.md``, "The UI plugin", lists the routes and the rules.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.resources import files
from typing import Annotated, Any, Callable, Iterable, Optional

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_provider_melon.hadoop.rm_json import as_dict, as_list, split_tags
from airflow_provider_melon.plugin import views
from airflow_provider_melon.spec import IDENTITY_TAG_PREFIX
from airflow_provider_melon.submission import APPLICATION_TYPE, airflow_tags

PAGES = ("gpus", "jobs", "fit", "ti")
#: at most this many bytes of each AM log file are served (its tail), with a line saying what was left out
AM_LOG_TAIL_BYTES = 4 * 1024 * 1024
RECENT_JOBS = 30
#: MeLoN applications (newest first) looked at for the jobs list before the viewer's filter
CANDIDATE_JOBS = 200


def _hook(conn_id: str):
    from airflow_provider_melon.hooks.yarn import YarnHook

    return YarnHook(conn_id, retries=1, timeout=(3.0, 10.0))


def checked_conn_id(conn_id: str = "yarn_default") -> str:
    """``conn_id`` if the api-server may use it for this request: an existing connection of type ``yarn`` (the
    default one may also be absent: the hook's defaults), listed in ``[melon] ui_conn_ids`` when that is set.
    Else 422 naming the field."""
    from airflow.configuration import conf
    from airflow.exceptions import AirflowNotFoundException

    from airflow_provider_melon.hooks.yarn import YarnHook

    allowed = [c.strip() for c in (conf.get("melon", "ui_conn_ids", fallback="") or "").split(",") if c.strip()]
    if allowed and conn_id not in allowed:
        raise HTTPException(422, f"conn_id: {conn_id!r} is not one of [melon] ui_conn_ids")
    try:
        conn = YarnHook.get_connection(conn_id)
    except AirflowNotFoundException:
        if conn_id == YarnHook.default_conn_name:
            return conn_id
        raise HTTPException(422, f"conn_id: no connection {conn_id!r}") from None
    if conn.conn_type != YarnHook.conn_type:
        raise HTTPException(
            422, f"conn_id: connection {conn_id!r} is of type {conn.conn_type!r}, not {YarnHook.conn_type!r}"
        )
    return conn_id


ConnId = Annotated[str, Depends(checked_conn_id)]


@dataclass(frozen=True)
class Viewer:
    """What the logged-in user may read: every DAG (``all_dags``), else the DAG ids in ``dag_ids``."""

    all_dags: bool
    dag_ids: frozenset[str]

    def may_read(self, dag_id: Optional[str]) -> bool:
        return self.all_dags or (dag_id is not None and dag_id in self.dag_ids)

    def sees(self, app_id: str, tis: dict[str, dict]) -> bool:
        """An application proven to be a task instance's (``tis``) if the user may read its DAG; any other only
        if the user may read every DAG."""
        ti = tis.get(app_id)
        return self.all_dags or (ti is not None and ti["dag_id"] in self.dag_ids)


def _viewer(user) -> Viewer:
    """The user's readable DAGs (the auth manager's ``get_authorized_dag_ids``); "every DAG" means every DAG the
    metadata DB knows is among them (``is_authorized_dag`` without details only says the user may *list* DAGs:
    FAB grants it to anyone who may read one)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    manager = get_auth_manager()
    readable = frozenset(manager.get_authorized_dag_ids(user=user, method="GET"))
    if not manager.is_authorized_dag(method="GET", user=user):
        return Viewer(False, readable)
    with create_session() as session:
        every = set(session.scalars(select(DagModel.dag_id)))
    return Viewer(every <= readable, readable)


def is_melon_app(app: dict) -> bool:
    return str(app.get("applicationType") or "").upper() == APPLICATION_TYPE and "melon" in split_tags(
        app.get("applicationTags")
    )


def attribute(apps: Iterable[dict], dag_ids: Optional[Iterable[str]] = None) -> dict[str, dict]:
    """The task instance each application is proven to belong to, by app id (apps that are not proven: absent).

    An app belongs to task instance (dag, task, run, map) of this deployment when it is a MeLoN application
    (applicationType ``MELON``, tag ``melon``), carries that task instance's tags (``airflow_tags``: the readable
    ``airflow-dag:``/``-task:``/``-run:``/``-map:`` ones), **and** that task instance's own XCom ``app_id``
    (pushed by the operator when it submitted or reattached) names it. Tags alone prove nothing: they are visible
    on the RM, so bob can copy alice's tags (and any ``labels``) onto his own application. The XCom check is chosen
    over a check of the app's YARN user because the plugin cannot know which user a task submits as (each task
    picks its connection, proxy user or keytab), while the XCom lives in this deployment's metadata DB and is
    written only through its execution API by that task instance's worker (so it also pins the deployment). The
    tag check stops a task of another DAG that pushes alice's app id as its own XCom. The ``melon-id:`` tag is not
    used here: ``submission.deployment_id()`` comes from settings the workers read (``[core]
    execution_api_server_url``), which an api-server need not share, and the XCom pins the deployment anyway. Cost: an app of an earlier try, whose XCom was cleared for the next try, is not attributed any
    more. ``dag_ids``: only consider these DAGs (the viewer's), None: all."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import and_, func, or_, select

    by_id = {str(a.get("id")): a for a in apps if is_melon_app(a)}
    wanted = {
        (t["dag"].lower(), t["task"].lower())
        for t in map(views.tags_of, by_id.values())
        if t.get("dag") and t.get("task")
    }
    if not wanted or (dag_ids is not None and not dag_ids):
        return {}
    cut = 100 - len("airflow-dag:"), 100 - len("airflow-task:")  # readable tags are cut at 100 characters

    def like(column, value: str, limit: int):
        return (
            func.lower(column).like(value.replace("%", r"\%").replace("_", r"\_") + "%", escape="\\")
            if len(value) >= limit
            else func.lower(column) == value
        )

    query = select(XComModel).where(
        XComModel.key == "app_id",
        or_(*(and_(like(XComModel.dag_id, d, cut[0]), like(XComModel.task_id, t, cut[1])) for d, t in wanted)),
    )
    if dag_ids is not None:
        query = query.where(XComModel.dag_id.in_(list(dag_ids)))
    out: dict[str, dict] = {}
    with create_session() as session:
        for row in session.scalars(query):
            app = by_id.get(str(XComModel.deserialize_value(row)))
            if app is None:
                continue
            ti = {"dag_id": row.dag_id, "task_id": row.task_id, "run_id": row.run_id, "map_index": row.map_index}
            expected = {
                t.lower()
                for t in airflow_tags(row.dag_id, row.task_id, row.run_id, row.map_index)
                if not t.startswith(IDENTITY_TAG_PREFIX)
            }
            if expected <= set(split_tags(app.get("applicationTags"))):
                out[str(app["id"])] = ti
    return out


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
    return [
        a
        for a in hook.find_applications(["melon"], states=states, application_type=APPLICATION_TYPE)
        if is_melon_app(a)
    ]


def gpus_data(conn_id: str, viewer: Viewer) -> dict:
    hook = _hook(conn_id)
    nodes = hook.nodes(["RUNNING"])
    running = _melon_apps(hook, ["RUNNING"])
    statuses = _statuses(hook, [a["id"] for a in running])  # every app's: other tenants' memory still counts
    tis = attribute(running, None if viewer.all_dags else viewer.dag_ids)
    visible = {a["id"] for a in running if viewer.sees(a["id"], tis)}
    return views.gpu_view(nodes, running, statuses, _leaf_queues(hook.scheduler()), tis=tis, visible=visible)


def jobs_data(conn_id: str, viewer: Viewer) -> dict:
    hook = _hook(conn_id)
    apps = _melon_apps(hook)[:CANDIDATE_JOBS]
    tis = attribute(apps, None if viewer.all_dags else viewer.dag_ids)
    apps = [a for a in apps if viewer.sees(a["id"], tis)][:RECENT_JOBS]
    return {"jobs": _job_views(hook, apps, tis)}


def _job_views(hook, apps: list[dict], tis: dict[str, dict]) -> list[dict]:
    statuses = _statuses(hook, [a["id"] for a in apps if a.get("state") == "RUNNING"])
    return [views.job_view(a, statuses.get(a["id"]), hook.web_ui_url, ti=tis.get(a["id"])) for a in apps]


class Refused(HTTPException):
    """A 403 of the plugin's own (the user is logged in, but may not read that DAG): never a reason to log in."""

    def __init__(self, detail: str):
        super().__init__(403, detail)


def visible_melon_app(hook, app_id: str, who: Viewer) -> tuple[dict, dict[str, dict]]:
    """The RM's application ``app_id`` and its attribution, if it is a MeLoN application the viewer may see:
    else 404 (no such application, or not a MeLoN one) or 403 (a DAG the viewer may not read)."""
    from airflow_provider_melon.hadoop.rm_json import YarnApiError

    try:
        app_json = hook.get_application(app_id)
    except YarnApiError as exc:
        if exc.status == 404:
            raise HTTPException(404, f"app_id: no application {app_id}") from None
        raise
    if not is_melon_app(app_json):
        raise HTTPException(404, f"app_id: {app_id} is not a MeLoN application")
    tis = attribute([app_json], None if who.all_dags else who.dag_ids)
    if not who.sees(app_json["id"], tis):
        raise Refused(f"app_id: you may not read the DAG of {app_id}")
    return app_json, tis


def am_log_text(hook, app_id: str, file: Optional[str] = None, limit: int = AM_LOG_TAIL_BYTES) -> str:
    """The log files of the application's (last attempt's) AM container as text, each under a header naming it
    (``file``: only that one; 404 naming ``file`` when the container has no such log), read from its
    NodeManager as ``melon logs`` does. A file longer than ``limit`` bytes: its last ``limit``, and a line saying
    so. 404 when no NodeManager serves them any more (why: :func:`nm_logs.gone_message`)."""
    from airflow_provider_melon.hadoop.nodemanager import (
        BOILERPLATE,
        ContainerRef,
        NodeLogs,
        NodeManagerError,
        gone_message,
    )

    attempts = [a for a in hook.app_attempts(app_id) if a.get("containerId")]
    if not attempts:
        raise HTTPException(404, f"app_id: {app_id} has no ApplicationMaster container yet")
    attempt = max(attempts, key=lambda a: int(views.number(a.get("id")) or 0))
    logs = NodeLogs(hook, app_id)
    ref = ContainerRef(
        str(attempt["containerId"]), "am", attempt.get("nodeId"), logs.nm_url(attempt.get("nodeHttpAddress"))
    )

    def served(answer):
        if ref.nm_url in logs.unreachable or not ref.nm_url:
            raise HTTPException(
                502,
                f"the NodeManager of {ref.id} ({ref.nm_url or attempt.get('nodeId')}) is "
                "unreachable from the api-server",
            )
        if answer is None:
            raise HTTPException(404, gone_message(app_id, hook.get_application(app_id)))
        return answer

    try:
        listed = served(logs.files(ref))
        if file is not None and file not in listed:
            raise HTTPException(
                404, f"file: the AM container {ref.id} has no log {file!r} (it has {', '.join(sorted(listed))})"
            )
        names = [file] if file is not None else sorted(n for n in listed if n not in BOILERPLATE)
        parts = []
        for name in names:
            total, data = served(logs.fetch(ref, name, -limit))
            head = f"==> {name} of {ref.id} on {attempt.get('nodeId')} ({total} bytes)"
            if total > len(data):
                head += f"; its first {total - len(data)} bytes not shown"
            parts.append(f"{head} <==\n{data.decode('utf-8', 'replace')}")
    except NodeManagerError as exc:
        raise HTTPException(502, f"the NodeManager of {ref.id} did not serve its logs: {exc}") from None
    return "\n".join(parts)


def wants_html(request: Request) -> bool:
    """A browser opening a page (not a script): a GET/HEAD that accepts HTML and sends no ``Authorization``."""
    return (
        request.method in ("GET", "HEAD")
        and "text/html" in request.headers.get("accept", "").lower()
        and "authorization" not in request.headers
    )


def login_redirect(request: Request) -> RedirectResponse:
    """To the auth manager's login page, with the URL the browser asked for as the return URL."""
    from airflow.api_fastapi.app import get_auth_manager

    from airflow_provider_melon.version_compat import login_url

    return RedirectResponse(
        login_url(get_auth_manager(), str(request.url)), status_code=307, headers={"Cache-Control": "no-store"}
    )


async def login_or_error(request: Request, exc: StarletteHTTPException):
    """Airflow's authentication refused the request (401, or 403 for a JWT it cannot read: a stale cookie): a
    browser goes to the login page, anyone else gets the JSON error. The plugin's own 403s (:class:`Refused`)
    and every other error are answered as they are."""
    if exc.status_code in (401, 403) and not isinstance(exc, Refused) and wants_html(request):
        return login_redirect(request)
    return await http_exception_handler(request, exc)


async def user_from_bearer_or_cookie(request: Request):
    """The request's Airflow user on Airflow 3.0, as 3.1+'s ``get_user`` finds it: the ``Authorization: Bearer`` token,
    else the ``_token`` cookie (a browser's navigation), validated by 3.0's ``get_user`` (401 "Not authenticated" for
    none, 401 expired, 403 invalid). See ``version_compat.API_SERVER_READS_THE_LOGIN_COOKIE``."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPBearer

    bearer = await HTTPBearer(auto_error=False)(request)
    token = (bearer.credentials if bearer else None) or request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    if not token:
        raise HTTPException(401, "Not authenticated")
    # Airflow 3.0's get_user(token_str) (this runs only there); mypy reads 3.1+'s get_user(request, ...)
    return await get_user(token)  # type: ignore[arg-type]


def create_app() -> FastAPI:
    from airflow.api_fastapi.core_api.security import get_user, requires_authenticated

    from airflow_provider_melon.version_compat import API_SERVER_READS_THE_LOGIN_COOKIE, tab_run_id

    current_user: Callable[..., Any]
    if API_SERVER_READS_THE_LOGIN_COOKIE:
        authenticated, current_user = requires_authenticated(), get_user
    else:  # Airflow 3.0: its get_user reads no cookie
        authenticated = current_user = user_from_bearer_or_cookie
    app = FastAPI(
        title="MeLoN",
        description=__doc__,
        dependencies=[Depends(authenticated)],
        exception_handlers={StarletteHTTPException: login_or_error},
    )

    def viewer(user=Depends(current_user)) -> Viewer:  # noqa: B008 - FastAPI's dependency idiom
        return _viewer(user)

    ViewerDep = Depends(viewer)

    @app.get("/api/gpus")
    def api_gpus(conn_id: ConnId, who: Viewer = ViewerDep) -> dict:
        return gpus_data(conn_id, who)

    @app.get("/api/jobs")
    def api_jobs(conn_id: ConnId, who: Viewer = ViewerDep) -> dict:
        return jobs_data(conn_id, who)

    @app.get("/api/jobs/{app_id}")
    def api_job(app_id: str, conn_id: ConnId, who: Viewer = ViewerDep) -> dict:
        hook = _hook(conn_id)
        app_json, tis = visible_melon_app(hook, app_id, who)
        return _job_views(hook, [app_json], tis)[0]

    @app.get("/api/jobs/{app_id}/logs", response_class=PlainTextResponse)
    def api_job_logs(app_id: str, conn_id: ConnId, who: Viewer = ViewerDep) -> PlainTextResponse:
        hook = _hook(conn_id)
        visible_melon_app(hook, app_id, who)
        return PlainTextResponse(am_log_text(hook, app_id))

    @app.get("/api/jobs/{app_id}/logs/{file}", response_class=PlainTextResponse)
    def api_job_log(app_id: str, file: str, conn_id: ConnId, who: Viewer = ViewerDep) -> PlainTextResponse:
        hook = _hook(conn_id)
        visible_melon_app(hook, app_id, who)
        return PlainTextResponse(am_log_text(hook, app_id, file))

    @app.get("/api/ti")
    def api_ti(
        dag_id: str, run_id: str, task_id: str, conn_id: ConnId, map_index: str = "-1", who: Viewer = ViewerDep
    ) -> dict:
        if not who.may_read(dag_id):
            raise Refused(f"dag_id: you may not read DAG {dag_id!r}")
        # the UI leaves "{MAP_INDEX}" unreplaced on a task that is not mapped
        index = int(map_index) if map_index.lstrip("-").isdigit() else -1
        run_id = tab_run_id(run_id)  # Airflow 3.1's tab URL: a "+" read as a space
        hook = _hook(conn_id)
        ti = {"dag_id": dag_id, "task_id": task_id, "run_id": run_id, "map_index": index}
        tags = [
            t
            for t in airflow_tags(dag_id, task_id, run_id, index)
            if t != "melon" and not t.startswith(IDENTITY_TAG_PREFIX)
        ]
        apps = hook.find_applications(tags, match_all=True, application_type=APPLICATION_TYPE)
        tis = attribute(apps, [dag_id])
        apps = [a for a in apps if tis.get(a["id"]) == ti]
        return {**ti, "jobs": _job_views(hook, apps, tis)}

    @app.get("/api/fit")
    def api_fit(
        conn_id: ConnId,
        instances: int = Query(1, ge=1, le=10_000),
        gpu_memory: Optional[str] = None,
        gpus: Optional[int] = Query(None, ge=1),
    ) -> dict:
        from airflow_provider_melon.spec import parse_size_mb

        try:
            memory_mb = parse_size_mb(gpu_memory) if gpu_memory else 0
            hook = _hook(conn_id)
            nodes = hook.nodes(["RUNNING"])
            running = _melon_apps(hook, ["RUNNING"])
            now = views.gpu_view(nodes, running, _statuses(hook, [a["id"] for a in running]), visible=set())
            return views.fit_view(nodes, now, instances, gpu_memory_mb=memory_mb, gpus=gpus or 0)
        except ValueError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None

    def page(name: str) -> HTMLResponse:
        shell = files("airflow_provider_melon.plugin").joinpath("static", "page.html").read_text()
        script = files("airflow_provider_melon.plugin").joinpath("static", "melon.js").read_text()
        return HTMLResponse(shell.replace("{{PAGE}}", name).replace("{{SCRIPT}}", script))

    for name in PAGES:
        app.add_api_route(
            f"/{name}",
            lambda name=name: page(name),
            methods=["GET"],
            response_class=HTMLResponse,
            include_in_schema=False,
        )
    return app


__all__: list[Any] = [
    "am_log_text",
    "attribute",
    "checked_conn_id",
    "create_app",
    "gpus_data",
    "is_melon_app",
    "jobs_data",
    "login_or_error",
    "Refused",
    "Viewer",
    "visible_melon_app",
    "wants_html",
]
