"""`melon submit|status|ls|logs|kill|wait`: argument checks and exit codes, output formatting, the progress bar,
and the cases a real cluster cannot produce on demand (an RM that restarts while we wait, a NodeManager that is
gone). The rest runs against a real mini cluster in tests/integration/test_cli_live.py."""

from __future__ import annotations

import io
import json
import os
import re

import pytest
import requests
import requests_mock as rm_mock

from airflow_provider_melon import cli
from airflow_provider_melon.cli import jobs as cli_jobs
from airflow_provider_melon.cli.exit_codes import exit_code_for
from airflow_provider_melon.cli.terminal import Progress, UploadProgress, app_exit_code

APP = "application_1700000000000_0007"
RM = "http://rm1:8088"


def melon(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr)."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def spec_file(tmp_path):
    def write(body: str, name: str = "job.yaml"):
        path = tmp_path / name
        path.write_text(body)
        return str(path)

    return write


GOOD = "name: hello\nentrypoint: echo hi\nroles: {worker: {memory: 256}}\n"


# ---- usage and exit codes ---------------------------------------------------------------------------------------
def test_help_documents_the_exit_codes(capsys):
    code, out, _ = melon(capsys, "--help")
    assert code == 0
    for line in (
        "exit codes",
        "2    bad usage",
        "3    the cluster is unreachable",
        "4    not found",
        "124  wait --timeout",
    ):
        assert line in out
    for command in ("submit", "status", "ls", "logs", "kill", "wait"):
        assert command in out
    code, out, _ = melon(capsys, "wait", "--help")
    assert code == 0 and "--timeout" in out and "124" in out and "--conn-id" in out and "--rm URL" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["status", "app_7"], "'app_7' is not a YARN application id"),
        (["status", APP, "--rm", RM, "--conn-id", "yarn_default"], "either as --conn-id or as --rm, not both"),
        (["ls", "--state", "RUNNING,DONE", "--rm", "http://127.0.0.1:1"], "--state DONE: YARN states are"),
        (["ls", "--limit", "-1", "--rm", "http://127.0.0.1:1"], "--limit -1"),
        (["submit", "nope.yaml", "--rm", RM], "job spec nope.yaml: no such file"),
    ],
)
def test_usage_errors_exit_2_with_one_line(capsys, argv, message):
    code, out, err = melon(capsys, *argv)
    assert code == 2, err
    assert message in err and "Traceback" not in err and err.count("\n") == 1 and out == ""


def test_a_bad_spec_exits_2_naming_the_field(capsys, spec_file):
    path = spec_file("name: hello\nentrypoint: echo hi\nroles: {worker: {instances: 0}}\n")
    code, _, err = melon(capsys, "submit", path, "--rm", "http://127.0.0.1:1", "--webhdfs", "http://127.0.0.1:1")
    assert code == 2 and "roles.worker.instances" in err and path in err and "Traceback" not in err
    code, _, err = melon(
        capsys,
        "submit",
        spec_file("{name: x, entrypoint: e, roles: {}, gpus: 2}", "j.json"),
        "--rm",
        "http://127.0.0.1:1",
    )
    assert code == 2 and "not valid JSON" in err


def test_submit_with_rm_urls_needs_webhdfs_and_key_value_env(capsys, spec_file):
    code, _, err = melon(capsys, "submit", spec_file(GOOD), "--rm", "http://127.0.0.1:1")
    assert code == 2 and "--webhdfs URL" in err
    code, _, err = melon(
        capsys,
        "submit",
        spec_file(GOOD),
        "--rm",
        "http://127.0.0.1:1",
        "--webhdfs",
        "http://127.0.0.1:1",
        "--container-env",
        "NO_EQUALS_SIGN",
    )
    assert code == 2 and "KEY=VALUE" in err


def test_argparse_errors_exit_2(capsys):
    code, _, err = melon(capsys, "wait")
    assert code == 2 and "app_id" in err


def test_no_cluster_given_and_no_embedded_one_exits_3(capsys, tmp_path):
    code, _, err = melon(capsys, "ls", "--work-dir", str(tmp_path))
    assert code == 3 and "--rm URL" in err and "--conn-id" in err


def test_unknown_airflow_connection_exits_2(capsys):
    code, _, err = melon(capsys, "status", APP, "--conn-id", "no_such_connection_here")
    assert code == 2 and "no_such_connection_here" in err and "Traceback" not in err


def test_app_exit_codes():
    assert app_exit_code({"state": "RUNNING", "finalStatus": "UNDEFINED"}) == 0
    assert app_exit_code({"state": "ACCEPTED"}) == 0
    assert app_exit_code({"state": "FINISHED", "finalStatus": "SUCCEEDED"}) == 0
    assert app_exit_code({"state": "FINISHED", "finalStatus": "FAILED"}) == 1  # an AM that unregistered FAILED
    assert app_exit_code({"state": "FAILED", "finalStatus": "FAILED"}) == 1
    assert app_exit_code({"state": "KILLED", "finalStatus": "KILLED"}) == 1


def test_errors_map_to_exit_codes():
    from airflow_provider_melon.hadoop.hdfs_io import MelonHdfsError
    from airflow_provider_melon.hadoop.rm_json import YarnApiError
    from airflow_provider_melon.spec import JobSpecError

    class Args:
        app_id, spec, verbose = APP, "job.yaml", False

    refused = YarnApiError(
        "ConnectionError: ... [Errno 111] Connection refused", status=None, url=f"{RM}/ws/v1/cluster/apps/{APP}"
    )
    assert exit_code_for(refused, Args) == (3, "cannot reach the ResourceManager http://rm1:8088: connection refused")
    code, message = exit_code_for(YarnApiError("app not found", status=404, url=RM), Args)
    assert code == 4 and APP in message
    assert exit_code_for(YarnApiError("no ACL", status=403, url=RM), Args)[0] == 1
    assert exit_code_for(MelonHdfsError("write", "/x", "Connection refused", retriable=True), Args)[0] == 3
    assert exit_code_for(MelonHdfsError("write", "/x", "AccessControlException"), Args)[0] == 1
    assert exit_code_for(JobSpecError("invalid job spec: name: bad"), Args) == (
        2,
        "job.yaml: invalid job spec: name: bad",
    )
    code, message = exit_code_for(RuntimeError("boom\nsecond line"), Args)
    assert code == 1 and message == "RuntimeError: boom (-v for the traceback)"


# ---- --json: an error is a JSON object on stdout too ------------------------------------------------------------
DOWN = "http://127.0.0.1:1"  # nothing listens on port 1: connection refused at once


def json_error(capsys, *argv: str) -> tuple[int, dict, str]:
    """Run with --json: (exit code, the one JSON object stdout holds, stderr)."""
    code, out, err = melon(capsys, *argv, "--json")
    try:
        answer = json.loads(out)
    except ValueError:
        raise AssertionError(f"stdout is not JSON (exit {code}): {out!r}; stderr: {err}") from None
    assert isinstance(answer, dict) and out.count("\n") == 1, out
    assert answer["exit_code"] == code and answer["message"] and "Traceback" not in out, answer
    return code, answer, err


@pytest.mark.parametrize(
    "argv",
    [
        ["ls"],
        ["status", APP],
        ["logs", APP],
        ["kill", APP],
        ["wait", APP],
        ["prune", "--webhdfs", DOWN],
        ["memory", "show", "dag/task", "--webhdfs", DOWN],
        ["memory", "forget", "dag/task", "--webhdfs", DOWN],
    ],
)
def test_json_errors_of_an_unreachable_cluster(capsys, argv):
    code, answer, err = json_error(capsys, *argv, "--rm", DOWN)
    assert code == 3 and answer["error"] == "unreachable" and answer["command"] == argv[0], answer
    assert "127.0.0.1" in answer["message"] and answer["message"] in err, (answer, err)
    if APP in argv:
        assert answer["app_id"] == APP


def test_json_error_of_submit_names_the_spec_and_the_field(capsys, spec_file):
    path = spec_file("name: hello\nentrypoint: echo hi\nroles: {worker: {instances: 0}}\n")
    code, answer, _ = json_error(capsys, "submit", path, "--rm", DOWN, "--webhdfs", DOWN)
    assert code == 2 and answer["error"] == "usage" and answer["spec"] == path, answer
    assert "roles.worker.instances" in answer["message"]
    code, answer, _ = json_error(capsys, "submit", spec_file(GOOD), "--rm", DOWN, "--webhdfs", DOWN)
    assert code == 3 and answer["error"] == "unreachable", answer


@pytest.mark.parametrize(
    "argv, code, error, text",
    [
        (["status", "app_7"], 2, "usage", "not a YARN application id"),  # our own check
        (["wait"], 2, "usage", "app_id"),  # argparse's
        (["ls", "--limit", "many"], 2, "usage", "--limit"),
        (["memory", "show", "dag/../other", "--rm", DOWN, "--webhdfs", DOWN], 2, "usage", "dag/../other"),
        (["doctor", "--rm", DOWN, "--conn-id", "yarn_default"], 2, "usage", "not both"),
        (["doctor", "--conn-id", "no_such_connection_here"], 2, "usage", "no_such_connection_here"),
        (["status", APP, "--conn-id", "no_such_connection_here"], 2, "usage", "no_such_connection_here"),
        (["ls", "--frobnicate"], 2, "usage", "--frobnicate"),
    ],
)
def test_json_usage_errors(capsys, tmp_path, argv, code, error, text):
    got, answer, _ = json_error(capsys, *argv, "--work-dir", str(tmp_path))
    assert (got, answer["error"]) == (code, error) and text in answer["message"], answer


def test_json_error_without_a_cluster(capsys, tmp_path):
    code, answer, _ = json_error(capsys, "ls", "--work-dir", str(tmp_path))
    assert code == 3 and answer["error"] == "unreachable" and "--rm URL" in answer["message"], answer


def test_without_json_errors_stay_off_stdout(capsys):
    code, out, err = melon(capsys, "ls", "--rm", DOWN)
    assert code == 3 and out == "" and err.startswith("error: cannot reach the ResourceManager")


def test_json_error_of_a_missing_application(capsys):
    """A 404 for the app (the live suite sees the real RM's; here its answer as the RM words it)."""
    with rm_mock.Mocker() as m:
        m.get(
            f"{RM}/ws/v1/cluster/apps/{APP}",
            status_code=404,
            json={"RemoteException": {"exception": "NotFoundException", "message": f"app with id: {APP} not found"}},
        )
        code, answer, _ = json_error(capsys, "status", APP, "--rm", RM)
    assert code == 4 and answer["error"] == "not_found" and answer["app_id"] == APP and answer["status"] == 404


# ---- ls formatting and filters (a stub RM client) ---------------------------------------------------------------
def _app(n: int, state="FINISHED", final="SUCCEEDED", tags=("melon",), started=0, app_type="MELON", **kw):
    return {
        "id": f"application_1700000000000_000{n}",
        "name": f"job-{n}",
        "user": "alice",
        "queue": "default",
        "state": state,
        "finalStatus": final,
        "progress": 100.0 if state == "FINISHED" else 40.0,
        "elapsedTime": 65_000 * n,
        "startedTime": started,
        "applicationType": app_type,
        "applicationTagList": list(tags),
        **kw,
    }


class StubYarn:
    def __init__(self, apps):
        self.apps = apps
        self.filters = None

    def list_applications(self, **filters):
        self.filters = filters
        return [dict(a) for a in self.apps]


@pytest.fixture
def stub_cluster(monkeypatch):
    def install(yarn):
        class StubCluster:
            def __init__(self, args):
                self.yarn = yarn

        monkeypatch.setattr(cli_jobs, "Cluster", StubCluster)
        return yarn

    return install


def test_ls_table_newest_first_with_all_tags_and_limit(capsys, stub_cluster):
    yarn = stub_cluster(
        StubYarn(
            [
                _app(1, tags=("melon", "team-a"), started=100),
                _app(2, state="RUNNING", final="UNDEFINED", tags=("melon", "team-a", "nightly"), started=300),
                _app(3, tags=("melon", "nightly"), started=200),
                _app(4, state="FAILED", final="FAILED", tags=("melon", "team-a", "nightly"), started=250),
                _app(5, tags=("team-a", "nightly"), started=400, app_type="SPARK"),
            ]
        )
    )
    code, out, _ = melon(capsys, "ls", "--tag", "Team-A", "--tag", "nightly", "--limit", "5")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "USER", "STATE", "PROGRESS", "ELAPSED"]
    assert [line.split()[0] for line in lines[1:]] == [
        "application_1700000000000_0002",
        "application_1700000000000_0004",
    ]
    assert lines[1].split()[1:] == ["job-2", "alice", "RUNNING/UNDEFINED", "40%", "2m10s"]
    assert lines[2].split()[3] == "FAILED/FAILED"
    assert yarn.filters["applicationTags"] == ["team-a", "nightly"] and yarn.filters["applicationTypes"] == "MELON"

    code, out, _ = melon(capsys, "ls", "--limit", "2", "--json", "--state", "finished,running")
    rows = json.loads(out)
    assert code == 0 and [r["id"][-1] for r in rows] == ["2", "4"]
    assert yarn.filters["states"] == ["FINISHED", "RUNNING"]
    assert rows[0]["state"] == "RUNNING" and rows[0]["final_status"] == "UNDEFINED" and rows[0]["elapsed_s"] == 130.0

    code, out, _ = melon(capsys, "ls", "--all-types", "--json", "--limit", "0")
    assert len(json.loads(out)) == 5 and yarn.filters["applicationTypes"] is None


# ---- wait: an RM that restarts under us (cannot be arranged on the mini cluster on demand) ------------------------
def test_wait_rides_out_an_rm_restart_and_reports_the_end(capsys, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    url = f"{RM}/ws/v1/cluster/apps/{APP}"
    running = {"json": {"app": _app(7, state="RUNNING", final="UNDEFINED") | {"id": APP}}}
    with rm_mock.Mocker() as m:
        m.get(
            url,
            [
                running,
                running,  # the first read, then one poll
                {"exc": requests.ConnectionError("Connection refused")},
                {"exc": requests.ConnectionError("refused")},
                {"status_code": 503, "text": "starting"},
                {"status_code": 503, "text": "starting"},
                {"status_code": 404, "json": {"RemoteException": {"message": f"app with id {APP} not found"}}},
                running,
                {"json": {"app": _app(7) | {"id": APP}}},
            ],
        )
        code, out, err = melon(capsys, "wait", APP, "--rm", RM, "--interval", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["final_status"] == "SUCCEEDED"


def test_wait_exits_1_for_a_killed_app_and_124_on_timeout(capsys, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    url = f"{RM}/ws/v1/cluster/apps/{APP}"
    with rm_mock.Mocker() as m:
        m.get(
            url, json={"app": _app(7, state="KILLED", final="KILLED", diagnostics="killed by user bob") | {"id": APP}}
        )
        code, out, _ = melon(capsys, "wait", APP, "--rm", RM)
        assert code == 1 and "KILLED/KILLED" in out and "killed by user bob" in out
        m.get(url, json={"app": _app(7, state="RUNNING", final="UNDEFINED") | {"id": APP}})
        code, _, err = melon(capsys, "wait", APP, "--rm", RM, "--timeout", "0")
        assert code == 124 and "still running" in err


# ---- logs: a NodeManager that is gone; the log answer; reading on from an offset ---------------------------------
def test_logs_with_the_nodemanager_down_exit_3(capsys):
    app = _app(7) | {"id": APP, "logAggregationStatus": "DISABLED"}
    attempt = {
        "id": 1,
        "appAttemptId": "appattempt_1700000000000_0007_000001",
        "containerId": "container_1700000000000_0007_01_000001",
        "nodeId": "127.0.0.1:1",
        "nodeHttpAddress": "127.0.0.1:1",
    }
    with rm_mock.Mocker(real_http=True) as m:  # the NodeManager's port is really closed
        m.get(f"{RM}/ws/v1/cluster/apps/{APP}", json={"app": app})
        m.get(f"{RM}/ws/v1/cluster/apps/{APP}/appattempts", json={"appAttempts": {"appAttempt": [attempt]}})
        code, _, err = melon(capsys, "logs", APP, "--rm", RM)
    assert code == 3 and "NodeManager(s) http://127.0.0.1:1 unreachable" in err


def test_gone_message_says_where_logs_went():
    from airflow_provider_melon.hadoop.nodemanager import gone_message

    off = gone_message(APP, {"logAggregationStatus": "DISABLED"})
    assert "are gone" in off and "log aggregation is off" in off and "retain-seconds" in off
    on = gone_message(APP, {"logAggregationStatus": "SUCCEEDED"})
    assert f"yarn logs -applicationId {APP}" in on


NM_ANSWER = (
    b"Container: container_1_0001_01_000002 on node:45454\nLogAggregationType: LOCAL\n"
    b"====================================================================\nLogType:stdout\n"
    b"LogLastModifiedTime:Mon Nov 30 19:26:23 +0000 2026\nLogLength:%d\nLogContents:\n%s"
    b"End of LogType:stdout.This log file belongs to a running container (container_1_0001_01_000002) and "
    b"so may not be complete.\n*****************\n\n"
)


def test_parse_log_answer_takes_exactly_the_bytes_served():
    from airflow_provider_melon.hadoop.nodemanager import NodeManagerError, parse_log_answer

    assert parse_log_answer(NM_ANSWER % (12, b"one\ntwo\nthre"), None) == (12, b"one\ntwo\nthre")
    assert parse_log_answer(NM_ANSWER % (500, b"last-five"[-5:]), -5) == (500, b"-five")
    assert parse_log_answer(NM_ANSWER % (3, b"abc"), -64) == (3, b"abc")  # the whole file when it is shorter
    assert parse_log_answer(NM_ANSWER % (0, b""), None) == (0, b"")
    with pytest.raises(NodeManagerError):
        parse_log_answer(b"<html>404</html>", None)


class GrowingFile:
    """A NodeManager's view of one log file: fetch(size) as parse_log_answer would return it."""

    def __init__(self):
        self.data = b""
        self.fetches = 0

    def fetch(self, ref, name, size=None):
        self.fetches += 1
        if size is None:
            return len(self.data), self.data
        return len(self.data), (self.data[:size] if size > 0 else self.data[max(len(self.data) + size, 0) :])


def test_log_tail_reads_each_byte_once_through_growth_truncation_and_partial_lines():
    from airflow_provider_melon.hadoop import nodemanager as nm_logs

    f = GrowingFile()
    tail = nm_logs.LogTail(f, nm_logs.ContainerRef("c", "worker:0"), "stdout")
    f.data = b"a1\na2\npart"
    assert tail.lines() == ["a1", "a2"]
    assert tail.lines(size_hint=len(f.data)) == [] and f.fetches == 1  # nothing new: not even fetched
    f.data += b"ial\n" + b"x" * 200_000 + b"\nlast"  # more than one chunk since the last read: widened
    assert tail.lines() == ["partial", "x" * 200_000]
    f.data += b"\n"
    assert tail.lines() == ["last"]
    f.data = b"new file\n"  # truncated (or replaced): read from its start
    assert tail.lines() == ["new file"]
    f.data += b"no newline at the end"
    assert tail.lines() == [] and tail.flush() == ["no newline at the end"] and tail.flush() == []


def test_containers_are_found_in_the_am_log_with_their_nodemanagers():
    from airflow_provider_melon.hadoop import nodemanager as nm_logs

    class Yarn:
        active_rm = "http://rm:8088"

        def app_attempts(self, app_id):
            return [
                {
                    "id": 2,
                    "containerId": "container_1_0007_02_000001",
                    "nodeId": "n2:1",
                    "nodeHttpAddress": "n2:80",
                    "appAttemptId": "appattempt_1_0007_000002",
                },
                {"id": 1, "containerId": "container_1_0007_01_000001", "nodeId": "n1:1", "nodeHttpAddress": "n1:80"},
            ]

        def nodes(self):
            return [{"id": "n1:1", "nodeHTTPAddress": "n1:80"}, {"id": "n2:1", "nodeHTTPAddress": "n2:80"}]

        def app_containers(self, app_id, attempt):
            return [{"containerId": "container_1_0007_02_000009", "nodeHttpAddress": "http://n1:80"}]

    am_logs = {
        "container_1_0007_01_000001": b"x MelonAM: task worker:0 attempt 0 -> container_1_0007_01_000002 on n2:1\n"
        b"x MelonAM: task worker:0 attempt 1 -> container_1_0007_01_000003 on n1:1\n",
        "container_1_0007_02_000001": b"x MelonAM: task chief:0 attempt 0 -> container_1_0007_02_000002 on n1:1\n",
    }
    logs = nm_logs.NodeLogs(Yarn(), "application_1_0007")
    logs.fetch = lambda ref, name, size=None: (
        (len(am_logs[ref.id]), am_logs[ref.id]) if name == "AppMaster.stdout" else None
    )
    found = [(c.id[-9:], c.label, c.nm_url) for c in logs.discover(running=True)]
    assert found == [
        ("01_000001", "am", "http://n1:80"),
        ("01_000002", "worker:0", "http://n2:80"),
        ("01_000003", "worker:0#1", "http://n1:80"),
        ("02_000001", "am#2", "http://n2:80"),
        ("02_000002", "chief:0", "http://n1:80"),
        ("02_000009", "container", "http://n1:80"),
    ]


# ---- the progress bar ------------------------------------------------------------------------------------------
class Tty(io.StringIO):
    def isatty(self):
        return True


def shown(tty) -> str:
    """What a terminal shows of the bar's text: without its colour escape sequences."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", tty.getvalue())


def test_progress_bar_is_drawn_on_a_terminal_only():
    piped = io.StringIO()
    Progress(piped).update(0.5, "RUNNING", force=True)
    assert piped.getvalue() == ""
    tty = Tty()
    bar = Progress(tty)
    bar.update(0.5, "RUNNING 12s", force=True)
    drawn = tty.getvalue()
    assert "━" in drawn and "50%" in drawn and "RUNNING 12s" in drawn  # rich's bar, its percentage, the text
    bar.clear()
    assert tty.getvalue().endswith("\x1b[2K")  # the bar's line erased (a transient rich progress)


def test_upload_progress_streams_every_byte_with_its_length():
    class Client:
        def __init__(self):
            self.written = {}

        def write(self, path, data=None, overwrite=False):
            self.written[path] = (
                (len(data), b"".join(iter(lambda: data.read(8192), b"")))
                if hasattr(data, "read")
                else (len(data), data)
            )

        def status(self, path, strict=False):
            return {"path": path}

    tty = Tty()
    client = Client()
    wrapped = UploadProgress(client, Progress(tty))
    payload = bytes(range(256)) * 1024
    wrapped.write("/c/abc/.code.zip.0123456789abcdef0123456789abcdef.tmp", data=payload, overwrite=False)
    wrapped.write("/c/abc/.code.zip.lock", data=b"host pid 1", overwrite=False)
    assert client.written["/c/abc/.code.zip.0123456789abcdef0123456789abcdef.tmp"] == (len(payload), payload)
    assert client.written["/c/abc/.code.zip.lock"] == (10, b"host pid 1")
    assert "100% staging code.zip 0.2/0.2 MiB" in shown(tty)
    assert wrapped.status("/x") == {"path": "/x"}  # everything else passes through


def test_upload_progress_streams_a_local_file(tmp_path):
    """A staged local file (hdfs_io.open_source) is sent as a stream with its length, and drives the bar."""

    class Tty(io.StringIO):
        def isatty(self):
            return True

    class Client:
        def write(self, path, data=None, overwrite=False):
            self.length, self.reads = len(data), []
            while block := data.read(8192):
                self.reads.append(len(block))

    payload = tmp_path / "env.tar.gz"
    payload.write_bytes(os.urandom(200_000))
    tty, client = Tty(), Client()
    with open(payload, "rb") as body:
        UploadProgress(client, Progress(tty)).write(
            "/c/abc/.env.tar.gz.0123456789abcdef0123456789abcdef.tmp", data=body, overwrite=False
        )
    assert client.length == 200_000 and sum(client.reads) == 200_000 and max(client.reads) == 8192
    assert "100% staging env.tar.gz 0.2/0.2 MiB" in shown(tty)
