"""The provider on another supported Airflow line, against the deployment: the ``client-3.0`` compose service
(``localhost/melon-airflow-client:3.0.6``, built by docker/build.sh from docker/airflow/Dockerfile's ``client``
target) is Airflow 3.0.6 with the provider installed from the same wheel as the stack's Airflow 3.3, by ``pip install -c
compat/constraints-3.0.txt <wheel>`` (the 3.0 line's constraints, standing in for Airflow's published ones). It runs
as one-off containers on the stack's compose network (``compose --profile client run --rm --no-deps``), with the
stack's connections, and ``melon doctor --submit-test`` from it runs a real job on the stack's YARN."""

from __future__ import annotations

import json
import re

import pytest

from tests.docker.conftest import RM_URL, http_json

pytestmark = pytest.mark.docker

CLIENT = "client-3.0"

#: every check `melon doctor --submit-test` makes on this deployment (the plain doctor's, then the job's steps)
CHECKS = ["resourcemanager", "resource-types", "scheduler", "nodes", "queue", "nodemanagers", "gpu-plugin", "placement", "hdfs",
          "datanodes", "am-jar", "auth", "hadoop-java", "submit-test:stage", "submit-test:submit", "submit-test:am",
          "submit-test:containers", "submit-test:output", "submit-test:logs", "submit-test:java",
          "submit-test:pynvml", "submit-test:framework"]


def client_run(stack, *cmd: str, timeout: float = 300):
    """``cmd`` in a one-off ``client-3.0`` container on the stack's network (removed after; nothing else started)."""
    return stack.compose("--profile", "client", "run", "--rm", "--no-deps", "-T", CLIENT, *cmd, check=False,
                         timeout=timeout)


def test_the_client_is_airflow_3_0_with_the_same_provider_and_a_clean_pip_check(stack):
    probe = ("import airflow, json, importlib.metadata as m; "
             "print(json.dumps({'airflow': airflow.__version__, 'provider': m.version('airflow-provider-melon')}))")
    result = client_run(stack, "sh", "-c", f'python -c "{probe}" && pip check')
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    lines = result.stdout.strip().splitlines()
    versions = json.loads(next(line for line in lines if line.startswith("{")))
    assert versions["airflow"] == "3.0.6", versions
    assert "No broken requirements found." in lines, result.stdout
    # the same provider release as the stack's Airflow 3.3 image: both from docker/build.sh's one wheel
    on_stack = stack.exec("api-server", "python", "-c", "import airflow, importlib.metadata as m; "
                          "print(airflow.__version__, m.version('airflow-provider-melon'))").split()
    assert on_stack[0] != "3.0.6" and on_stack[1] == versions["provider"], (on_stack, versions)
    print(f"[docker] client: Airflow {versions['airflow']}, airflow-provider-melon {versions['provider']}, pip check "
          f"clean (the stack: Airflow {on_stack[0]})")


def test_doctor_submit_test_from_an_airflow_3_0_client_is_all_green(stack):
    result = client_run(stack, "melon", "doctor", "--submit-test", "--json", timeout=900)
    try:
        findings = {f["check"]: f for f in json.loads(result.stdout[result.stdout.index("["):])}
    except ValueError as exc:
        raise AssertionError(f"no JSON from melon doctor ({result.returncode}): {exc}\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}") from None
    print("[docker] melon doctor --submit-test from the Airflow 3.0.6 client:\n" + "\n".join(
        f"  {f['status'].upper():<4} {c}: {f['detail']}" for c, f in findings.items()))
    assert {c: f["status"] for c, f in findings.items()} == dict.fromkeys(CHECKS, "ok"), findings
    assert result.returncode == 0, result.stderr[-3000:]

    # the probe job really ran on the stack's YARN, as the connection's user, one task on each NodeManager
    [app_id] = re.findall(r"application_\d+_\d+", findings["submit-test:submit"]["detail"])
    app = http_json(f"{RM_URL}/ws/v1/cluster/apps/{app_id}")["app"]
    assert (app["name"], app["state"], app["finalStatus"], app["user"]) == \
        ("melon-doctor-probe", "FINISHED", "SUCCEEDED", "airflow"), app
    assert "melon-doctor" in app["applicationTags"].split(","), app["applicationTags"]
    assert "stdout of 2 task(s) read" in findings["submit-test:logs"]["detail"], findings["submit-test:logs"]
    # the scheduler plug-in packs the two probe tasks, on one NodeManager or on both: each node is either checked or
    # named as not checked, never left out silently
    pynvml = findings["submit-test:pynvml"]["detail"]
    checked = {n for n in ("nodemanager-1", "nodemanager-2") if f"{n}:45454: /opt/melon/venv/bin/python" in pynvml}
    unchecked = {n for n in ("nodemanager-1", "nodemanager-2") if f"no probe on {n}:45454: not checked there" in pynvml}
    assert checked and checked | unchecked == {"nodemanager-1", "nodemanager-2"}, pynvml
    assert "tensorflow 2." in findings["submit-test:framework"]["detail"], findings["submit-test:framework"]
