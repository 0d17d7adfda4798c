"""Where a benchmark's figures come from: the commit it ran at, for the first line of its output (a result in
``results/`` then names the code that made it)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ran_at() -> str:
    """``commit 1a2b3c4 (clean), 2 CPUs, Python 3.11.9, load average 0.52 at start; command: benchmarks/x.py --y``;
    the tree's state says whether the figures are the commit's: ``with uncommitted changes`` when a tracked file
    outside ``benchmarks/results`` differs from it."""
    where = f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f} at start"
    command = " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]) if sys.argv and sys.argv[0] else "?"

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()

    try:
        sha = git("rev-parse", "--short", "HEAD")
        # a result being written (redirected into results/) is no change to the code that makes it
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)benchmarks/results")
    except (OSError, subprocess.SubprocessError):
        return f"commit unknown (no git), {where}; command: {command}"
    state = "with uncommitted changes" if dirty else "clean"
    return f"commit {sha} ({state}), {where}; command: {command}"
