"""scripts/test_repeat.py: the flake table is built from real pytest JUnit XML, and a failure or a test missing
from a round makes the run red."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("test_repeat", REPO / "scripts" / "test_repeat.py")
repeat = importlib.util.module_from_spec(spec)
spec.loader.exec_module(repeat)

SAMPLE = """
import pytest
def test_ok(): pass
def test_bad(): assert 1 == 2, "one is not two"
@pytest.mark.skip(reason="not here")
def test_skipped(): pass
"""


def _junit(tmp_path: Path, name: str, body: str) -> Path:
    (tmp_path / f"test_{name}.py").write_text(body)
    xml = tmp_path / f"{name}.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
            str(tmp_path / f"test_{name}.py"),
        ],
        capture_output=True,
    )
    return xml


def test_outcomes_are_read_from_pytest_junit(tmp_path):
    results = repeat.parse_junit(_junit(tmp_path, "sample", SAMPLE))
    outcomes = {name.split("::")[-1]: outcome for name, (outcome, _, _) in results.items()}
    assert outcomes == {"test_ok": "passed", "test_bad": "failed", "test_skipped": "skipped"}
    [message] = [m for name, (o, _, m) in results.items() if o == "failed"]
    assert "one is not two" in message


def test_table_counts_failures_and_tests_missing_from_a_round(tmp_path):
    full = repeat.parse_junit(_junit(tmp_path, "sample", SAMPLE))
    green = {k: v for k, v in full.items() if not k.endswith("test_bad")}
    text, failed = repeat.table([green, green])
    assert failed == 0 and "test_ok" in text
    text, failed = repeat.table([full, green])  # test_bad failed in round 1 and is missing from round 2
    row = next(line for line in text.splitlines() if "test_bad" in line)
    assert failed == 2 and row.split()[1:5] == ["0", "1", "0", "1"]


def test_a_failure_is_written_down_as_it_happens(tmp_path):
    """tests/instafail.py: the report is in the file while the session still runs (a stopped round keeps it)."""
    failures = tmp_path / "failures.txt"
    (tmp_path / "test_live.py").write_text(
        "def test_bad(): assert 1 == 2, 'one is not two'\n"
        f"def test_after(): assert 'one is not two' in open({str(failures)!r}).read()\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.instafail",
            str(tmp_path / "test_live.py"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "MELON_INSTAFAIL_FILE": str(failures)},
    )
    assert "1 failed, 1 passed" in result.stdout, result.stdout + result.stderr
    assert "test_live.py::test_bad (call" in failures.read_text()


def test_rounds_on_xdist_workers_give_the_same_table(tmp_path):
    """make test-repeat runs pytest-xdist with --dist loadgroup and the groups tests/conftest.py marks: the table's
    names must be the tests' own (no worker or group in them), or rounds would not line up with each other."""
    grouped = "import pytest\npytestmark = pytest.mark.xdist_group('g')\n" + SAMPLE
    plain = repeat.parse_junit(_junit(tmp_path, "sample", SAMPLE))
    xml = tmp_path / "workers.xml"
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "test_sample.py").write_text(grouped)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            f"--junitxml={xml}",
            str(tmp_path / "w" / "test_sample.py"),
        ],
        capture_output=True,
    )
    on_workers = repeat.parse_junit(xml)
    assert {k.split("::")[-1]: v[0] for k, v in on_workers.items()} == {
        k.split("::")[-1]: v[0] for k, v in plain.items()
    }


def test_a_failure_on_a_worker_is_written_down_once(tmp_path):
    failures = tmp_path / "failures.txt"
    (tmp_path / "test_live.py").write_text("def test_bad(): assert 1 == 2, 'one is not two'\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.instafail",
            "-n",
            "2",
            str(tmp_path / "test_live.py"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "MELON_INSTAFAIL_FILE": str(failures)},
    )
    assert "1 failed" in result.stdout, result.stdout + result.stderr
    assert failures.read_text().count("test_live.py::test_bad (call") == 1


def test_the_summary_row_names_each_failed_test_and_each_rounds_minutes(tmp_path):
    full = repeat.parse_junit(_junit(tmp_path, "sample", SAMPLE))
    green = {k: v for k, v in full.items() if not k.endswith("test_bad")}
    row = repeat.summary_row(
        "20261205T0512Z", "abc1234", ["tests/e2e", "tests/faults"], 2, True, [full, green, full], [600.0, 630.0, 90.0]
    )
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == [
        "2026-12-05 05:12",
        "`abc1234`",
        "e2e faults",
        "2",
        "one core busy",
        "2: `test_bad` ×2",
        "10.0, 10.5, 1.5",
    ]
    assert (
        repeat.summary_row("20261205T0512Z", "abc1234", ["tests/unit"], 0, False, [green], [60.0]).split("|")[6].strip()
        == "0"
    )
