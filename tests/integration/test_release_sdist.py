"""The sdist from a clean checkout (the tracked files only: no jar, no Maven output) carries the ApplicationMaster
jar; a wheel built from it on a host without Maven and a JDK carries that jar byte for byte; a wheel built from an
sdist that lacks it, where Maven is missing, stops saying how to build it; and the wheel built from the sdist,
installed outside the checkout, says where the embedded cluster lives instead of writing into site-packages, and
runs its job commands against the Airflow connection ``yarn_default``.

Builds run with ``--no-build-isolation`` (the project venv's setuptools: nothing downloaded); the full release build
with an isolated environment is tests/integration/test_packaging.py's."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from airflow_provider_melon import __version__
from tests.integration import outside

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
JAR = "airflow_provider_melon/am/melon-appmaster.jar"
ROOT = f"airflow_provider_melon-{__version__}"


@pytest.fixture(scope="module")
def clean_checkout(tmp_path_factory) -> Path:
    """The files git tracks or would (not ignored), as `git clone` gives them: no jar, no appmaster/*/target."""
    src = tmp_path_factory.mktemp("checkout") / "src"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, files.decode().split("\0")):
        path = REPO / name
        if path.is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    assert not (src / JAR).exists()
    return src


@pytest.fixture(scope="module")
def sdist(clean_checkout, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sdist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out), str(clean_checkout)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return out / f"{ROOT}.tar.gz"


def test_the_sdist_of_a_clean_checkout_carries_the_application_master(sdist):
    names = tarfile.open(sdist).getnames()
    assert f"{ROOT}/{JAR}" in names, [n for n in names if "/am/" in n]


def _without_the_jar(sdist: Path, out: Path) -> Path:
    stripped = out / sdist.name
    with tarfile.open(sdist) as src, tarfile.open(stripped, "w:gz") as dst:
        for member in src.getmembers():
            if member.name != f"{ROOT}/{JAR}":
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return stripped


def _path_without_a_jdk(where: Path) -> dict:
    """The environment with a PATH of what the build needs, less Maven and the JDK (as on an Airflow host)."""
    tools = where / "bin"
    tools.mkdir()
    for tool in ("bash", "sh", "find", "cmp", "cp", "mkdir", "dirname", "env", "uname"):
        found = shutil.which(tool)
        if found:
            (tools / tool).symlink_to(found)
    return {**os.environ, "PATH": str(tools)}


def test_a_wheel_from_an_sdist_without_the_jar_and_without_maven_says_how_to_build_it(sdist, tmp_path):
    stripped = _without_the_jar(sdist, tmp_path)
    env = _path_without_a_jdk(tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "wheels"),
            str(stripped),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    log = result.stdout + result.stderr
    assert result.returncode != 0, log[-3000:]
    assert "JDK 17 and Maven" in log and "mvn, javac not found on PATH" in log, log[-4000:]
    assert not list((tmp_path / "wheels").glob("*.whl"))


@pytest.fixture(scope="module")
def wheel_without_a_jdk(sdist, tmp_path_factory) -> Path:
    """The wheel built from the sdist where neither Maven nor a JDK is on PATH (an Airflow host's `pip install
    <sdist>`): the sdist's jar is fresh, so no build of it is needed."""
    root = tmp_path_factory.mktemp("no-jdk")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(root), str(sdist)],
        capture_output=True,
        text=True,
        env=_path_without_a_jdk(root),
        timeout=900,
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    [wheel] = root.glob("*.whl")
    return wheel


def test_a_wheel_from_the_sdist_needs_no_jdk_and_carries_the_sdists_jar(sdist, wheel_without_a_jdk):
    sdist_jar = tarfile.open(sdist).extractfile(f"{ROOT}/{JAR}").read()  # type: ignore[union-attr]
    assert zipfile.ZipFile(wheel_without_a_jdk).read(JAR) == sdist_jar


@pytest.fixture(scope="module")
def installed(wheel_without_a_jdk, tmp_path_factory) -> Path:
    """The wheel built from the sdist without a JDK, installed into a fresh venv outside the checkout with what it
    requires with no extras (tests/integration/outside.py); returns the venv."""
    return outside.install(wheel_without_a_jdk, tmp_path_factory.mktemp("installed")).venv


def _melon(venv: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(venv / "bin" / "melon"), *argv],
        cwd=venv.parent,
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=300,
    )


def _site_packages(venv: Path) -> Path:
    [purelib] = (venv / "lib").glob("python3*/site-packages")
    return purelib


def test_the_installed_wheel_carries_the_am_and_says_where_the_embedded_cluster_lives(installed):
    site_packages = _site_packages(installed)
    assert (site_packages / JAR).is_file()
    for argv in (["minicluster", "start"], ["up"]):
        result = _melon(installed, *argv)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "checkout of the airflow-provider-melon repository" in result.stderr and "make up" in result.stderr
    assert not (site_packages / ".melon-minicluster").exists()
    assert not (site_packages / ".airflow-up").exists()


def test_the_installed_job_commands_use_the_yarn_default_connection(installed):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once the block ends
    conn = json.dumps({"conn_type": "yarn", "host": f"http://127.0.0.1:{port}"})
    result = _melon(installed, "ls", AIRFLOW_CONN_YARN_DEFAULT=conn)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"127.0.0.1:{port}" in result.stderr and "mini cluster" not in result.stderr, result.stderr
