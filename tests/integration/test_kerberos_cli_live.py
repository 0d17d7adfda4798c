"""Kerberos from the command line, as a user would: `melon minicluster start --secure --tenants` prints export
lines; a fresh shell holding only those lines (no ticket yet: the hook must get its own before its first WebHDFS
call) runs `melon submit job.json --conn-id yarn_default --wait`, and the job succeeds as the principal's short
name, staged under /user/airflow/.melon and with its output under /user/airflow (HDFS permissions are on: the OS
user's home would be refused)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from airflow_provider_melon.dev import minicluster as mc
from tests.conftest import port_base

pytestmark = pytest.mark.integration

MELON = str(Path(sys.executable).parent / "melon")

WRITE = """import os
with open(os.path.join(os.environ["MELON_OUTPUT_RESULT"], "hello.txt"), "w") as fh:
    fh.write("written as " + os.environ.get("USER", "?"))
print("kerberos job done")
"""


def exported(lines: list[str]) -> dict[str, str]:
    """``export NAME=VALUE`` lines (shell-quoted) → the environment a shell sourcing them would have."""
    env = {}
    for line in lines:
        (assignment,) = shlex.split(line[len("export ") :])
        name, _, value = assignment.partition("=")
        env[name] = value
    return env


@pytest.fixture(scope="module")
def secure_cli_cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("melon-secure-cli")
    base = port_base("MELON_TEST_SECURE_PORT_BASE") + 100
    start = subprocess.run(
        [
            MELON,
            "minicluster",
            "start",
            "--secure",
            "--tenants",
            "--nodemanagers",
            "1",
            "--work-dir",
            str(work),
            "--port-base",
            str(base),
            "--timeout",
            "300",
        ],
        capture_output=True,
        text=True,
        timeout=420,
    )
    try:
        assert start.returncode == 0, start.stdout[-3000:] + start.stderr[-3000:]
        yield work, [line for line in start.stderr.splitlines() if line.startswith("export ")]
    finally:
        subprocess.run([MELON, "minicluster", "stop", "--work-dir", str(work)], capture_output=True, timeout=120)


def test_submit_with_only_the_printed_exports(secure_cli_cluster, tmp_path):
    work, lines = secure_cli_cluster
    details = mc.read_details(work)
    names = [line.split("=", 1)[0].removeprefix("export ") for line in lines]
    assert names == [
        "AIRFLOW_CONN_YARN_DEFAULT",
        "AIRFLOW_CONN_WEBHDFS_DEFAULT",
        "KRB5_CONFIG",
        "KRB5CCNAME",
        "AIRFLOW__CORE__SECURITY",
    ], lines
    # the launcher's readiness check logged in as airflow into that cache: a user's fresh shell has no ticket
    Path(details.ccache("airflow")).unlink(missing_ok=True)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", **exported(lines)}
    if os.environ.get("PYTHONPATH"):  # which checkout of the provider the test runs (not part of the user's shell)
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    code = tmp_path / "code"
    code.mkdir()
    (code / "write.py").write_text(WRITE)
    output = f"{details.fs_default_fs}/user/airflow/kerberos-cli/{uuid.uuid4().hex[:8]}"
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "name": "kerberos-cli",
                "framework": "generic",
                "code": str(code),
                "entrypoint": "python write.py",
                "roles": {"worker": {"instances": 1, "memory": "512m", "vcores": 1}},
                "outputs": {"result": output},
            }
        )
    )
    submit = subprocess.run(
        [MELON, "submit", str(job), "--conn-id", "yarn_default", "--wait", "--timeout", "300", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
        cwd=tmp_path,
    )
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    result = json.loads(submit.stdout[submit.stdout.index("{") :])
    assert result["final"]["user"] == "airflow", result
    assert result["final"]["final_status"] == "SUCCEEDED", result
    staged = [f["url"] for f in result["staged"].values()]
    assert staged and all(url.startswith(f"{details.fs_default_fs}/user/airflow/.melon/") for url in staged), staged
    # the output, read back with the airflow principal's ticket
    client = mc.kerberos_login(details).webhdfs_client(details.webhdfs_url.rsplit("/webhdfs/v1", 1)[0])
    path = output.split("//", 1)[1].split("/", 1)[1]
    with client.read(f"/{path}/hello.txt") as reader:
        assert reader.read().startswith(b"written as")
    assert client.status(f"/{path}")["owner"] == "airflow"
