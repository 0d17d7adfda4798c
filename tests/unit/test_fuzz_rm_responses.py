"""Malformed ResourceManager answers: the YARN hooks raise YarnApiError with a one-line message,
never KeyError/TypeError/JSONDecodeError/RecursionError/requests errors; the trigger turns them into failed polls.

requests_mock serves what a real cluster does not produce but a proxy, a load balancer or a truncated transfer
does: HTML error pages, cut-off JSON, JSON of another shape, undecodable bodies, broken redirects. Nothing is
contacted (requests_mock refuses unregistered URLs, and the RM address is loopback anyway).
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest
import requests
import requests_mock as rm_mock
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES, duration_s, progress_line, task_summary
from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hooks.yarn import AsyncYarnHook, YarnHook
from airflow_provider_melon.runtime.figures import finite_number
from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger

RM = "http://127.0.0.1:18088"
WS = "/ws/v1/cluster"
APP = "application_1700000000000_0001"
ATTEMPT = "appattempt_1700000000000_0001_000001"

RESOURCE = {
    "memory": 8192,
    "vCores": 8,
    "resourceInformations": {
        "resourceInformation": [
            {"name": "memory-mb", "value": 8192, "units": "Mi"},
            {"name": "vcores", "value": 8},
            {"name": "yarn.io/gpu", "value": 2},
            {"name": "melon.io/gpu-memory", "value": 16, "units": "Gi"},
        ]
    },
}
APP_JSON = {
    "id": APP,
    "state": "RUNNING",
    "finalStatus": "UNDEFINED",
    "diagnostics": "",
    "startedTime": 1,
    "elapsedTime": 5,
    "applicationTags": "melon,airflow-task:train",
    "trackingUrl": RM + "/proxy/x/",
}
#: realistic answers per call: the skeletons the generated bodies cut short or bend out of shape
CALLS = {
    "cluster_info": (
        "GET",
        WS + "/info",
        lambda h: h.cluster_info(),
        dict,
        {"clusterInfo": {"state": "STARTED", "haState": "ACTIVE"}},
    ),
    "cluster_metrics": (
        "GET",
        WS + "/metrics",
        lambda h: h.cluster_metrics(),
        dict,
        {"clusterMetrics": {"appsRunning": 1}},
    ),
    "scheduler": (
        "GET",
        WS + "/scheduler",
        lambda h: h.scheduler(),
        dict,
        {"scheduler": {"schedulerInfo": {"type": "capacityScheduler"}}},
    ),
    "nodes": (
        "GET",
        WS + "/nodes",
        lambda h: h.nodes(),
        list,
        {
            "nodes": {
                "node": [
                    {
                        "id": "n1:1",
                        "state": "RUNNING",
                        "totalResource": RESOURCE,
                        "usedResource": RESOURCE,
                        "usedMemoryMB": 1,
                        "availMemoryMB": 2,
                    }
                ]
            }
        },
    ),
    "node_gpu_summary": (
        "GET",
        WS + "/nodes",
        lambda h: h.node_gpu_summary(),
        dict,
        {"nodes": {"node": {"id": "n1:1", "totalResource": RESOURCE}}},
    ),
    "new_application": (
        "POST",
        WS + "/apps/new-application",
        lambda h: h.new_application(),
        dict,
        {"application-id": APP, "maximum-resource-capability": RESOURCE},
    ),
    "submit_application": ("POST", WS + "/apps", lambda h: h.submit_application({"queue": "default"}), str, {}),
    "get_application": ("GET", WS + f"/apps/{APP}", lambda h: h.get_application(APP), dict, {"app": APP_JSON}),
    "get_state": ("GET", WS + f"/apps/{APP}/state", lambda h: h.get_state(APP), str, {"state": "RUNNING"}),
    "kill_application": (
        "PUT",
        WS + f"/apps/{APP}/state",
        lambda h: h.kill_application(APP),
        dict,
        {"state": "KILLED"},
    ),
    "app_attempts": (
        "GET",
        WS + f"/apps/{APP}/appattempts",
        lambda h: h.app_attempts(APP),
        list,
        {"appAttempts": {"appAttempt": [{"id": 1, "containerId": "c1"}]}},
    ),
    "app_containers": (
        "GET",
        WS + f"/apps/{APP}/appattempts/{ATTEMPT}/containers",
        lambda h: h.app_containers(APP, ATTEMPT),
        list,
        {"containers": {"container": [{"id": "c"}]}},
    ),
    "list_applications": (
        "GET",
        WS + "/apps",
        lambda h: h.list_applications(states=["RUNNING"]),
        list,
        {"apps": {"app": [APP_JSON]}},
    ),
    "find_applications": (
        "GET",
        WS + "/apps",
        lambda h: h.find_applications(["melon"]),
        list,
        {"apps": {"app": [APP_JSON, dict(APP_JSON, startedTime="x")]}},
    ),
    "rm_conf": (
        "GET",
        "/conf",
        lambda h: h.rm_conf("yarn.resourcemanager.ha.enabled"),
        (str, type(None)),
        {"property": {"name": "x", "value": "true"}},
    ),
    "am_status": (
        "GET",
        f"/proxy/{APP}/status",
        lambda h: h.am_status(APP),
        (dict, type(None)),
        {"state": "RUNNING", "tasks": [{"role": "worker", "index": 0, "step": 5, "loss": 0.5}]},
    ),
    "application_logs_url": (
        "GET",
        WS + f"/apps/{APP}",
        lambda h: h.application_logs_url(APP),
        str,
        {"app": dict(APP_JSON, amContainerLogs="http://nm:8042/logs")},
    ),
}

PROXY_PAGES = [
    "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center>"
    "<hr><center>nginx</center></body></html>",
    '<!DOCTYPE html>\n<html><body><form action="/login">Sign in to continue</form></body></html>\n',
    "<html><body><h2>HTTP ERROR 500</h2>\n<pre>java.lang.NullPointerException\n\tat org.apache.hadoop.Foo"
    ".bar(Foo.java:1)\n\tat org.apache.hadoop.Baz</pre></body></html>",
    "Service Unavailable",
    "",
    "   \n",
    "\x00\x01\x02",
    "null",
    "[]",
    '"RUNNING"',
    "42",
    "true",
    "[" * 50_000 + "]" * 50_000,  # deeper than Python's json recurses
    '{"app": ' * 3000 + "{}" + "}" * 3000,
    '{"app": {"state": "RUNNING", "startedTime": 1e400, "elapsedTime": NaN, "progress": Infinity}}',
    '{"apps": {"app": [{"id": "a", "startedTime": ' + "9" * 5000 + "}]}}",
    "<html>" + "x" * 200_000 + "</html>",
]

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def bent(draw, obj):
    """``obj`` with some keys dropped and some values swapped for JSON of another type or shape."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            choice = draw(st.sampled_from(["keep", "keep", "recurse", "drop", "replace"]))
            if choice == "drop":
                continue
            out[key] = value if choice == "keep" else draw(json_values) if choice == "replace" else draw(bent(value))
        return out
    if isinstance(obj, list):
        return [draw(bent(v)) for v in obj] + draw(st.lists(json_values, max_size=2))
    return draw(st.one_of(st.just(obj), json_values))


@st.composite
def answers(draw, skeleton):
    """(status, headers, body bytes) of a malformed or odd RM answer."""
    kind = draw(st.sampled_from(["page", "truncated", "bent", "random-json", "bytes"]))
    if kind == "page":
        body = draw(st.sampled_from(PROXY_PAGES)).encode()
    elif kind == "truncated":
        text = json.dumps(draw(bent(skeleton)) if draw(st.booleans()) else skeleton)
        body = text[: draw(st.integers(0, max(0, len(text) - 1)))].encode()
    elif kind == "bent":
        body = json.dumps(draw(bent(skeleton))).encode()
    elif kind == "random-json":
        body = json.dumps(draw(json_values)).encode()
    else:
        body = draw(st.binary(max_size=64))
    status = draw(
        st.sampled_from([200, 200, 200, 200, 201, 202, 204, 301, 302, 307, 400, 401, 403, 404, 500, 502, 503])
    )
    headers = {
        "Content-Type": draw(
            st.sampled_from(
                [
                    "application/json",
                    "application/json; charset=utf-8",
                    "text/html",
                    "text/plain",
                    "application/octet-stream",
                ]
            )
        )
    }
    if status in (301, 302, 307) and draw(st.booleans()):
        headers["Location"] = draw(
            st.sampled_from(
                [
                    "http://[::1",
                    "http://127.0.0.1:notaport/x",
                    "javascript:alert(1)",
                    "",
                    "/login",
                    "ftp://127.0.0.1/x",
                    "http://127.0.0.1:18088" + WS + "/info",
                ]
            )
        )
    return status, headers, body


def make_hook() -> YarnHook:
    return YarnHook(rm_urls=[RM], user="alice", retries=0, backoff=0)


def check_outcome(name: str, call, hook) -> None:
    _, _, _, returns, _ = CALLS[name]
    try:
        result = call(hook)
    except YarnApiError as err:
        text = str(err)
        assert text and "\n" not in text, f"{name}: not one line: {text!r}"
        assert len(text) < 2000, f"{name}: message of {len(text)} characters"
        return
    assert isinstance(result, returns), f"{name} returned {type(result).__name__}"
    if name == "get_application":
        assert isinstance(result["state"], str) and result["state"]
    if isinstance(result, list):
        assert all(isinstance(item, dict) for item in result)


def mock_answer(m, name, status, headers, body):
    method, path, _, _, _ = CALLS[name]
    # where a generated redirect leads (all loopback or not a URL at all): nothing there
    m.register_uri(rm_mock.ANY, rm_mock.ANY, status_code=404, text="Not Found")
    m.register_uri(method, RM + path, status_code=status, headers=headers, content=body)  # the last one wins


@settings(max_examples=250)
@given(data=st.data(), name=st.sampled_from(sorted(CALLS)))
def test_sync_hook_raises_only_yarn_api_error_on_malformed_answers(data, name):
    status, headers, body = data.draw(answers(CALLS[name][4]), label="answer")
    with rm_mock.Mocker() as m:
        mock_answer(m, name, status, headers, body)
        check_outcome(name, CALLS[name][2], make_hook())


@settings(max_examples=40)
@given(data=st.data(), name=st.sampled_from(sorted(CALLS)))
def test_async_hook_raises_only_yarn_api_error_on_malformed_answers(data, name):
    status, headers, body = data.draw(answers(CALLS[name][4]), label="answer")

    with rm_mock.Mocker() as m:  # patches the transport globally: the hook's worker thread sees it too
        mock_answer(m, name, status, headers, body)
        hook = AsyncYarnHook(rm_urls=[RM], user="alice", retries=0, backoff=0)
        # the same calls on the async twin: each returns a coroutine, run here to its end
        check_outcome(name, lambda h: asyncio.run(CALLS[name][2](h)), hook)


@pytest.mark.parametrize(
    "exc",
    [
        requests.exceptions.ContentDecodingError("bad gzip"),
        requests.exceptions.InvalidHeader("bad header"),
        requests.exceptions.ChunkedEncodingError("cut"),
        requests.exceptions.ConnectionError("reset"),
        requests.exceptions.ReadTimeout("slow"),
        requests.exceptions.InvalidURL("bad url"),
    ],
)
def test_transport_failures_become_yarn_api_error(exc):
    with rm_mock.Mocker() as m:
        m.get(RM + WS + f"/apps/{APP}", exc=exc)
        with pytest.raises(YarnApiError) as err:
            make_hook().get_application(APP)
    assert type(exc).__name__ in str(err.value) and "\n" not in str(err.value)
    assert err.value.status is None


def test_html_page_with_200_names_what_came_back():
    with rm_mock.Mocker() as m:
        m.get(RM + WS + f"/apps/{APP}", text=PROXY_PAGES[1], headers={"Content-Type": "text/html"})
        with pytest.raises(YarnApiError, match=r"RM answered non-JSON \(text/html\): '<!DOCTYPE html>"):
            make_hook().get_application(APP)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"app": {}},
        {"app": {"id": APP}},
        {"app": {"state": None}},
        {"app": {"state": ["RUNNING"]}},
        {"app": "RUNNING"},
        [],
    ],
)
def test_application_without_a_state_is_an_error_not_an_empty_answer(body):
    with rm_mock.Mocker() as m:
        m.get(RM + WS + f"/apps/{APP}", json=body)
        with pytest.raises(YarnApiError, match="no application state in the RM's answer"):
            make_hook().get_application(APP)


@pytest.mark.parametrize(
    "status,location,message",
    [
        (307, "http://[::1", "YARN RM answer unreadable for .*: ValueError: Invalid IPv6 URL$"),  # requests parses it
        (302, "http://[::1", "YARN RM answer unreadable for .*: ValueError: Invalid IPv6 URL$"),
        (
            307,
            "http://127.0.0.1:port/x",
            "YARN RM returned 307 .*: unusable redirect Location 'http://127.0.0.1:port/x'",
        ),
    ],
)
def test_unusable_redirect_is_an_error(status, location, message):
    with rm_mock.Mocker() as m:
        m.get(RM + WS + "/info", status_code=status, headers={"Location": location})
        with pytest.raises(YarnApiError, match=message):
            make_hook().cluster_info()


def test_json_nested_beyond_recursion_is_an_error():
    with rm_mock.Mocker() as m:
        m.get(RM + WS + "/info", text="[" * 50_000 + "]" * 50_000)
        with pytest.raises(YarnApiError, match="non-JSON"):
            make_hook().cluster_info()


def test_huge_error_page_gives_a_bounded_message():
    with rm_mock.Mocker() as m:
        m.get(RM + WS + "/info", status_code=404, text="<html>" + "x" * 200_000 + "</html>")
        with pytest.raises(YarnApiError) as err:
            make_hook().cluster_info()
    assert len(str(err.value)) < 1000


def test_resource_units_of_another_type_or_absurd_values_do_not_break_nodes():
    odd = {
        "memory": 1,
        "resourceInformations": [
            {"name": "melon.io/gpu-memory", "value": 10**400, "units": "M"},
            {"name": "yarn.io/gpu", "value": 1, "units": ["Gi"]},
            {"name": "x", "value": {"v": 1}, "units": {"u": 1}},
        ],
    }
    with rm_mock.Mocker() as m:
        m.get(RM + WS + "/nodes", json={"nodes": {"node": [{"id": "n", "totalResource": odd}]}})
        nodes = make_hook().nodes()
    assert nodes[0]["totalResource"]["resources"]["yarn.io/gpu"] == 1


# ----------------------------------------------------------------------------------------------- the trigger


def make_trigger(**kw) -> YarnApplicationTrigger:
    trig = YarnApplicationTrigger(app_id=APP, yarn_conn_id="yarn_fuzz", poll_interval=5, **kw)
    trig._hook = AsyncYarnHook(rm_urls=[RM], user="alice", retries=0, backoff=0)

    async def no_wait():
        return None

    trig._sleep = no_wait
    trig.coalesce_polls = False  # its own GET per poll (the shared poller has its tests in test_poller.py)
    return trig


def run_trigger(trig) -> list[dict]:
    async def collect():
        return [event.payload async for event in trig.run()]

    return asyncio.run(asyncio.wait_for(collect(), timeout=120))


#: answers to GET /apps/{id} the hook must refuse: no usable application state in any of them
MALFORMED_APP_PAGES = [p for p in PROXY_PAGES if '"state"' not in p]


def malformed_app_answer():
    return st.one_of(
        st.tuples(
            st.sampled_from([200, 200, 404, 500, 502, 503]),
            st.sampled_from([{"Content-Type": "text/html"}, {"Content-Type": "application/json"}]),
            st.sampled_from(MALFORMED_APP_PAGES).map(str.encode),
        ),
        st.tuples(
            st.just(200),
            st.just({"Content-Type": "application/json"}),
            st.sampled_from(
                [
                    '{"app": {"state": ',
                    '{"app"',
                    "{",
                    '{"app": {}}',
                    '{"app": []}',
                    "[]",
                    '{"app": {"state": null}}',
                    '{"app": {"state": 7}}',
                ]
            ).map(str.encode),
        ),
    )


@settings(max_examples=25)
@given(answers_=st.lists(malformed_app_answer(), min_size=1, max_size=4), budget=st.integers(0, 3))
def test_trigger_turns_malformed_answers_into_failed_polls_then_an_error_event(answers_, budget):
    trig = make_trigger(max_consecutive_failures=budget)
    with rm_mock.Mocker() as m:
        m.get(RM + WS + f"/apps/{APP}", [{"status_code": s, "headers": h, "content": b} for s, h, b in answers_])
        events = run_trigger(trig)
        polls = len(m.request_history)
    assert len(events) == 1
    event = events[0]
    assert event["status"] == "error"
    assert f"polls in a row (budget {budget})" in event["message"] and "YARN RM" in event["message"]
    assert "\n" not in event["message"]
    assert polls == budget + 1  # every failed poll retried, up to the budget
    json.dumps(event)


@settings(max_examples=25)
@given(data=st.data())
def test_trigger_survives_odd_fields_in_usable_answers(data):
    """An application with a state, but everything else bent; the AM's status bent too: one event, no raise."""
    running = data.draw(bent(dict(APP_JSON, state="RUNNING")).map(lambda a: dict(a, state="RUNNING")), label="running")
    end = data.draw(st.sampled_from(TERMINAL_STATES), label="end")
    final = data.draw(
        bent(dict(APP_JSON, state=end, finalStatus="SUCCEEDED", diagnostics="done")).map(lambda a: dict(a, state=end)),
        label="final",
    )
    status_body = data.draw(
        st.one_of(
            bent(CALLS["am_status"][4]).map(json.dumps),
            st.sampled_from(
                [
                    '{"tasks": 5}',
                    '{"tasks": {"a": 1}}',
                    '{"tasks": [{"step": Infinity, "loss": NaN, "attempt": 1e999}]}',
                    '{"tasks": [{"step": "1e400", "exit_code": [1]}]}',
                    "[]",
                    "<html>",
                ]
            ),
        ),
        label="status",
    )
    trig = make_trigger(max_consecutive_failures=1, log_every_n=1)
    with rm_mock.Mocker() as m:
        m.get(
            RM + WS + f"/apps/{APP}", [{"json": {"app": running}}, {"json": {"app": running}}, {"json": {"app": final}}]
        )
        m.get(RM + f"/proxy/{APP}/status", text=status_body, headers={"Content-Type": "application/json"})
        events = run_trigger(trig)
    assert len(events) == 1
    event = events[0]
    assert event["status"] in ("success", "error")
    assert isinstance(event["message"], str) and isinstance(event["diagnostics"], str)
    assert event["duration_s"] is None or math.isfinite(event["duration_s"])
    json.dumps(event)


@pytest.mark.parametrize(
    "tasks",
    [
        5,
        "abc",
        {"role": "w"},
        [{"step": float("inf"), "loss": float("nan")}],
        [{"step": "1e400", "attempt": float("inf"), "exit_code": {"x": 1}}],
        None,
    ],
)
def test_progress_helpers_read_what_they_can(tasks):
    summary = task_summary(tasks)
    for entry in summary.values():
        assert entry["step"] is None or isinstance(entry["step"], int)
    line = progress_line({"state": "RUNNING", "tasks": tasks})
    assert line.startswith("AM RUNNING")


@pytest.mark.parametrize(
    "value, number",
    [
        (3, 3.0),
        (2.5, 2.5),
        ("4", 4.0),
        (" 1e3 ", 1000.0),
        (True, None),
        (None, None),
        ("", None),
        ("abc", None),
        (float("inf"), None),
        (float("nan"), None),
        ("1e400", None),
        ("-Infinity", None),
        ({"value": 1}, None),
        ([1], None),
    ],
)
def test_a_json_figure_is_a_finite_number_or_none(value, number):
    """The one reading of a figure in the RM's and the AM's JSON (run times, steps, losses, memory): a bool, a
    non-finite float or anything that is not a number is no figure, never a crash."""
    assert finite_number(value) == number


@pytest.mark.parametrize(
    "app, seconds",
    [
        ({"elapsedTime": 1500}, 1.5),
        ({"elapsedTime": "2500"}, 2.5),
        ({"elapsedTime": 0, "startedTime": 1000, "finishedTime": 4000}, 3.0),
        ({"elapsedTime": 10**400}, None),  # JSON ints have no bound; float() of this one overflows
        ({"startedTime": 1000, "finishedTime": 10**400}, None),
        ({"elapsedTime": "NaN", "startedTime": True, "finishedTime": 5}, None),
        ({"startedTime": 5000, "finishedTime": 1000}, None),
    ],
)
def test_an_applications_duration_is_a_finite_figure_or_none(app, seconds):
    assert duration_s(app) == seconds
