"""AsyncYarnHook: the same behaviour as YarnHook (it runs the sync hook in a worker thread)."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from unittest import mock

import pytest
import requests
import requests_mock as rm_mock

from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hooks.yarn import AsyncYarnHook, YarnHook

RM1 = "http://rm1:8088"
RM2 = "http://rm2:8088"
WS = "/ws/v1/cluster"
APP_ID = "application_1700000000000_0007"


@pytest.fixture
def m():
    with rm_mock.Mocker() as mocker:  # patches the transport adapter globally: worker threads see it too
        yield mocker


def make_hook(**kw) -> AsyncYarnHook:
    kw.setdefault("rm_urls", [RM1, RM2])
    kw.setdefault("user", "alice")
    kw.setdefault("backoff", 0)
    return AsyncYarnHook(**kw)


def test_same_public_api_and_signatures():
    public = {
        n
        for n, v in vars(YarnHook).items()
        if callable(v)
        and not n.startswith("_")
        and n not in ("get_conn", "close", "get_ui_field_behaviour", "get_connection_form_widgets")
    }
    for name in public:
        amethod = getattr(AsyncYarnHook, name, None)
        assert amethod is not None, name
        assert inspect.iscoroutinefunction(amethod), name
        assert inspect.signature(amethod) == inspect.signature(getattr(YarnHook, name)), name


@pytest.mark.asyncio
async def test_state_poll_and_kill(m):
    m.get(RM1 + WS + f"/apps/{APP_ID}/state", json={"state": "RUNNING"})
    m.put(RM1 + WS + f"/apps/{APP_ID}/state", status_code=202, json={"state": "RUNNING"})
    hook = make_hook()
    assert await hook.get_state(APP_ID) == "RUNNING"
    assert await hook.kill_application(APP_ID) == {"state": "RUNNING"}
    for req in m.request_history:
        assert req.qs["user.name"] == ["alice"]
        assert req.timeout == (5.0, 30.0)
    assert m.request_history[1].json() == {"state": "KILLED"}


@pytest.mark.asyncio
async def test_runs_off_the_event_loop_thread(m):
    loop_thread = threading.get_ident()
    seen = []

    def cb(request, context):
        seen.append(threading.get_ident())
        return {"clusterInfo": {"state": "STARTED"}}

    m.get(RM1 + WS + "/info", json=cb)
    assert (await make_hook().cluster_info())["state"] == "STARTED"
    assert seen and seen[0] != loop_thread


@pytest.mark.asyncio
async def test_connection_looked_up_lazily_in_worker_thread(m):
    from airflow.sdk import Connection

    conn = Connection(conn_id="yarn_async", conn_type="yarn", host="rm1", login="bob")
    threads = []

    def fake_get_connection(conn_id):
        threads.append(threading.get_ident())
        return conn

    m.get(RM1 + WS + "/info", json={"clusterInfo": {"state": "STARTED"}})
    with mock.patch.object(YarnHook, "get_connection", side_effect=fake_get_connection):
        hook = AsyncYarnHook("yarn_async", backoff=0)
        assert threads == []  # nothing at construction
        await hook.cluster_info()
        await hook.cluster_info()
    assert len(threads) == 1 and threads[0] != threading.get_ident()
    assert m.request_history[0].qs["user.name"] == ["bob"]


@pytest.mark.asyncio
async def test_500_then_success_retried(m):
    m.get(RM1 + WS + "/metrics", [{"status_code": 503, "text": "busy"}, {"json": {"clusterMetrics": {"x": 1}}}])
    assert await make_hook().cluster_metrics() == {"x": 1}
    assert m.call_count == 2


@pytest.mark.asyncio
async def test_5xx_gives_up(m):
    m.get(RM1 + WS + "/info", status_code=500, text="down")
    with pytest.raises(YarnApiError) as exc:
        await make_hook(retries=2).cluster_info()
    assert exc.value.status == 500
    assert m.call_count == 3


@pytest.mark.asyncio
async def test_4xx_at_once(m):
    m.get(
        RM1 + WS + f"/apps/{APP_ID}",
        status_code=404,
        json={"RemoteException": {"exception": "NotFoundException", "message": f"app with id: {APP_ID} not found"}},
    )
    with pytest.raises(YarnApiError) as exc:
        await make_hook().get_application(APP_ID)
    assert exc.value.status == 404
    assert "not found" in exc.value.message
    assert m.call_count == 1


@pytest.mark.asyncio
async def test_standby_redirect_remembered(m):
    m.get(RM1 + WS + f"/apps/{APP_ID}", status_code=307, headers={"Location": RM2 + WS + f"/apps/{APP_ID}"})
    m.get(RM2 + WS + f"/apps/{APP_ID}", json={"app": {"id": APP_ID, "state": "ACCEPTED"}})
    hook = make_hook()
    assert (await hook.get_application(APP_ID))["state"] == "ACCEPTED"
    assert (await hook.get_application(APP_ID))["state"] == "ACCEPTED"
    assert [r.netloc for r in m.request_history] == ["rm1:8088", "rm2:8088", "rm2:8088"]
    assert hook.sync_hook.active_rm == RM2


@pytest.mark.asyncio
async def test_connection_error_fails_over(m):
    m.get(RM1 + WS + "/nodes", exc=requests.exceptions.ConnectionError("refused"))
    m.get(
        RM2 + WS + "/nodes",
        json={
            "nodes": {"node": {"id": "nm1:1", "totalResource": {"memory": 1, "vCores": 1, "resourceInformations": ""}}}
        },
    )
    nodes = await make_hook().nodes()
    assert nodes[0]["totalResource"]["resources"]["memory-mb"] == 1


@pytest.mark.asyncio
async def test_read_timeout_retried(m):
    m.get(RM1 + WS + "/info", exc=requests.exceptions.ReadTimeout("slow"))
    with pytest.raises(YarnApiError) as exc:
        await make_hook(rm_urls=[RM1], retries=1).cluster_info()
    assert exc.value.status is None
    assert m.call_count == 2


@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore::Warning:requests_kerberos")
async def test_kerberos_same_in_async(m, monkeypatch):
    from requests_kerberos import HTTPKerberosAuth

    from airflow_provider_melon.hooks.kerberos import TicketKeeper

    monkeypatch.setattr(TicketKeeper, "ensure", lambda self, force=False: None)  # the KDC side: test_secure_live

    m.put(RM1 + WS + f"/apps/{APP_ID}/state", status_code=200, json={"state": "KILLED"})
    hook = make_hook(auth="kerberos")
    await hook.kill_application(APP_ID)
    assert isinstance(hook.sync_hook.get_conn().auth, HTTPKerberosAuth)
    assert "user.name" not in m.request_history[0].qs


@pytest.mark.asyncio
async def test_find_and_submit(m):
    m.post(RM1 + WS + "/apps/new-application", json={"application-id": APP_ID})
    m.post(RM1 + WS + "/apps", status_code=202)
    m.get(RM1 + WS + "/apps", json={"apps": {"app": [{"id": APP_ID, "applicationTags": "melon-x"}]}})
    hook = make_hook()
    new = await hook.new_application()
    ctx = {"application-id": new["application-id"], "application-tags": {"tag": ["MELON-X"]}}
    assert await hook.submit_application(ctx) == APP_ID
    assert json.loads(m.request_history[1].text) == ctx
    found = await hook.find_applications(["MELON-X"])
    assert [a["id"] for a in found] == [APP_ID]
    assert m.request_history[2].qs["applicationtags"] == ["melon-x"]
    assert await hook.application_logs_url(found[0]) == f"{RM1}/cluster/app/{APP_ID}"


@pytest.mark.asyncio
async def test_concurrent_calls(m):
    m.get(RM1 + WS + f"/apps/{APP_ID}/state", json={"state": "RUNNING"})
    hook = make_hook()
    states = await asyncio.gather(*(hook.get_state(APP_ID) for _ in range(8)))
    assert states == ["RUNNING"] * 8


@pytest.mark.asyncio
async def test_test_connection(m):
    m.get(RM1 + WS + "/info", json={"clusterInfo": {"state": "STARTED", "haState": "ACTIVE"}})
    ok, msg = await make_hook().test_connection()
    assert ok and "ACTIVE" in msg
