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
            job(master={"instances": 1, "min_instances": 1}, worker={"instances": 2}),
            "roles.master.min_instances: the master hosts the rendezvous",
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
