"""``tensorboard`` in the job spec: validation, what the plan hands the containers, the TensorBoard link and the
Jobs page's link (the executor's side: test_executor_tensorboard.py; the AM's: TensorBoardProxyTest)."""

import json

import pytest

from airflow_provider_melon import submission
from airflow_provider_melon.links import TensorBoardLink, proxied_tensorboard_url
from airflow_provider_melon.plugin import views
from airflow_provider_melon.spec import JobSpec, JobSpecError
from airflow_provider_melon.submission import StagedFile
from tests.unit.test_operator import APP, RM, app, hooks, job, make_context, make_op, pushed, yarn_conn  # noqa: F401 - fixtures: hooks, yarn_conn (autouse)

TF = {
    "name": "tb",
    "framework": "tensorflow",
    "entrypoint": "python train.py",
    "roles": {"ps": {"instances": 1}, "worker": {"instances": 2}, "chief": {"instances": 1}},
}
RUNTIME = StagedFile("hdfs://nn:8020/c/rt.zip", 10, 111)


def spec(**over) -> JobSpec:
    return JobSpec.from_dict({**TF, **over})


def plan_env(s: JobSpec) -> dict:
    return submission.build_plan(s, code=None, runtime=RUNTIME, inputs={})["env"]


@pytest.mark.parametrize(
    "over, logdir",
    [
        ({"tensorboard": True}, None),
        ({"tensorboard": "hdfs://nn:8020/tb/run-1"}, "hdfs://nn:8020/tb/run-1"),
        ({"tensorboard": True, "tensorboard_log_dir": "/shared/tb"}, "/shared/tb"),
        ({"tensorboard": "/shared/tb", "tensorboard_log_dir": "/shared/tb"}, "/shared/tb"),
    ],
)
def test_tensorboard_runs_beside_the_chief(over, logdir):
    s = spec(**over)
    assert (s.tensorboard_role, s.tensorboard_dir) == ("chief", logdir)
    env = plan_env(s)
    assert env["MELON_TENSORBOARD_TASK"] == "chief:0"
    assert env.get("MELON_TENSORBOARD_LOG_DIR") == logdir  # None: the executor makes ./tensorboard
    assert JobSpec.from_json(s.to_json()) == s and JobSpec.from_yaml(s.to_yaml()) == s


def test_without_tensorboard_nothing_starts_and_the_old_field_still_travels():
    for s in (spec(), spec(tensorboard=False), spec(tensorboard_log_dir="hdfs:///tb")):
        assert s.tensorboard_role is None and "MELON_TENSORBOARD_TASK" not in plan_env(s)
    assert plan_env(spec(tensorboard_log_dir="hdfs:///tb"))["MELON_TENSORBOARD_LOG_DIR"] == "hdfs:///tb"


@pytest.mark.parametrize(
    "roles, role",
    [
        ({"master": {}, "worker": {"instances": 2}}, "master"),
        ({"worker": {"instances": 2}}, "worker"),
    ],
)
def test_pytorch_and_generic_roles(roles, role):
    s = JobSpec.from_dict(
        {"name": "t", "framework": "pytorch", "entrypoint": "python t.py", "roles": roles, "tensorboard": True}
    )
    assert s.tensorboard_role == role
    g = JobSpec.from_dict(
        {
            "name": "g",
            "entrypoint": "python t.py",
            "tensorboard": True,
            "roles": {"ps": {}, "trainer": {"instances": 3}},
        }
    )
    assert g.tensorboard_role == "trainer"  # the first tracked role (ps is untracked)


@pytest.mark.parametrize(
    "over, message",
    [
        ({"tensorboard": ""}, "tensorboard: give true or a log dir, not an empty string"),
        ({"tensorboard": "  "}, "tensorboard: give true or a log dir"),
        (
            {"tensorboard": "/a", "tensorboard_log_dir": "/b"},
            "tensorboard: names a log dir and so does tensorboard_log_dir: give it once",
        ),
        ({"tensorboard": 3}, "tensorboard: expected true, false or a log dir (a string), got 3"),
        ({"tensorboard": ["x"]}, "tensorboard: expected true, false or a log dir"),
    ],
)
def test_bad_values_name_the_field(over, message):
    with pytest.raises(JobSpecError, match="^invalid job spec: " + message.replace("(", r"\(").replace(")", r"\)")):
        spec(**over)


def test_link_is_the_rm_proxy_unless_the_connection_names_a_tensorboard(hooks, monkeypatch):  # noqa: F811
    assert proxied_tensorboard_url("http://rm:8088/", APP) == f"http://rm:8088/proxy/{APP}/tensorboard/"
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    ctx = make_context()
    make_op(job=job(tensorboard=True)).execute(ctx)
    # the connection's template (an external TensorBoard on the log dir) wins when there is one
    assert pushed(ctx)[TensorBoardLink.xcom_key] == "http://tb:6006/#scalars&logdir=hdfs://nn:8020/tb/mnist"

    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_TEST",
        json.dumps({"conn_type": "yarn", "host": RM, "login": "alice", "extra": {"fs_default_fs": "hdfs://nn:8020"}}),
    )
    ctx = make_context()
    make_op(job=job(tensorboard=True, tensorboard_log_dir=None)).execute(ctx)
    assert pushed(ctx)[TensorBoardLink.xcom_key] == f"{RM}/proxy/{APP}/tensorboard/"
    ctx = make_context()
    make_op(job=job(tensorboard_log_dir=None)).execute(ctx)
    assert TensorBoardLink.xcom_key not in pushed(ctx)


def test_jobs_page_links_the_registered_tensorboard():
    app = {"id": "application_1_0001", "state": "RUNNING", "finalStatus": "UNDEFINED"}
    with_tb = views.job_view(
        app, {"tensorboard": {"url": "http://n1:4242", "task": "chief:0", "error": None}}, "http://rm:8088/"
    )
    assert with_tb["links"]["TensorBoard"] == "http://rm:8088/proxy/application_1_0001/tensorboard/"
    failed = views.job_view(app, {"tensorboard": {"url": None, "task": "chief:0", "error": "no module"}}, "http://rm")
    assert "TensorBoard" not in failed["links"]
    ended = views.job_view({**app, "state": "FINISHED"}, {"tensorboard": {"url": "http://n1:4242"}}, "http://rm")
    assert "TensorBoard" not in ended["links"]
