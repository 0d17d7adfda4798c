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


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _bounds(properties: dict, name: str, keys=_BOUNDS) -> dict:
    field = properties[name]
    field = field["anyOf"][0] if "anyOf" in field else field  # Optional[int]: the int's
    return {k: v for k, v in field.items() if k in keys}


@pytest.mark.parametrize(
    "plan_field,spec_field,keys",
    [
        ("instances", "instances", _BOUNDS),
        ("vcores", "vcores", _BOUNDS),
        ("restarts", "restarts", _BOUNDS),
        ("min_instances", "min_instances", _BOUNDS),
        ("oom_growth", "oom_growth", _BOUNDS),
        ("oom_max_growths", "oom_max_growths", ("maximum",)),  # the plan's 0: no OOM retry (oom_retry false)
    ],
)
def test_a_plan_roles_bounds_are_the_job_specs(plan_field, spec_field, keys):
    """Bounds live in spec.py alone: the plan (and so the AM's schema check) takes them from there."""
    from airflow_provider_melon.spec import RoleSpec

    plan = json.loads(submission.PLAN_SCHEMA_PATH.read_text())["$defs"]["PlanRole"]["properties"]
    spec = RoleSpec.model_json_schema()["properties"]
    assert _bounds(plan, plan_field, keys) == _bounds(spec, spec_field, keys)


@pytest.mark.parametrize(
    "field,keys",
    [
        ("register_timeout_s", _BOUNDS),
        ("gang_hold_s", _BOUNDS),
        ("elastic_grace_s", _BOUNDS),
        ("stall_timeout_s", _BOUNDS),
        ("queue_timeout_s", ("maximum",)),  # the plan's 0: wait (the spec's None)
    ],
)
def test_a_plans_bounds_are_the_job_specs(field, keys):
    plan = json.loads(submission.PLAN_SCHEMA_PATH.read_text())["properties"]
    spec = JobSpec.model_json_schema()["properties"]
    assert _bounds(plan, field, keys) == _bounds(spec, field, keys)


def test_the_plan_has_no_defaults_of_its_own():
    """Defaults live in spec.py alone: build_plan writes every field, the schema requires each, and the AM reads
    the checked plan without defaults of its own."""
    schema = json.loads(submission.PLAN_SCHEMA_PATH.read_text())
    for part in (schema, schema["$defs"]["PlanRole"], schema["$defs"]["PlanResource"]):
        assert set(part["required"]) == set(part["properties"]), part["title"]
        assert [name for name, p in part["properties"].items() if "default" in p] == [], part["title"]


def test_the_executor_waits_for_its_gang_as_long_as_the_am(tmp_path):
    """The job's register_timeout_s (default in spec.py alone) governs the AM's gang timeout and the executor's
    wait for its gang alike."""
    (tmp_path / "code").mkdir()
    spec = JobSpec.from_dict(
        {
            "name": "slow-gang",
            "framework": "generic",
            "code": str(tmp_path / "code"),
            "entrypoint": "python t.py",
            "register_timeout_s": 900,
            "roles": {"worker": {"instances": 2}},
        }
    )
    plan = submission.build_plan(spec, code=CODE, runtime=RUNTIME, inputs={})
    assert plan["register_timeout_s"] == 900
    assert plan["env"]["MELON_REGISTER_TIMEOUT_S"] == "900"
