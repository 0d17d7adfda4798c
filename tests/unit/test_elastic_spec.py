"""Elastic bounds of a role (``min_instances``) and the job's ``elastic_grace_s``: validation naming the field, and
what crosses to the AM's plan."""

from __future__ import annotations

import pytest

from airflow_provider_melon import submission
from airflow_provider_melon.spec import JobSpec, JobSpecError
from airflow_provider_melon.submission import StagedFile

RUNTIME = StagedFile("hdfs://nn:8020/c/rt.zip", 10, 111)


def job(framework="pytorch", **roles):
    return {
        "name": "elastic",
        "framework": framework,
        "entrypoint": "python train.py",
        **({"launcher": "torchrun"} if framework == "pytorch" else {}),
        "roles": roles or {"worker": {"instances": 4, "min_instances": 2}},
    }


def test_an_elastic_role_reaches_the_plan_with_its_bounds_and_the_grace():
    spec = JobSpec.from_dict({**job(), "elastic_grace_s": 15})
    assert spec.roles["worker"].elastic and spec.roles["worker"].min_instances == 2
    plan = submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})
    (worker,) = plan["roles"]
    assert (worker["instances"], worker["min_instances"]) == (4, 2)
    assert plan["elastic_grace_s"] == 15


def test_a_role_without_bounds_needs_all_its_tasks():
    spec = JobSpec.from_dict(job(worker={"instances": 3}))
    assert not spec.roles["worker"].elastic
    plan = submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})
    assert plan["roles"][0]["min_instances"] == 3
    assert plan["elastic_grace_s"] == 60  # the default


@pytest.mark.parametrize(
    "data,message",
    [
        (job(worker={"instances": 2, "min_instances": 3}), "roles.worker.min_instances: must be at most instances (2)"),
        (
            job(worker={"instances": 2, "min_instances": 0}),
            "roles.worker.min_instances: Input should be greater than 0",
        ),
        (job(worker={"instances": 2, "min_instances": "two"}), "roles.worker.min_instances: "),
        (
            job("tensorflow", worker={"instances": 3, "min_instances": 2}),
            "roles.worker.min_instances: tensorflow cannot go on with fewer workers",
        ),
        (
            job("generic", worker={"instances": 3, "min_instances": 2}, ps={"untracked": True, "min_instances": 1}),
            "roles.ps.min_instances: an untracked role cannot be elastic",
        ),
        (
            {**job(), "launcher": "python"},
            "roles.worker.min_instances: an elastic pytorch role needs launcher: torchrun",
        ),
        ({**job(), "elastic_grace_s": -1}, "elastic_grace_s: Input should be greater than or equal to 0"),
    ],
)
def test_bad_bounds_are_refused_naming_the_field(data, message):
    with pytest.raises(JobSpecError) as err:
        JobSpec.from_dict(data)
    assert message in str(err.value)


def test_generic_jobs_may_be_elastic():
    """A generic job brings its own membership (it reads MELON_CLUSTER), so it may declare bounds."""
    spec = JobSpec.from_dict(job("generic", worker={"instances": 3, "min_instances": 1}))
    assert spec.roles["worker"].min_instances == 1


def test_bounds_round_trip_through_yaml():
    spec = JobSpec.from_dict(job())
    assert JobSpec.from_yaml(spec.to_yaml()).roles["worker"].min_instances == 2


def test_torchrun_gets_the_jobs_elastic_bounds():
    """Every agent of the rendezvous is given the same bounds: the sum over the roles (a master counts once)."""
    spec = JobSpec.from_dict(job(master={}, worker={"instances": 4, "min_instances": 2}))
    env = submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})["env"]
    assert (env["MELON_TORCHRUN_NNODES"], env["MELON_TORCHRUN_MAX_RESTARTS"]) == ("3:5", "5")
    fixed = submission.build_plan(
        JobSpec.from_dict(job(worker={"instances": 2})), code=None, runtime=RUNTIME, inputs={}
    )["env"]
    assert "MELON_TORCHRUN_NNODES" not in fixed and fixed["MELON_LAUNCHER"] == "torchrun"


@pytest.mark.parametrize(
    "roles,gang",
    [
        ({"chief": {}, "worker": {"instances": 2}}, {"chief", "worker"}),  # MultiWorkerMirroredStrategy
        ({"worker": {"instances": 2}, "evaluator": {}}, {"worker"}),  # the evaluator is outside the collectives
        ({"chief": {}, "worker": {"instances": 2}, "ps": {"instances": 1}}, set()),  # ParameterServerStrategy
    ],
)
def test_a_tensorflow_collective_gang_is_restarted_whole_and_the_stall_timeout_reaches_the_plan(roles, gang):
    spec = JobSpec.from_dict({"name": "tf", "framework": "tensorflow", "entrypoint": "python t.py", "roles": roles})
    plan = submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})
    assert {r["name"] for r in plan["roles"] if r["restart_gang"]} == gang
    assert plan["stall_timeout_s"] == 900  # the default
    spec = JobSpec.from_dict({**job(), "stall_timeout_s": 0})
    plan = submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})
    assert plan["stall_timeout_s"] == 0 and not plan["roles"][0]["restart_gang"]


def test_a_master_is_a_member_like_the_others_and_an_elastic_torchrun_job_serves_its_rendezvous_beside_the_am():
    """The rendezvous store is served beside the AM (the plan's rendezvous_store, run with the job's Python), so the
    master no longer hosts it: it may declare its bounds (its one instance) like any role."""
    spec = JobSpec.from_dict(
        job(master={"instances": 1, "min_instances": 1}, worker={"instances": 3, "min_instances": 2})
    )
    plan = submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={}, default_python="/opt/py/bin/python3")
    assert plan["rendezvous_store"].startswith("/opt/py/bin/python3 -c ")
    assert (
        submission.build_plan(JobSpec.from_dict(job(worker={"instances": 2})), code=None, runtime=RUNTIME, inputs={})[
            "rendezvous_store"
        ]
        is None
    )  # not elastic: task 0 hosts it, as torchrun does


def test_the_rendezvous_store_serves_torchs_tcpstore_and_says_so_as_the_am_expects(tmp_path):
    """The plan's command, run as the AM runs it (bash, MELON_RDZV_HOST/PORT, stdin a pipe): it prints the AM's
    ready line and serves a TCPStore a client (an agent, is_host=0) uses; it ends when its stdin closes."""
    import datetime
    import os
    import subprocess
    import sys
    from pathlib import Path

    from torch.distributed import TCPStore

    from airflow_provider_melon.runtime import framework, ports

    java = (Path(__file__).parents[2] / "appmaster/am/src/main/java/org/melon/yarn/RendezvousStore.java").read_text()
    assert f'READY = "{framework.RDZV_STORE_READY}"' in java  # the line, declared once on each side, the same
    sock = ports.reserve("127.0.0.1", None)
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "MELON_RDZV_HOST": "127.0.0.1", "MELON_RDZV_PORT": str(port)}
    proc = subprocess.Popen(
        ["bash", "-c", framework.rendezvous_store_command(sys.executable)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"{framework.RDZV_STORE_READY} on 127.0.0.1:{port}"), line
        client = TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10))
        client.set("k", "v")
        assert client.get("k") == b"v"
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_where_the_ams_node_has_no_torch_the_store_says_so_and_exits_for_the_am_to_fall_back(tmp_path):
    """The AM's RendezvousStore takes its last line as the reason, and task 0's agent hosts the store, as before."""
    import os
    import subprocess
    import sys

    from airflow_provider_melon.runtime import framework

    (tmp_path / "torch.py").write_text("raise ImportError('No module named torch')\n")  # a node without torch
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "MELON_RDZV_HOST": "127.0.0.1", "MELON_RDZV_PORT": "1"}
    done = subprocess.run(
        ["bash", "-c", framework.rendezvous_store_command(sys.executable)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done
    assert done.stdout.startswith("melon-rdzv-store: no torch here ("), done.stdout
