"""tests/evidence.py: rows a test records on a pytest-xdist worker reach the controller, which prints the table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SAMPLE = """
import pytest
from tests.evidence import record

@pytest.mark.parametrize("i", range(4))
def test_row(i):
    record("sample table", {"case": f"case-{i}", "seen": "yes" if i % 2 else "no"})
"""


def test_rows_recorded_on_two_workers_are_all_printed_once_by_the_controller(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.evidence",
            "-n",
            "2",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_sample.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("sample table: 4 rows") == 1, result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("| case-")]
    assert sorted(r.split("|")[1].strip() for r in rows) == ["case-0", "case-1", "case-2", "case-3"], result.stdout
    assert "| case-1 | yes  |" in result.stdout
