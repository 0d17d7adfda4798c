"""Unit tests of YarnHook against a mocked RM (requests_mock): HA, retries, errors, auth, timeouts, parsing."""

from __future__ import annotations

import json
from unittest import mock

import pytest
import requests
import requests_mock as rm_mock

from airflow_provider_melon.hadoop.rm_json import YarnApiError, normalise_node, parse_resource
from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.provider_info import CONN_FORM_FIELDS, YARN_UI_FIELD_BEHAVIOUR

RM1 = "http://rm1:8088"
RM2 = "http://rm2:8088"
WS = "/ws/v1/cluster"
INFO = {"clusterInfo": {"id": 1, "state": "STARTED", "haState": "ACTIVE", "resourceManagerVersion": "3.5.0"}}
APP_ID = "application_1700000000000_0001"


@pytest.fixture
def m():
    with rm_mock.Mocker() as mocker:
        yield mocker


def make_hook(**kw) -> YarnHook:
    kw.setdefault("rm_urls", [RM1, RM2])
    kw.setdefault("user", "alice")
    kw.setdefault("backoff", 0)
    return YarnHook(**kw)


# ---------------------------------------------------------------------------------------------- config


def test_rm_urls_normalised():
    hook = YarnHook(rm_urls="rm1, https://rm2:9090/ ,http://rm3:8088", user="u")
    assert hook.rm_urls == ["http://rm1:8088", "https://rm2:9090", "http://rm3:8088"]
    assert hook.timeout == (5.0, 30.0)
    assert hook.retries == 3


def test_no_rm_url_is_an_error():
    with pytest.raises(ValueError, match="No ResourceManager URL"):
        YarnHook(rm_urls=[])


def test_connection_fields_parsed():
    from airflow.sdk import Connection

    conn = Connection(
        conn_id="yarn_x",
        conn_type="yarn",
        host="rm1,http://rm2:8090",
        port=8032,
        login="bob",
        extra=json.dumps({"connect_timeout": 2, "read_timeout": "7.5", "retries": 1, "verify": "false"}),
    )
    with mock.patch.object(YarnHook, "get_connection", return_value=conn) as get_conn:
        hook = YarnHook("yarn_x")
        get_conn.assert_not_called()  # lazy
        assert hook.active_rm == "http://rm1:8032"
        get_conn.assert_called_once_with("yarn_x")
    assert hook.rm_urls == ["http://rm1:8032", "http://rm2:8090"]
    assert hook.user == "bob"
    assert hook.timeout == (2.0, 7.5)
    assert hook.retries == 1
    assert hook.verify is False
    assert hook.auth_mode == "simple"
    assert hook.web_ui_url == hook.active_rm  # no web_ui_url: links use the RM itself


def test_web_ui_url_is_what_links_use():
    from airflow.sdk import Connection

    conn = Connection(
        conn_id="yarn_x",
        conn_type="yarn",
        host="http://resourcemanager:8088",
        extra=json.dumps({"web_ui_url": "https://gateway.example.com/yarn/"}),
    )
    with mock.patch.object(YarnHook, "get_connection", return_value=conn):
        hook = YarnHook("yarn_x")
        assert hook.active_rm == "http://resourcemanager:8088"  # REST calls stay on the RM
        assert hook.application_url(APP_ID) == f"https://gateway.example.com/yarn/cluster/app/{APP_ID}"


def test_connection_kerberos_extra():
    from airflow.sdk import Connection
    from requests_kerberos import HTTPKerberosAuth

    conn = Connection(
        conn_id="k",
        conn_type="yarn",
        host="http://rm1:8088",
        extra=json.dumps({"auth": "kerberos", "kerberos_principal": "airflow@EXAMPLE.COM"}),
    )
    with mock.patch.object(YarnHook, "get_connection", return_value=conn):
        hook = YarnHook("k")
        session = hook.get_conn()
    assert isinstance(session.auth, HTTPKerberosAuth)
    assert hook.kerberos_principal == "airflow@EXAMPLE.COM"


def test_bad_auth_mode():
    with pytest.raises(ValueError, match="auth must be"):
        YarnHook(rm_urls=[RM1], auth="basic")


def test_form_declarations():
    assert set(CONN_FORM_FIELDS) >= {
        "auth",
        "kerberos_principal",
        "connect_timeout",
        "read_timeout",
        "retries",
        "verify",
    }
    for spec in CONN_FORM_FIELDS.values():
        assert spec["label"] and "type" in spec["schema"]
    assert "password" in YARN_UI_FIELD_BEHAVIOUR["hidden-fields"]
    behaviour = YarnHook.get_ui_field_behaviour()
    assert behaviour["relabeling"]["host"] == "ResourceManager URL(s)"
    try:
        widgets = YarnHook.get_connection_form_widgets()
    except ImportError as err:  # wtforms is absent without the FAB UI: Airflow's provider manager copes
        assert err.name == "wtforms"
    else:
        assert set(widgets) == set(CONN_FORM_FIELDS)


def test_form_declarations_validate_against_airflow_schema():
    """The dicts must fit the provider.yaml schema of Airflow >= 3.2 (conn-fields / ui-field-behaviour)."""
    import importlib.resources

    import jsonschema

    schema_text = importlib.resources.files("airflow").joinpath("provider.yaml.schema.json").read_text()
    item = json.loads(schema_text)["properties"]["connection-types"]["items"]
    doc = {
        "connection-type": "yarn",
        "hook-class-name": "airflow_provider_melon.hooks.yarn.YarnHook",
        "hook-name": "YARN ResourceManager",
        "conn-fields": CONN_FORM_FIELDS,
        "ui-field-behaviour": YARN_UI_FIELD_BEHAVIOUR,
    }
    jsonschema.validate(doc, item)


# ---------------------------------------------------------------------------------------------- retries


def test_500_then_success_is_retried(m):
    m.get(RM1 + WS + "/info", [{"status_code": 500, "text": "boom"}, {"json": INFO}])
    info = make_hook().cluster_info()
    assert info["state"] == "STARTED"
    assert m.call_count == 2


def test_persistent_500_gives_up(m):
    m.get(
        RM1 + WS + "/info",
        [
            {
                "status_code": 500,
                "json": {
                    "RemoteException": {
                        "exception": "WebApplicationException",
                        "message": "internal trouble",
                        "javaClassName": "x",
                    }
                },
            }
        ]
        * 5,
    )
    hook = make_hook(retries=4)
    with pytest.raises(YarnApiError) as exc:
        hook.cluster_info()
    assert exc.value.status == 500
    assert exc.value.message == "internal trouble"
    assert exc.value.url.startswith(RM1 + WS + "/info")
    assert m.call_count == 5  # 1 + 4 retries, then gives up


def test_401_raises_at_once_without_retry(m):
    m.get(RM1 + WS + "/apps/" + APP_ID, status_code=401, text="<html><body>Authentication required</body></html>")
    with pytest.raises(YarnApiError) as exc:
        make_hook().get_application(APP_ID)
    assert exc.value.status == 401
    assert "Authentication required" in exc.value.message
    assert APP_ID in exc.value.url
    assert "401" in str(exc.value)
    assert m.call_count == 1


def test_errors_are_one_line_with_the_fix(m):
    m.get(RM1 + WS + "/apps/" + APP_ID, status_code=401, text="Authentication required")
    with pytest.raises(YarnApiError, match="fix: the RM wants Kerberos .* auth=kerberos") as exc:
        make_hook(rm_urls=[RM1]).get_application(APP_ID)
    assert "\n" not in str(exc.value)
    m.get(
        RM1 + WS + "/info",
        status_code=403,
        json={
            "RemoteException": {
                "exception": "ForbiddenException",
                "message": "User bob cannot perform operation.\n\tat org.apache.hadoop.yarn.server.X.y(X.java:1)",
            }
        },
    )
    with pytest.raises(YarnApiError) as exc:
        make_hook(rm_urls=[RM1]).cluster_info()
    assert exc.value.message == "User bob cannot perform operation."
    assert "\n" not in str(exc.value) and "ACL" in exc.value.fix
    m.get(RM1 + WS + "/metrics", exc=requests.exceptions.ConnectionError("refused"))
    with pytest.raises(YarnApiError, match="fix: check the yarn connection's host"):
        make_hook(rm_urls=[RM1], retries=0).cluster_metrics()


def test_400_from_submit_carries_remote_exception(m):
    msg = (
        "Invalid resource request, requested resource type=[memory-mb] < 0 or greater than maximum "
        "allowed allocation. Requested resource=<memory:999999, vCores:1>"
    )
    m.post(
        RM1 + WS + "/apps",
        status_code=400,
        json={
            "RemoteException": {
                "exception": "BadRequestException",
                "message": msg,
                "javaClassName": "org.apache.hadoop.yarn.webapp.BadRequestException",
            }
        },
    )
    with pytest.raises(YarnApiError) as exc:
        make_hook().submit_application({"application-id": APP_ID, "resource": {"memory": 999999, "vCores": 1}})
    assert exc.value.status == 400
    assert exc.value.message == msg
    assert exc.value.exception == "BadRequestException"
    assert msg in str(exc.value)
    assert m.call_count == 1


def test_read_timeout_retried_then_error(m):
    m.get(RM1 + WS + "/info", exc=requests.exceptions.ReadTimeout("read timed out"))
    hook = make_hook(rm_urls=[RM1], retries=2)
    with pytest.raises(YarnApiError) as exc:
        hook.cluster_info()
    assert exc.value.status is None
    assert "ReadTimeout" in exc.value.message
    assert m.call_count == 3


def test_all_rms_down_tries_each_per_attempt(m):
    m.get(RM1 + WS + "/info", exc=requests.exceptions.ConnectionError("refused"))
    m.get(RM2 + WS + "/info", exc=requests.exceptions.ConnectTimeout("slow"))
    with pytest.raises(YarnApiError):
        make_hook(retries=1).cluster_info()
    urls = [r.url.split("?")[0] for r in m.request_history]
    assert urls == [RM1 + WS + "/info", RM2 + WS + "/info"] * 2


# ---------------------------------------------------------------------------------------------- HA


def test_standby_307_followed_and_remembered(m):
    m.get(
        RM1 + WS + "/apps/" + APP_ID + "/state",
        status_code=307,
        headers={"Location": RM2 + WS + "/apps/" + APP_ID + "/state"},
        text="This is standby RM. The redirect url is: " + RM2,
    )
    m.get(RM2 + WS + "/apps/" + APP_ID + "/state", json={"state": "RUNNING"})
    hook = make_hook()
    assert hook.get_state(APP_ID) == "RUNNING"
    assert hook.active_rm == RM2
    # user.name re-added on the followed request
    assert m.request_history[1].qs["user.name"] == ["alice"]
    m.reset_mock()
    assert hook.get_state(APP_ID) == "RUNNING"
    assert [r.netloc for r in m.request_history] == ["rm2:8088"]  # straight to rm2


def test_307_location_query_kept(m):
    m.get(RM1 + WS + "/apps", status_code=307, headers={"Location": RM2 + WS + "/apps?states=RUNNING&user.name=alice"})
    m.get(RM2 + WS + "/apps", json={"apps": {"app": [{"id": APP_ID, "state": "RUNNING"}]}})
    apps = make_hook().list_applications(states=["RUNNING"])
    assert [a["id"] for a in apps] == [APP_ID]
    followed = m.request_history[1]
    assert followed.qs == {"states": ["running"], "user.name": ["alice"]}  # no duplicates


def test_307_without_location_tries_next_rm(m):
    m.get(
        RM1 + WS + "/metrics",
        status_code=307,
        headers={"Refresh": "3;url=" + RM1 + WS + "/metrics"},
        text="This is standby RM. Redirecting to the current active RM",
    )
    m.get(RM2 + WS + "/metrics", json={"clusterMetrics": {"activeNodes": 2}})
    hook = make_hook()
    assert hook.cluster_metrics() == {"activeNodes": 2}
    assert hook.active_rm == RM2


def test_connection_error_fails_over(m):
    m.get(RM1 + WS + "/scheduler", exc=requests.exceptions.ConnectionError("refused"))
    m.get(RM2 + WS + "/scheduler", json={"scheduler": {"schedulerInfo": {"type": "capacityScheduler"}}})
    hook = make_hook()
    assert hook.scheduler() == {"type": "capacityScheduler"}
    assert hook.active_rm == RM2
    assert m.call_count == 2


def test_find_active_rm_probes_ha_state(m):
    m.get(RM1 + WS + "/info", json={"clusterInfo": {"haState": "STANDBY"}})
    m.get(RM2 + WS + "/info", json={"clusterInfo": {"haState": "ACTIVE"}})
    hook = make_hook()
    assert hook.find_active_rm() == RM2
    assert hook.active_rm == RM2


# ---------------------------------------------------------------------------------------------- timeouts + auth


def test_timeout_on_every_call(m):
    register_all(m)
    hook = make_hook(timeout=(3, 11))
    call_everything(hook)
    assert m.call_count >= 12
    for req in m.request_history:
        assert req.timeout == (3.0, 11.0), req.url


def test_timeout_passed_to_session_request():
    hook = make_hook()
    resp = requests.Response()
    resp.status_code, resp._content, resp.url = 200, json.dumps(INFO).encode(), RM1 + WS + "/info"
    with mock.patch.object(requests.Session, "request", return_value=resp) as req:
        hook.cluster_info()
    assert req.call_args.kwargs["timeout"] == (5.0, 30.0)
    assert req.call_args.kwargs["allow_redirects"] is False


def test_user_name_on_every_call_including_kill(m):
    register_all(m)
    call_everything(make_hook())
    methods = set()
    for req in m.request_history:
        assert req.qs.get("user.name") == ["alice"], req.url
        methods.add(req.method)
    assert {"GET", "POST", "PUT"} <= methods
    kill = [r for r in m.request_history if r.method == "PUT"]
    assert kill and kill[0].json() == {"state": "KILLED"}


@pytest.mark.filterwarnings("ignore::Warning:requests_kerberos")
def test_kerberos_on_every_call_and_no_user_name(m):
    from requests_kerberos import HTTPKerberosAuth

    register_all(m)
    hook = make_hook(auth="kerberos")
    # the ticket check before each call (against a real KDC: tests/integration/test_secure_live.py) is not this test's
    mock.patch("airflow_provider_melon.hooks.kerberos.TicketKeeper.ensure").start()
    assert isinstance(hook.get_conn().auth, HTTPKerberosAuth)
    seen_auth = []
    orig = HTTPKerberosAuth.__call__

    def spy(self, request):
        seen_auth.append(request.method + " " + request.url)
        return orig(self, request)

    with mock.patch.object(HTTPKerberosAuth, "__call__", spy):
        call_everything(hook)
    mock.patch.stopall()
    assert len(seen_auth) == m.call_count
    assert any(s.startswith("PUT ") for s in seen_auth)  # kill carries SPNEGO too
    for req in m.request_history:
        assert "user.name" not in req.qs, req.url


def test_custom_auth_object_applied(m):
    class Token(requests.auth.AuthBase):
        def __call__(self, r):
            r.headers["Authorization"] = "Bearer t"
            return r

    m.put(RM1 + WS + f"/apps/{APP_ID}/state", status_code=202, json={"state": "RUNNING"})
    make_hook(auth=Token()).kill_application(APP_ID)
    req = m.request_history[0]
    assert req.headers["Authorization"] == "Bearer t"
    assert "user.name" not in req.qs


# ---------------------------------------------------------------------------------------------- API surface


def test_new_application_and_submit(m):
    m.post(
        RM1 + WS + "/apps/new-application",
        json={
            "application-id": APP_ID,
            "maximum-resource-capability": {
                "memory": 8192,
                "vCores": 4,
                "resourceInformations": {
                    "resourceInformation": [
                        {"name": "memory-mb", "value": 8192, "units": "Mi"},
                        {"name": "vcores", "value": 4},
                        {"name": "yarn.io/gpu", "value": 2},
                        {"name": "melon.io/gpu-memory", "value": 32, "units": "Gi"},
                    ]
                },
            },
        },
    )
    m.post(RM1 + WS + "/apps", status_code=202, headers={"Location": RM1 + WS + "/apps/" + APP_ID})
    hook = make_hook()
    new = hook.new_application()
    assert new["application-id"] == APP_ID
    cap = new["maximum-resource-capability"]["resources"]
    assert cap == {"memory-mb": 8192, "vcores": 4, "yarn.io/gpu": 2, "melon.io/gpu-memory": 32768}
    ctx = {
        "application-id": APP_ID,
        "application-name": "t",
        "queue": "default",
        "priority": 3,
        "max-app-attempts": 1,
        "application-type": "MELON",
        "application-tags": {"tag": ["melon-run-1"]},
        "am-container-spec": {"commands": {"command": "sleep 5"}},
        "resource": {"memory": 256, "vCores": 1},
    }
    assert hook.submit_application(ctx) == APP_ID
    sent = m.request_history[-1]
    assert sent.json() == ctx
    assert sent.headers["Content-Type"] == "application/json"


def test_submit_without_id_uses_location(m):
    m.post(RM1 + WS + "/apps", status_code=202, headers={"Location": RM1 + WS + "/apps/" + APP_ID})
    assert make_hook().submit_application({"application-name": "x"}) == APP_ID


def test_new_application_without_id_is_an_error(m):
    m.post(RM1 + WS + "/apps/new-application", json={})
    with pytest.raises(YarnApiError, match="no application-id"):
        make_hook().new_application()


def test_get_application_and_logs_url(m):
    app = {
        "id": APP_ID,
        "state": "RUNNING",
        "finalStatus": "UNDEFINED",
        "applicationTags": "A,b",
        "amContainerLogs": "http://nm1:8042/node/containerlogs/container_1/alice",
    }
    m.get(RM1 + WS + "/apps/" + APP_ID, json={"app": app})
    hook = make_hook()
    got = hook.get_application(APP_ID)
    assert got["state"] == "RUNNING"
    assert got["applicationTagList"] == ["a", "b"]
    assert hook.application_logs_url(got) == app["amContainerLogs"]
    assert hook.application_logs_url(APP_ID) == app["amContainerLogs"]
    assert hook.application_logs_url({"id": APP_ID}) == f"{RM1}/cluster/app/{APP_ID}"


@pytest.mark.parametrize("status", [200, 202])
def test_kill_accepts_200_and_202(m, status):
    m.put(RM1 + WS + f"/apps/{APP_ID}/state", status_code=status, json={"state": "KILLED"})
    assert make_hook().kill_application(APP_ID) == {"state": "KILLED"}


def test_kill_of_finished_app_is_400(m):
    m.put(
        RM1 + WS + f"/apps/{APP_ID}/state",
        status_code=400,
        json={"RemoteException": {"exception": "BadRequestException", "message": "Only 'KILLED' is allowed"}},
    )
    with pytest.raises(YarnApiError, match="Only 'KILLED'"):
        make_hook().kill_application(APP_ID)


@pytest.mark.parametrize(
    "body,expected",
    [
        ({"appAttempts": {"appAttempt": [{"id": 1}, {"id": 2}]}}, [{"id": 1}, {"id": 2}]),
        ({"appAttempts": {"appAttempt": {"id": 1}}}, [{"id": 1}]),
        ({"appAttempts": ""}, []),
        ({"appAttempts": None}, []),
        ({}, []),
    ],
)
def test_attempts_parsing(m, body, expected):
    m.get(RM1 + WS + f"/apps/{APP_ID}/appattempts", json=body)
    assert make_hook().app_attempts(APP_ID) == expected


@pytest.mark.parametrize(
    "body,expected",
    [
        ({"containers": {"container": [{"containerId": "c1"}]}}, [{"containerId": "c1"}]),
        ({"container": [{"containerId": "c1"}, {"containerId": "c2"}]}, [{"containerId": "c1"}, {"containerId": "c2"}]),
        ({"container": {"containerId": "c1"}}, [{"containerId": "c1"}]),
        ({"containers": ""}, []),
        ({}, []),
    ],
)
def test_containers_parsing(m, body, expected):
    att = "appattempt_1700000000000_0001_000001"
    m.get(RM1 + WS + f"/apps/{APP_ID}/appattempts/{att}/containers", json=body)
    assert make_hook().app_containers(APP_ID, att) == expected


def test_empty_body_containers(m):
    att = "appattempt_1700000000000_0001_000001"
    m.get(RM1 + WS + f"/apps/{APP_ID}/appattempts/{att}/containers", text="")
    assert make_hook().app_containers(APP_ID, att) == []


def test_find_applications_by_tag(m):
    m.get(
        RM1 + WS + "/apps",
        json={
            "apps": {
                "app": [
                    {"id": "application_1_0001", "applicationTags": "melon-run-x,other", "startedTime": 10},
                    {"id": "application_1_0002", "applicationTags": "melon-run-x", "startedTime": 20},
                    {"id": "application_1_0003", "applicationTags": "unrelated", "startedTime": 30},
                ]
            }
        },
    )
    found = make_hook().find_applications(["Melon-Run-X"], states=["RUNNING", "ACCEPTED"])
    assert [a["id"] for a in found] == ["application_1_0002", "application_1_0001"]
    req = m.request_history[0]
    assert req.qs["applicationtags"] == ["melon-run-x"]
    assert req.qs["states"] == ["running,accepted"]
    # match_all
    found = make_hook().find_applications(["melon-run-x", "other"], match_all=True)
    assert [a["id"] for a in found] == ["application_1_0001"]


@pytest.mark.parametrize("apps", [{"apps": None}, {"apps": ""}, {"apps": {}}, {}])
def test_find_applications_none(m, apps):
    m.get(RM1 + WS + "/apps", json=apps)
    assert make_hook().find_applications("t") == []


def test_find_applications_needs_a_tag():
    with pytest.raises(ValueError):
        make_hook().find_applications([])


def test_test_connection(m):
    m.get(RM1 + WS + "/info", json=INFO)
    ok, msg = make_hook().test_connection()
    assert ok and "STARTED" in msg
    m.get(RM1 + WS + "/info", status_code=403, text="Forbidden")
    ok, msg = make_hook().test_connection()
    assert not ok and "403" in msg


# ---------------------------------------------------------------------------------------------- node parsing


def ri(name, value, units=""):
    return {
        "name": name,
        "value": value,
        "units": units,
        "resourceType": "COUNTABLE",
        "minimumAllocation": 0,
        "maximumAllocation": 9999,
    }


NODE_FULL = {
    "id": "nm1:4545",
    "state": "RUNNING",
    "nodeHostName": "nm1",
    "nodeHTTPAddress": "nm1:8042",
    "totalResource": {
        "memory": 4096,
        "vCores": 8,
        "resourceInformations": {
            "resourceInformation": [
                ri("memory-mb", 4096, "Mi"),
                ri("vcores", 8),
                ri("yarn.io/gpu", 2),
                ri("melon.io/gpu-memory", 32768, "Mi"),
            ]
        },
    },
    "usedResource": {
        "memory": 1024,
        "vCores": 1,
        "resourceInformations": {
            "resourceInformation": [
                ri("memory-mb", 1024, "Mi"),
                ri("vcores", 1),
                ri("yarn.io/gpu", 0),
                ri("melon.io/gpu-memory", 4096, "Mi"),
            ]
        },
    },
    "availableResource": {
        "memory": 3072,
        "vCores": 7,
        "resourceInformations": {
            "resourceInformation": [
                ri("memory-mb", 3072, "Mi"),
                ri("vcores", 7),
                ri("yarn.io/gpu", 2),
                ri("melon.io/gpu-memory", 28672, "Mi"),
            ]
        },
    },
}


def test_nodes_with_resource_information_list(m):
    m.get(RM1 + WS + "/nodes", json={"nodes": {"node": [NODE_FULL]}})
    (node,) = make_hook().nodes()
    assert node["totalResource"]["resources"] == {
        "memory-mb": 4096,
        "vcores": 8,
        "yarn.io/gpu": 2,
        "melon.io/gpu-memory": 32768,
    }
    assert node["usedResource"]["resources"]["melon.io/gpu-memory"] == 4096
    assert node["availableResource"]["resources"]["melon.io/gpu-memory"] == 28672
    assert node["totalResource"]["memory"] == 4096  # original fields kept


def test_nodes_single_object_instead_of_list(m):
    node = {
        "id": "nm1:1",
        "state": "RUNNING",
        "totalResource": {
            "memory": 2048,
            "vCores": 2,
            "resourceInformations": {"resourceInformation": ri("yarn.io/gpu", 2)},
        },
        "usedResource": {"memory": 0, "vCores": 0},
    }
    m.get(RM1 + WS + "/nodes", json={"nodes": {"node": node}})  # one node, not a list
    (n,) = make_hook().nodes()
    assert n["totalResource"]["resources"] == {
        "memory-mb": 2048,
        "vcores": 2,
        "yarn.io/gpu": 2,
        "melon.io/gpu-memory": 0,
    }
    assert n["availableResource"]["resources"]["yarn.io/gpu"] == 2  # derived by subtraction
    assert n["availableResource"]["resources"]["memory-mb"] == 2048


@pytest.mark.parametrize("infos", ["", None, {}, {"resourceInformation": ""}, [], "missing"])
def test_nodes_empty_or_missing_resource_informations(infos):
    total = {"memory": 1024, "vCores": 2}
    if infos != "missing":
        total["resourceInformations"] = infos
    n = normalise_node({"id": "x", "totalResource": total, "usedResource": "", "availableResource": None})
    assert n["totalResource"]["resources"] == {
        "memory-mb": 1024,
        "vcores": 2,
        "yarn.io/gpu": 0,
        "melon.io/gpu-memory": 0,
    }
    assert n["usedResource"]["resources"]["memory-mb"] == 0
    assert n["availableResource"]["resources"]["memory-mb"] == 1024


def test_resource_informations_as_bare_list_and_string_values():
    r = parse_resource(
        {
            "resourceInformations": [
                {"name": "yarn.io/gpu", "value": "3"},
                {"name": "melon.io/gpu-memory", "value": 2097152, "units": "Ki"},
                {"value": 1},
                "junk",
            ]
        }
    )
    assert r["resources"]["yarn.io/gpu"] == 3
    assert r["resources"]["melon.io/gpu-memory"] == 2048


def test_nodes_legacy_flat_fields():
    n = normalise_node(
        {"id": "x", "usedMemoryMB": 512, "availMemoryMB": 1536, "usedVirtualCores": 1, "availableVirtualCores": 3}
    )
    assert n["totalResource"]["resources"]["memory-mb"] == 2048
    assert n["totalResource"]["resources"]["vcores"] == 4
    assert n["availableResource"]["resources"]["memory-mb"] == 1536


@pytest.mark.parametrize("body", [{"nodes": None}, {"nodes": ""}, {"nodes": {}}, {}, {"nodes": {"node": []}}])
def test_no_nodes(m, body):
    m.get(RM1 + WS + "/nodes", json=body)
    assert make_hook().nodes() == []


def test_nodes_states_filter_and_gpu_summary(m):
    other = json.loads(json.dumps(NODE_FULL))
    other["id"], other["nodeHostName"] = "nm2:4545", "nm2"
    m.get(RM1 + WS + "/nodes", json={"nodes": {"node": [NODE_FULL, other]}})
    summary = make_hook().node_gpu_summary()
    assert m.request_history[0].qs["states"] == ["running"]
    assert summary["total"]["gpus"] == 4
    assert summary["total"]["gpu_memory_mb"] == 65536
    assert summary["total"]["gpu_memory_used_mb"] == 8192
    assert summary["total"]["nodes"] == 2
    assert [r["host"] for r in summary["nodes"]] == ["nm1", "nm2"]


# ---------------------------------------------------------------------------------------------- helpers


def register_all(m):
    base = RM1 + WS
    att = "appattempt_1700000000000_0001_000001"
    m.get(base + "/info", json=INFO)
    m.get(base + "/metrics", json={"clusterMetrics": {}})
    m.get(base + "/scheduler", json={"scheduler": {"schedulerInfo": {}}})
    m.get(base + "/nodes", json={"nodes": {"node": [NODE_FULL]}})
    m.post(base + "/apps/new-application", json={"application-id": APP_ID})
    m.post(base + "/apps", status_code=202, headers={"Location": base + "/apps/" + APP_ID})
    m.get(base + "/apps/" + APP_ID, json={"app": {"id": APP_ID, "state": "RUNNING"}})
    m.get(base + f"/apps/{APP_ID}/state", json={"state": "RUNNING"})
    m.put(base + f"/apps/{APP_ID}/state", status_code=202, json={"state": "RUNNING"})
    m.get(base + f"/apps/{APP_ID}/appattempts", json={"appAttempts": {"appAttempt": [{"appAttemptId": att}]}})
    m.get(base + f"/apps/{APP_ID}/appattempts/{att}/containers", json={"container": []})
    m.get(base + "/apps", json={"apps": {"app": [{"id": APP_ID, "applicationTags": "t"}]}})


def call_everything(hook: YarnHook):
    att = "appattempt_1700000000000_0001_000001"
    hook.cluster_info()
    hook.cluster_metrics()
    hook.scheduler()
    hook.nodes()
    hook.node_gpu_summary()
    hook.new_application()
    hook.submit_application({"application-id": APP_ID})
    hook.get_application(APP_ID)
    hook.get_state(APP_ID)
    hook.kill_application(APP_ID)
    hook.app_attempts(APP_ID)
    hook.app_containers(APP_ID, att)
    hook.find_applications(["t"])
    hook.application_logs_url(APP_ID)


def test_default_user_like_hadoop_clients(m, monkeypatch):
    m.get(RM1 + WS + "/info", json=INFO)
    monkeypatch.setenv("HADOOP_USER_NAME", "hdfsuser")
    hook = YarnHook(rm_urls=[RM1])
    assert hook.user == "hdfsuser"
    hook.cluster_info()
    assert m.request_history[0].qs["user.name"] == ["hdfsuser"]
    monkeypatch.delenv("HADOOP_USER_NAME")
    import getpass

    assert YarnHook(rm_urls=[RM1]).user == getpass.getuser()


def test_chunked_encoding_error_is_retried(m):
    m.get(RM1 + WS + "/info", [{"exc": requests.exceptions.ChunkedEncodingError("cut")}, {"json": INFO}])
    assert make_hook(rm_urls=[RM1]).cluster_info()["state"] == "STARTED"
    assert m.call_count == 2


def test_am_status_through_proxy(m):
    url = RM1 + f"/proxy/{APP_ID}/status"
    m.get(url, json={"tasks": {"chief": 1}}, headers={"Content-Type": "application/json"})
    assert make_hook().am_status(APP_ID) == {"tasks": {"chief": 1}}
    assert m.request_history[0].qs["user.name"] == ["alice"]


@pytest.mark.parametrize(
    "response",
    [
        {"status_code": 302, "headers": {"Location": RM1 + f"/cluster/app/{APP_ID}"}},  # AM not registered / gone
        {
            "status_code": 200,
            "text": "<html>WARNING: The following page may not be safe!</html>",
            "headers": {"Content-Type": "text/html"},
        },
        {"status_code": 500, "text": "proxy could not reach the AM"},
    ],
)
def test_am_status_none_when_not_serving(m, response):
    m.get(RM1 + f"/proxy/{APP_ID}/status", **response)
    hook = make_hook()
    assert hook.am_status(APP_ID) is None
    assert m.call_count == 1  # no redirect following, no retry: best effort
    assert hook.active_rm == RM1


def test_am_status_4xx_raises(m):
    m.get(RM1 + f"/proxy/{APP_ID}/status", status_code=404, text="Application not found")
    with pytest.raises(YarnApiError):
        make_hook().am_status(APP_ID)


def test_per_call_retries_override(m):
    m.get(RM1 + WS + "/info", status_code=503, text="busy")
    with pytest.raises(YarnApiError):
        make_hook(rm_urls=[RM1], retries=5)._request("GET", WS + "/info", retries=1)
    assert m.call_count == 2


def test_non_307_redirect_is_not_an_ha_redirect(m):
    m.get(RM1 + WS + "/info", status_code=302, headers={"Location": "http://login.example/"})
    hook = make_hook()
    resp = hook._request("GET", WS + "/info")
    assert resp.status_code == 302
    assert hook.active_rm == RM1
    assert m.call_count == 1


def test_unexpected_redirect_on_json_call_is_an_error(m):
    m.get(RM1 + WS + "/info", status_code=302, headers={"Location": "http://login.example/"})
    with pytest.raises(YarnApiError, match="unexpected redirect") as exc:
        make_hook().cluster_info()
    assert exc.value.status == 302


def test_get_url_reaches_another_daemon_with_the_hooks_auth_and_no_redirects(m):
    """What the CLI reads NodeManagers' logs with: the hook's session, user.name, timeout; the answer as it is."""
    hook = make_hook()
    m.get("http://nm1:8042/ws/v1/node/containers/c1/logs", json={"containerLogsInfo": {}})
    resp = hook.get_url("http://nm1:8042/ws/v1/node/containers/c1/logs", {"size": -10})
    assert resp.status_code == 200 and m.last_request.qs == {"size": ["-10"], "user.name": ["alice"]}
    m.get("http://nm1:8042/moved", status_code=307, headers={"Location": "http://logserver/x"})
    assert hook.get_url("http://nm1:8042/moved").status_code == 307  # not followed
    m.get("http://nm1:8042/missing", status_code=404)
    assert hook.get_url("http://nm1:8042/missing").status_code == 404  # no YarnApiError: the caller decides


def test_container_log_without_a_node_address_says_so_and_calls_nothing(m):
    """The RM may list a node without a ``nodeHTTPAddress``: there is no NodeManager to ask (never ``http://None``)."""
    from airflow_provider_melon.hadoop.nodemanager import NodeManagerError

    hook = make_hook()
    for missing in (None, ""):
        with pytest.raises(NodeManagerError, match="no NodeManager address"):
            hook.container_log(missing, "container_1700000000000_0001_01_000002")
        with pytest.raises(NodeManagerError, match="no NodeManager address"):
            hook.node_base_url(missing)
    assert m.request_history == []
