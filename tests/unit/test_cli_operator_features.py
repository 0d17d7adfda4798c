"""What an operator expects of ``melon`` on a real cluster: ``--version``, ``ls`` filters (user, queue, state,
name, age: as ``yarn application -list`` and ``skein application ls``), and shell completion (argcomplete, which
ships with Airflow)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from airflow_provider_melon import __version__, cli
from airflow_provider_melon.cli import jobs as cli_jobs


def melon(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    code, out, _ = melon(capsys, "--version")
    assert code == 0 and out.strip() == f"melon {__version__}"


class RecordingYarn:
    """Answers ``list_applications`` as the RM's /apps does for the filters it supports (user, queue, states,
    startedTimeBegin), from a fixed list; records what was asked."""

    def __init__(self, apps):
        self.apps, self.asked = apps, None

    def list_applications(self, **filters):
        self.asked = filters
        apps = [dict(a) for a in self.apps]
        if filters.get("user"):
            apps = [a for a in apps if a["user"] == filters["user"]]
        if filters.get("queue"):
            apps = [a for a in apps if a["queue"] == filters["queue"]]
        if filters.get("startedTimeBegin"):
            apps = [a for a in apps if a["startedTime"] >= filters["startedTimeBegin"]]
        return apps


@pytest.fixture
def apps(monkeypatch):
    now = int(time.time() * 1000)
    hour = 3600 * 1000

    def app(n, name, user, queue, started_h_ago, state="RUNNING"):
        return {
            "id": f"application_1700000000000_000{n}",
            "name": name,
            "user": user,
            "queue": queue,
            "state": state,
            "finalStatus": "UNDEFINED",
            "progress": 10.0,
            "elapsedTime": 1000,
            "startedTime": now - started_h_ago * hour,
            "applicationType": "MELON",
            "applicationTagList": ["melon"],
        }

    yarn = RecordingYarn(
        [
            app(1, "mnist-nightly", "alice", "gpu", 30),
            app(2, "resnet", "alice", "default", 2),
            app(3, "mnist-adhoc", "bob", "gpu", 1),
            app(4, "bert", "bob", "gpu", 5),
        ]
    )

    class Cluster:
        def __init__(self, args):
            self.yarn = yarn

    monkeypatch.setattr(cli_jobs, "Cluster", Cluster)
    return yarn


def _ids(out: str) -> list[str]:
    return [row["id"][-1] for row in json.loads(out)]


def test_ls_filters_by_user_queue_name_and_age(capsys, apps):
    code, out, _ = melon(capsys, "ls", "--json", "--owner", "alice")
    assert code == 0 and _ids(out) == ["2", "1"] and apps.asked["user"] == "alice"
    code, out, _ = melon(capsys, "ls", "--json", "--queue", "gpu")
    assert _ids(out) == ["3", "4", "1"] and apps.asked["queue"] == "gpu"
    code, out, _ = melon(capsys, "ls", "--json", "--name", "mnist*")
    assert _ids(out) == ["3", "1"]
    code, out, _ = melon(capsys, "ls", "--json", "--newer-than", "6h", "--queue", "gpu")
    assert _ids(out) == ["3", "4"]
    assert abs(apps.asked["startedTimeBegin"] - (time.time() - 6 * 3600) * 1000) < 60_000


@pytest.mark.parametrize("age", ["soon", "0", "-2h", "nan"])
def test_ls_bad_age_is_a_usage_error_naming_the_option(capsys, apps, age):
    code, _, err = melon(capsys, "ls", f"--newer-than={age}")
    assert code == 2 and f"--newer-than {age!r}: expected a duration" in err, err


def test_shell_completion_completes_commands_and_options(tmp_path):
    """argcomplete's own protocol, as bash's completion function drives it: COMP_LINE/COMP_POINT in, the
    candidates out (into _ARGCOMPLETE_STDOUT_FILENAME instead of file descriptor 8)."""

    def complete(line: str) -> list[str]:
        out = tmp_path / "completions"
        env = {
            **os.environ,
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_IFS": "\n",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        }
        result = subprocess.run(
            [sys.executable, "-m", "airflow_provider_melon.cli"], env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return [c.strip() for c in out.read_text().split("\n")]

    assert {"status", "submit"} <= set(complete("melon s"))
    assert "--newer-than" in complete("melon ls --ne")


@pytest.mark.parametrize("argv", [["doctor", "--json"], ["ls", "--json"]])
def test_json_output_is_only_json_whatever_airflow_logs(tmp_path, argv):
    """A real Airflow whose logging is at DEBUG (a deployment's own setting) logs through its structlog on stdout
    from the moment it is imported; under --json all of it goes to stderr, and stdout parses."""
    home = tmp_path / "airflow"
    home.mkdir()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "DEBUG",
        "AIRFLOW_CONN_YARN_DEFAULT": json.dumps({"conn_type": "yarn", "host": "http://127.0.0.1:9"}),
        "AIRFLOW_CONN_WEBHDFS_DEFAULT": json.dumps({"conn_type": "webhdfs", "host": "127.0.0.1", "port": 9}),
    }
    env.pop("AIRFLOW__LOGGING__NAMESPACE_LEVELS", None)
    result = subprocess.run(
        [sys.executable, "-m", "airflow_provider_melon.cli", *argv, "--conn-id", "yarn_default"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # Airflow did log, onto stderr: its settings module, by logger name (3.1 on) or by file name (3.0's format)
    assert re.search(r"airflow\.settings|\{settings\.py:\d+\}", result.stderr), result.stderr[-2000:]
    if argv[0] == "doctor":  # its findings (the RM is unreachable) are the JSON
        parsed = json.loads(result.stdout)
        assert result.returncode == 1 and {"check", "status"} <= set(parsed[0])
    else:  # nothing to list: the error on stderr, and as JSON on stdout
        assert result.returncode == 3 and json.loads(result.stdout)["error"] == "unreachable", result.stdout[-2000:]


def test_the_doctor_submit_tests_poll_answers_ends_on_time_and_passes_errors_on():
    from airflow_provider_melon.cli.doctor_submit import poll

    answers = iter([None, None, "formed"])
    assert poll(lambda: next(answers), 10, 0.01) == "formed"
    started = time.monotonic()
    assert poll(lambda: None, 0.3, 0.05) is None
    assert 0.25 <= time.monotonic() - started < 5
    with pytest.raises(ConnectionError):
        poll(lambda: (_ for _ in ()).throw(ConnectionError("rm down")), 10, 0.01)
