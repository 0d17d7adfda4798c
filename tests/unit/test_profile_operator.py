"""MelonProfileOperator (the one-task profile job, reading the profile back, XComs) and the profiler's ``--output``
(WebHDFS through the ``hdfs`` package or plain urllib, against a small fake NameNode/DataNode served here).

MelonHook/YarnHook are mocked at their public methods, as in test_operator.py; the HDFS client is a fake with the
``hdfs`` package's ``read`` context manager.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import pytest

from airflow_provider_melon.gpu import profiler
from airflow_provider_melon.hooks.melon import MelonHook
from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.operators.profile import MelonProfileOperator
from airflow_provider_melon.operators.train import MelonTrainOperator
from airflow_provider_melon.spec import JobSpec, JobSpecError
from airflow_provider_melon.version_compat import AirflowException

REPO = Path(__file__).resolve().parents[2]
APP = "application_1700000000000_0007"
DAG_ID, TASK_ID, RUN_ID = "pipe", "profile", "manual__2026-01-01T00:00:00+00:00"
MINI_NODES = [
    {
        "id": f"nm{i}:1",
        "state": "RUNNING",
        "totalResource": {"resources": {"yarn.io/gpu": 2, "melon.io/gpu-memory": 32768}},
    }
    for i in (1, 2)
]


def train_job(**over):
    job = {
        "name": "mnist-mwms",
        "framework": "tensorflow",
        "entrypoint": "python train.py --epochs 2 --batch-size 64",
        "env": {"A": "1"},
        "inputs": [{"path": "/data/mnist.npz", "name": "mnist.npz"}],
        "outputs": {"model": "hdfs://nn:8020/models/m"},
        "tensorboard_log_dir": "hdfs://nn:8020/tb",
        "roles": {
            "chief": {"memory": "2g", "vcores": 2, "gpu_memory": "2GiB", "restarts": 3},
            "worker": {"instances": 3, "memory": "2g", "gpu_memory": "2GiB"},
        },
    }
    job.update(over)
    return job


@pytest.fixture(autouse=True)
def yarn_conn(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_TEST", json.dumps({"conn_type": "yarn", "host": "http://rm:8088", "login": "alice"})
    )


def make_op(**kw):
    kw.setdefault("task_id", TASK_ID)
    kw.setdefault("job", train_job())
    kw.setdefault("yarn_conn_id", "yarn_test")
    kw.setdefault("deferrable", False)
    kw.setdefault("poll_interval", 5)
    kw.setdefault("steps", 5)
    kw.setdefault("webhdfs_url", "http://nn:9870")
    return MelonProfileOperator(**kw)


def make_context():
    ti = mock.Mock(dag_id=DAG_ID, task_id=TASK_ID, run_id=RUN_ID, map_index=-1, stats_tags={})
    return {"ti": ti, "run_id": RUN_ID}


def pushed(ctx) -> dict:
    return {c.kwargs["key"]: c.kwargs["value"] for c in ctx["ti"].xcom_push.call_args_list}


def argv_of(spec: JobSpec) -> list[str]:
    return shlex.split(spec.entrypoint)


# --------------------------------------------------------------------------------------------- the profile job


def test_profile_job_is_one_task_of_the_success_role_on_a_whole_gpu():
    op = make_op()
    spec = op.profile_spec(
        JobSpec.from_dict(train_job()),
        "/user/alice/.melon/profiles/x/profile.json",
        gpu_size_mb=16384,
        webhdfs_url="http://nn:9870",
        user="alice",
    )
    assert spec.name == "mnist-mwms-profile"
    assert spec.framework == "tensorflow"  # a chief alone is a valid TF job: the script sees a one-task TF_CONFIG
    assert list(spec.roles) == ["chief"]
    chief = spec.roles["chief"]
    assert (chief.instances, chief.gpus, chief.gpu_memory, chief.restarts, chief.memory_mb, chief.vcores) == (
        1,
        1,
        None,
        0,
        2048,
        2,
    )
    assert argv_of(spec) == [
        "python",
        "-m",
        "airflow_provider_melon.gpu.profiler",
        "--steps",
        "5",
        "--output",
        "/user/alice/.melon/profiles/x/profile.json",
        "--webhdfs",
        "http://nn:9870",
        "--hdfs-user",
        "alice",
        "--gpu-memory-mb",
        "16384",
        "--",
        "python",
        "train.py",
        "--epochs",
        "2",
        "--batch-size",
        "64",
    ]
    # same env (plus the steps), inputs; no outputs, no TensorBoard
    assert spec.env == {"A": "1", "MELON_PROFILE_STEPS": "5"}
    assert [i.path for i in spec.inputs] == ["/data/mnist.npz"]
    assert spec.outputs == {} and spec.tensorboard_log_dir is None
    assert spec.task_count == 1


def test_role_choice_framework_and_gpu_mode():
    op = make_op(role="worker")
    assert list(op.profile_spec(JobSpec.from_dict(train_job()), "/p").roles) == ["worker"]
    ps_job = train_job(roles={"worker": {"gpus": 2}, "ps": {"memory": "1g"}})
    ps = make_op(role="ps").profile_spec(JobSpec.from_dict(ps_job), "/p")
    assert ps.framework == "generic" and ps.roles["ps"].gpus is None and not ps.roles["ps"].untracked
    assert make_op().profile_spec(JobSpec.from_dict(ps_job), "/p").roles["worker"].gpus == 2  # first role; 2 kept
    torch_job = train_job(
        framework="pytorch", roles={"worker": {"instances": 4, "gpu_memory": "3GiB"}, "master": {"gpu_memory": "3GiB"}}
    )
    t = make_op().profile_spec(JobSpec.from_dict(torch_job), "/p")
    assert t.framework == "pytorch" and list(t.roles) == ["master"]
    with pytest.raises(JobSpecError, match=r"role: 'evaluator' is not a role of the job \(chief, worker\)"):
        make_op(role="evaluator").profile_spec(JobSpec.from_dict(train_job()), "/p")


def test_steps_are_validated_also_when_templated():
    with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
        make_op(steps=0)
    assert argv_of(make_op(steps=" 7 ").profile_spec(JobSpec.from_dict(train_job()), "/p"))[4] == "7"
    with pytest.raises(JobSpecError, match="steps: must be >= 1, got -2"):
        make_op(steps="-2").profile_spec(JobSpec.from_dict(train_job()), "/p")
    with pytest.raises(JobSpecError, match="steps: expected a whole number"):
        make_op(steps="{{ oops }}x").profile_spec(JobSpec.from_dict(train_job()), "/p")


def test_the_training_jobs_outputs_are_not_the_profile_tasks_outlets():
    assert make_op().outlets == []
    assert MelonTrainOperator(task_id="t", job=train_job()).outlets  # the train task does declare them


# --------------------------------------------------------------------------------------- execute, end to end


class FakeHdfs:
    url = "http://nn:9870"

    def __init__(self, files=None):
        self.files = dict(files or {})

    @contextlib.contextmanager
    def read(self, path):
        if path not in self.files:
            raise FileNotFoundError(f"File {path} not found.")
        yield io.BytesIO(self.files[path])


def profile_doc(**over):
    doc = {
        "method": "analytic",
        "reason": "no GPU: NVML did not initialise (NVML Shared Library Not Found)",
        "peak_mb": 528.8,
        "mean_sm_util": None,
        "step_time_s": 0.0075,
        "expected_mb": 838,
        "packing_pays": True,
        "gpu_memory_mb": 16384,
        "steps": 5,
        "returncode": 0,
        "notes": [],
        "app_id": APP,
        "container_id": "c1",
    }
    doc.update(over)
    return doc


@pytest.fixture
def hooks():
    hdfs = FakeHdfs()
    finished = {
        "id": APP,
        "state": "FINISHED",
        "finalStatus": "SUCCEEDED",
        "diagnostics": "",
        "startedTime": 1,
        "finishedTime": 9001,
        "elapsedTime": 9000,
        "trackingUrl": f"http://rm:8088/proxy/{APP}/",
    }
    with (
        mock.patch.object(
            MelonHook, "submit", autospec=True, return_value={"app_id": APP, "staging": None, "plan": {}}
        ) as submit,
        mock.patch.object(MelonHook, "am_status", autospec=True, return_value=None),
        mock.patch.object(MelonHook, "hdfs", new_callable=mock.PropertyMock, return_value=hdfs),
        mock.patch.object(YarnHook, "find_applications", autospec=True, return_value=[]),
        mock.patch.object(YarnHook, "get_application", autospec=True, return_value=finished),
        mock.patch.object(YarnHook, "nodes", autospec=True, return_value=MINI_NODES) as nodes,
        mock.patch.object(MelonTrainOperator, "_sleep", autospec=True),
    ):
        yield mock.Mock(submit=submit, hdfs=hdfs, nodes=nodes)


@pytest.fixture
def log():
    logger = mock.Mock()
    with mock.patch.object(MelonProfileOperator, "log", new_callable=mock.PropertyMock, return_value=logger):
        yield logger


def test_execute_submits_the_profile_job_reads_the_json_and_pushes_xcoms(hooks, log):
    op = make_op()
    ctx = make_context()
    path = op.profile_path_for(ctx)
    assert path.startswith(f"/user/{op.hook.user}/.melon/profiles/{DAG_ID}/{TASK_ID}/")
    assert path.endswith("/profile.json")
    hooks.hdfs.files[path] = json.dumps(profile_doc()).encode()

    result = op.execute(ctx)

    spec = hooks.submit.call_args.args[1]
    assert spec.name == "mnist-mwms-profile" and spec.task_count == 1
    argv = argv_of(spec)
    assert argv[argv.index("--output") + 1] == path
    assert argv[argv.index("--gpu-memory-mb") + 1] == "16384"  # the cluster's largest GPU, from the nodes
    assert result["method"] == "analytic" and result["expected_gpu_memory"] == "838MiB" and result["path"] == path
    xcoms = pushed(ctx)
    assert xcoms["expected_gpu_memory"] == "838MiB"
    assert xcoms["packing_pays"] is True
    assert xcoms["profile"]["method"] == "analytic" and xcoms["profile"]["app_id"] == APP
    said = " ".join(str(c.args) for c in log.info.call_args_list)
    assert "Profile method: analytic" in said and "no GPU: NVML did not initialise" in said
    # what the train task receives through its templated gpu_memory
    train = MelonTrainOperator(task_id="train", job=train_job(), gpu_memory=xcoms["expected_gpu_memory"])
    assert {r.gpu_memory_mb for r in train.load_spec().roles.values()} == {838}


def test_nvml_profile_is_logged_as_measured(hooks, log):
    op = make_op()
    ctx = make_context()
    hooks.hdfs.files[op.profile_path_for(ctx)] = json.dumps(
        profile_doc(method="nvml", reason="", peak_mb=3000.0, mean_sm_util=0.93, expected_mb=3556, packing_pays=False)
    ).encode()
    result = op.execute(ctx)
    assert pushed(ctx)["expected_gpu_memory"] == "3556MiB" and pushed(ctx)["packing_pays"] is False
    assert result["mean_sm_util"] == 0.93
    said = " ".join(str(c.args) for c in log.info.call_args_list)
    assert "Profile method: nvml (measured)" in said and "0.93" in said


def test_no_estimate_pushes_none_and_the_train_task_keeps_its_declared_memory(hooks, log):
    op = make_op()
    ctx = make_context()
    hooks.hdfs.files[op.profile_path_for(ctx)] = json.dumps(
        profile_doc(
            method="none",
            expected_mb=None,
            packing_pays=None,
            peak_mb=None,
            reason="no GPU: NVML found 0 devices and the script reported no memory model",
        )
    ).encode()
    result = op.execute(ctx)
    assert result["method"] == "none" and pushed(ctx)["expected_gpu_memory"] is None
    warned = " ".join(str(c.args) for c in log.warning.call_args_list)
    assert "no GPU: NVML found 0 devices" in warned
    train = MelonTrainOperator(task_id="train", job=train_job(), gpu_memory=str(pushed(ctx)["expected_gpu_memory"]))
    assert {r.gpu_memory_mb for r in train.load_spec().roles.values()} == {2048}


def test_a_stale_or_missing_profile_fails_the_task(hooks):
    op = make_op()
    ctx = make_context()
    hooks.hdfs.files[op.profile_path_for(ctx)] = json.dumps(profile_doc(app_id="application_1_0001")).encode()
    with pytest.raises(AirflowException, match=f"written by application_1_0001, not by {APP}"):
        op.execute(ctx)
    hooks.hdfs.files.clear()
    with pytest.raises(AirflowException, match=f"profile application {APP} succeeded but its profile .* could not"):
        make_op().execute(make_context())


def test_preflight_applies_to_the_profile_job(hooks):
    # profiled on a whole GPU: a role of gpus 3 cannot run on 2-GPU nodes, and nothing is submitted
    from airflow_provider_melon.version_compat import AirflowFailException

    job = train_job(roles={"chief": {"gpus": 3}, "worker": {"gpu_memory": "1GiB"}})
    with pytest.raises(AirflowFailException, match="role chief: 3 GPU\\(s\\) per task, but no node has more than 2"):
        make_op(job=job).execute(make_context())
    hooks.submit.assert_not_called()


# ---------------------------------------------------------------------------------- profiler --output, WebHDFS


class FakeWebHdfs:
    """NameNode + DataNode on one port: ``PUT /webhdfs/v1/p?op=CREATE`` -> 307 to ``/dn/p``; ``PUT /dn/p`` -> 201.
    ``standby=True`` answers 403 StandbyException instead; ``noredirect=True`` answers 200 with the location."""

    def __init__(self, standby=False, noredirect=False):
        self.files, self.requests = {}, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_PUT(self):
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append((parts.path, query, len(body)))
                if parts.path.startswith("/webhdfs/v1/"):
                    if standby:
                        self._answer(
                            403,
                            {
                                "RemoteException": {
                                    "exception": "StandbyException",
                                    "message": "Operation category WRITE is not supported",
                                }
                            },
                        )
                        return
                    rest = parts.path[len("/webhdfs/v1") :]
                    loc = f"http://127.0.0.1:{outer.port}/dn{rest}?user={query.get('user.name')}"
                    if noredirect:
                        self._answer(200, {"Location": loc})
                    else:
                        self.send_response(307)
                        self.send_header("Location", loc)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                elif parts.path.startswith("/dn/"):
                    outer.files[parts.path[len("/dn") :]] = (body, query.get("user"))
                    self.send_response(201)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._answer(404, {})

            def _answer(self, code, doc):
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhdfs():
    servers = []

    def make(**kw):
        servers.append(FakeWebHdfs(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


@pytest.mark.parametrize("noredirect", [False, True])
def test_write_webhdfs_urllib_fallback_follows_the_create_redirect(webhdfs, noredirect):
    nn = webhdfs(noredirect=noredirect)
    profiler.write_webhdfs(
        nn.url, "hdfs://nn:8020/user/alice/p/profile.json", b'{"x": 1}', "alice", use_hdfs_package=False
    )
    assert nn.files == {"/user/alice/p/profile.json": (b'{"x": 1}', "alice")}
    create = nn.requests[0]
    assert create[0] == "/webhdfs/v1/user/alice/p/profile.json" and create[2] == 0
    assert create[1] == {"op": "CREATE", "overwrite": "true", "user.name": "alice"}


def test_write_webhdfs_tries_the_next_namenode_after_a_standby_and_says_why_when_all_fail(webhdfs):
    standby, active = webhdfs(standby=True), webhdfs()
    profiler.write_webhdfs(f"{standby.url};{active.url}", "/a.json", b"1", "bob", use_hdfs_package=False)
    assert active.files == {"/a.json": (b"1", "bob")} and standby.files == {}
    with pytest.raises(OSError, match=r"WebHDFS CREATE of /a.json failed: .*HTTP 403.*StandbyException"):
        profiler.write_webhdfs(standby.url, "/a.json", b"1", "bob", use_hdfs_package=False)


def test_write_webhdfs_refuses_a_path_outside_hdfs_before_any_request(webhdfs):
    nn = webhdfs()
    for elsewhere in ("file:///tmp/p.json", "p.json"):
        with pytest.raises(OSError, match=f"{elsewhere!r} is not in HDFS"):
            profiler.write_webhdfs(nn.url, elsewhere, b"1", "bob", use_hdfs_package=False)
    assert nn.requests == []


def test_write_webhdfs_with_the_hdfs_package(webhdfs):
    pytest.importorskip("hdfs")
    nn = webhdfs()
    profiler.write_webhdfs(nn.url, "/x/y.json", b"[]", "carol")
    assert nn.files["/x/y.json"][0] == b"[]"
    assert nn.requests[0][1]["op"] == "CREATE" and nn.requests[0][1]["user.name"] == "carol"


def _reporting_script(tmp_path) -> str:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import os, sys
        from airflow_provider_melon.gpu import profiler
        from airflow_provider_melon.gpu.memory_model import MemoryModel
        assert os.environ["MELON_PROFILE_STEPS"] == "3", os.environ.get("MELON_PROFILE_STEPS")
        print("python is", sys.executable)
        profiler.report(memory_model=MemoryModel(params=2**20, optimizer_slots=2,
                        activation_bytes_per_sample=2**20, workspace_mb=64, framework_overhead_mb=300), batch=32,
                        step_time_s=0.25)
    """)
    )
    return str(script)


def test_profiler_cli_output_to_webhdfs_carries_the_app_id(webhdfs, tmp_path):
    nn = webhdfs()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "MELON_APP_ID": APP, "CONTAINER_ID": "container_9"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_melon.gpu.profiler",
            "--steps",
            "3",
            "--output",
            "hdfs://nn:8020/user/alice/prof.json",
            "--webhdfs",
            nn.url,
            "--hdfs-user",
            "alice",
            "--",
            "python",
            _reporting_script(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert f"python is {sys.executable}" in r.stderr  # a leading `python` runs under the profiler's interpreter
    body, user = nn.files["/user/alice/prof.json"]
    doc = json.loads(body)
    assert user == "alice" and doc["app_id"] == APP and doc["container_id"] == "container_9"
    assert doc["method"] in ("analytic", "nvml")
    if doc["method"] == "analytic":  # memory_model's worked example: 412 MiB, 112 the allocator's (F = 300 aside),
        assert doc["expected_mb"] == 380 and doc["step_time_s"] == 0.25  # ceil(112 * 1.1 + 256)
    assert json.loads(r.stdout.strip().splitlines()[-1])["expected_mb"] == doc["expected_mb"]


def test_profiler_cli_output_without_estimate_exits_0_and_failed_write_exits_1(tmp_path, webhdfs):
    script = tmp_path / "noop.py"
    script.write_text("print('no model reported')\n")
    out = tmp_path / "p.json"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    base = [sys.executable, "-m", "airflow_provider_melon.gpu.profiler", "--steps", "1"]
    r = subprocess.run(
        base + ["--output", str(out), "--", "python", str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    doc = json.loads(out.read_text())
    if doc["method"] == "none":  # no GPU here: still a document, exit 0 (without --output it would be 2)
        assert r.returncode == 0 and doc["reason"].startswith("no GPU:") and doc["expected_mb"] is None
        r2 = subprocess.run(base + ["--", "python", str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert r2.returncode == 2
    standby = webhdfs(standby=True)
    r3 = subprocess.run(
        base + ["--output", "/p.json", "--webhdfs", standby.url, "--", "python", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r3.returncode == 1 and "could not write the profile to /p.json" in r3.stderr


def test_deferred_resume_on_a_fresh_operator_reads_the_same_path(hooks):
    # `airflow dags test` resumes a deferred task on a new operator object, with the trigger's event only
    from airflow_provider_melon.hadoop.app_state import make_event_payload

    ctx = make_context()
    path = make_op().profile_path_for(ctx)
    hooks.hdfs.files[path] = json.dumps(profile_doc(expected_mb=1200)).encode()
    app = {
        "id": APP,
        "state": "FINISHED",
        "finalStatus": "SUCCEEDED",
        "startedTime": 1,
        "finishedTime": 2,
        "elapsedTime": 1,
    }
    result = make_op(deferrable=True).execute_complete(ctx, make_event_payload("success", APP, app, "done"))
    assert result["path"] == path and pushed(ctx)["expected_gpu_memory"] == "1200MiB"
    hooks.submit.assert_not_called()
