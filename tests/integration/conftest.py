"""One release build for the tests that check the artifacts (test_packaging.py) and install the wheel
(test_wheel_install.py): ``python -m build`` makes the sdist and, from it, the wheel, as CI's release step does.
One build, not two: each runs Maven for the AM jar inside an isolated environment (minutes on 2 cores)."""

from __future__ import annotations

import glob
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def release_dist(tmp_path_factory) -> tuple[Path, Path, str]:
    """``(wheel, sdist, build log)``."""
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], capture_output=True, text=True, timeout=1200
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:]
    [whl] = glob.glob(str(out / "airflow_provider_melon-*.whl"))
    [sdist] = glob.glob(str(out / "airflow_provider_melon-*.tar.gz"))
    return Path(whl), Path(sdist), log
