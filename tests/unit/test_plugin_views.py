"""The UI plugin's figures, from recorded RM and AM JSON (the shapes Hadoop 3.5 and our AM serve)."""

import pytest

from airflow_provider_melon.hadoop.rm_json import normalise_node
from airflow_provider_melon.plugin import views


def node(node_id, gpus=2, gpu_mem=32768, used_mem=0, used_gpus=0):
    def res(mem, vcores, g, gm):
        return {
            "memory": mem,
            "vCores": vcores,
            "resourceInformations": {
                "resourceInformation": [
                    {"name": "memory-mb", "value": mem, "units": "Mi"},
                    {"name": "vcores", "value": vcores},
                    {"name": "yarn.io/gpu", "value": g},
                    {"name": "melon.io/gpu-memory", "value": gm, "units": "Mi"},
                ]
            },
        }

    return normalise_node(
        {
            "id": node_id,
            "nodeHostName": node_id.split(":")[0],
            "state": "RUNNING",
            "totalResource": res(8192, 8, gpus, gpu_mem),
            "usedResource": res(1024, 1, used_gpus, used_mem),
        }
    )


APP = {
    "id": "application_1_0001",
    "name": "hpo-trial-0",
    "user": "root",
    "queue": "default",
    "state": "RUNNING",
    "finalStatus": "UNDEFINED",
    "progress": 50.0,
    "startedTime": 1000,
    "elapsedTime": 42000,
    "applicationTags": "melon,airflow-dag:melon_hpo_fanout,airflow-task:trial,airflow-run:abc,airflow-map:0",
    "amContainerLogs": "http://nm1:8042/node/containerlogs/c1/root",
}
LABELS = {
    "dag_id": "melon_hpo_fanout",
    "task_id": "trial",
    "run_id": "manual__2026-01-01T00:00:00+00:00",
    "map_index": 0,
}


def task(
    role, index, gpu, node_id, expected=6144, used=None, state="REGISTERED", gpus=0, mps=False, history=(), held=None
):
    return {
        "role": role,
        "index": index,
        "state": state,
        "gpu": gpu,
        "node_id": node_id,
        "host": "nm1",
        "gpu_memory_mb": expected if held is None else held,  # what it registered: what the ledger holds
        "expected_gpu_memory_mb": expected,
        "gpu_memory_used_mb": used,
        "gpus": gpus,
        "mps": mps,
        "step": 7,
        "loss": 0.5,
        "attempt": 0,
        "history": [list(h) for h in history],
    }


def test_gpu_view_places_tasks_on_their_node_and_gpu():
    nodes = [node("localhost:1"), node("localhost:2", used_mem=12288)]
    status = {
        "labels": LABELS,
        "tasks": [
            task("worker", 0, "1", "localhost:2", used=2100, mps=True),
            task("worker", 1, "1", "localhost:2"),
            task("worker", 2, None, "localhost:1", state="ALLOCATED"),
            task("chief", 0, "0", "localhost:1", state="SUCCEEDED"),  # done: not on a GPU any more
        ],
    }
    view = views.gpu_view(nodes, [APP], {APP["id"]: status}, tis={APP["id"]: LABELS})
    n1, n2 = view["nodes"]
    assert [g["total_mb"] for g in n2["gpus"]] == [16384, 16384]
    gpu1 = n2["gpus"][1]
    assert [t["task"] for t in gpu1["tasks"]] == ["worker:0", "worker:1"]
    assert (gpu1["reserved_mb"], gpu1["free_mb"], gpu1["used_mb"]) == (12288, 4096, 2100)
    assert n2["gpus"][0]["tasks"] == [] and n2["mps"] and not n1["mps"]
    assert n2["yarn_gpu_memory_used_mb"] == 12288
    assert [t["task"] for t in n1["waiting_for_a_gpu"]] == ["worker:2"]
    ref = gpu1["tasks"][0]
    assert ref["ti_url"] == "dags/melon_hpo_fanout/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00/tasks/trial/mapped/0"
    assert view["totals"] == {"nodes": 2, "gpus": 4, "gpu_memory_mb": 65536, "reserved_mb": 12288, "tasks_on_gpus": 2}


def test_a_gpu_counts_the_slots_its_tasks_hold_not_what_they_expect():
    # two small tasks expecting 1 GiB each hold a quarter of the 16 GiB GPU (the ledger's slot, registered)
    status = {
        "labels": {},
        "tasks": [task("worker", i, "0", "localhost:1", expected=1024, held=4096) for i in range(2)],
    }
    [n] = views.gpu_view([node("localhost:1")], [APP], {APP["id"]: status})["nodes"]
    assert (n["gpus"][0]["reserved_mb"], n["gpus"][0]["free_mb"]) == (8192, 8192)
    assert [t["expected_mb"] for t in n["gpus"][0]["tasks"]] == [1024, 1024]


def test_an_exclusive_task_fills_its_gpus():
    status = {"labels": {}, "tasks": [task("worker", 0, "0,1", "localhost:1", expected=0, gpus=2)]}
    [n] = views.gpu_view([node("localhost:1")], [APP], {APP["id"]: status})["nodes"]
    assert [(g["reserved_mb"], g["free_mb"]) for g in n["gpus"]] == [(16384, 0), (16384, 0)]


def test_queue_headroom():
    queue = {
        "queuePath": "root.default",
        "state": "RUNNING",
        "maxEffectiveCapacity": {
            "resourceInformations": {
                "resourceInformation": [
                    {"name": "melon.io/gpu-memory", "value": 65536, "units": "Mi"},
                    {"name": "yarn.io/gpu", "value": 4},
                ]
            }
        },
        "resourcesUsed": {
            "resourceInformations": {
                "resourceInformation": [{"name": "melon.io/gpu-memory", "value": 18432, "units": "Mi"}]
            }
        },
    }
    [q] = views.gpu_view([], [], {}, [queue])["queues"]
    assert (q["gpu_memory_headroom_mb"], q["gpus"], q["gpus_used"]) == (65536 - 18432, 4, 0)


def test_job_view_links_history_and_airflow_identity():
    status = {
        "labels": {**LABELS, "tensorboard": "http://tb/?logdir=x"},
        "tasks": [task("worker", 0, "1", "localhost:2", history=[(1, 1, 2.0), (2, 5, 1.0), (3, 9, None)])],
    }
    job = views.job_view(APP, status, "http://127.0.0.1:28088/", ti=LABELS)
    assert job["links"] == {
        "YARN application": "http://127.0.0.1:28088/cluster/app/application_1_0001",
        "ApplicationMaster": "http://127.0.0.1:28088/proxy/application_1_0001/",
        "AM logs": "api/jobs/application_1_0001/logs",
        "TensorBoard": "http://tb/?logdir=x",
    }
    assert job["series"] == [
        {
            "task": "worker:0",
            "points": [
                {"t": 1, "step": 1, "loss": 2.0},
                {"t": 2, "step": 5, "loss": 1.0},
                {"t": 3, "step": 9, "loss": None},
            ],
        }
    ]
    assert (job["dag_id"], job["task_id"], job["map_index"], job["elapsed_s"]) == ("melon_hpo_fanout", "trial", 0, 42.0)
    ended = views.job_view({**APP, "state": "FINISHED"}, None, "http://rm:8088", ti=LABELS)
    assert "ApplicationMaster" not in ended["links"] and ended["tasks"] == []
    assert ended["dag_id"] == "melon_hpo_fanout"  # the proven attribution, also when the AM is gone


def test_with_a_web_ui_url_no_link_names_a_nodemanagers_internal_host():
    """The RM's ``amContainerLogs`` names the AM's NodeManager by its cluster-internal name (the docker/ stack's
    ``nodemanager-1:8042``), which a browser outside the cluster's network cannot open: the AM logs link goes
    through the plugin (the api-server reads the NodeManager), the RM's pages through ``web_ui_url``."""
    app = {
        **APP,
        "amContainerLogs": "http://nodemanager-1:8042/node/containerlogs/container_1_0001_01_000001/airflow",
        "amHostHttpAddress": "nodemanager-1:8042",
    }
    status = {
        "labels": {},
        "tasks": [{**task("worker", 0, "0", "nodemanager-1:45454"), "host": "nodemanager-1"}],
        "tensorboard": {"url": "http://nodemanager-1:41234/"},
    }
    for state in ("RUNNING", "FINISHED"):
        job = views.job_view({**app, "state": state}, status, "http://127.0.0.1:28088", ti=LABELS)
        assert "AM logs" in job["links"], job["links"]
        for name, url in job["links"].items():
            assert "nodemanager-1" not in url and "8042" not in url, (name, url)
            assert url.startswith("http://127.0.0.1:28088/") or url == views.am_logs_link(APP["id"]), (name, url)
    assert views.am_logs_link(APP["id"]) == "api/jobs/application_1_0001/logs"
    # no AM logs link where the RM shows the connection's user none (another tenant's app under view ACLs)
    assert (
        "AM logs"
        not in views.job_view(
            {k: v for k, v in app.items() if k != "amContainerLogs"}, status, "http://127.0.0.1:28088"
        )["links"]
    )


def test_job_view_says_where_gang_formation_stands_until_the_gang_has_formed():
    gang = {"hold_s": 60, "formed": False, "message": "waiting for the gang: 1 of 3 containers granted"}
    waiting = views.job_view(APP, {"tasks": [], "gang": gang}, "http://rm:8088")
    assert waiting["gang_waiting"] == "waiting for the gang: 1 of 3 containers granted"
    formed = views.job_view(APP, {"tasks": [], "gang": {**gang, "formed": True}}, "http://rm:8088")
    assert formed["gang_waiting"] is None
    hostile = views.job_view(APP, {"tasks": [], "gang": {**gang, "message": {"<b>": 1}}}, "http://rm:8088")
    assert hostile["gang_waiting"] is None  # not a string: dropped, never rendered


def test_fit_now_counts_free_memory_per_gpu_and_ever_is_the_preflight():
    nodes = [node("localhost:1"), node("localhost:2")]
    status = {"labels": {}, "tasks": [task("worker", i, "0", "localhost:1") for i in range(2)]}
    now = views.gpu_view(nodes, [APP], {APP["id"]: status})
    fit = views.fit_view(nodes, now, instances=8, gpu_memory_mb=6144)
    # GPU 0 of node 1 has 16384 - 12288 = 4096 free: nothing; the other three GPUs take 2 each
    assert fit["now"]["tasks_that_fit"] == 6 and not fit["now"]["fits"]
    assert fit["ever"]["fits"]
    assert "6 of 8 fit" in fit["now"]["message"]
    never = views.fit_view(nodes, now, instances=1, gpu_memory_mb=20480)
    assert not never["ever"]["fits"] and "16384" in never["ever"]["message"]
    whole = views.fit_view(nodes, now, instances=2, gpus=2)
    assert whole["now"]["tasks_that_fit"] == 1  # node 2 has two idle GPUs; node 1 only one
    with pytest.raises(ValueError, match="either gpu_memory or gpus"):
        views.fit_view(nodes, now, instances=1)


# ---- hostile values: an AM (any YARN user's) serves what it likes on /status; the RM echoes what a submitter wrote

XSS = '<img src=x onerror="window.__pwned=1">'


def hostile_status():
    return {
        "labels": {
            "dag_id": XSS,
            "task_id": XSS,
            "run_id": XSS,
            "map_index": XSS,
            "tensorboard": "javascript:window.__pwned=1",
        },
        "tasks": [
            {
                "role": XSS,
                "index": XSS,
                "state": XSS,
                "gpu": "0",
                "node_id": "localhost:1",
                "host": XSS,
                "gpu_memory_mb": "6144<b>",
                "expected_gpu_memory_mb": XSS,
                "gpu_memory_used_mb": "lots",
                "gpus": "two",
                "mps": XSS,
                "step": XSS,
                "loss": "0.5<script>",
                "attempt": XSS,
                "exit_code": XSS,
                "history": [[XSS, XSS, XSS], [1, 2, 0.5]],
            }
        ],
    }


def test_hostile_numbers_are_coerced_and_links_that_are_not_http_are_dropped():
    app = {**APP, "elapsedTime": XSS, "progress": XSS, "startedTime": XSS, "amContainerLogs": "javascript:alert(1)"}
    job = views.job_view(app, hostile_status(), "http://127.0.0.1:28088/")
    [t] = job["tasks"]
    assert (t["step"], t["loss"], t["attempt"], t["exit_code"], t["expected_mb"], t["used_mb"]) == (None,) * 6
    assert (job["elapsed_s"], job["progress"], job["started"]) == (0.0, 0.0, None)
    assert job["series"] == [{"task": f"{XSS}:None", "points": [{"t": 1, "step": 2, "loss": 0.5}]}]
    assert set(job["links"]) == {"YARN application", "ApplicationMaster"}  # no javascript: AM logs, no TensorBoard
    assert all(u.startswith("http://127.0.0.1:28088/") for u in job["links"].values())


def test_labels_never_attribute_a_job_to_a_dag():
    """The AM's labels come from the submitter's plan: the job's DAG and TI link come only from the attribution
    the caller proved (``ti``), never from the labels or the readable tags."""
    job = views.job_view(APP, hostile_status(), "http://rm:8088")
    assert (job["dag_id"], job["task_id"], job["run_id"], job["map_index"], job["ti_url"]) == (None,) * 5
    ti = {"dag_id": "melon_hpo_fanout", "task_id": "trial", "run_id": "r1", "map_index": 0}
    job = views.job_view(APP, hostile_status(), "http://rm:8088", ti=ti)
    assert job["ti_url"] == "dags/melon_hpo_fanout/runs/r1/tasks/trial/mapped/0" and job["dag_id"] == "melon_hpo_fanout"


def test_gpu_view_survives_strings_where_numbers_go_and_hides_what_the_viewer_may_not_see():
    status = hostile_status()
    view = views.gpu_view([node("localhost:1")], [APP], {APP["id"]: status})  # raised TypeError before
    gpu0 = view["nodes"][0]["gpus"][0]
    [ref] = gpu0["tasks"]
    assert (ref["expected_mb"], ref["used_mb"], gpu0["used_mb"], ref["ti_url"], ref["dag_id"]) == (
        0,
        None,
        None,
        None,
        None,
    )
    anonymous = views.gpu_view([node("localhost:1")], [APP], {APP["id"]: task_status()}, visible=set())
    [ref] = anonymous["nodes"][0]["gpus"][0]["tasks"]
    assert ref == {
        "anonymous": True,
        "task": None,
        "state": None,
        "app_id": None,
        "app_name": None,
        "user": None,
        "expected_mb": 6144,
        "held_mb": 6144,
        "used_mb": 100,
        "exclusive_gpus": 0,
        "dag_id": None,
        "task_id": None,
        "run_id": None,
        "map_index": None,
        "ti_url": None,
    }
    assert anonymous["totals"]["reserved_mb"] == 6144


def task_status():
    return {"labels": LABELS, "tasks": [task("worker", 0, "0", "localhost:1", used=100)]}


def test_conn_id_must_name_a_yarn_connection_and_the_allow_list(monkeypatch):
    """The api-server acts with the named connection's credentials: only connections of type yarn (and, with
    ``[melon] ui_conn_ids``, only those) are accepted; anything else is a 422 naming ``conn_id``."""
    from fastapi import HTTPException

    from airflow_provider_melon.plugin.app import checked_conn_id

    monkeypatch.setenv("AIRFLOW_CONN_NOT_YARN", '{"conn_type": "http", "host": "127.0.0.1"}')
    monkeypatch.setenv("AIRFLOW_CONN_YARN_OTHER", '{"conn_type": "yarn", "host": "127.0.0.1"}')
    assert checked_conn_id("yarn_other") == "yarn_other"
    assert checked_conn_id("yarn_default") == "yarn_default"  # the default may be absent: the hook's defaults
    for conn_id, why in (("not_yarn", "of type 'http', not 'yarn'"), ("nope", "no connection 'nope'")):
        with pytest.raises(HTTPException) as err:
            checked_conn_id(conn_id)
        assert err.value.status_code == 422 and err.value.detail.startswith("conn_id: ") and why in err.value.detail
    monkeypatch.setenv("AIRFLOW__MELON__UI_CONN_IDS", "yarn_default")
    with pytest.raises(HTTPException) as err:
        checked_conn_id("yarn_other")
    assert err.value.detail == "conn_id: 'yarn_other' is not one of [melon] ui_conn_ids"


def test_the_api_takes_only_its_documented_query_parameters():
    """The viewer and the checked conn_id are dependencies, not query parameters a caller could fill in."""
    from airflow_provider_melon.plugin.app import create_app

    paths = create_app().openapi()["paths"]
    query = {
        path: sorted(p["name"] for p in op["get"].get("parameters", []) if p["in"] == "query")
        for path, op in paths.items()
    }
    assert query == {
        "/api/gpus": ["conn_id"],
        "/api/jobs": ["conn_id"],
        "/api/jobs/{app_id}": ["conn_id"],
        "/api/jobs/{app_id}/logs": ["conn_id"],
        "/api/jobs/{app_id}/logs/{file}": ["conn_id"],
        "/api/ti": ["conn_id", "dag_id", "map_index", "run_id", "task_id"],
        "/api/fit": ["conn_id", "gpu_memory", "gpus", "instances"],
    }


def test_only_a_browser_opening_a_page_is_sent_to_the_login_page():
    """A browser navigation (Accept: text/html, no Authorization header) is redirected to the login page on a
    401; a script (JSON, or any request with a bearer token) gets the JSON error."""
    from starlette.requests import Request

    from airflow_provider_melon.plugin.app import wants_html

    def request(method="GET", **headers):
        return Request(
            {
                "type": "http",
                "method": method,
                "path": "/melon/jobs",
                "query_string": b"",
                "headers": [(k.lower().replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
            }
        )

    chromium = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
    assert wants_html(request(Accept=chromium))
    assert not wants_html(request())  # urllib, curl: no Accept
    assert not wants_html(request(Accept="*/*"))  # the page's own fetch()
    assert not wants_html(request(Accept="application/json"))
    assert not wants_html(request(Accept=chromium, Authorization="Bearer x"))
    assert not wants_html(request("POST", Accept=chromium))


def test_job_view_shows_learned_gpu_memory_and_growths_only_for_a_proven_task():
    """gpu_memory: auto: the job page says where the figure came from (the operator's label) and how a
    task grew after running out of GPU memory; a label on an app not proven to be the task's is not shown."""
    note = "roles.worker.gpu_memory auto: 1430 MiB (learned from the last 1 run(s): peak 1300 MiB × 1.10 in run x)"
    grown = {
        "role": "worker",
        "index": 0,
        "state": "RUNNING",
        "expected_gpu_memory_mb": 1536,
        "initial_gpu_memory_mb": 1024,
        "gpu_memory_peak_mb": 1300,
        "oom_growths": 1,
    }
    status = {"tasks": [grown], "labels": {**LABELS, "gpu_memory": note}}
    job = views.job_view(APP, status, "http://rm:8088", ti=LABELS)
    assert job["gpu_memory_note"] == note
    [row] = job["tasks"]
    assert (row["expected_mb"], row["initial_mb"], row["peak_mb"], row["oom_growths"]) == (1536, 1024, 1300, 1)
    assert views.job_view(APP, status, "http://rm:8088")["gpu_memory_note"] is None


@pytest.mark.parametrize("all_admins", ["False", "True"])
def test_the_login_redirect_names_the_page_as_the_return_url_with_this_airflows_simple_auth_manager(
    monkeypatch, all_admins
):
    """The installed Airflow's own SimpleAuthManager (whose ``get_url_login`` ignores ``next_url`` below 3.3): the
    browser is sent to its login page with ``next`` = the page it asked for, exactly once: its login form sends the
    browser back there (the all-admins token login of 3.0–3.2 does not read it: it goes to the UI's base URL)."""
    from urllib.parse import parse_qs, urlsplit

    import airflow.api_fastapi.app as airflow_app
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from starlette.requests import Request

    from airflow_provider_melon.plugin.app import login_redirect

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", all_admins)
    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: SimpleAuthManager())
    page = b"dag_id=melon_ui_probe&run_id=manual__2026-01-01T00:00:00+00:00&task_id=train&map_index=-1"
    request = Request(
        {
            "type": "http",
            "method": "GET",
            "scheme": "http",
            "server": ("127.0.0.1", 8080),
            "root_path": "/melon",
            "path": "/melon/ti",
            "query_string": page,
            "headers": [],
        }
    )
    response = login_redirect(request)
    assert response.status_code == 307
    location = urlsplit(response.headers["location"])
    assert location.path == ("/auth/token/login" if all_admins == "True" else "/auth/login")
    assert parse_qs(location.query) == {"next": ["http://127.0.0.1:8080/melon/ti?" + page.decode()]}


def test_the_login_redirect_keeps_a_return_url_the_auth_manager_put_there(monkeypatch):
    """An auth manager that honours ``next_url`` itself (the FAB one's absolute URL): its URL as it is, one ``next``."""
    from urllib.parse import parse_qs, urlencode, urlsplit

    import airflow.api_fastapi.app as airflow_app
    from starlette.requests import Request

    from airflow_provider_melon.plugin.app import login_redirect

    class Fab:
        def get_url_login(self, **kwargs):
            return "http://127.0.0.1:8080/auth/login/?" + urlencode({"next": kwargs["next_url"]})

    monkeypatch.setattr(airflow_app, "get_auth_manager", Fab)
    request = Request(
        {
            "type": "http",
            "method": "GET",
            "scheme": "http",
            "server": ("127.0.0.1", 8080),
            "root_path": "/melon",
            "path": "/melon/jobs",
            "query_string": b"",
            "headers": [],
        }
    )
    location = urlsplit(login_redirect(request).headers["location"])
    assert (location.netloc, location.path) == ("127.0.0.1:8080", "/auth/login/")
    assert parse_qs(location.query) == {"next": ["http://127.0.0.1:8080/melon/jobs"]}


def test_a_page_is_served_to_the_login_cookie_a_browser_sends(monkeypatch):
    """A browser opening a MeLoN page sends its login as the ``_token`` cookie (no ``Authorization`` header): the
    plugin asks the auth manager about that token on every Airflow line (Airflow 3.0.6's own ``get_user`` reads only
    a bearer header); a bearer header still wins, and no login, a refused token and an expired one are refused."""
    import airflow.api_fastapi.app as airflow_app
    import airflow.api_fastapi.core_api.security as security
    from fastapi.testclient import TestClient
    from jwt import ExpiredSignatureError, InvalidTokenError

    from airflow_provider_melon.plugin.app import create_app

    asked: list[str] = []

    class User:
        def get_name(self):
            return "alice"

    class AuthManager:
        async def get_user_from_token(self, token):
            asked.append(token)
            if token == "expired":
                raise ExpiredSignatureError("expired")
            if token != "alice's":
                raise InvalidTokenError("not a token of ours")
            return User()

    for module in (airflow_app, security):
        monkeypatch.setattr(module, "get_auth_manager", AuthManager, raising=False)
    client = TestClient(create_app())
    page = client.get("/jobs", cookies={"_token": "alice's"})
    assert page.status_code == 200 and 'data-page="jobs"' in page.text, page.text[:300]
    assert asked == ["alice's"]
    assert client.get("/jobs", cookies={"_token": "expired"}).status_code == 401
    assert client.get("/jobs", cookies={"_token": "forged"}).status_code == 403
    assert client.get("/jobs").status_code == 401
    asked.clear()
    assert (
        client.get("/jobs", cookies={"_token": "forged"}, headers={"Authorization": "Bearer alice's"}).status_code
        == 200
    )
    assert asked == ["alice's"]


def test_the_yarn_job_tab_asks_for_the_run_its_url_names(monkeypatch):
    """The "YARN job" tab's iframe URL as this Airflow line's UI builds it (3.1.8's puts ``{RUN_ID}`` in raw, 3.2+
    URL-encode it; read in their UI bundles), read by the page's script (``URLSearchParams``: a raw ``+`` becomes a
    space) and sent on to ``/api/ti``: the plugin looks up the run the tab is of, ``+00:00`` and all."""
    from urllib.parse import parse_qs, quote

    import airflow.api_fastapi.app as airflow_app
    import airflow.api_fastapi.core_api.security as security
    from fastapi.testclient import TestClient

    from airflow_provider_melon.plugin import app as plugin_app
    from airflow_provider_melon.spec import IDENTITY_TAG_PREFIX
    from airflow_provider_melon.submission import airflow_tags
    from airflow_provider_melon.version_compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_2_PLUS

    class AuthManager:
        async def get_user_from_token(self, token):
            return object()

        def is_authorized_dag(self, **kwargs):
            return True

    asked = []

    class Hook:
        def find_applications(self, tags, **kwargs):
            asked.append(sorted(tags))
            return []

    for module in (airflow_app, security):
        monkeypatch.setattr(module, "get_auth_manager", AuthManager, raising=False)
    monkeypatch.setattr(plugin_app, "_hook", lambda conn_id: Hook())
    monkeypatch.setattr(plugin_app, "_viewer", lambda user: type("V", (), {"may_read": lambda self, dag: True})())
    run_id = "manual__2026-01-01T00:00:00.123456+00:00"
    raw = AIRFLOW_V_3_1_PLUS and not AIRFLOW_V_3_2_PLUS
    tab_query = f"dag_id=d&run_id={run_id if raw else quote(run_id, safe='')}&task_id=train&map_index=-1"
    page_reads = parse_qs(tab_query)["run_id"][0]  # URLSearchParams.get, as parse_qs: "+" -> " "
    app = plugin_app.create_app()
    app.dependency_overrides[plugin_app.checked_conn_id] = lambda: "yarn_default"
    answer = TestClient(app).get(
        "/api/ti",
        params={"dag_id": "d", "run_id": page_reads, "task_id": "train", "map_index": "-1"},
        headers={"Authorization": "Bearer t"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["run_id"] == run_id
    assert asked == [
        sorted(
            t for t in airflow_tags("d", "train", run_id, -1) if t != "melon" and not t.startswith(IDENTITY_TAG_PREFIX)
        )
    ]


def test_the_3_0_login_dependency_takes_the_bearer_header_else_the_cookie(monkeypatch):
    """``user_from_bearer_or_cookie`` (the plugin's routes' login on Airflow 3.0) called directly, so every line runs
    it: the token it hands to Airflow's ``get_user`` is the bearer header's, else the ``_token`` cookie's; none: 401."""
    import asyncio

    import airflow.api_fastapi.core_api.security as security
    from fastapi import HTTPException
    from starlette.requests import Request

    from airflow_provider_melon.plugin.app import user_from_bearer_or_cookie

    async def get_user(token):
        return f"user of {token}"

    monkeypatch.setattr(security, "get_user", get_user)

    def call(headers):
        request = Request(
            {
                "type": "http",
                "method": "GET",
                "path": "/melon/jobs",
                "query_string": b"",
                "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
            }
        )
        return asyncio.run(user_from_bearer_or_cookie(request))

    assert call({"cookie": "_token=from-cookie"}) == "user of from-cookie"
    assert call({"authorization": "Bearer from-header", "cookie": "_token=from-cookie"}) == "user of from-header"
    assert call({"authorization": "Basic abc", "cookie": "_token=from-cookie"}) == "user of from-cookie"
    with pytest.raises(HTTPException) as refused:
        call({})
    assert refused.value.status_code == 401


@pytest.mark.parametrize(
    "value, shown", [(3, 3), (2.0, 2.0), ("4096", 4096), ("2.5", 2.5), (10**400, None), (True, None), ("NaN", None)]
)
def test_a_figure_on_the_page_is_a_number_whole_numbers_as_ints(value, shown):
    """An RM figure too large for a float (JSON ints have no bound) is no figure, not an OverflowError."""
    figure = views.number(value)
    assert figure == shown and type(figure) is type(shown)
