"""The docs/ site builds with Sphinx with warnings as errors, so it cannot rot: a broken include, a how-to marker
that moved, a dead cross-reference or a page left out of the toctree fails `make test`.

Also checked here: every page added to docs/ is picked up (the index's glob toctree), every `[START howto_…]`
marker of the example DAGs is shown in the docs, the configuration reference is generated from provider_info
(every declared option is on the page), and every extra key the code reads from the yarn connection is named on
the connections page."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_melon.provider_info import get_provider_info

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def sphinx_build(src: Path, out: Path) -> subprocess.CompletedProcess:
    try:
        import myst_parser  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError as exc:  # not a skip: make test must build the docs
        pytest.fail(
            f"{exc}: the docs extra is not installed (scripts/setup.sh installs '.[docs]' with -c constraints.txt)"
        )
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=src,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html")
    result = sphinx_build(DOCS, out)
    assert result.returncode == 0, f"sphinx-build -W failed:\n{result.stdout[-5000:]}\n{result.stderr[-5000:]}"
    return out


def text_of(html_file: Path) -> str:
    import html

    text = html.unescape(re.sub(r"<[^>]+>", "", html_file.read_text(encoding="utf-8")))
    return text.translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\""))  # Sphinx's smart quotes


def test_the_docs_build_without_warnings_and_every_page_is_in_the_toctree(built):
    pages = sorted(p.stem for p in DOCS.glob("*.md"))
    assert {
        "index",
        "connections",
        "operators",
        "configuration",
        "changelog",
        "security",
        "internals",
        "operations",
        "cluster-configuration",
        "ledger",
        "protocol",
    } <= set(pages)
    index = (built / "index.html").read_text(encoding="utf-8")
    for page in pages:
        assert (built / f"{page}.html").is_file(), page
        if page != "index":
            assert f'href="{page}.html"' in index, f"docs/{page}.md is not in the index's toctree"


def copy_of_the_docs(tmp_path: Path) -> Path:
    """docs/ and dags/ (the how-tos include them by relative path) side by side in a temp dir."""
    shutil.copytree(DOCS, tmp_path / "docs", ignore=shutil.ignore_patterns("_build"))
    shutil.copytree(REPO / "dags", tmp_path / "dags", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "CHANGELOG.md").write_text((REPO / "CHANGELOG.md").read_text())
    return tmp_path / "docs"


def test_a_new_page_with_a_warning_fails_the_build(tmp_path):
    docs = copy_of_the_docs(tmp_path)
    (docs / "someones-new-page.md").write_text(
        "# A new page\n\n```{literalinclude} ../dags/melon_mnist_pipeline.py\n"
        ':start-after: "[START howto_melon_no_such_marker]"\n```\n'
    )
    result = sphinx_build(docs, tmp_path / "out")
    assert result.returncode != 0
    assert "someones-new-page" in result.stderr and "howto_melon_no_such_marker" in result.stderr, result.stderr


def test_a_new_page_is_picked_up_by_the_glob_toctree(tmp_path):
    docs = copy_of_the_docs(tmp_path)
    (docs / "someones-new-page.md").write_text("# A new page\n\nWritten by another engineer.\n")
    result = sphinx_build(docs, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert 'href="someones-new-page.html"' in (tmp_path / "out" / "index.html").read_text(encoding="utf-8")


def test_every_howto_marker_of_the_example_dags_is_in_the_docs():
    markers = set()
    for dag in (REPO / "dags").glob("*.py"):
        text = dag.read_text(encoding="utf-8")
        starts = set(re.findall(r"\[START (howto_\w+)\]", text))
        assert starts == set(re.findall(r"\[END (howto_\w+)\]", text)), f"{dag.name}: unmatched START/END"
        markers |= starts
    assert markers, "no how-to markers in dags/"
    docs = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    included = set(re.findall(r':start-after: "\[START (howto_\w+)\]"', docs))
    assert markers - included == set(), f"how-to markers no docs page includes: {sorted(markers - included)}"


def test_the_configuration_reference_lists_every_declared_option(built):
    page = text_of(built / "configuration.html")
    for section, body in get_provider_info()["config"].items():
        for key, option in body["options"].items():
            assert f"[{section}] {key}" in page
            assert f"AIRFLOW__{section.upper()}__{key.upper()}" in page
            assert option["description"][:40] in page, key


def test_the_connections_page_names_every_extra_the_code_reads(built):
    read = set()
    for path in (REPO / "airflow_provider_melon").rglob("*.py"):
        read |= set(re.findall(r"""\b(?:extras?|ex)\.get\(\s*["'](\w+)["']""", path.read_text(encoding="utf-8")))
    [conn] = [c for c in get_provider_info()["connection-types"] if c["connection-type"] == "yarn"]
    assert {"auth", "fs_default_fs", "admin_acl", "run_as_owner"} <= read  # the scan works
    page = text_of(built / "connections.html")
    missing = sorted(key for key in read | set(conn["conn-fields"]) if key not in page)
    assert not missing, f"yarn connection extras the code reads but docs/connections.md does not name: {missing}"
