"""The ``melon`` command installed from the wheel, not run from a checkout: site-packages holds no ``appmaster/``
(the launcher the embedded cluster needs is built there by ``make setup``), so ``minicluster start`` and ``up``
say where the embedded cluster lives and write nothing, and the job commands default to the Airflow connection
``yarn_default``. (The same from a really installed wheel: tests/integration/test_release_sdist.py.)"""

from __future__ import annotations

import json
import socket

import pytest

from airflow_provider_melon import cli
from airflow_provider_melon.dev import minicluster as mc


def melon(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The package's layout as a wheel installs it: the package folder's parent (site-packages) has no
    appmaster/, so the default work dir would be site-packages/.melon-minicluster."""
    site_packages = tmp_path / "site-packages"
    site_packages.mkdir()
    monkeypatch.setattr(mc, "REPO_ROOT", site_packages)
    monkeypatch.setattr(mc, "APPMASTER_DIR", site_packages / "appmaster")
    monkeypatch.setattr(mc, "DEFAULT_WORK_DIR", site_packages / ".melon-minicluster")
    return site_packages


@pytest.mark.parametrize("argv", [["minicluster", "start"], ["up"]])
def test_the_embedded_cluster_from_a_wheel_says_where_it_lives_and_writes_nothing(capsys, installed, argv):
    code, out, err = melon(capsys, *argv)
    assert code == 2, (out, err)
    assert "checkout" in err and "make up" in err, err
    assert "yarn_default" in err  # what to use instead, against a real cluster
    assert list(installed.iterdir()) == []  # no .melon-minicluster (or anything else) written into site-packages


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the block ends: nothing listens there


def test_job_commands_from_a_wheel_default_to_the_yarn_default_connection(capsys, installed, monkeypatch):
    port = _closed_port()
    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_DEFAULT", json.dumps({"conn_type": "yarn", "host": f"http://127.0.0.1:{port}"})
    )
    code, _, err = melon(capsys, "ls")
    assert code == 3, err  # unreachable: the connection's RM, not "no mini cluster running in site-packages"
    assert f"127.0.0.1:{port}" in err and "mini cluster" not in err, err


def test_from_a_checkout_the_job_commands_still_default_to_the_embedded_cluster(capsys, tmp_path):
    code, _, err = melon(capsys, "ls", "--work-dir", str(tmp_path))
    assert code == 3 and "mini cluster" in err


def test_an_installed_melon_reaches_an_embedded_cluster_named_by_its_work_dir(capsys, installed, tmp_path):
    code, _, err = melon(capsys, "ls", "--work-dir", str(tmp_path / "cluster"))
    assert code == 3 and f"no mini cluster running in {tmp_path / 'cluster'}" in err, err
