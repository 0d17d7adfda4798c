"""What `melon <command> --help` says of the default cluster: one statement, the one the code follows
(`cli.jobs.Cluster`: the Airflow connection yarn_default when installed, the embedded cluster in a checkout)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def help_of(command: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "airflow_provider_melon.cli", command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())


@pytest.mark.parametrize("command", ["doctor", "ls", "status"])
def test_the_help_names_one_default_cluster(command):
    text = help_of(command)
    defaults = re.findall(r"default:? [^.;)]*yarn_default", text)
    assert len(defaults) == 1, f"melon {command} --help names the default cluster {len(defaults)} times: {defaults}"
