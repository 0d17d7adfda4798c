import json

import pytest

from airflow_provider_melon.spec import JobSpec, JobSpecError, parse_size_mb


def _job(tmp_path, **over):
    (tmp_path / "code").mkdir(exist_ok=True)
    job = {
        "name": "mnist",
        "framework": "tensorflow",
        "code": str(tmp_path / "code"),
        "entrypoint": "python train.py",
        "roles": {
            "chief": {"instances": 1, "memory": "2g", "vcores": 1, "gpu_memory": "4GiB"},
            "worker": {"instances": 2, "memory": "2048m", "gpu_memory": 4096},
        },
    }
    job.update(over)
    return job


@pytest.mark.parametrize(
    "text,mb",
    [
        ("2g", 2048),
        ("2G", 2048),
        ("2GiB", 2048),
        ("512m", 512),
        ("512Mi", 512),
        ("6GB", 6144),
        (1024, 1024),
        ("1.5g", 1536),
        ("1t", 1024 * 1024),
    ],
)
def test_sizes(text, mb):
    assert parse_size_mb(text) == mb


def test_valid_spec_normalises_sizes_and_defaults(tmp_path):
    spec = JobSpec.from_dict(
        _job(
            tmp_path,
            roles={"chief": {"memory": "2g", "gpu_memory": "4GiB"}, "worker": {"instances": 2}, "ps": {"instances": 1}},
        )
    )
    assert spec.roles["chief"].memory_mb == 2048
    assert spec.roles["chief"].gpu_memory_mb == 4096
    assert spec.roles["ps"].untracked is True
    assert spec.roles["worker"].untracked is False
    assert spec.success_role == "chief"
    assert spec.task_count == 4


@pytest.mark.parametrize(
    "override,field",
    [
        ({"roles": {"chief": {"instances": 0}}}, "roles.chief.instances"),
        ({"roles": {"worker": {"instances": -1}}}, "roles.worker.instances"),
        ({"roles": {"worker": {"vcores": 0}}}, "roles.worker.vcores"),
        ({"roles": {"worker": {"gpus": 1, "gpu_memory": "4g"}}}, "roles.worker"),
        ({"roles": {"worker": {"gpus": 0}}}, "roles.worker.gpus"),
        ({"framework": "jax"}, "framework"),
        ({"roles": {"chief": {"instances": 2}}}, "roles.chief.instances"),
        ({"roles": {"worker": {"memory": "two gigs"}}}, "roles.worker.memory"),
        ({"roles": {"worker": {"gpu_memory": "-4g"}}}, "roles.worker.gpu_memory"),
        ({"code": "/definitely/not/here"}, "code"),
        ({"entrypoint": "   "}, "entrypoint"),
        ({"roles": {}}, "roles"),
        ({"roles": {"launcher": {}}}, "launcher"),
        ({"roles": {"worker": {"restarts": -1}}}, "roles.worker.restarts"),
        # optional: only an untracked role (the job waits for every tracked task)
        ({"roles": {"worker": {"optional": True}}}, "roles.worker.optional"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"name": "1bad name"}, "name"),
        ({"bogus": 1}, "bogus"),
        ({"environment": {"archive": "hdfs:///envs/e.tar.gz"}}, "environment"),
        ({"inputs": [{"path": "relative/data.csv"}]}, "inputs.0.path"),
        # staging's link names for a code folder's big files
        ({"inputs": [{"path": "hdfs:///d.bin", "name": "melon-code-file-0"}]}, "inputs.0.name"),
        ({"inputs": [{"path": "hdfs:///melon-code-file-3"}]}, "inputs.0.path"),
    ],
)
def test_invalid_inputs_name_the_field(tmp_path, override, field):
    job = _job(tmp_path)
    if "roles" in override and override["roles"]:
        job["roles"] = {**job["roles"], **override.pop("roles")}
    job.update(override)
    with pytest.raises(JobSpecError) as err:
        JobSpec.from_dict(job)
    assert field in str(err.value)


def test_pytorch_roles_and_master(tmp_path):
    spec = JobSpec.from_dict(_job(tmp_path, framework="pytorch", roles={"worker": {"instances": 2}}))
    assert spec.success_role is None
    with pytest.raises(JobSpecError, match="roles: pytorch roles"):
        JobSpec.from_dict(_job(tmp_path, framework="pytorch", roles={"chief": {}}))


def test_relative_code_resolves_against_base_dir(tmp_path):
    (tmp_path / "training").mkdir()
    spec = JobSpec.from_dict(_job(tmp_path, code="training"), base_dir=tmp_path)
    assert spec.code == str((tmp_path / "training").resolve())


def test_round_trips(tmp_path):
    spec = JobSpec.from_dict(
        _job(tmp_path, tags=["team-a"], env={"A": "1"}, inputs=[{"path": "hdfs:///data/mnist.npz"}])
    )
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert JobSpec.from_json(spec.to_json()) == spec
    assert JobSpec.from_yaml(spec.to_yaml()) == spec
    path = tmp_path / "job.yaml"
    path.write_text(spec.to_yaml())
    assert JobSpec.load(str(path)) == spec
    assert json.loads(spec.to_json())["roles"]["worker"]["gpu_memory"] == 4096


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(JobSpecError, match="not found"):
        JobSpec.load(str(tmp_path / "missing.yaml"))
    with pytest.raises(JobSpecError, match="expected a mapping"):
        JobSpec.from_dict(["not", "a", "dict"])
    with pytest.raises(JobSpecError, match="not valid JSON"):
        JobSpec.from_json("{nope")


def test_env_archive_may_be_a_local_file_to_stage():
    base = {"name": "j", "entrypoint": "python t.py", "roles": {"worker": {}}}
    spec = JobSpec.from_dict({**base, "environment": {"archive": "file:///tmp/env.tar.gz", "python": "env/bin/python"}})
    assert spec.environment.archive == "file:///tmp/env.tar.gz"
    with pytest.raises(JobSpecError, match="archive"):
        JobSpec.from_dict({**base, "environment": {"archive": "file:env.tar.gz", "python": "env/bin/python"}})


@pytest.mark.parametrize("tag", ["melon-id:0123456789abcdef", "MELON-ID:deadbeef", "  melon-id:x"])
def test_reserved_identity_tag_is_refused_naming_tags(tmp_path, tag):
    # the identity tag is the provider's alone: reattach finds a task's app by it, so a spec must not forge one
    # (YARN lower-cases tags, hence the case-insensitive match)
    with pytest.raises(JobSpecError) as err:
        JobSpec.from_dict(_job(tmp_path, tags=["team-a", tag]))
    assert "tags.1" in str(err.value)
    assert "melon-id:" in str(err.value)


@pytest.mark.parametrize("value", ["lots", "50100", "80-90", "50200-50100"])
def test_a_bad_port_range_in_env_is_refused_naming_it(tmp_path, value):
    """The AM's and the tasks' listening range: refused with the spec, not by an AM or executor on the cluster."""
    with pytest.raises(JobSpecError, match=f"env.MELON_PORT_RANGE: MELON_PORT_RANGE='{value}'"):
        JobSpec.from_dict(_job(tmp_path, env={"MELON_PORT_RANGE": value}))
    assert JobSpec.from_dict(_job(tmp_path, env={"MELON_PORT_RANGE": "50100-50200"})).env
