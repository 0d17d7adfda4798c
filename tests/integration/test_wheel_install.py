"""The wheel is the product: the release build's wheel (`python -m build`, from the sdist) carries the ApplicationMaster jar, and a provider installed from that
wheel (not editable) into a fresh venv in a temp dir outside the checkout submits a TensorFlow job to the mini
cluster from there.

The fresh venv holds only the wheel (``--no-deps``); the wheel's third-party dependencies (Airflow, hdfs, …)
come from the project's venv through a ``.pth`` line, so the test does not download Airflow again (the docker/
images install the wheel with all its dependencies from PyPI). The editable install of the checkout in that
venv is a ``.pth``/finder which a ``.pth`` line does not activate: the test asserts that the package, its AM jar
and everything on ``sys.path`` but that dependency folder lie outside the checkout.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

TF_JOB = '''
import json, os
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    v = tf.Variable(1.0)
print("tf-from-wheel", tf.__version__, "replicas", strategy.num_replicas_in_sync,
      json.loads(os.environ["TF_CONFIG"])["task"], flush=True)
'''


@pytest.fixture(scope="module")
def wheel(release_dist) -> Path:
    return release_dist[0]  # the wheel CI's release build makes (tests/integration/conftest.py)


def test_the_wheel_carries_the_application_master(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "airflow_provider_melon/am/melon-appmaster.jar" in names
    jar = zipfile.ZipFile(zipfile.ZipFile(wheel).open("airflow_provider_melon/am/melon-appmaster.jar"))
    assert "org/melon/yarn/MelonApplicationMaster.class" in jar.namelist()
    # thin: our classes only, the cluster provides Hadoop
    assert not any(n.startswith("org/apache/hadoop/") for n in jar.namelist())


def test_wheel_installed_provider_submits_a_tf_job_from_outside_the_checkout(wheel, minicluster, tmp_path_factory,
                                                                              jobs):
    root = tmp_path_factory.mktemp("outside")
    assert REPO not in root.parents
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], capture_output=True,
                         text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-4000:]
    fresh_site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip()
    deps = site.getsitepackages()[0]  # the project venv's third-party packages
    (Path(fresh_site) / "melon-test-deps.pth").write_text(deps + "\n")

    code = root / "job"
    code.mkdir()
    (code / "tf_job.py").write_text(TF_JOB)
    spec = root / "job.json"
    spec.write_text(json.dumps({
        "name": "tf-from-wheel", "framework": "tensorflow", "code": str(code), "entrypoint": "python tf_job.py",
        # the node's interpreter (with TensorFlow), as on a real cluster; the submitting client needs none
        "environment": {"python": sys.executable},
        "roles": {"chief": {"memory": "1g", "gpu_memory": "1GiB"}, "worker": {"memory": "1g", "gpu_memory": "1GiB"}},
    }))
    probe = root / "probe.py"
    probe.write_text(
        "import json, sys\n"
        "import airflow_provider_melon, airflow\n"
        "from airflow_provider_melon.hooks.melon import packaged_am_jar\n"
        "print(json.dumps({'pkg': airflow_provider_melon.__file__, 'jar': str(packaged_am_jar()),\n"
        "                  'airflow': airflow.__version__, 'path': sys.path}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    probed = subprocess.run([str(py), str(probe)], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    # a failure names its cause (a full run beside the docker build once lost this probe's stderr, and with it the reason)
    assert probed.returncode == 0, f"probe exited {probed.returncode}:\n{probed.stdout[-2000:]}{probed.stderr[-4000:]}"
    seen = json.loads(probed.stdout)
    assert seen["pkg"].startswith(str(venv)) and seen["jar"].startswith(str(venv)), seen
    inside = [p for p in seen["path"] if p.startswith(str(REPO)) and p != deps]
    assert not inside, f"paths into the checkout on sys.path: {inside}"

    result = subprocess.run([str(venv / "bin" / "melon"), "submit", str(spec), "--work-dir", str(minicluster.work_dir),
                             "--json"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    app_id = json.loads(result.stdout)["app_id"]
    app = jobs.wait(app_id, timeout=300)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app.get("diagnostics")

    from airflow_provider_melon.dev import minicluster as mc

    logs = "\n".join(mc.container_logs(minicluster.work_dir, app_id).values())
    assert logs.count("tf-from-wheel") == 2 and "replicas 2" in logs, logs[-3000:]
