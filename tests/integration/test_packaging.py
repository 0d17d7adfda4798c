"""The release artifacts, as CI builds them: `python -m build` makes the sdist and, from it, the wheel (so the sdist
alone is enough to build a wheel that carries the AM, the sdist's jars byte for byte: Maven runs once), `twine check --strict` accepts both, setuptools warns of no
package it would ignore, and each artifact holds what an operator needs (the AM jar, the UI plugin's page, the
license). No cluster needed; the build's isolated environment comes from the package index, as `pip wheel` does in
test_wheel_install.py."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from airflow_provider_melon import __version__

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dist(release_dist) -> tuple[Path, Path, str]:
    return release_dist  # tests/integration/conftest.py: one build for this file and test_wheel_install.py


def test_build_gives_both_artifacts_at_the_one_version(dist):
    whl, sdist, _ = dist
    assert whl.name == f"airflow_provider_melon-{__version__}-py3-none-any.whl"
    assert sdist.name == f"airflow_provider_melon-{__version__}.tar.gz"
    metadata = zipfile.ZipFile(whl).read(f"airflow_provider_melon-{__version__}.dist-info/METADATA").decode()
    assert re.search(rf"^Version: {re.escape(__version__)}$", metadata, re.M)
    assert re.search(r"^License(-Expression)?: Apache-2.0$", metadata, re.M), metadata[:800]


def test_the_wheels_project_urls_are_https_addresses(dist):
    """A Project-URL is a link (pip show, PyPI, the packaging tools): an https address, or none."""
    whl, _, _ = dist
    metadata = zipfile.ZipFile(whl).read(f"airflow_provider_melon-{__version__}.dist-info/METADATA").decode()
    urls = [line.split(",", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Project-URL:")]
    bad = [u for u in urls if urlsplit(u).scheme != "https" or not urlsplit(u).netloc]
    assert not bad, bad


def test_setuptools_warns_of_no_ignored_package(dist):
    _, _, log = dist
    assert "Package would be ignored" not in log, log[log.find("would be ignored") - 2000 :][:4000]
    assert "is absent from the `packages` configuration" not in log


def test_twine_check_passes(dist):
    whl, sdist, _ = dist
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(whl), str(sdist)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_the_wheel_holds_the_am_the_ui_plugin_page_and_the_license(dist):
    whl, _, _ = dist
    names = set(zipfile.ZipFile(whl).namelist())
    for needed in (
        "airflow_provider_melon/am/melon-appmaster.jar",
        "airflow_provider_melon/plugin/static/page.html",
        "airflow_provider_melon/plugin/static/melon.js",
        f"airflow_provider_melon-{__version__}.dist-info/licenses/LICENSE",
    ):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.startswith(("tests/", "dags/", "docs/"))]


def test_the_sdist_holds_the_sources_to_rebuild_everything(dist):
    _, sdist, _ = dist
    root = f"airflow_provider_melon-{__version__}/"
    names = {n[len(root) :] for n in tarfile.open(sdist).getnames()}
    for needed in (
        "LICENSE",
        "CHANGELOG.md",
        "README.md",
        "setup.cfg",
        "setup.py",
        "appmaster/pom.xml",
        "appmaster/build.sh",
        "airflow_provider_melon/plugin/static/page.html",
    ):
        assert needed in names, needed
    # the AM (appmaster/am, Java 8) and the mini-cluster launcher (appmaster/launcher) are separate Maven modules
    for module in ("am", "launcher"):
        assert f"appmaster/{module}/pom.xml" in names, module
        assert any(n.startswith(f"appmaster/{module}/src/") and n.endswith(".java") for n in names), module
    assert "airflow_provider_melon/am/plan.schema.json" in names  # the plan contract the AM's build checks


def test_the_wheel_carries_the_sdists_jars_and_maven_ran_once(dist):
    """The wheel step finds the sdist's jars fresh: it builds no other (the folders the sdist's extraction makes
    are newer than its jars, and must not count as sources that changed)."""
    whl, sdist, log = dist
    root = f"airflow_provider_melon-{__version__}/"
    with tarfile.open(sdist) as src, zipfile.ZipFile(whl) as wheel:
        for jar in ("airflow_provider_melon/am/melon-appmaster.jar", "airflow_provider_melon/rm/melon-scheduler.jar"):
            assert wheel.read(jar) == src.extractfile(root + jar).read(), jar  # type: ignore[union-attr]
    assert log.count("[appmaster] mvn package") <= 1, log[-6000:]
