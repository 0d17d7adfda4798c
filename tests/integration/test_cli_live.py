"""The `melon` job commands against the real mini cluster, as a user runs them: the CLI in a subprocess, pointed at
the cluster by its RM and WebHDFS URLs (`--rm`, `--webhdfs`; nothing read from the cluster's work dir) or by an
Airflow connection (`--conn-id`), logs read from the NodeManagers' REST API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.gpu import learned
from airflow_provider_melon.gpu.context import first_run_mb
from airflow_provider_melon.hadoop import memory_history
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "airflow_provider_melon.cli"]


class Melon:
    """Runs `melon ...` against the mini cluster by URL; remembers what it submitted, to kill leftovers."""

    def __init__(self, cluster: mc.ClusterDetails, tmp: Path):
        self.cluster, self.tmp = cluster, tmp
        self.where = [
            "--rm",
            cluster.rm_web_url,
            "--webhdfs",
            cluster.webhdfs_url.rsplit("/webhdfs/v1", 1)[0],
            "--user",
            cluster.user,
        ]
        self.submitted: list[str] = []

    def run(
        self, *args: str, env: dict | None = None, where: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        argv = [*CLI, *args, *(self.where if where else [])]
        return subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
        )

    def submit(self, job: dict, *extra: str, where: bool = True, env: dict | None = None) -> dict:
        spec = self.tmp / f"{job['name']}.json"
        spec.write_text(json.dumps(job))
        # what a yarn connection's extra would give for this cluster: its AM classpath, the NMs' python, the
        # containers' environment (the mini cluster's virtual GPU inventory)
        settings = ["--am-classpath", self.cluster.am_classpath, "--python", sys.executable]
        for key, value in mc.container_env(self.cluster).items():
            settings += ["--container-env", f"{key}={value}"]
        result = self.run("submit", str(spec), "--json", *settings, *extra, where=where, env=env)
        assert result.returncode in (0, 1), result.stderr
        out = json.loads(result.stdout)
        self.submitted.append(out["app_id"])
        return out | {"returncode": result.returncode}

    def json(self, *args: str, **kw):
        result = self.run(*args, "--json", **kw)
        return result.returncode, json.loads(result.stdout) if result.stdout.strip() else None, result.stderr


@pytest.fixture
def melon(minicluster, yarn_hook, tmp_path):
    m = Melon(minicluster, tmp_path)
    yield m
    for app_id in m.submitted:
        try:
            if yarn_hook.get_application(app_id)["state"] not in TERMINAL_STATES:
                yarn_hook.kill_application(app_id)
        except Exception:  # noqa: BLE001 - best-effort clean-up
            pass


def generic(name: str, entrypoint: str, **roles) -> dict:
    return {
        "name": name,
        "framework": "generic",
        "entrypoint": entrypoint,
        "roles": roles or {"worker": {"instances": 1, "memory": 256}},
    }


def test_submit_status_ls_logs_follow_wait(melon, minicluster):
    ticker = "import time\nfor i in range(6):\n    print('tick', i, flush=True)\n    time.sleep(1)\nprint('hi from melon cli')"
    sub = melon.submit(generic("cli-live-hello", f'python -c "{ticker}"'))
    app_id = sub["app_id"]
    assert sub["returncode"] == 0 and app_id.startswith("application_") and set(sub["staged"]) >= {"runtime", "am_jar"}

    status = melon.run("status", app_id)
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"{app_id}  cli-live-hello") and "state " in status.stdout

    code, apps, err = melon.json("ls", "--limit", "0")
    assert code == 0, err
    mine = [a for a in apps if a["id"] == app_id]
    assert len(mine) == 1 and mine[0]["name"] == "cli-live-hello" and mine[0]["user"] == minicluster.user

    # follow until the app ends: every line of the task once, in order, and the AM's own log
    follow = melon.run("logs", app_id, "-f", "--interval", "0.5")
    assert follow.returncode == 0, follow.stderr
    task_lines = [line for line in follow.stdout.splitlines() if line.startswith("[worker:0 stdout] ")]
    assert task_lines == [f"[worker:0 stdout] tick {i}" for i in range(6)] + ["[worker:0 stdout] hi from melon cli"]
    assert any(
        line.startswith("[am AppMaster.stdout] ") and "MelonAM: task worker:0 attempt 0 ->" in line
        for line in follow.stdout.splitlines()
    )

    waited = melon.run("wait", app_id)
    assert waited.returncode == 0, waited.stderr
    assert f"{app_id} FINISHED/SUCCEEDED" in waited.stdout

    logs = melon.run("logs", app_id, "--file", "stdout")
    assert logs.returncode == 0, logs.stderr
    assert f"==> worker:0 container_{app_id[len('application_') :]}_01_000002" in logs.stdout
    assert logs.stdout.count("hi from melon cli") == 1 and "MelonAM" not in logs.stdout

    code, final, _ = melon.json("status", app_id)
    assert code == 0 and (final["app"]["state"], final["app"]["final_status"]) == ("FINISHED", "SUCCEEDED")


def test_failing_job_exits_1_and_its_logs_go_with_the_nodemanagers_files(melon, minicluster):
    sub = melon.submit(generic("cli-live-fail", "python -c \"import sys; print('about to fail'); sys.exit(3)\""))
    app_id = sub["app_id"]
    waited = melon.run("wait", app_id)
    assert waited.returncode == 1, waited.stdout + waited.stderr
    assert "FAILED" in waited.stdout and "exited 3" in waited.stdout
    assert melon.run("status", app_id).returncode == 1

    logs = melon.run("logs", app_id, "--container", "worker:0")
    assert logs.returncode == 0 and "about to fail" in logs.stdout, logs.stderr

    # what a NodeManager does yarn.nodemanager.log.retain-seconds after an app ended, with log aggregation off:
    # delete its logs
    app_dirs = [p for p in Path(minicluster.work_dir).rglob(app_id) if p.is_dir() and "logDir" in str(p.parent)]
    assert app_dirs
    for path in app_dirs:
        shutil.rmtree(path)
    gone = melon.run("logs", app_id)
    assert gone.returncode == 4, gone.stdout + gone.stderr
    assert f"the logs of {app_id} are gone" in gone.stderr and "log aggregation is off" in gone.stderr
    assert "Traceback" not in gone.stderr


def test_kill_a_sleeping_job(melon):
    app_id = melon.submit(generic("cli-live-sleep", "sleep 600"))["app_id"]
    timed_out = melon.run("wait", app_id, "--timeout", "1")
    assert timed_out.returncode == 124 and "still running" in timed_out.stderr

    killed = melon.run("kill", app_id)
    assert killed.returncode == 0, killed.stderr
    status = melon.run("status", app_id)
    assert status.returncode == 1 and "KILLED/KILLED" in status.stdout
    assert melon.run("wait", app_id).returncode == 1
    again = melon.run("kill", app_id)
    assert again.returncode == 0 and "already ended" in again.stdout


def test_unknown_app_unreachable_cluster_and_bad_input(melon, minicluster):
    unknown = melon.run("status", "application_1_9999", "--json")
    assert unknown.returncode == 4 and "no application application_1_9999" in unknown.stderr
    answer = json.loads(unknown.stdout)  # the real RM's 404, as the JSON a script reads
    assert (answer["error"], answer["exit_code"], answer["status"]) == ("not_found", 4, 404), answer
    assert answer["app_id"] == "application_1_9999" and answer["message"] in unknown.stderr, answer
    assert melon.run("logs", "application_1_9999").returncode == 4
    assert melon.run("kill", "application_1_9999").returncode == 4

    down = melon.run("status", "application_1_9999", "--rm", "http://127.0.0.1:1", where=False)
    assert down.returncode == 3 and "cannot reach the ResourceManager http://127.0.0.1:1" in down.stderr
    assert melon.run("ls", "--rm", "http://127.0.0.1:1", where=False).returncode == 3

    bad = melon.run("status", "not-an-app")
    assert bad.returncode == 2 and "not a YARN application id" in bad.stderr
    for result in (unknown, down, bad):
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_airflow_connection_path(melon, minicluster):
    """The cluster named by Airflow connections (environment variables), read by the provider's hooks."""
    conns = mc.airflow_connections(minicluster, sys.executable)
    env = {
        "AIRFLOW_CONN_MY_YARN": json.dumps(conns["yarn_default"]),
        "AIRFLOW_CONN_MY_HDFS": json.dumps(conns["webhdfs_default"]),
    }
    spec = melon.tmp / "conn.yaml"
    spec.write_text(
        "name: cli-live-conn\nentrypoint: python -c \"print('via a connection')\"\nroles: {worker: {memory: 256}}\n"
    )
    submitted = melon.run(
        "submit",
        str(spec),
        "--conn-id",
        "my_yarn",
        "--webhdfs-conn-id",
        "my_hdfs",
        "--wait",
        "--json",
        env=env,
        where=False,
    )
    assert submitted.returncode == 0, submitted.stderr
    out = json.loads(submitted.stdout)
    melon.submitted.append(out["app_id"])
    assert out["final"]["final_status"] == "SUCCEEDED"

    status = melon.run("status", out["app_id"], "--conn-id", "my_yarn", "--json", env=env, where=False)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["app"]["name"] == "cli-live-conn"
    logs = melon.run("logs", out["app_id"], "--conn-id", "my_yarn", "--file", "stdout", env=env, where=False)
    assert logs.returncode == 0 and "via a connection" in logs.stdout


def test_the_embedded_cluster_is_the_default(melon, minicluster):
    """No --rm, no --conn-id: the mini cluster in --work-dir (URLs, AM classpath, python from its details)."""
    spec = melon.tmp / "embedded.yaml"
    spec.write_text(
        "name: cli-live-embedded\nentrypoint: python -c \"print('embedded')\"\nroles: {worker: {memory: 256}}\n"
    )
    here = ["--work-dir", str(minicluster.work_dir)]
    submitted = melon.run("submit", str(spec), "--wait", *here, where=False)
    assert submitted.returncode == 0, submitted.stderr
    first = submitted.stdout.splitlines()[0]
    assert first.startswith("submitted application_") and "(cli-live-embedded)" in first
    app_id = first.split()[1]
    melon.submitted.append(app_id)
    assert f"{app_id} FINISHED/SUCCEEDED" in submitted.stdout
    listed = melon.run("ls", "--state", "FINISHED", *here, where=False)
    assert listed.returncode == 0 and any(
        line.split()[0] == app_id and "cli-live-embedded" in line for line in listed.stdout.splitlines()[1:]
    )


# A job that needs 1400 MiB of GPU memory: under a smaller cap it dies of TensorFlow's exception as TensorFlow raises
# it on a GPU (its class name and message; tests/oom_texts.py has the real texts), and it reports its peak through
# MELON_PEAK_FILE as the cap's bootstrap does for TF/PyTorch on a GPU (the mini cluster's GPUs are virtual: no
# framework sees one).
OOM_JOB = """import json, os, sys
class ResourceExhaustedError(Exception):
    pass
cap = int(os.environ.get("MELON_CAP_MB", "0"))
with open(os.environ["MELON_PEAK_FILE"], "w") as f:
    json.dump({"peak_mb": min(cap, 1300)}, f)
if cap < 1400:
    raise ResourceExhaustedError("{{function_node __wrapped__Fill}} OOM when allocating tensor with "
        "shape[367001600] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc "
        "[Op:Fill]")
print("fits under", cap, "MiB")
"""


def test_an_oom_grows_the_memory_and_the_next_run_starts_at_the_learned_figure(melon, melon_hook, tmp_path):
    """End to end on the cluster: a task that runs out of GPU memory under its cap exits 76, the AM asks
    again with 1.5 × its expected memory (not a restart of the role's budget), the job succeeds; `submit --wait`
    records the run in the user's 0700 profiles/ folder, and the next `gpu_memory: auto` run starts at the learned
    figure (peak 1300 × 1.1 = 1430 MiB) and fits at once. (A job whose growths run out: test_am_live.py.)"""
    code = tmp_path / "oom"
    code.mkdir()
    (code / "oom_job.py").write_text(OOM_JOB)
    job = {
        "name": "oom-learns",
        "framework": "generic",
        "code": str(code),
        "entrypoint": "python oom_job.py",
        "roles": {"worker": {"instances": 1, "memory": 256, "gpu_memory": "auto:1GiB"}},
    }
    key = f"tests/oom-{uuid.uuid4().hex[:8]}"

    first = melon.submit(job, "--wait", "--learn-as", key)
    assert first["returncode"] == 0 and first["final"]["final_status"] == "SUCCEEDED", first
    [task] = melon_hook.final_status(first["app_id"])["tasks"]
    assert (task["initial_gpu_memory_mb"], task["expected_gpu_memory_mb"], task["oom_growths"]) == (1024, 1536, 1)
    assert task["oom"]["cap_mb"] == 1024 and task["gpu_memory_peak_mb"] == 1300, task
    assert task["oom"]["kind"] == "cap" and task["oom"]["need_mb"] == 1024 + 1400, task  # its peak and the request
    # the job wrote {"peak_mb": N} itself: the executor's heartbeats say "user", and the AM keeps the source with it
    assert task["gpu_memory_peak_source"] == "user", task
    # `melon submit` by URL knows no cluster: a generic job's first-run context reserve is held on the GPU beside
    # the expected memory, not put under the cap; the ledger holds that or the task's slot (a quarter of the 16 GiB
    # GPU), whichever is more, and the task registers what it holds
    context = first_run_mb("generic")
    need = 1536 + context
    assert task["gpu_memory_mb"] == max(need, 16384 // 4), task
    task_log = "".join(mc.container_logs(melon.cluster.work_dir, first["app_id"], "stderr").values())
    assert f"MiB held (1536 + {context} for the CUDA context" in task_log, task_log[-3000:]
    am_log = "".join(mc.container_logs(melon.cluster.work_dir, first["app_id"], "AppMaster.stdout").values())
    assert (
        "exceeded its expected GPU memory (cap 1024 MiB; peak seen 1024 MiB): asking again with 1536 MiB" in am_log
    ), am_log[-3000:]
    history = memory_history.folder(melon_hook.staging_dir, key)
    assert first["memory_history"] == f"{history}/{first['app_id']}.json"
    assert melon_hook.hdfs.status(history)["permission"] == "700"
    [run] = memory_history.read_history(melon_hook.hdfs, melon_hook.staging_dir, key)
    [record] = memory_history.role_runs([run], "worker")
    assert (record["peak_mb"], record["peak_source"]) == (1300, "user"), record
    # priority: auto -- the first run had no run time to learn from (priority 0); it recorded its own, which
    # the second run's YARN priority comes from (the launcher allows priorities up to learned.MAX_PRIORITY)
    app = melon_hook.yarn.get_application(first["app_id"])
    assert 0 < run["ran_s"] <= (app["finishedTime"] - app["launchTime"]) / 1000, (run, app)
    assert app["priority"] == 0, app

    second = melon.submit(job, "--wait", "--learn-as", key)
    assert second["final"]["final_status"] == "SUCCEEDED", second
    assert melon_hook.yarn.get_application(second["app_id"])["priority"] == learned.priority(run["ran_s"]) == 1
    [task] = melon_hook.final_status(second["app_id"])["tasks"]
    assert (task["initial_gpu_memory_mb"], task["expected_gpu_memory_mb"], task["oom_growths"]) == (1430, 1430, 0)
    assert (task["initial_gpu_context_mb"], task["gpu_context_mb"]) == (context, context)
    # `melon memory show` prints both figures the history teaches: the expected memory and the context reserve
    shown = melon.run("memory", "show", key)
    assert shown.returncode == 0, shown.stderr
    assert "learned now 1430 MiB (learned from the last 2 run(s): peak 1300 MiB × 1.10" in shown.stdout, shown.stdout
    assert (
        f"context reserve beside it: {context} MiB (learned from the last 2 run(s): ran with a context reserve of "
        f"{context} MiB" in shown.stdout
    ), shown.stdout
    assert "yes (cap)" in shown.stdout, shown.stdout  # the first run's OOM, at its cap
