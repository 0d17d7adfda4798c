import base64
import json

import pytest

from airflow_provider_melon import rm, submission
from airflow_provider_melon.spec import JobSpec
from airflow_provider_melon.submission import StagedFile

RUNTIME = StagedFile("hdfs://nn:8020/c/rt.zip", 10, 111)
CODE = StagedFile("hdfs://nn:8020/c/code.zip", 20, 222)
JAR = StagedFile("hdfs://nn:8020/c/am.jar", 30, 333)
PLAN = StagedFile("hdfs://nn:8020/a/plan.json", 40, 444)


@pytest.fixture
def spec(tmp_path):
    (tmp_path / "code").mkdir()
    return JobSpec.from_dict(
        {
            "name": "mnist",
            "framework": "tensorflow",
            "code": str(tmp_path / "code"),
            "entrypoint": "python train.py --epochs 2",
            "queue": "gpu",
            "priority": 3,
            "max_attempts": 2,
            "tags": ["Team-A"],
            "env": {"A": "1"},
            "outputs": {"model": "hdfs:///models/mnist"},
            "inputs": [{"path": "hdfs:///data/mnist.npz"}],
            "roles": {
                "chief": {"memory": "2g", "gpu_memory": "4g", "large": True},
                "worker": {"instances": 2, "gpus": 1, "restarts": 2},
                "ps": {"memory": 1024},
            },
        }
    )


def test_a_shared_role_holds_a_fair_slot_of_the_largest_gpu(spec):
    # an H200's 141 GiB: a large task holds half of it, a small one a quarter, whatever memory it expects; a role of
    # whole GPUs and one without GPU memory hold no slot
    spec.roles["small"] = spec.roles["chief"].model_copy(update={"large": False})
    plan = submission.build_plan(
        spec,
        code=CODE,
        runtime=RUNTIME,
        inputs={"hdfs:///data/mnist.npz": StagedFile("hdfs://nn:8020/data/mnist.npz", 50, 555)},
        largest_gpu_mb=144384,
    )
    slots = {r["name"]: r["gpu_slot_mb"] for r in plan["roles"]}
    assert slots == {"chief": 72192, "small": 36096, "worker": 0, "ps": 0}
    # a task that expects more than its share holds what it expects
    spec.roles["small"] = spec.roles["small"].model_copy(update={"gpu_memory": 50000})
    plan = submission.build_plan(
        spec,
        code=CODE,
        runtime=RUNTIME,
        inputs={"hdfs:///data/mnist.npz": StagedFile("hdfs://nn:8020/data/mnist.npz", 50, 555)},
        largest_gpu_mb=144384,
    )
    assert {r["name"]: r["gpu_slot_mb"] for r in plan["roles"]}["small"] == 50000


def test_plan_roles_resources_and_env(spec):
    data = StagedFile("hdfs://nn:8020/data/mnist.npz", 50, 555)
    plan = submission.build_plan(
        spec,
        code=CODE,
        runtime=RUNTIME,
        inputs={"hdfs:///data/mnist.npz": data},
        default_python="/opt/py/bin/python",
        container_env={"MELON_GPU_INVENTORY": "/x"},
        webhdfs_url="http://nn:9870",
        hdfs_user="alice",
        gpu_context_mb=400,
    )
    roles = {r["name"]: r for r in plan["roles"]}
    assert roles["chief"] == {
        "name": "chief",
        "instances": 1,
        "memory_mb": 2048,
        "vcores": 1,
        "gpus": 0,
        "gpu_memory_mb": 4096,
        "restarts": 0,
        "min_instances": 1,
        "tracked": True,
        "optional": False,
        "oom_growth": 1.5,
        "oom_max_growths": 2,
        "gpu_context_mb": 400,
        "gpu_slot_mb": 0,  # the cluster's GPUs unknown: no slot
        "gpu_models": [],  # any GPU
        "restart_gang": False,  # a job with ps: ParameterServerStrategy restarts a lost task alone
    }
    assert roles["worker"]["gpus"] == 1 and roles["worker"]["gpu_memory_mb"] == 0 and roles["worker"]["restarts"] == 2
    assert roles["worker"]["gpu_context_mb"] == roles["ps"]["gpu_context_mb"] == 0  # only shared roles reserve it
    assert roles["ps"]["tracked"] is False
    assert plan["success_role"] == "chief"
    assert plan["command"] == "/opt/py/bin/python -m airflow_provider_melon.runtime.executor"
    env = plan["env"]
    assert base64.b64decode(env["MELON_ENTRYPOINT_B64"]).decode() == "python train.py --epochs 2"
    assert '"' not in env["MELON_ENTRYPOINT_B64"] and "'" not in env["MELON_ENTRYPOINT_B64"]
    assert env["MELON_FRAMEWORK"] == "tensorflow"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # nothing written into the shared localized runtime and code
    assert env["MELON_LARGE_ROLES"] == "chief"
    assert env["PYTHONPATH"] == "./melon_runtime"
    assert env["A"] == "1" and env["MELON_GPU_INVENTORY"] == "/x"
    # outputs: published by the chief's task 0 (the success role) through WebHDFS as the job's user
    assert json.loads(base64.b64decode(env["MELON_OUTPUTS_B64"])) == {"model": "hdfs:///models/mnist"}
    assert (env["MELON_OUTPUT_ROLE"], env["MELON_OUTPUT_OVERWRITE"]) == ("chief", "0")
    assert plan["output_role"] == "chief"  # the AM waits for its task 0 (it publishes) before success
    assert (env["MELON_WEBHDFS_URL"], env["MELON_HDFS_USER"]) == ("http://nn:9870", "alice")
    assert env["MELON_INPUTS"] == "mnist.npz"
    local = {r["name"]: r for r in plan["local_resources"]}
    assert local["code"] == {
        "name": "code",
        "url": CODE.url,
        "type": "ARCHIVE",
        "visibility": "APPLICATION",
        "size": 20,
        "timestamp": 222,
    }
    assert local["mnist.npz"]["visibility"] == "PUBLIC" and local["mnist.npz"]["size"] == 50
    json.dumps(plan)  # serialisable as written to HDFS


def test_plan_roles_carry_the_oom_growth_of_their_spec_role(spec):
    data = spec.to_dict()
    data["roles"]["chief"].update(gpu_memory="2GiB", oom_growth=2, oom_retry=False)
    data["roles"]["worker"].pop("gpus")
    data["roles"]["worker"].update(gpu_memory="1GiB", oom_max_growths=3)
    plan = submission.build_plan(
        JobSpec.from_dict(data), code=CODE, runtime=RUNTIME, inputs={"hdfs:///data/mnist.npz": CODE}
    )
    by_name = {r["name"]: r for r in plan["roles"]}
    assert (by_name["chief"]["oom_growth"], by_name["chief"]["oom_max_growths"]) == (2.0, 0)  # oom_retry: false
    assert (by_name["worker"]["oom_growth"], by_name["worker"]["oom_max_growths"]) == (1.5, 3)
    data["roles"]["worker"].pop("gpu_memory")
    data["roles"]["worker"]["gpus"] = 1
    plan = submission.build_plan(
        JobSpec.from_dict(data), code=CODE, runtime=RUNTIME, inputs={"hdfs:///data/mnist.npz": CODE}
    )
    assert {r["name"]: r for r in plan["roles"]}["worker"]["oom_max_growths"] == 0  # whole GPUs: never grown
    data["roles"]["worker"]["gpu_memory"] = "auto"
    data["roles"]["worker"].pop("gpus")
    with pytest.raises(ValueError, match="not resolved yet"):  # auto is resolved before any plan is built
        submission.build_plan(
            JobSpec.from_dict(data), code=CODE, runtime=RUNTIME, inputs={"hdfs:///data/mnist.npz": CODE}
        )


def test_env_archive_and_docker(tmp_path, spec):
    archived = spec.model_copy(
        update={
            "environment": spec.environment.model_validate(
                {"archive": "hdfs:///envs/e.tar.gz", "python": "env/bin/python"}
            )
        }
    )
    env_file = StagedFile("hdfs://nn:8020/envs/e.tar.gz", 60, 666)
    plan = submission.build_plan(
        archived, code=CODE, runtime=RUNTIME, inputs={"hdfs:///data/mnist.npz": CODE}, env_archive=env_file
    )
    assert plan["command"].startswith("./env/bin/python -m ")
    env_res = [r for r in plan["local_resources"] if r["name"] == "env"][0]
    assert env_res["type"] == "ARCHIVE" and env_res["visibility"] == "PUBLIC"
    # one staged into the private (0700) staging folder: YARN may localize it for the application only
    private = submission.build_plan(
        archived,
        code=CODE,
        runtime=RUNTIME,
        inputs={"hdfs:///data/mnist.npz": CODE},
        env_archive=env_file,
        env_archive_visibility="APPLICATION",
    )
    assert [r["visibility"] for r in private["local_resources"] if r["name"] == "env"] == ["APPLICATION"]

    docker = spec.model_copy(update={"environment": spec.environment.model_validate({"docker_image": "tf:2.21"})})
    plan = submission.build_plan(docker, code=CODE, runtime=RUNTIME, inputs={"hdfs:///data/mnist.npz": CODE})
    assert plan["env"]["YARN_CONTAINER_RUNTIME_TYPE"] == "docker"
    assert plan["env"]["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"] == "tf:2.21"


def test_submission_context(spec):
    ctx = submission.build_submission(
        spec,
        app_id="application_1_0001",
        am_jar=JAR,
        plan=PLAN,
        secret="s3cr3t",
        tags=submission.airflow_tags("dag", "train", "manual__1", 3),
        am_classpath="/conf:/jars/*",
    )
    assert ctx["application-id"] == "application_1_0001"
    assert ctx["queue"] == "gpu" and ctx["priority"] == 3 and ctx["max-app-attempts"] == 2
    assert ctx["application-type"] == "MELON"
    tags = ctx["application-tags"]["tag"]
    assert "team-a" in tags and "melon" in tags and "airflow-task:train" in tags and "airflow-map:3" in tags
    assert any(t.startswith("airflow-run:") for t in tags)
    spec_am = ctx["am-container-spec"]
    entries = {e["key"]: e["value"] for e in spec_am["local-resources"]["entry"]}
    assert entries["melon-appmaster.jar"] == {
        "resource": JAR.url,
        "type": "FILE",
        "visibility": "APPLICATION",
        "size": 30,
        "timestamp": 333,
    }
    env = {e["key"]: e["value"] for e in spec_am["environment"]["entry"]}
    assert env["CLASSPATH"] == "./melon-appmaster.jar<CPS>/conf:/jars/*"
    # the secret travels as a credentials secret, never in the (launch-script-visible) environment
    assert "MELON_SECRET" not in env
    secret = {e["key"]: e["value"] for e in spec_am["credentials"]["secrets"]["entry"]}
    assert base64.b64decode(secret["melon.am.secret"]) == b"s3cr3t"
    assert "s3cr3t" not in spec_am["commands"]["command"]  # the secret is never on a command line
    assert spec_am["commands"]["command"].startswith("{{JAVA_HOME}}/bin/java ")


def test_the_am_gets_the_view_acl_for_its_own_pages_only_when_acls_are_set(spec):
    kw = dict(app_id="application_1_0001", am_jar=JAR, plan=PLAN, secret="s3cr3t", tags=[])

    def am_env(ctx):
        return {e["key"]: e["value"] for e in ctx["am-container-spec"]["environment"]["entry"]}

    # what MelonHook.submit passes for alice with admin_acl " melon-admins"
    acls = submission.application_acls("alice", " melon-admins")
    env = am_env(submission.build_submission(spec, acls=acls, **kw))
    assert env[submission.VIEW_ACL_ENV] == "alice melon-admins" == acls["VIEW_APP"]
    assert set(env) == {"CLASSPATH", "MELON_VIEW_ACL", rm.PLACEMENT_ENV}  # MODIFY_APP stays with the RM
    # no ACLs asked for: no variable, and the AM allows only the owner and the YARN admins (as the RM)
    assert set(am_env(submission.build_submission(spec, **kw))) == {"CLASSPATH", rm.PLACEMENT_ENV}
    # YARN writes it into launch_container.sh inside double quotes: shell characters are escaped
    odd = am_env(submission.build_submission(spec, acls={"VIEW_APP": 'a$b,"c" g', "MODIFY_APP": "a"}, **kw))
    assert odd[submission.VIEW_ACL_ENV] == 'a\\$b,\\"c\\" g'


def test_run_tag_is_stable_and_short():
    assert submission.run_tag("scheduled__2026-01-01T00:00:00+00:00") == submission.run_tag(
        "scheduled__2026-01-01T00:00:00+00:00"
    )
    assert submission.run_tag("a") != submission.run_tag("b")
    assert len(submission.run_tag("x" * 500)) < 100


def test_code_files_are_localized_beside_the_archive_and_mapped_for_the_executor(spec):
    big = StagedFile("hdfs://nn:8020/c/9f/code-file", 70, 777)
    other = StagedFile("hdfs://nn:8020/c/aa/code-file", 80, 888)
    plan = submission.build_plan(
        spec,
        code=CODE,
        runtime=RUNTIME,
        inputs={"hdfs:///data/mnist.npz": CODE},
        code_files={"weights/init.pt": big, "data/train.bin": other},
    )
    local = {r["name"]: r for r in plan["local_resources"]}
    assert local["melon-code-file-0"] == {
        "name": "melon-code-file-0",
        "url": other.url,
        "type": "FILE",
        "visibility": "APPLICATION",
        "size": 80,
        "timestamp": 888,
    }
    assert local["melon-code-file-1"]["url"] == big.url
    mapping = json.loads(base64.b64decode(plan["env"]["MELON_CODE_FILES_B64"]))
    assert mapping == {"melon-code-file-0": "data/train.bin", "melon-code-file-1": "weights/init.pt"}
    plain = submission.build_plan(spec, code=CODE, runtime=RUNTIME, inputs={"hdfs:///data/mnist.npz": CODE})
    assert "MELON_CODE_FILES_B64" not in plain["env"]
    assert not any(r["name"].startswith("melon-code-file-") for r in plain["local_resources"])


def test_deployment_id_is_what_every_worker_of_a_deployment_shares_and_another_deployment_does_not(monkeypatch):
    """A worker's task process may not read the metadata DB's address (Airflow 3 replaces it with
    ``airflow-db-not-allowed:///``), so the identity cannot come from it: two deployments would share it."""
    for key in ("AIRFLOW__MELON__DEPLOYMENT_ID", "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "AIRFLOW__API__BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    # Airflow imported first, as in a worker (run alone, this file would import it with the address below, which
    # Airflow's own start-up cannot parse); its configuration is read from the environment at each get
    pytest.importorskip("airflow.configuration")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "airflow-db-not-allowed:///")
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "http://airflow-dev:8080/execution/")
    dev = submission.deployment_id()
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "http://airflow-prod:8080/execution/")
    prod = submission.deployment_id()
    assert dev != prod and dev.startswith("api-")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://airflow@db/airflow")  # the scheduler's
    assert submission.deployment_id() == prod  # the same in a process that may read the DB
    monkeypatch.setenv("AIRFLOW__MELON__DEPLOYMENT_ID", "prod-eu")
    assert submission.deployment_id() == "prod-eu"
    assert submission.identity_tag("prod-eu", "d", "t", "r") != submission.identity_tag("dev", "d", "t", "r")


def test_a_job_with_gpus_asks_the_rm_for_the_gpu_fit_allocator(spec, tmp_path):
    """The RM copies the AM container's environment into the application's scheduling environment, where YARN's
    ``APPLICATION_PLACEMENT_TYPE_CLASS`` names the allocator of its asks: the plug-in's, for a job with GPUs; a job
    without GPUs keeps YARN's default."""
    kw = dict(app_id="application_1_0001", am_jar=JAR, plan=PLAN, secret="s3cr3t", tags=[])

    def am_env(ctx):
        return {e["key"]: e["value"] for e in ctx["am-container-spec"]["environment"]["entry"]}

    assert am_env(submission.build_submission(spec, **kw))[rm.PLACEMENT_ENV] == rm.FIT_PLACEMENT
    cpu = JobSpec.from_dict(
        {
            "name": "etl",
            "framework": "generic",
            "code": str(tmp_path / "code"),
            "entrypoint": "python x.py",
            "roles": {"worker": {"instances": 2}},
        }
    )
    assert rm.PLACEMENT_ENV not in am_env(submission.build_submission(cpu, **kw))
    # a job that names GPU models asks through placement constraints (SchedulingRequests), which YARN matches with
    # its own constraint allocator whatever the environment names: the job does not claim the plug-in's check
    modelled = spec.model_copy(
        update={"roles": {"worker": spec.roles["worker"].model_copy(update={"gpu_models": ["A100"]})}}
    )
    assert rm.PLACEMENT_ENV not in am_env(submission.build_submission(modelled, **kw))


def test_a_bad_port_range_in_the_connections_container_env_is_refused_naming_it(spec):
    spec = spec.model_copy(update={"inputs": []})
    with pytest.raises(ValueError, match="the yarn connection's container_env MELON_PORT_RANGE='lots'"):
        submission.build_plan(spec, code=CODE, runtime=RUNTIME, inputs={}, container_env={"MELON_PORT_RANGE": "lots"})
    env = {"MELON_PORT_RANGE": "50100-50200"}
    plan = submission.build_plan(spec, code=CODE, runtime=RUNTIME, inputs={}, container_env=env)
    assert plan["env"]["MELON_PORT_RANGE"] == "50100-50200"  # the AM reads it there, as its tasks get it
