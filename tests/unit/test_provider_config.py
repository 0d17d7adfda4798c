"""The ``[melon]`` options: every one the code reads is declared in ``provider_info`` (so the generated
configuration reference in docs/ lists it, and Airflow's ``config list`` knows it); one default per option, the
same in Airflow and in ``melon submit``; ``melon --help`` is plain text, not reST."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_provider_melon import __version__, cli
from airflow_provider_melon.cli import jobs as cli_jobs
from airflow_provider_melon.provider_info import STAGING_RETRY_S_DEFAULT, get_provider_info

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_provider_melon"

#: conf.get("melon", "x") / conf.getint("melon", "x") / conf.getfloat(...) anywhere, and MelonHook's _conf("x")
READS = [
    re.compile(r"""conf\.get\w*\(\s*["']melon["']\s*,\s*["'](\w+)["']"""),
    re.compile(r"""\b_conf\(\s*["'](\w+)["']\s*\)"""),
]


def options_read() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern in READS:
            for key in pattern.findall(text):
                found.setdefault(key, []).append(str(path.relative_to(PACKAGE)))
    return found


def declared() -> dict:
    return get_provider_info()["config"]["melon"]["options"]


def test_every_melon_option_the_code_reads_is_declared():
    read = options_read()
    # the scan itself works: these are read in known places
    assert {"poll_interval", "staging_retry_s", "admin_acl", "deployment_id", "ui_conn_ids"} <= set(read)
    missing = {key: where for key, where in read.items() if key not in declared()}
    assert not missing, f"[melon] options read but not declared in provider_info's config: {missing}"


def test_every_declared_option_is_read_somewhere():
    unused = set(declared()) - set(options_read())
    assert not unused, f"declared in provider_info but never read: {sorted(unused)}"


def test_declared_options_are_complete():
    for key, option in declared().items():
        for field in ("description", "version_added", "type", "example", "default"):
            assert field in option, f"[melon] {key}: no {field!r}"
        assert option["type"] in ("string", "integer", "float", "boolean"), key


def test_provider_info_reports_the_package_version():
    assert get_provider_info()["versions"] == [__version__]


def test_no_option_was_added_in_a_version_after_the_package():
    def release(text):
        return tuple(int(part) for part in text.split("."))

    later = {
        key: option["version_added"]
        for key, option in declared().items()
        if release(option["version_added"]) > release(__version__)
    }
    assert not later, f"[melon] options 'added' after {__version__}, the package's own version: {later}"


def test_staging_retry_s_has_one_default_for_airflow_and_melon_submit(tmp_path, monkeypatch, capsys):
    assert declared()["staging_retry_s"]["default"] == str(STAGING_RETRY_S_DEFAULT)
    seen = {}

    def fake_submit(args, cluster):  # stands in for the staging only: the hook is built as submit builds it
        seen["hook"] = cluster.melon_hook()
        return 0

    monkeypatch.setattr(cli_jobs, "cmd_submit", fake_submit)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\nentrypoint: echo\nroles: {worker: {memory: 256}}\n")
    base = [
        "submit",
        str(spec),
        "--rm",
        "http://127.0.0.1:9",
        "--webhdfs",
        "http://127.0.0.1:9",
        "--fs-default-fs",
        "hdfs://127.0.0.1:9",
        "--user",
        "alice",
    ]
    assert cli.main(base) == 0
    assert seen["hook"].staging_retry_s == STAGING_RETRY_S_DEFAULT
    assert cli.main(base + ["--staging-retry-s", "7"]) == 0
    assert seen["hook"].staging_retry_s == 7


COMMANDS = [
    "submit",
    "status",
    "ls",
    "logs",
    "kill",
    "prune",
    "wait",
    "minicluster",
    "up",
    "doctor",
    "pack-env",
    "plan",
]


@pytest.mark.parametrize("argv", [[]] + [[c] for c in COMMANDS], ids=lambda a: " ".join(a) or "melon")
def test_help_is_plain_text_not_rest(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv + ["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: melon")
    for markup in ("``", ":mod:", ":func:", ":class:", ":meth:", ":data:"):
        assert markup not in out, f"melon {' '.join(argv)} --help shows reST markup {markup!r}:\n{out}"
