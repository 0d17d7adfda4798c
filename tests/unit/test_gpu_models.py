"""GPU models: a role names the models it accepts (``roles.<r>.gpu_models``), the plan carries them to the AM, and
pre-flight refuses a model no node publishes, or a cluster whose scheduler cannot place by node attribute."""

from __future__ import annotations

import pytest

from airflow_provider_melon import submission
from airflow_provider_melon.spec import JobSpec, JobSpecError
from airflow_provider_melon.submission import StagedFile

RUNTIME = StagedFile("hdfs://nn:8020/c/rt.zip", 10, 111)


def _job(**worker):
    return {"name": "j", "framework": "generic", "entrypoint": "python t.py", "roles": {"worker": worker}}


# ---- the spec field ----------------------------------------------------------------------------------------------


def test_a_role_that_asks_for_gpus_names_the_models_it_accepts():
    exclusive = JobSpec.from_dict(_job(gpus=1, gpu_models=["A100", "H100"]))
    shared = JobSpec.from_dict(_job(gpu_memory="4g", gpu_models=["T4"]))
    assert exclusive.roles["worker"].gpu_models == ["A100", "H100"]
    assert shared.roles["worker"].gpu_models == ["T4"]
    assert JobSpec.from_dict(_job(gpus=1)).roles["worker"].gpu_models is None  # any GPU
    # YAML round trip keeps them
    assert JobSpec.from_yaml(exclusive.to_yaml()).roles["worker"].gpu_models == ["A100", "H100"]


@pytest.mark.parametrize(
    "worker,message",
    [
        ({"gpu_models": ["A100"]}, "roles.worker.gpu_models: only a role that asks for GPUs"),
        ({"memory": "2g", "gpu_models": ["A100"]}, "add gpus (whole GPUs) or gpu_memory"),
        ({"gpus": 1, "gpu_models": []}, "roles.worker.gpu_models: name at least one GPU model"),
        ({"gpus": 1, "gpu_models": ["A 100"]}, "roles.worker.gpu_models.0: 'A 100' cannot be a GPU model"),
        ({"gpus": 1, "gpu_models": ["A100", "-x"]}, "roles.worker.gpu_models.1: '-x' cannot be a GPU model"),
        ({"gpus": 1, "gpu_models": ["A100", "A100"]}, "roles.worker.gpu_models.1: 'A100' is named twice"),
        ({"gpus": 1, "gpu_models": ["A" * 256]}, "roles.worker.gpu_models.0"),
        ({"gpus": 1, "gpu_models": "A100"}, "roles.worker.gpu_models: Input should be a valid list"),
        ({"gpus": 1, "gpu_models": [3]}, "roles.worker.gpu_models.0: Input should be a valid string"),
    ],
)
def test_invalid_gpu_models_name_the_field(worker, message):
    with pytest.raises(JobSpecError) as err:
        JobSpec.from_dict(_job(**worker))
    assert message in str(err.value)


# ---- the plan ----------------------------------------------------------------------------------------------------


def _plan(spec: JobSpec) -> dict:
    return submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})


def test_the_plan_carries_each_roles_models_and_none_for_any_gpu():
    spec = JobSpec.from_dict(
        {
            "name": "j",
            "framework": "tensorflow",
            "entrypoint": "python t.py",
            "roles": {"chief": {"gpus": 1, "gpu_models": ["A100", "H100"]}, "worker": {"gpu_memory": "2g"}},
        }
    )
    roles = {r["name"]: r for r in _plan(spec)["roles"]}
    assert roles["chief"]["gpu_models"] == ["A100", "H100"]
    assert roles["worker"]["gpu_models"] == []  # any GPU: the AM asks as before (a ResourceRequest)


def test_the_plan_refuses_a_model_yarn_cannot_carry():
    import pydantic

    plan = _plan(JobSpec.from_dict(_job(gpus=1, gpu_models=["A100"])))
    plan["roles"][0]["gpu_models"] = ["A 100"]
    with pytest.raises(pydantic.ValidationError) as err:
        submission.Plan.model_validate(plan)
    assert "roles.0.gpu_models.0" in str(err.value)
