"""The wheel is the product: the release build's wheel (`python -m build`, from the sdist) carries the ApplicationMaster
jar; what it pulls in with no extras needs no compiler (no Kerberos library, no HDFS provider); and a provider
installed from that wheel (not editable) into a fresh venv in a temp dir outside the checkout, with only those
dependencies, submits a TensorFlow job to the mini cluster from there.

The fresh venv holds only the wheel (``--no-deps``); the distributions the wheel requires with no extras (Airflow,
hdfs, …) come from the project's venv, linked into a folder on its path (tests/integration/outside.py), so the test
does not download Airflow again (the docker/ images install the wheel with all its dependencies from PyPI). The
test asserts that the package, its AM jar and everything on ``sys.path`` lie outside the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.integration import outside

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

TF_JOB = """
import json, os
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    v = tf.Variable(1.0)
print("tf-from-wheel", tf.__version__, "replicas", strategy.num_replicas_in_sync,
      json.loads(os.environ["TF_CONFIG"])["task"], flush=True)
"""


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


#: what only the extras bring: the Kerberos libraries (kerberos; gssapi and krb5 compile against libkrb5) and the
#: HDFS provider (webhdfs; it requires hdfs[kerberos], so the same libraries)
EXTRAS_ONLY = {"gssapi", "krb5", "pyspnego", "requests-kerberos", "apache-airflow-providers-apache-hdfs"}


def test_the_wheel_with_no_extras_pulls_in_nothing_compiled_on_the_host(wheel):
    """What ``pip install <wheel>`` pulls in, followed through the installed metadata of the project venv (whose
    versions are the tested pins): none of the extras' distributions, and no distribution whose wheel pip compiled
    on this machine (a bare ``linux_*`` tag: PyPI serves Linux binaries as manylinux wheels only). The project
    venv itself has compiled ones (gssapi and krb5: its test extra brings the Kerberos libraries)."""
    dists = outside.closure(wheel)
    assert "apache-airflow-core" in dists and "hdfs" in dists, sorted(dists)
    assert not EXTRAS_ONLY & dists.keys(), sorted(EXTRAS_ONLY & dists.keys())
    compiled = {name: outside.built_here(dist) for name, dist in dists.items() if outside.built_here(dist)}
    assert not compiled, f"compiled on install (need a C compiler and headers): {compiled}"


def test_wheel_installed_provider_submits_a_tf_job_from_outside_the_checkout(
    wheel, minicluster, tmp_path_factory, jobs
):
    root = tmp_path_factory.mktemp("outside")
    assert REPO not in root.parents
    installed = outside.install(wheel, root)
    venv, py = installed.venv, installed.python

    code = root / "job"
    code.mkdir()
    (code / "tf_job.py").write_text(TF_JOB)
    spec = root / "job.json"
    spec.write_text(
        json.dumps(
            {
                "name": "tf-from-wheel",
                "framework": "tensorflow",
                "code": str(code),
                "entrypoint": "python tf_job.py",
                # the node's interpreter (with TensorFlow), as on a real cluster; the submitting client needs none
                "environment": {"python": sys.executable},
                "roles": {
                    "chief": {"memory": "1g", "gpu_memory": "1GiB"},
                    "worker": {"memory": "1g", "gpu_memory": "1GiB"},
                },
            }
        )
    )
    probe = root / "probe.py"
    probe.write_text(
        "import importlib.util, json, sys\n"
        "import airflow_provider_melon, airflow\n"
        "from airflow_provider_melon.hooks.melon import packaged_am_jar\n"
        "def importable(name):\n"
        "    try:\n"
        "        return importlib.util.find_spec(name) is not None\n"
        "    except ModuleNotFoundError:  # a parent package is missing\n"
        "        return False\n"
        "extras_only = ['gssapi', 'krb5', 'spnego', 'requests_kerberos', 'airflow.providers.apache.hdfs']\n"
        "print(json.dumps({'pkg': airflow_provider_melon.__file__, 'jar': str(packaged_am_jar()),\n"
        "                  'airflow': airflow.__version__, 'path': sys.path,\n"
        "                  'importable': [m for m in extras_only if importable(m)]}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    probed = subprocess.run([str(py), str(probe)], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    # a failure names its cause (a full run beside the docker build once lost this probe's stderr, and with it the reason)
    assert probed.returncode == 0, f"probe exited {probed.returncode}:\n{probed.stdout[-2000:]}{probed.stderr[-4000:]}"
    seen = json.loads(probed.stdout)
    assert seen["pkg"].startswith(str(venv)) and seen["jar"].startswith(str(venv)), seen
    inside = [p for p in seen["path"] if p.startswith(str(REPO))]
    assert not inside, f"paths into the checkout on sys.path: {inside}"
    # the wheel alone: neither the Kerberos libraries nor the HDFS provider (the extras) is there
    assert seen["importable"] == [], seen["importable"]

    result = subprocess.run(
        [str(venv / "bin" / "melon"), "submit", str(spec), "--work-dir", str(minicluster.work_dir), "--json"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    app_id = json.loads(result.stdout)["app_id"]
    app = jobs.wait(app_id, timeout=300)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app.get("diagnostics")

    from airflow_provider_melon.dev import minicluster as mc

    logs = "\n".join(mc.container_logs(minicluster.work_dir, app_id).values())
    assert logs.count("tf-from-wheel") == 2 and "replicas 2" in logs, logs[-3000:]
