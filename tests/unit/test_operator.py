"""MelonTrainOperator: validation before HTTP, gpu_memory override, tags, reattach, XCom/links, completion,
kill, the synchronous poll loop and the ResumableJobMixin path.

MelonHook (staging + submit, AM status) and YarnHook (RM) are mocked at their public methods — they are
tested on their own, against requests_mock and the real cluster. The ``yarn_test`` connection comes from an
``AIRFLOW_CONN_*`` variable, as in a deployment.
"""

from __future__ import annotations

import json
import textwrap
from datetime import timedelta
from unittest import mock

import pytest
import requests_mock as rm_mock

from airflow_provider_melon.hadoop import memory_history
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.hadoop.hdfs_io import hdfs_asset_uri
from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hooks.melon import MelonHook
from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.links import MelonAmStatusLink, TensorBoardLink, YarnApplicationLink
from airflow_provider_melon.operators.train import MelonTrainOperator
from airflow_provider_melon.spec import IDENTITY_TAG_PREFIX, JobSpec, JobSpecError
from airflow_provider_melon.submission import airflow_tags, deployment_id
from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger
from airflow_provider_melon.version_compat import RESUMABLE_JOBS, AirflowException

#: Airflow 3.3's task state store (ResumableJobMixin): below 3.3 there is none, so nothing is stored or read there
needs_state_store = pytest.mark.skipif(not RESUMABLE_JOBS, reason="Airflow < 3.3: no task state store")

RM = "http://rm:8088"
APP = "application_1700000000000_0042"
DAG_ID, TASK_ID, RUN_ID = "train_dag", "train", "manual__2026-01-01T00:00:00+00:00"
TAGS = airflow_tags(DAG_ID, TASK_ID, RUN_ID, -1, deployment=deployment_id())
IDENTITY = [t for t in TAGS if t.startswith(IDENTITY_TAG_PREFIX)]  # the one tag reattach looks up


def job(**over):
    spec = {
        "name": "mnist",
        "framework": "tensorflow",
        "entrypoint": "python train.py",
        "roles": {
            "chief": {"instances": 1, "memory": "2g", "gpu_memory": "4GiB"},
            "worker": {"instances": 2, "memory": "2g", "gpu_memory": "4GiB"},
            "ps": {"instances": 1, "memory": "1g"},
        },
        "outputs": {"model": "hdfs://nn:8020/models/mnist", "metrics": "/user/alice/metrics", "local": "file:///x"},
        "tensorboard_log_dir": "hdfs://nn:8020/tb/mnist",
    }
    spec.update(over)
    return spec


def app(state, final="UNDEFINED", app_id=APP, diagnostics="", started=1_000, user="alice", type_="MELON", tags=TAGS):
    out = {
        "id": app_id,
        "state": state,
        "finalStatus": final,
        "diagnostics": diagnostics,
        "startedTime": started,
        "trackingUrl": f"{RM}/proxy/{app_id}/",
        "elapsedTime": 0,
        "finishedTime": 0,
        "user": user,
        "applicationType": type_,
        "applicationTagList": [t.lower() for t in tags],
    }
    if state in TERMINAL_STATES:
        out.update(elapsedTime=61_000, finishedTime=started + 61_000)
    return out


@pytest.fixture(autouse=True)
def yarn_conn(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_TEST",
        json.dumps(
            {
                "conn_type": "yarn",
                "host": RM,
                "login": "alice",
                "extra": {
                    "fs_default_fs": "hdfs://nn:8020",
                    "tensorboard_url": "http://tb:6006/#scalars&logdir={logdir}",
                },
            }
        ),
    )


class FakeStore:
    """The task state store's get/set surface (Airflow 3.3 ``context["task_state_store"]``)."""

    def __init__(self, **values):
        self.values = dict(values)

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value, **kw):
        self.values[key] = value


def make_context(store=None):
    ti = mock.Mock(dag_id=DAG_ID, task_id=TASK_ID, run_id=RUN_ID, map_index=-1, stats_tags={})
    ctx = {"ti": ti, "run_id": RUN_ID}
    if store is not None:
        ctx["task_state_store"] = store
    return ctx


def pushed(ctx) -> dict:
    return {c.kwargs["key"]: c.kwargs["value"] for c in ctx["ti"].xcom_push.call_args_list}


def make_op(**kw):
    kw.setdefault("task_id", TASK_ID)
    kw.setdefault("job", job())
    kw.setdefault("yarn_conn_id", "yarn_test")
    kw.setdefault("deferrable", False)
    kw.setdefault("poll_interval", 5)
    return MelonTrainOperator(**kw)


REAL_SLEEP = MelonTrainOperator._sleep  # the product's poll sleep, before the fixture mocks it


@pytest.fixture
def hooks():
    """Public hook methods mocked (autospec: a wrong signature fails the test)."""
    with (
        mock.patch.object(
            MelonHook, "submit", autospec=True, return_value={"app_id": APP, "staging": None, "plan": {}}
        ) as submit,
        mock.patch.object(MelonHook, "am_status", autospec=True, return_value=None) as am_status,
        mock.patch.object(MelonHook, "final_status", autospec=True, return_value=None) as final_status,
        mock.patch.object(YarnHook, "find_applications", autospec=True, return_value=[]) as find,
        mock.patch.object(YarnHook, "get_application", autospec=True) as get_app,
        mock.patch.object(YarnHook, "kill_application", autospec=True, return_value={}) as kill,
        mock.patch.object(YarnHook, "get_state", autospec=True, return_value="KILLED") as get_state,
        mock.patch.object(YarnHook, "nodes", autospec=True, return_value=[]),
        mock.patch.object(MelonHook, "file_status", autospec=True, return_value={"type": "DIRECTORY"}) as file_status,
        # the task's run history in HDFS (priority: auto reads it before each submission): none yet
        mock.patch.object(MelonHook, "hdfs", new_callable=mock.PropertyMock, return_value=mock.Mock()),
        mock.patch.object(memory_history, "read_history", autospec=True, return_value=[]),
        mock.patch.object(MelonTrainOperator, "_sleep", autospec=True) as sleep,
    ):
        yield mock.Mock(
            submit=submit,
            am_status=am_status,
            final_status=final_status,
            find=find,
            get_app=get_app,
            kill=kill,
            sleep=sleep,
            file_status=file_status,
            get_state=get_state,
        )


# ---------------------------------------------------------------------------------------------- construction


def test_poll_interval_below_minimum_is_an_error():
    with pytest.raises(ValueError, match="poll_interval must be at least 5 seconds, got 4"):
        make_op(poll_interval=4)


def test_defaults_and_template_fields():
    op = make_op()
    assert op.template_fields == ("job", "gpu_memory", "run_as", "yarn_queue", "memory_key")
    assert op.cancel_on_kill is True and op.stream_logs is True
    assert op.deferrable is False
    assert {type(link) for link in op.operator_extra_links} == {YarnApplicationLink, MelonAmStatusLink, TensorBoardLink}
    # a literal job's fully qualified hdfs:// outputs are outlets from parse time on
    assert [a.uri for a in op.outlets] == ["hdfs://nn:8020/models/mnist"]


def test_deferrable_default_follows_config(monkeypatch):
    import importlib

    import airflow_provider_melon.operators.train as train_mod

    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "true")
    try:
        reloaded = importlib.reload(train_mod)
        op = reloaded.MelonTrainOperator(task_id="t", job=job(), yarn_conn_id="yarn_test")
        assert op.deferrable is True
    finally:
        monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE")
        importlib.reload(train_mod)


# ---------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "bad_job,field",
    [
        (job(roles={"chief": {"instances": 0}}), "roles.chief.instances"),
        (job(roles={"chief": {"gpus": 1, "gpu_memory": "2g"}}), "roles.chief"),
        (job(roles={"master": {"instances": 1}}), "roles"),
        ({k: v for k, v in job().items() if k != "entrypoint"}, "entrypoint"),
    ],
)
def test_invalid_spec_fails_before_any_http_call(bad_job, field):
    op = make_op(job=bad_job)
    with rm_mock.Mocker() as m:  # no URL registered: any HTTP call would raise NoMockAddress
        with pytest.raises(JobSpecError, match=field.replace(".", r"\.")):
            op.execute(make_context())
        assert m.call_count == 0


def test_invalid_gpu_memory_override_names_the_field_before_http():
    op = make_op(gpu_memory="plenty")
    with rm_mock.Mocker() as m:
        with pytest.raises(JobSpecError, match=r"roles\.chief\.gpu_memory"):
            op.execute(make_context())
        assert m.call_count == 0


# ---------------------------------------------------------------------------------------------- spec loading


def test_gpu_memory_override_applies_to_shared_roles_only(hooks):
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    make_op(gpu_memory="6144").execute(make_context())
    spec = hooks.submit.call_args.args[1]
    assert spec.roles["chief"].gpu_memory_mb == 6144
    assert spec.roles["worker"].gpu_memory_mb == 6144
    assert spec.roles["ps"].gpu_memory is None


@pytest.mark.parametrize("value", [None, "", "None"])
def test_empty_gpu_memory_override_keeps_the_spec(hooks, value):
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    make_op(gpu_memory=value).execute(make_context())
    assert hooks.submit.call_args.args[1].roles["chief"].gpu_memory_mb == 4096


def test_yaml_path_relative_to_the_dag_folder(tmp_path, hooks):
    from airflow.sdk import DAG

    (tmp_path / "training" / "mnist").mkdir(parents=True)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "mnist.yaml").write_text(
        textwrap.dedent("""\
        name: mnist
        framework: tensorflow
        code: training/mnist
        entrypoint: python train.py
        roles:
          worker: {instances: 2, gpu_memory: 2g}
        """)
    )
    dag_file = tmp_path / "dag.py"
    dag_file.write_text("# the DAG file\n")
    with DAG("d") as dag:
        op = make_op(job="jobs/mnist.yaml", gpu_memory="3g")
    dag.fileloc = str(dag_file)
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    op.execute(make_context())
    spec = hooks.submit.call_args.args[1]
    assert spec.code == str((tmp_path / "training" / "mnist").resolve())
    assert spec.roles["worker"].gpu_memory_mb == 3072


def test_jobspec_instance_accepted(hooks):
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    spec = JobSpec.from_dict(job())
    make_op(job=spec).execute(make_context())
    submitted = hooks.submit.call_args.args[1]
    # the spec as given, each shared role with the context reserve the hook resolved for it (its first run's here)
    assert submitted.model_dump(exclude={"roles"}) == spec.model_dump(exclude={"roles"})
    for name, role in spec.roles.items():
        assert submitted.roles[name].model_dump(exclude={"gpu_context"}) == role.model_dump(exclude={"gpu_context"})
        assert (submitted.roles[name].gpu_context is not None) == bool(role.gpu_memory)


# ---------------------------------------------------------------------------------------------- submit + XCom


def test_deferrable_submit_pushes_xcom_and_links_then_defers(hooks):
    from airflow_provider_melon.version_compat import TaskDeferred

    hooks.get_app.return_value = app("ACCEPTED")
    ctx = make_context()
    op = make_op(deferrable=True, timeout=timedelta(hours=2), cancel_on_kill=False, poll_interval=15)
    with mock.patch("airflow_provider_melon.operators.train.time.time", return_value=1_000_000.0):
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(ctx)
    hooks.submit.assert_called_once()
    assert hooks.submit.call_args.kwargs["tags"] == TAGS
    # the task instance rides along in the plan, for the UI plugin (the AM echoes it in /status)
    assert hooks.submit.call_args.kwargs["labels"] == {
        "dag_id": DAG_ID,
        "task_id": TASK_ID,
        "run_id": RUN_ID,
        "map_index": -1,
    }
    hooks.find.assert_called_once_with(mock.ANY, IDENTITY, match_all=True)
    xcom = pushed(ctx)
    assert xcom["app_id"] == APP
    assert xcom["tracking_url"] == f"{RM}/proxy/{APP}/"
    assert xcom["am_status_url"] == f"{RM}/proxy/{APP}/"
    assert xcom[YarnApplicationLink.xcom_key] == f"{RM}/cluster/app/{APP}"
    assert xcom[MelonAmStatusLink.xcom_key] == f"{RM}/proxy/{APP}/"
    assert xcom[TensorBoardLink.xcom_key] == "http://tb:6006/#scalars&logdir=hdfs://nn:8020/tb/mnist"
    trig = deferred.value.trigger
    assert isinstance(trig, YarnApplicationTrigger)
    kwargs = trig.serialize()[1]
    assert kwargs["app_id"] == APP and kwargs["yarn_conn_id"] == "yarn_test"
    assert kwargs["deadline"] == 1_000_000.0 + 7200
    assert kwargs["cancel_on_kill"] is False and kwargs["poll_interval"] == 15.0
    assert kwargs["last_state"] == "ACCEPTED"
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.kwargs["roles"] == {"chief": 1, "worker": 2, "ps": 1}
    assert deferred.value.kwargs["outputs"]["model"] == "hdfs://nn:8020/models/mnist"


def test_no_tensorboard_link_without_logdir(hooks):
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    ctx = make_context()
    make_op(job=job(tensorboard_log_dir=None)).execute(ctx)
    assert TensorBoardLink.xcom_key not in pushed(ctx)


def test_deferrable_checks_state_before_deferring(hooks):
    hooks.get_app.return_value = app("FINISHED", "FAILED", diagnostics="gang registration timed out")
    with pytest.raises(AirflowException, match="gang registration timed out"):
        make_op(deferrable=True).execute(make_context())


# ---------------------------------------------------------------------------------------------- reattach


def test_live_app_found_by_tags_is_attached_not_submitted(hooks):
    from airflow_provider_melon.version_compat import TaskDeferred

    hooks.find.return_value = [
        app("RUNNING", app_id="application_1_0009", started=9_000),
        app("FAILED", "FAILED", app_id="application_1_0003", started=3_000),
    ]
    ctx = make_context()
    with pytest.raises(TaskDeferred) as deferred:
        make_op(deferrable=True).execute(ctx)
    hooks.submit.assert_not_called()
    assert deferred.value.trigger.app_id == "application_1_0009"
    assert pushed(ctx)["app_id"] == "application_1_0009"


def test_succeeded_app_found_by_tags_returns_result_without_submit(hooks):
    hooks.find.return_value = [app("FINISHED", "SUCCEEDED")]
    ctx = make_context()
    result = make_op(deferrable=True).execute(ctx)  # no TaskDeferred: finished already
    hooks.submit.assert_not_called()
    assert result["app_id"] == APP and result["final_status"] == "SUCCEEDED"
    assert result["outputs"]["model"] == "hdfs://nn:8020/models/mnist"


@pytest.mark.parametrize("old", [app("FINISHED", "FAILED"), app("KILLED", "KILLED"), app("FAILED", "FAILED")])
def test_failed_or_killed_app_found_by_tags_is_resubmitted(hooks, old):
    hooks.find.return_value = [dict(old, id="application_1_0001")]
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    result = make_op().execute(make_context())
    hooks.submit.assert_called_once()
    assert result["app_id"] == APP


def test_reattach_off_always_submits(hooks):
    hooks.find.return_value = [app("FINISHED", "SUCCEEDED", app_id="application_1_0001")]
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    make_op(reattach=False).execute(make_context())
    hooks.find.assert_not_called()
    hooks.submit.assert_called_once()


def test_map_index_is_part_of_the_identity(hooks):
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    ctx = make_context()
    ctx["ti"].map_index = 3
    make_op().execute(ctx)
    mapped = airflow_tags(DAG_ID, TASK_ID, RUN_ID, 3, deployment=deployment_id())
    assert hooks.find.call_args.args[1] == [mapped[1]]
    assert hooks.submit.call_args.kwargs["tags"] == mapped


def on_cluster(hooks, *apps):
    """The RM's tag filter over ``apps`` (what YarnHook.find_applications answers: every tag, lower-cased)."""
    hooks.find.side_effect = lambda self, tags, states=None, match_all=False, application_type=None: [
        a for a in apps if {t.lower() for t in tags} <= set(a["applicationTagList"])
    ]


def context_for(task_id, run_id=RUN_ID, store=None):
    ctx = make_context(store)
    ctx["ti"].task_id, ctx["ti"].run_id, ctx["run_id"] = task_id, run_id, run_id
    return ctx


LONG = "section_" * 11  # 88 characters: task-group ids that share them get the same cut airflow-task: tag


@pytest.mark.parametrize("first,second", [(LONG + "prepare.train", LONG + "evaluate.train"), ("Train", "train")])
def test_other_task_with_the_same_readable_tags_is_not_reattached_to(hooks, first, second):
    other = app(
        "FINISHED",
        "SUCCEEDED",
        app_id="application_1_0001",
        tags=airflow_tags(DAG_ID, first, RUN_ID, deployment=deployment_id()),
    )
    assert set(other["applicationTagList"]) >= {t.lower() for t in airflow_tags(DAG_ID, second, RUN_ID)[2:]}
    on_cluster(hooks, other)
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    result = make_op(task_id=second).execute(context_for(second))
    hooks.submit.assert_called_once()
    assert result["app_id"] == APP


def test_the_same_task_instance_of_another_deployment_is_not_reattached_to(hooks, monkeypatch):
    monkeypatch.setenv("AIRFLOW__MELON__DEPLOYMENT_ID", "prod")
    prod = app("RUNNING", app_id="application_1_0001", tags=airflow_tags(DAG_ID, TASK_ID, RUN_ID, deployment="prod"))
    on_cluster(hooks, prod)
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    assert make_op().execute(make_context())["app_id"] == "application_1_0001"  # prod's own retry reattaches
    hooks.submit.assert_not_called()
    monkeypatch.setenv("AIRFLOW__MELON__DEPLOYMENT_ID", "dev")
    assert make_op().execute(make_context())["app_id"] == APP  # dev, same dag/task/run: its own app
    hooks.submit.assert_called_once()
    assert hooks.submit.call_args.kwargs["tags"][1] != prod["applicationTagList"][1]


@pytest.mark.parametrize(
    "planted,why",
    [
        (
            app("FINISHED", "SUCCEEDED", app_id="application_1_0001", user="bob"),
            "it belongs to user 'bob', not 'alice'",
        ),
        (app("RUNNING", app_id="application_1_0001", type_="MAPREDUCE"), "its type is 'MAPREDUCE', not MELON"),
    ],
)
def test_an_app_with_the_tags_but_not_ours_is_not_reattached_to(hooks, capsys, planted, why):
    on_cluster(hooks, planted)
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    assert make_op().execute(make_context())["app_id"] == APP
    hooks.submit.assert_called_once()
    shown = capsys.readouterr()  # the task SDK's log goes to stdout; Airflow 3.0's logging handler writes stderr
    said = [line for line in (shown.out + shown.err).splitlines() if "application_1_0001" in line]
    assert any(
        f"Not reattaching to YARN application application_1_0001 ({planted['state']}/"
        f"{planted['finalStatus']}) found by tags: {why}" in line
        for line in said
    ), said


def test_run_as_tenant_is_the_user_an_app_must_belong_to(hooks):
    on_cluster(
        hooks,
        app("RUNNING", app_id="application_1_0001", user="alice"),
        app("RUNNING", app_id="application_1_0002", user="carol", started=500),
    )
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED", app_id="application_1_0002")
    assert make_op(run_as="carol").execute(make_context())["app_id"] == "application_1_0002"
    hooks.submit.assert_not_called()


@needs_state_store
def test_kill_is_noted_in_the_state_store_and_waited_for(hooks):
    store = FakeStore()
    hooks.get_state.side_effect = ["RUNNING", "RUNNING", "KILLED"]  # KILLING shows as RUNNING for a moment
    hooks.get_app.return_value = app("RUNNING")
    with mock.patch("airflow_provider_melon.operators.train.time.time", side_effect=[0.0, 100.0]):  # deadline past
        with pytest.raises(AirflowException, match="timeout .*; the application was killed"):
            make_op(timeout=12).execute(make_context(store))
    hooks.kill.assert_called_once_with(mock.ANY, APP)
    assert store.values["melon_killed_app_ids"] == [APP]
    assert hooks.get_state.call_count == 3


def test_an_app_this_task_killed_is_not_reattached_to_while_the_rm_shows_it_running(hooks, capsys):
    store = FakeStore(melon_killed_app_ids=["application_1_0001"])
    on_cluster(hooks, app("RUNNING", app_id="application_1_0001"))
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    assert make_op(durable=False).execute(make_context(store))["app_id"] == APP
    hooks.submit.assert_called_once()
    shown = capsys.readouterr()  # stdout (task SDK log), stderr on Airflow 3.0
    assert (
        "application_1_0001 (RUNNING/UNDEFINED) found by tags: an earlier try of this task killed it"
        in shown.out + shown.err
    )


@needs_state_store
def test_a_stored_app_this_task_killed_is_not_reconnected_to(hooks, capsys):
    store = FakeStore(melon_yarn_app_id="application_1_0001", melon_killed_app_ids=["application_1_0001"])
    on_cluster(hooks, app("RUNNING", app_id="application_1_0001"))
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    assert make_op().execute(make_context(store))["app_id"] == APP
    hooks.submit.assert_called_once()
    assert (
        "Not reconnecting to YARN application application_1_0001: an earlier try of this task killed it"
        in capsys.readouterr().out
    )


# ---------------------------------------------------------------------------------------------- ResumableJobMixin


@needs_state_store
def test_state_store_gets_the_app_id_before_polling(hooks):
    store = FakeStore()
    seen = []
    hooks.get_app.side_effect = lambda self, app_id: seen.append(dict(store.values)) or app("FINISHED", "SUCCEEDED")
    make_op().execute(make_context(store))
    assert store.values == {"melon_yarn_app_id": APP}
    assert seen[-1] == {"melon_yarn_app_id": APP}  # persisted before the poll that saw the end


@needs_state_store
def test_state_store_live_app_reconnects_without_lookup_or_submit(hooks):
    store = FakeStore(melon_yarn_app_id="application_1_0077")
    hooks.get_app.side_effect = [
        app("RUNNING", app_id="application_1_0077"),
        app("RUNNING", app_id="application_1_0077"),
        app("FINISHED", "SUCCEEDED", app_id="application_1_0077"),
    ]
    ctx = make_context(store)
    result = make_op().execute(ctx)
    hooks.submit.assert_not_called()
    hooks.find.assert_not_called()
    assert result["app_id"] == "application_1_0077"
    assert pushed(ctx)["app_id"] == "application_1_0077"  # XCom/links pushed again in this try


@needs_state_store
def test_state_store_succeeded_app_returns_result(hooks):
    store = FakeStore(melon_yarn_app_id="application_1_0077")
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED", app_id="application_1_0077")
    result = make_op().execute(make_context(store))
    hooks.submit.assert_not_called()
    assert result["final_status"] == "SUCCEEDED" and result["app_id"] == "application_1_0077"


@needs_state_store
def test_state_store_failed_app_submits_fresh(hooks):
    store = FakeStore(melon_yarn_app_id="application_1_0077")
    hooks.get_app.side_effect = [
        app("FINISHED", "FAILED", app_id="application_1_0077"),
        app("RUNNING"),
        app("FINISHED", "SUCCEEDED"),
    ]
    result = make_op().execute(make_context(store))
    hooks.submit.assert_called_once()
    assert result["app_id"] == APP and store.values["melon_yarn_app_id"] == APP


@needs_state_store
def test_state_store_unknown_app_submits_fresh(hooks):
    store = FakeStore(melon_yarn_app_id="application_1_0077")
    hooks.get_app.side_effect = [YarnApiError("not found", status=404), app("ACCEPTED"), app("FINISHED", "SUCCEEDED")]
    make_op().execute(make_context(store))
    hooks.submit.assert_called_once()


# ---------------------------------------------------------------------------------------------- completion


AM_TASKS = [
    {"role": "chief", "index": 0, "state": "SUCCEEDED", "step": 500, "loss": 0.05, "attempt": 0, "exit_code": 0},
    {"role": "worker", "index": 0, "state": "SUCCEEDED", "step": 499, "loss": 0.06, "attempt": 0},
    {"role": "worker", "index": 1, "state": "RUNNING", "step": 498, "loss": 0.07, "attempt": 1},
]


def event(status="success", final="SUCCEEDED", state="FINISHED", **kw):
    out = {
        "status": status,
        "app_id": APP,
        "state": state,
        "final_status": final,
        "diagnostics": "",
        "duration_s": 61.0,
        "message": f"app {status}",
        "tracking_url": f"{RM}/proxy/{APP}/",
        "tasks": None,
    }
    out.update(kw)
    return out


def test_execute_complete_success_result_outlets_and_xcom(hooks, monkeypatch):
    from airflow_provider_melon import version_compat

    # Airflow 3.1+'s outlets (outputs known at run time added); 3.0's: the test below
    monkeypatch.setattr(version_compat, "RUNTIME_OUTLETS", True)
    op = make_op()
    ctx = make_context()
    result = op.execute_complete(
        ctx,
        event(tasks=AM_TASKS),
        outputs=job()["outputs"],
        roles={"chief": 1, "worker": 2, "ps": 1},
        fs_default_fs="hdfs://nn:8020",
    )
    assert result["app_id"] == APP and result["final_status"] == "SUCCEEDED"
    assert result["duration_s"] == 61.0
    assert result["task_source"] == "am-last-seen"
    assert result["tasks"]["worker"]["states"] == {"SUCCEEDED": 1, "RUNNING": 1}
    assert result["tasks"]["worker"]["restarts"] == 1
    assert result["tasks"]["chief"]["step"] == 500
    assert result["tasks"]["ps"] == {
        "instances": 1,
        "states": {},
        "step": None,
        "total": None,
        "loss": None,
        "metrics": {},
        "restarts": 0,
        "failed_exit_codes": [],
    }
    assert result["outputs"] == job()["outputs"]
    assert sorted(a.uri for a in op.outlets) == ["hdfs://nn:8020/models/mnist", "hdfs://nn:8020/user/alice/metrics"]
    xcom = pushed(ctx)
    assert xcom["final_status"] == "SUCCEEDED" and xcom["outputs"] == job()["outputs"]


def test_a_declared_output_missing_after_success_fails_naming_it_and_pushes_no_outputs(hooks):
    """(The live twin, against the mini cluster's HDFS: tests/security/test_outputs.py.)"""
    hooks.file_status.side_effect = lambda hook, path: None if path == "/models/mnist" else {"type": "FILE"}
    ctx = make_context()
    with pytest.raises(
        AirflowException,
        match=r"output\(s\) 'model' \(hdfs://nn:8020/models/mnist\) are not in "
        r"HDFS; no asset is declared",
    ):
        make_op().execute_complete(ctx, event(), outputs=job()["outputs"], roles={"chief": 1})
    assert sorted(c.args[1] for c in hooks.file_status.call_args_list) == ["/models/mnist", "/user/alice/metrics"]
    assert "outputs" not in pushed(ctx)


def test_an_output_that_cannot_be_checked_fails_naming_it(hooks):
    hooks.file_status.side_effect = ConnectionError("namenode down")
    with pytest.raises(
        AirflowException,
        match=r"output 'model' \(hdfs://nn:8020/models/mnist\) could not be "
        r"checked in HDFS: namenode down",
    ):
        make_op().execute_complete(
            make_context(), event(), outputs={"model": "hdfs://nn:8020/models/mnist"}, roles={"chief": 1}
        )


@pytest.mark.parametrize("ev", [event(tasks=AM_TASKS), event("error", "FAILED", diagnostics="exited 1")])
def test_ended_app_points_the_am_link_at_its_rm_page(hooks, ev):
    ctx = make_context()
    try:
        make_op().execute_complete(ctx, ev, roles={"chief": 1})
    except AirflowException:
        pass
    assert pushed(ctx)[MelonAmStatusLink.xcom_key] == f"{RM}/cluster/app/{APP}"  # not the proxy: the AM is gone


def test_result_prefers_live_am_status_then_rm(hooks):
    hooks.am_status.return_value = {"state": "SUCCEEDED", "tasks": AM_TASKS[:1]}
    result = make_op().execute_complete(make_context(), event(tasks=AM_TASKS), roles={"chief": 1})
    assert result["task_source"] == "am" and result["tasks"]["chief"]["states"] == {"SUCCEEDED": 1}
    hooks.am_status.return_value = None
    result = make_op().execute_complete(make_context(), event(), roles={"chief": 1, "worker": 2})
    assert result["task_source"] == "rm"
    assert result["tasks"]["worker"]["instances"] == 2 and result["tasks"]["worker"]["states"] == {}


def test_result_is_read_from_the_ams_final_status_after_the_end(hooks):
    """The AM's final /status (HDFS, written before it unregistered) wins over the last poll's picture: each task's
    last report, not the one seen a poll earlier (chief step null, worker 2 of 4, metrics {})."""
    last_seen = [
        {"role": "chief", "index": 0, "state": "RUNNING", "step": None, "metrics": {}},
        {"role": "worker", "index": 0, "state": "RUNNING", "step": 2, "total": 4, "metrics": {}},
    ]
    final = [
        {
            "role": "chief",
            "index": 0,
            "state": "SUCCEEDED",
            "step": 4,
            "total": 4,
            "loss": 0.25,
            "metrics": {"accuracy": 0.9},
        },
        {
            "role": "worker",
            "index": 0,
            "state": "SUCCEEDED",
            "step": 4,
            "total": 4,
            "loss": 0.5,
            "metrics": {"accuracy": 0.8},
        },
    ]
    hooks.final_status.return_value = {"state": "SUCCEEDED", "tasks": final}
    hooks.am_status.return_value = {"state": "RUNNING", "tasks": last_seen}
    result = make_op().execute_complete(make_context(), event(tasks=last_seen), roles={"chief": 1, "worker": 1})
    assert hooks.final_status.call_args.args[1] == APP
    assert result["task_source"] == "am-final"
    assert result["progress"] == {
        "chief:0": {"state": "SUCCEEDED", "step": 4, "total": 4, "loss": 0.25, "metrics": {"accuracy": 0.9}},
        "worker:0": {"state": "SUCCEEDED", "step": 4, "total": 4, "loss": 0.5, "metrics": {"accuracy": 0.8}},
    }
    assert result["tasks"]["worker"]["step"] == 4 and result["tasks"]["chief"]["metrics"] == {"accuracy": 0.9}
    hooks.final_status.return_value = None  # no final status (an AM that died): the last one seen, as before
    hooks.am_status.return_value = None
    result = make_op().execute_complete(make_context(), event(tasks=last_seen), roles={"chief": 1, "worker": 1})
    assert result["task_source"] == "am-last-seen" and result["progress"]["worker:0"]["step"] == 2


@pytest.mark.parametrize(
    "ev",
    [
        event(
            "error",
            "FAILED",
            diagnostics="task worker:1 on nm2 exited 1: OOM",
            message="YARN application x ended FINISHED/FAILED: task worker:1 on nm2 exited 1: OOM",
        ),
        event(
            "error",
            "KILLED",
            state="KILLED",
            diagnostics="task worker:1 on nm2 exited 1: OOM",
            message="YARN application x ended KILLED/KILLED: task worker:1 on nm2 exited 1: OOM",
        ),
        event("success", "UNDEFINED", diagnostics="task worker:1 on nm2 exited 1: OOM"),
    ],
)
def test_execute_complete_failure_raises_with_diagnostics(hooks, ev):
    with pytest.raises(AirflowException, match="task worker:1 on nm2 exited 1: OOM"):
        make_op().execute_complete(make_context(), ev)
    hooks.kill.assert_not_called()


@pytest.mark.parametrize("cancel,kills", [(True, 1), (False, 0)])
def test_execute_complete_timeout_kills_if_cancel_on_kill(hooks, cancel, kills):
    with pytest.raises(AirflowException, match="timeout"):
        make_op(cancel_on_kill=cancel).execute_complete(
            make_context(), event("timeout", "UNDEFINED", "RUNNING", message="did not finish before the task's timeout")
        )
    assert hooks.kill.call_count == kills
    if kills:
        assert hooks.kill.call_args.args[1] == APP


def test_hdfs_asset_uri_rules():
    assert hdfs_asset_uri("hdfs://nn:8020/a/b") == "hdfs://nn:8020/a/b"
    assert hdfs_asset_uri("hdfs:///a/b", "hdfs://nn:9000") == "hdfs://nn:9000/a/b"
    assert hdfs_asset_uri("/a/b", "hdfs://nn:9000/") == "hdfs://nn:9000/a/b"
    assert hdfs_asset_uri("/a/b") is None
    assert hdfs_asset_uri("s3://bucket/a") is None


# ---------------------------------------------------------------------------------------------- kill


def test_on_kill_kills_the_app(hooks):
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    op = make_op()
    op.execute(make_context())
    op.on_kill()
    hooks.kill.assert_called_once_with(mock.ANY, APP)


def test_on_kill_respects_cancel_on_kill_false(hooks):
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    op = make_op(cancel_on_kill=False)
    op.execute(make_context())
    op.on_kill()
    hooks.kill.assert_not_called()


def test_on_kill_before_submit_does_nothing(hooks):
    make_op().on_kill()
    hooks.kill.assert_not_called()


# ---------------------------------------------------------------------------------------------- sync poll loop


def test_sync_poll_until_success_with_progress(hooks):
    # the first answer is read right after submit; then three polls
    hooks.get_app.side_effect = [app("ACCEPTED"), app("RUNNING"), app("RUNNING"), app("FINISHED", "SUCCEEDED")]
    hooks.am_status.side_effect = [{"state": "RUNNING", "tasks": AM_TASKS}, None]
    result = make_op(log_every_n=2, job_logs=False).execute(make_context())
    assert result["final_status"] == "SUCCEEDED"
    assert hooks.sleep.call_count == 2
    # AM asked on the 1st running poll (not the 2nd: every 2 polls) and once more at the end (gone: None); with
    # job logs on it is asked on every running poll (the tasks' containers): tests/unit/test_logs.py
    assert hooks.am_status.call_count == 2
    assert result["task_source"] == "am-last-seen"
    assert result["tasks"]["chief"]["step"] == 500


def test_sync_failure_raises_with_rm_diagnostics(hooks):
    hooks.get_app.side_effect = [app("RUNNING"), app("FINISHED", "FAILED", diagnostics="task chief:0 exited 2")]
    with pytest.raises(AirflowException, match="task chief:0 exited 2"):
        make_op().execute(make_context())


def test_sync_outage_within_budget_then_success(hooks):
    down = YarnApiError("Connection refused")
    hooks.get_app.side_effect = [app("RUNNING"), down, down, app("FINISHED", "SUCCEEDED")]
    assert make_op(max_consecutive_failures=2).execute(make_context())["final_status"] == "SUCCEEDED"


def test_sync_outage_beyond_budget_fails_without_killing(hooks):
    down = YarnApiError("Connection refused")
    hooks.get_app.side_effect = [app("RUNNING"), down, down, down]
    with pytest.raises(AirflowException, match="unreachable for 3 polls"):
        make_op(max_consecutive_failures=2).execute(make_context())
    hooks.kill.assert_not_called()


def test_sync_timeout_kills(hooks):
    """The operator's own sleep, clamped to the deadline (polls at t = 0, 5, 10, then sleeps the 2 s left)."""
    clock = mock.Mock(now=1_000_000.0, sleeps=[])
    clock.time.side_effect = lambda: clock.now
    clock.sleep.side_effect = lambda s: (clock.sleeps.append(s), setattr(clock, "now", clock.now + s))
    hooks.get_app.return_value = app("RUNNING")
    hooks.sleep.side_effect = REAL_SLEEP
    with mock.patch("airflow_provider_melon.operators.train.time", clock):
        with pytest.raises(AirflowException, match="timeout.*killed"):
            make_op(timeout=12).execute(make_context())
    hooks.kill.assert_called_once_with(mock.ANY, APP)
    assert hooks.get_app.call_count == 1 + 3  # after submit, then polls at t = 0, 5, 10 (deadline 12)
    assert clock.sleeps == [5, 5, 2] and clock.now == 1_000_012.0  # no overshoot past the deadline


def test_execution_timeout_bounds_the_deadline(hooks):
    from airflow_provider_melon.version_compat import TaskDeferred

    hooks.get_app.return_value = app("RUNNING")
    op = make_op(deferrable=True, timeout=3600, execution_timeout=timedelta(minutes=10))
    with mock.patch("airflow_provider_melon.operators.train.time.time", return_value=500.0):
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(make_context())
    assert deferred.value.trigger.deadline == 500.0 + 600


def test_execute_complete_without_defer_kwargs_rereads_the_job(hooks, monkeypatch):
    """`airflow dags test` resumes with the event only: outputs and roles come from the job again."""
    from airflow_provider_melon import version_compat

    monkeypatch.setattr(version_compat, "RUNTIME_OUTLETS", True)  # 3.1+'s outlets, as above
    op = make_op()
    result = op.execute_complete(make_context(), event())
    assert result["outputs"] == job()["outputs"]
    assert set(result["tasks"]) == {"chief", "worker", "ps"}
    assert "hdfs://nn:8020/user/alice/metrics" in [a.uri for a in op.outlets]  # fs_default_fs of the connection


def test_on_airflow_3_0_outputs_known_only_at_run_time_are_not_added_as_outlets(hooks, monkeypatch):
    """3.0's api-server fails a task whose outlets hold an asset not active from parse time (version_compat)."""
    from airflow_provider_melon import version_compat

    monkeypatch.setattr(version_compat, "RUNTIME_OUTLETS", False)
    op = make_op()
    before = [a.uri for a in op.outlets]
    op.execute_complete(
        make_context(),
        event(tasks=AM_TASKS),
        outputs=job()["outputs"],
        roles={"chief": 1, "worker": 2, "ps": 1},
        fs_default_fs="hdfs://nn:8020",
    )
    assert [a.uri for a in op.outlets] == before == ["hdfs://nn:8020/models/mnist"]  # the parse-time one only
