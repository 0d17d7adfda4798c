"""The executor's TensorBoard (runtime/tensorboard.py): a real executor subprocess against the in-test AM, with a
fake ``tensorboard`` package on its path that serves like TensorBoard does (the real one takes ~30 s to import
TensorFlow; tests/integration/test_tensorboard_live.py runs the real one on the mini cluster)."""

import importlib.util
import json
import socket
import textwrap
import time

import pytest

from airflow_provider_melon.runtime import tensorboard
from tests.unit.test_executor import am_factory, entry, exec_env, finish, start  # noqa: F401 - fixture

# Serves 200 under --path_prefix on --host and an ephemeral port, announces itself as TensorBoard does, and
# records its argv and environment; FAKE_TB_EXIT makes it fail before serving instead.
FAKE_MAIN = textwrap.dedent("""\
    import json, os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    args = sys.argv[1:]
    opt = {args[i]: args[i + 1] for i in range(0, len(args), 2)}
    with open(os.environ["FAKE_TB_RECORD"], "w") as f:
        json.dump({"argv": args, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                   "secret": os.environ.get("MELON_SECRET"), "cwd": os.getcwd()}, f)
    if os.environ.get("FAKE_TB_EXIT"):
        print("fake TensorBoard: cannot load plugins", file=sys.stderr)
        sys.exit(int(os.environ["FAKE_TB_EXIT"]))
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
        def do_GET(self):
            ok = self.path.startswith(opt["--path_prefix"] + "/")
            self.send_response(200 if ok else 404)
            self.end_headers()
            self.wfile.write(b"<title>TensorBoard</title>")
    server = HTTPServer((opt["--host"], int(opt["--port"])), H)
    print("noise before the serving line", file=sys.stderr, flush=True)
    print("TensorBoard 9.9.9 at http://%s:%d%s/ (Press CTRL+C to quit)" % (
        opt["--host"], server.server_address[1], opt["--path_prefix"]), file=sys.stderr, flush=True)
    server.serve_forever()
    """)

# The user's process: reports its log dir, then lives until the executor's TensorBoard registered (or failed).
USER = (
    "import os, time, json; print('LOGDIR=' + os.environ['MELON_TENSORBOARD_LOG_DIR'], flush=True); "
    "[time.sleep(0.1) for _ in range(100) if not os.path.exists(os.environ['FAKE_TB_RECORD'] + '.seen')]"
)


@pytest.fixture
def fake_tb(tmp_path):
    pkg = tmp_path / "fake-tb" / "tensorboard"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "main.py").write_text(FAKE_MAIN)
    return tmp_path / "fake-tb"


def tb_env(tmp_path, am, role, fake_tb, **extra):
    env = exec_env(
        tmp_path,
        am,
        role,
        0,
        MELON_ENTRYPOINT=entry(USER),
        MELON_TENSORBOARD_TASK="chief:0",
        FAKE_TB_RECORD=str(tmp_path / "record.json"),
        **extra,
    )
    env["PYTHONPATH"] = f"{fake_tb}:{env['PYTHONPATH']}"
    return env


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def test_the_tensorboard_task_starts_registers_and_stops_it(tmp_path, am_factory, fake_tb):
    am = am_factory(["chief:0"])
    proc = start(tmp_path, tb_env(tmp_path, am, "chief", fake_tb))
    beat = wait_for(lambda: next((h for h in list(am.heartbeats) if h.get("tensorboard_url")), None))
    (tmp_path / "record.json.seen").write_text("")
    rc, out, err = finish(proc)
    assert rc == 0, err
    url = beat["tensorboard_url"]
    port = int(url.rsplit(":", 1)[1])
    assert url == f"http://127.0.0.1:{port}"  # MELON_HOST, and the port TensorBoard announced
    logdir = str(tmp_path / "tensorboard")
    assert f"LOGDIR={logdir}" in out  # true: a folder of the container, made before TensorBoard starts
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["argv"] == ["--logdir", logdir, "--host", "127.0.0.1", "--port", "0", "--path_prefix", "/tensorboard"]
    assert record["cuda"] == "" and record["secret"] is None  # no GPU, no secret for TensorBoard
    assert "[tensorboard] noise before the serving line" in err  # its output lands in the task's log
    assert "TensorBoard serving" in err and "TensorBoard stopped" in err
    # the last heartbeat unregisters it, and it is gone
    assert am.heartbeats[-1]["tensorboard_url"] == "" and am.heartbeats[-1]["message"] == "user process exited 0"
    assert refused(port)
    assert not any("tensorboard_error" in h for h in am.heartbeats)


def test_a_log_dir_from_the_spec_is_used_as_given(tmp_path, am_factory, fake_tb):
    am = am_factory(["chief:0"])
    logdir = tmp_path / "shared" / "tb"
    proc = start(tmp_path, tb_env(tmp_path, am, "chief", fake_tb, MELON_TENSORBOARD_LOG_DIR=logdir))
    wait_for(lambda: any(h.get("tensorboard_url") for h in list(am.heartbeats)))
    (tmp_path / "record.json.seen").write_text("")
    rc, out, err = finish(proc)
    assert rc == 0, err
    assert f"LOGDIR={logdir}" in out and logdir.is_dir()
    assert json.loads((tmp_path / "record.json").read_text())["argv"][:2] == ["--logdir", str(logdir)]


def test_other_tasks_start_none(tmp_path, am_factory, fake_tb):
    am = am_factory(["chief:0", "worker:0"], preregistered={"chief:0": "127.0.0.1:1"})
    env = tb_env(tmp_path, am, "worker", fake_tb)
    (tmp_path / "record.json.seen").write_text("")
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    assert f"LOGDIR={tmp_path / 'tensorboard'}" in out  # the same variable for every task's code
    assert not (tmp_path / "record.json").exists()
    assert not any("tensorboard_url" in h or "tensorboard_error" in h for h in am.heartbeats)


def test_a_tensorboard_that_fails_is_reported_and_training_goes_on(tmp_path, am_factory, fake_tb):
    am = am_factory(["chief:0"])
    proc = start(tmp_path, tb_env(tmp_path, am, "chief", fake_tb, FAKE_TB_EXIT=3))
    beat = wait_for(lambda: next((h for h in list(am.heartbeats) if h.get("tensorboard_error")), None))
    (tmp_path / "record.json.seen").write_text("")
    rc, out, err = finish(proc)
    assert rc == 0, err
    assert (
        beat["tensorboard_error"] == "TensorBoard not started: TensorBoard exited 3 before serving (its "
        "output is above)"
    )
    assert "[tensorboard] fake TensorBoard: cannot load plugins" in err
    assert "TensorBoard not started" in err and "training continues" in err
    assert not any(h.get("tensorboard_url") for h in am.heartbeats)


def test_missing_tensorboard_says_how_to_get_it(monkeypatch):
    assert tensorboard.missing() is None or importlib.util.find_spec("tensorboard") is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    why = tensorboard.missing()
    assert "has no tensorboard module" in why and "install tensorboard" in why


@pytest.mark.parametrize(
    "line, port",
    [
        ("TensorBoard 2.21.0 at http://127.0.0.1:42739/tensorboard/ (Press CTRL+C to quit)", 42739),
        ("TensorBoard 2.21.0 at http://node-1.example.com:6006/tensorboard/ (Press CTRL+C to quit)", 6006),
        ("TensorBoard 2.21.0 at http://[::1]:7000/tensorboard/ (Press CTRL+C to quit)", 7000),
        ("TensorBoard 2.21.0 at http://127.0.0.1:42739/ (Press CTRL+C to quit)", None),  # no prefix: not ours
        ("W1130 TensorBoard at http://x:1/tensorboard/", None),
    ],
)
def test_serving_port(line, port):
    assert tensorboard.serving_port(line) == port


def free_pair() -> int:
    """``low`` with ``low`` and ``low + 1`` both free on loopback (held by nobody once this returns)."""
    for _ in range(50):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            low = first.getsockname()[1]
            try:
                second.bind(("127.0.0.1", low + 1))
            except OSError:
                continue
            return low
    raise AssertionError("no two neighbouring free ports on loopback")


def test_with_a_port_range_tensorboard_listens_in_it_beside_the_tasks_port(tmp_path, am_factory, fake_tb):
    """The AM proxies TensorBoard, maybe from another node: behind a firewall that opens MELON_PORT_RANGE only, it
    must listen there too, on another port than the one the task registered for its framework."""
    low = free_pair()
    am = am_factory(["chief:0"])
    env = tb_env(tmp_path, am, "chief", fake_tb, MELON_PORT_RANGE=f"{low}-{low + 1}")
    proc = start(tmp_path, env)
    wait_for(lambda: any(h.get("tensorboard_url") for h in list(am.heartbeats)))
    (tmp_path / "record.json.seen").write_text("")
    rc, _, err = finish(proc)
    assert rc == 0, err
    registered = am.registrations[0]["port"]
    argv = json.loads((tmp_path / "record.json").read_text())["argv"]
    listened = int(argv[argv.index("--port") + 1])
    assert {registered, listened} == {low, low + 1}, (registered, listened)
