"""The spec's torchrun launcher (``launcher``, ``nproc_per_node``): validation naming the field, and what crosses to
the containers' environment (the executor reads ``MELON_LAUNCHER`` / ``MELON_NPROC_PER_NODE``)."""

from __future__ import annotations

import pytest

from airflow_provider_melon import submission
from airflow_provider_melon.spec import JobSpec, JobSpecError
from airflow_provider_melon.submission import StagedFile

RUNTIME = StagedFile("hdfs://nn:8020/c/rt.zip", 10, 111)


def job(framework="pytorch", roles=None, **fields):
    return {
        "name": "ddp",
        "framework": framework,
        "entrypoint": "python train.py",
        "roles": roles or {"worker": {"instances": 2}},
        **fields,
    }


def test_a_torchrun_job_tells_every_container_its_launcher():
    spec = JobSpec.from_dict(job(launcher="torchrun", nproc_per_node=2, roles={"worker": {"instances": 2, "gpus": 2}}))
    env = submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})["env"]
    assert (env["MELON_LAUNCHER"], env["MELON_NPROC_PER_NODE"]) == ("torchrun", "2")


def test_the_default_launcher_is_python_and_adds_nothing():
    spec = JobSpec.from_dict(job())
    assert (spec.launcher, spec.nproc_per_node) == ("python", 1)
    env = submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})["env"]
    assert "MELON_LAUNCHER" not in env and "MELON_NPROC_PER_NODE" not in env


@pytest.mark.parametrize(
    "data,message",
    [
        (
            job("tensorflow", launcher="torchrun"),
            "launcher: torchrun launches pytorch jobs; this job's framework is 'tensorflow'",
        ),
        (job(launcher="mpirun"), "launcher: Input should be 'python' or 'torchrun'"),
        (job(nproc_per_node=2), "nproc_per_node: several processes per container need launcher: torchrun"),
        (job(launcher="torchrun", nproc_per_node=0), "nproc_per_node: Input should be greater than 0"),
        (
            job(launcher="torchrun", nproc_per_node=2, roles={"worker": {"instances": 2, "gpu_memory": "4g"}}),
            "nproc_per_node: roles.worker shares a GPU (gpu_memory)",
        ),
        (
            job(launcher="torchrun", nproc_per_node=4, roles={"worker": {"instances": 2, "gpus": 2}}),
            "nproc_per_node: 4 processes per container, but roles.worker has 2 GPU(s)",
        ),
    ],
)
def test_bad_launcher_fields_are_named(data, message):
    with pytest.raises(JobSpecError) as err:
        JobSpec.from_dict(data)
    assert message in str(err.value)
