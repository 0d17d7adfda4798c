"""Where a benchmark's figures come from: the commit it ran at, for the first line of its output (a result in
``results/`` then names the code that made it)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ran_at() -> str:
    """``commit 1a2b3c4 (clean), 2 CPUs, Python 3.11.9``; the tree's state says whether the figures are the commit's:
    ``with uncommitted changes`` when a tracked file outside ``benchmarks/results`` differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()

    try:
        sha = git("rev-parse", "--short", "HEAD")
        # a result being written (redirected into results/) is no change to the code that makes it
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)benchmarks/results")
    except (OSError, subprocess.SubprocessError):
        return f"commit unknown (no git), {os.cpu_count()} CPUs, Python {platform.python_version()}"
    state = "with uncommitted changes" if dirty else "clean"
    return f"commit {sha} ({state}), {os.cpu_count()} CPUs, Python {platform.python_version()}"
