"""The plan contract (``submission.Plan``), declared once: the committed JSON Schema the Java AM's build reads is
the model's, every field the schema declares is written by ``build_plan``, and a plan that breaks the contract
is refused naming the field."""

from __future__ import annotations

import json

import pydantic
import pytest

from airflow_provider_melon import submission
from airflow_provider_melon.spec import JobSpec
from airflow_provider_melon.submission import StagedFile

RUNTIME = StagedFile("hdfs://nn:8020/c/rt.zip", 10, 111)
CODE = StagedFile("hdfs://nn:8020/c/code.zip", 20, 222)


def _plan(tmp_path) -> dict:
    (tmp_path / "code").mkdir()
    spec = JobSpec.from_dict(
        {
            "name": "mnist",
            "framework": "tensorflow",
            "code": str(tmp_path / "code"),
            "entrypoint": "python t.py",
            "outputs": {"model": "hdfs:///models/mnist"},
            "inputs": [{"path": "hdfs:///data/mnist.npz"}],
            "roles": {"chief": {"gpu_memory": "4g"}, "worker": {"instances": 2}, "ps": {}},
        }
    )
    return submission.build_plan(
        spec,
        code=CODE,
        runtime=RUNTIME,
        inputs={"hdfs:///data/mnist.npz": CODE},
        labels={"dag_id": "d", "map_index": -1},
        staged_urls=[RUNTIME.url, CODE.url],
        status_file="hdfs://nn:8020/user/u/.melon/apps/a/melon-status.json",
    )


def test_the_committed_schema_is_the_models():
    committed = submission.PLAN_SCHEMA_PATH.read_text()
    assert committed == submission.plan_schema_text(), (
        "am/plan.schema.json is stale: python -m airflow_provider_melon.submission --write-plan-schema"
    )


def test_every_field_of_the_schema_is_written(tmp_path):
    schema = json.loads(submission.PLAN_SCHEMA_PATH.read_text())
    plan = _plan(tmp_path)
    assert set(plan) == set(schema["properties"]) and set(schema["required"]) <= set(plan)
    role_fields = set(schema["$defs"]["PlanRole"]["properties"])
    resource_fields = set(schema["$defs"]["PlanResource"]["properties"])
    assert all(set(role) == role_fields for role in plan["roles"])
    assert plan["local_resources"] and all(set(r) == resource_fields for r in plan["local_resources"])
    assert json.loads(json.dumps(plan)) == plan  # plain JSON, as written to melon-plan.json
    assert plan["staged"] == sorted([RUNTIME.url, CODE.url])
    assert plan["status_file"].endswith("/melon-status.json")


@pytest.mark.parametrize(
    "path,value,field",
    [
        (("roles", 0, "instances"), 0, "roles.0.instances"),
        (("local_resources", 0, "visibility"), "WORLD", "local_resources.0.visibility"),
        (("gang_hold_s",), -1, "gang_hold_s"),
        (("roles", 0, "oom_growth"), 0.5, "roles.0.oom_growth"),
        (("roles", 0, "oom_max_growths"), -1, "roles.0.oom_max_growths"),
        (("surprise",), 1, "surprise"),
    ],
)
def test_a_plan_that_breaks_the_contract_is_refused_naming_the_field(tmp_path, path, value, field):
    plan = _plan(tmp_path)
    node = plan
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(pydantic.ValidationError) as err:
        submission.Plan.model_validate(plan)
    assert field in str(err.value)
