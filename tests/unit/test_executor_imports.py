"""The executor's import path stays small: every YARN container starts a Python that imports it, and on a node
that starts a gang at once those imports add up (``benchmarks/bench_launch.py``; figures in
``docs/development.md``). Checked by what a fresh interpreter has in ``sys.modules``, not by timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import airflow_provider_melon

ROOT = Path(airflow_provider_melon.__file__).resolve().parent.parent

#: modules the executor's start does not need, each with what pulled it in before
NOT_AT_START = {
    "urllib.request": "the AM client (http.client does) and the WebHDFS client (only the output task publishes)",
    "importlib.abc": "the package's moved-module finder (a finder by protocol needs no base class)",
    "importlib.resources": "importlib.abc",
    "importlib.util": "runtime/tensorboard.py's check for the tensorboard module (only its task runs it)",
    "pathlib": "importlib.resources",
    "uuid": "runtime/outputs.py's upload names (only the output task publishes)",
    "platform": "uuid",
}


def _modules_after(code: str) -> set[str]:
    # -S: no site, so a development install's own import hooks do not count against the executor
    code += "; import sys, json; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_executor_imports_only_what_its_start_needs():
    loaded = _modules_after("import airflow_provider_melon.runtime.executor")
    assert "airflow_provider_melon.runtime.executor" in loaded  # the check sees the real import
    extra = {name: why for name, why in NOT_AT_START.items() if name in loaded}
    assert not extra, f"the executor's start imports modules it does not need: {extra}"


def test_the_lazily_imported_paths_still_import_what_they_use():
    loaded = _modules_after(
        "from airflow_provider_melon.runtime import outputs, tensorboard; "
        "import airflow_provider_melon.runtime.amclient as a; "
        "outputs.publish({'MELON_OUTPUTS_B64': ''}, '.', print); tensorboard.missing(); "
        "a.AmClient('http://127.0.0.1:1', 's').post('/register', {})"
    )
    assert {"importlib.util", "http.client", "airflow_provider_melon.runtime.webhdfs"} <= loaded
