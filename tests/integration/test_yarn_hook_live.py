"""YarnHook against the real Hadoop 3.5 ResourceManager of the mini cluster (session fixture ``minicluster``).

Note on "trivial" apps: an AM container that never registers with the RM (``sleep 5``) does not FINISH —
YARN fails the attempt when the AM container exits unregistered ("AM Container … exited with exitCode: 0.
Failing this attempt"), so the application ends FAILED. To reach FINISHED/SUCCEEDED, ``test_trivial_am_finishes``
runs a ten-line AM (AMRMClient register → unregister SUCCEEDED) compiled in the container by Java's
source-file mode, with the cluster's published ``am_classpath``.
"""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
import time
import uuid

import pytest

from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hooks.yarn import AsyncYarnHook, YarnHook

pytestmark = pytest.mark.integration


# No double quotes and no '$' in the source: the NM writes env values inside double quotes in launch_container.sh.
TRIVIAL_AM_SRC = (
    "import org.apache.hadoop.yarn.client.api.AMRMClient; import org.apache.hadoop.yarn.conf.YarnConfiguration; "
    "import org.apache.hadoop.yarn.api.records.FinalApplicationStatus; "
    "public class TrivialAM { public static void main(String[] a) throws Exception { "
    "AMRMClient<AMRMClient.ContainerRequest> c = AMRMClient.createAMRMClient(); "
    "c.init(new YarnConfiguration()); c.start(); String e = new String(); "
    "c.registerApplicationMaster(e, 0, e); Thread.sleep(Long.parseLong(a[0]) * 1000L); "
    "c.unregisterApplicationMaster(FinalApplicationStatus.SUCCEEDED, a[1], e); c.stop(); } }"
)

# Same, plus an HTTP server (JDK built-in) registered as the tracking URL, answering {"ok":true} as JSON.
# Strings are built from chars: the source must not contain a double quote.
STATUS_AM_SRC = (
    "import org.apache.hadoop.yarn.client.api.AMRMClient; import org.apache.hadoop.yarn.conf.YarnConfiguration; "
    "import org.apache.hadoop.yarn.api.records.FinalApplicationStatus; "
    "import com.sun.net.httpserver.HttpServer; import java.net.InetSocketAddress; import java.net.InetAddress; "
    "public class StatusAM { static String s(char... c) { return new String(c); } "
    "public static void main(String[] a) throws Exception { char q = 34; "
    "byte[] body = s('{', q, 'o', 'k', q, ':', 't', 'r', 'u', 'e', '}').getBytes(); "
    "InetAddress lo = InetAddress.getLoopbackAddress(); "
    "HttpServer srv = HttpServer.create(new InetSocketAddress(lo, 0), 0); "
    "srv.createContext(String.valueOf('/'), x -> { x.getResponseHeaders().add("
    "s('C','o','n','t','e','n','t','-','T','y','p','e'), "
    "s('a','p','p','l','i','c','a','t','i','o','n','/','j','s','o','n')); "
    "x.sendResponseHeaders(200, body.length); x.getResponseBody().write(body); x.close(); }); srv.start(); "
    "String url = s('h','t','t','p',':','/','/') + lo.getHostAddress() + ':' + srv.getAddress().getPort() + '/'; "
    "AMRMClient<AMRMClient.ContainerRequest> c = AMRMClient.createAMRMClient(); "
    "c.init(new YarnConfiguration()); c.start(); String e = new String(); "
    "c.registerApplicationMaster(lo.getHostAddress(), 0, url); Thread.sleep(Long.parseLong(a[0]) * 1000L); "
    "c.unregisterApplicationMaster(FinalApplicationStatus.SUCCEEDED, a[1], e); c.stop(); srv.stop(0); } }"
)


def _tag() -> str:
    return f"melon-it-{uuid.uuid4().hex[:10]}"


def _context(
    app_id: str,
    command: str,
    tags: list[str],
    *,
    env: dict[str, str] | None = None,
    memory: int = 256,
    name: str = "melon-hook-it",
) -> dict:
    spec: dict = {"commands": {"command": command}}
    if env:
        spec["environment"] = {"entry": [{"key": k, "value": v} for k, v in env.items()]}
    return {
        "application-id": app_id,
        "application-name": name,
        "application-type": "MELON",
        "queue": "default",
        "priority": 0,
        "max-app-attempts": 1,
        "application-tags": {"tag": tags},
        "am-container-spec": spec,
        "resource": {"memory": memory, "vCores": 1},
    }


def _wait_state(hook: YarnHook, app_id: str, states: tuple[str, ...] | set[str], timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    app = hook.get_application(app_id)
    while app.get("state") not in states and time.monotonic() < deadline:
        time.sleep(0.5)
        app = hook.get_application(app_id)
    return app


def _wait_for(fn, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    value = fn()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = fn()
    return value


def _kill_quietly(hook: YarnHook, app_id: str) -> None:
    try:
        if hook.get_state(app_id) not in TERMINAL_STATES:
            hook.kill_application(app_id)
    except YarnApiError:
        pass


# ------------------------------------------------------------------------------------------------ cluster


def test_cluster_info_started(yarn_hook):
    info = yarn_hook.cluster_info()
    assert info["state"] == "STARTED"
    assert info["haState"] == "ACTIVE"
    assert info["resourceManagerVersion"].startswith("3.5")
    ok, msg = yarn_hook.test_connection()
    assert ok, msg
    assert yarn_hook.cluster_metrics()["activeNodes"] == 2
    assert yarn_hook.scheduler()["type"] == "capacityScheduler"


def test_nodes_report_gpus_and_gpu_memory(yarn_hook):
    nodes = yarn_hook.nodes(states=["RUNNING"])
    assert len(nodes) == 2
    for node in nodes:
        total = node["totalResource"]["resources"]
        assert total["yarn.io/gpu"] == 2
        assert total["melon.io/gpu-memory"] == 32768
        assert total["memory-mb"] > 0 and total["vcores"] > 0
        avail, used = node["availableResource"]["resources"], node["usedResource"]["resources"]
        for name in ("yarn.io/gpu", "melon.io/gpu-memory", "memory-mb"):
            assert avail[name] + used[name] == total[name]
    summary = yarn_hook.node_gpu_summary()
    assert summary["total"]["gpus"] == 4
    assert summary["total"]["gpu_memory_mb"] == 65536


def test_new_application_capability(yarn_hook):
    new = yarn_hook.new_application()
    assert new["application-id"].startswith("application_")
    cap = new["maximum-resource-capability"]["resources"]
    assert cap["memory-mb"] > 0
    assert cap["yarn.io/gpu"] == 2
    assert cap["melon.io/gpu-memory"] == 32768


# ------------------------------------------------------------------------------------------------ apps


def test_sleep_am_runs_to_a_terminal_state_and_is_found_by_tag(yarn_hook):
    tag = _tag()
    app_id = yarn_hook.new_application()["application-id"]
    assert yarn_hook.submit_application(_context(app_id, "sleep 5", [tag.upper(), "melon-it"])) == app_id
    app = _wait_state(yarn_hook, app_id, TERMINAL_STATES, timeout=90)
    # An AM that never registers fails its attempt when its container exits (see the module docstring).
    assert app["state"] == "FAILED", app
    assert "exitCode: 0" in app["diagnostics"]
    assert app["applicationType"] == "MELON"
    assert tag in app["applicationTagList"]  # YARN lower-cases tags
    assert yarn_hook.get_state(app_id) == "FAILED"

    found = yarn_hook.find_applications([tag.upper()])
    assert [a["id"] for a in found] == [app_id]
    assert yarn_hook.find_applications([tag], states=["RUNNING"]) == []
    assert [a["id"] for a in yarn_hook.find_applications([tag], states=["FAILED", "FINISHED"])] == [app_id]
    assert yarn_hook.find_applications([_tag()]) == []

    attempts = yarn_hook.app_attempts(app_id)
    assert isinstance(attempts, list) and len(attempts) == 1
    assert attempts[0]["appAttemptState"] == "FAILED"
    # a finished attempt has no running containers: an empty list, not an error
    assert yarn_hook.app_containers(app_id, attempts[0]["appAttemptId"]) == []
    logs = yarn_hook.application_logs_url(app_id)
    assert "containerlogs" in logs and app_id.split("_", 1)[1] in logs


def test_trivial_am_finishes(yarn_hook, minicluster):
    tag = _tag()
    app_id = yarn_hook.new_application()["application-id"]
    command = (
        "printenv MELON_AM_SRC > TrivialAM.java && {{JAVA_HOME}}/bin/java -Xmx256m -cp $CLASSPATH "
        "TrivialAM.java 1 trivial-done 1><LOG_DIR>/stdout 2><LOG_DIR>/stderr"
    )
    ctx = _context(
        app_id, command, [tag], memory=512, env={"CLASSPATH": minicluster.am_classpath, "MELON_AM_SRC": TRIVIAL_AM_SRC}
    )
    yarn_hook.submit_application(ctx)
    try:
        app = _wait_state(yarn_hook, app_id, TERMINAL_STATES, timeout=120)
    finally:
        _kill_quietly(yarn_hook, app_id)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app.get("diagnostics")
    assert app["diagnostics"] == "trivial-done"


def test_am_status_through_rm_proxy(yarn_hook, minicluster):
    app_id = yarn_hook.new_application()["application-id"]
    command = (
        "printenv MELON_AM_SRC > StatusAM.java && {{JAVA_HOME}}/bin/java -Xmx256m -cp $CLASSPATH "
        "StatusAM.java 60 status-done 1><LOG_DIR>/stdout 2><LOG_DIR>/stderr"
    )
    ctx = _context(
        app_id,
        command,
        [_tag()],
        memory=512,
        env={"CLASSPATH": minicluster.am_classpath, "MELON_AM_SRC": STATUS_AM_SRC},
    )
    yarn_hook.submit_application(ctx)
    try:
        assert yarn_hook.am_status(app_id) is None  # not registered yet: the proxy redirects to the app page
        app = _wait_state(yarn_hook, app_id, {"RUNNING", *TERMINAL_STATES}, timeout=120)
        assert app["state"] == "RUNNING", app.get("diagnostics")
        assert app["trackingUrl"].rstrip("/").endswith(f"/proxy/{app_id}")
        assert _wait_for(lambda: yarn_hook.am_status(app_id), timeout=20) == {"ok": True}
    finally:
        _kill_quietly(yarn_hook, app_id)
    assert _wait_for(lambda: yarn_hook.get_state(app_id) == "KILLED", timeout=10)
    assert _wait_for(lambda: yarn_hook.am_status(app_id) is None, timeout=10)


def test_kill_running_app(yarn_hook):
    tag = _tag()
    app_id = yarn_hook.new_application()["application-id"]
    yarn_hook.submit_application(_context(app_id, "sleep 60", [tag]))
    try:
        # the AM container runs; the AM never registers, so the app stays ACCEPTED until killed
        attempts = _wait_for(lambda: yarn_hook.app_attempts(app_id), timeout=30)
        assert isinstance(attempts, list) and attempts
        attempt_id = attempts[-1]["appAttemptId"]
        containers = _wait_for(lambda: yarn_hook.app_containers(app_id, attempt_id), timeout=30)
        assert isinstance(containers, list) and containers, "the AM container should be listed"
        assert containers[0]["containerId"].startswith("container_")
        assert yarn_hook.get_state(app_id) in {"ACCEPTED", "RUNNING"}

        t0 = time.monotonic()
        yarn_hook.kill_application(app_id)
        yarn_hook.kill_application(app_id)  # repeated kill is fine (200)
        state = _wait_for(lambda: (s := yarn_hook.get_state(app_id)) in TERMINAL_STATES and s, timeout=10)
        assert state == "KILLED", f"not KILLED within 10 s: {yarn_hook.get_state(app_id)}"
        assert time.monotonic() - t0 <= 10.5
    finally:
        _kill_quietly(yarn_hook, app_id)


def test_submit_over_max_memory_is_a_clear_error(yarn_hook):
    app_id = yarn_hook.new_application()["application-id"]
    with pytest.raises(YarnApiError) as exc:
        yarn_hook.submit_application(_context(app_id, "sleep 1", [_tag()], memory=10_000_000))
    assert exc.value.status == 400
    assert "memory" in exc.value.message.lower() and "max" in exc.value.message.lower()
    assert exc.value.url.split("?")[0].endswith("/ws/v1/cluster/apps")


def test_submit_without_application_id_is_a_clear_error(yarn_hook):
    ctx = _context("x", "sleep 1", [_tag()])
    del ctx["application-id"]
    with pytest.raises(YarnApiError) as exc:
        yarn_hook.submit_application(ctx)
    assert exc.value.status == 400
    assert "application id" in exc.value.message.lower()


def test_unknown_app_is_404_not_retried(yarn_hook):
    with pytest.raises(YarnApiError) as exc:
        yarn_hook.get_application("application_1_0001")
    assert exc.value.status == 404
    assert "not found" in exc.value.message
    # one line, naming the app, with the fix
    assert "\n" not in str(exc.value) and "application_1_0001" in str(exc.value)
    assert "fix: the RM does not know this application" in str(exc.value)


def test_state_change_other_than_kill_is_rejected(yarn_hook):
    app_id = yarn_hook.new_application()["application-id"]
    yarn_hook.submit_application(_context(app_id, "sleep 30", [_tag()]))
    try:
        with pytest.raises(YarnApiError) as exc:
            yarn_hook._request("PUT", f"/ws/v1/cluster/apps/{app_id}/state", json={"state": "RUNNING"})
        assert exc.value.status == 400
        assert "Only 'KILLED' is allowed" in exc.value.message
        assert exc.value.exception == "BadRequestException"
    finally:
        _kill_quietly(yarn_hook, app_id)


# ------------------------------------------------------------------------------------------------ HA


class _StandbyHandler(http.server.BaseHTTPRequestHandler):
    """Answers like a standby RM: 307 with Location to the active RM (or, with no target, Refresh only)."""

    target: str | None = None
    seen: list[str] = []

    def _answer(self) -> None:
        type(self).seen.append(self.command + " " + self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b"This is standby RM."
        self.send_response(307)
        if self.target:
            self.send_header("Location", self.target + self.path)
        else:
            self.send_header("Refresh", "3;url=" + self.path)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def standby_rm(minicluster):
    servers = []

    def start(target: str | None) -> tuple[str, type]:
        handler = type("H", (_StandbyHandler,), {"target": target, "seen": []})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", handler

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_standby_redirect_to_real_rm_is_followed_and_remembered(minicluster, standby_rm):
    standby, handler = standby_rm(minicluster.rm_web_url)
    hook = YarnHook(rm_urls=[standby, minicluster.rm_web_url], user=minicluster.user, backoff=0)
    app_id = hook.new_application()["application-id"]  # POST through the redirect
    assert hook.active_rm == minicluster.rm_web_url
    assert len(handler.seen) == 1 and "user.name=" in handler.seen[0]
    with pytest.raises(YarnApiError) as exc:  # goes straight to the active RM now
        hook.get_application(app_id)
    assert exc.value.status == 404
    assert len(handler.seen) == 1


def test_standby_without_active_and_dead_rm_fail_over(minicluster, standby_rm):
    lost, handler = standby_rm(None)
    hook = YarnHook(
        rm_urls=[_dead_url(), lost, minicluster.rm_web_url], user=minicluster.user, timeout=(2, 10), backoff=0
    )
    assert hook.cluster_metrics()["activeNodes"] == 2
    assert hook.active_rm == minicluster.rm_web_url
    assert len(handler.seen) == 1


def test_all_rms_dead_gives_up_with_error():
    hook = YarnHook(rm_urls=[_dead_url(), _dead_url()], user="nobody", timeout=(1, 2), retries=1, backoff=0)
    t0 = time.monotonic()
    with pytest.raises(YarnApiError) as exc:
        hook.cluster_info()
    assert exc.value.status is None
    assert time.monotonic() - t0 < 10


# ------------------------------------------------------------------------------------------------ async


def test_async_hook_live(minicluster):
    async def run() -> tuple:
        hook = AsyncYarnHook(rm_urls=[minicluster.rm_web_url], user=minicluster.user)
        info = await hook.cluster_info()
        nodes = await hook.nodes(["RUNNING"])
        new = await hook.new_application()
        with pytest.raises(YarnApiError):
            await hook.get_state(new["application-id"])  # allocated an id, never submitted
        return info, nodes

    info, nodes = asyncio.run(run())
    assert info["state"] == "STARTED"
    assert sorted(n["totalResource"]["resources"]["yarn.io/gpu"] for n in nodes) == [2, 2]
