"""The example DAGs on a real Airflow (api-server, scheduler, dag-processor, triggerer; LocalExecutor with 4
slots), triggered through the REST API as the UI's Trigger button does (no logical date), all at once, against
the real mini cluster. A second run of the HPO DAG is triggered from the CLI with a logical date (what a
scheduled run has), at the same time as the first: both must succeed, each in its own folder.

While the runs go on, a watcher polls the REST API and records every task instance's state, trigger and
triggerer job, so the tests can assert that deferred tasks were held by the triggerer process.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

import pytest

from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.dev.local_airflow import LocalAirflowError
from airflow_provider_melon.hadoop import memory_history
from airflow_provider_melon.hadoop.app_state import LIVE_STATES
from airflow_provider_melon.hadoop.hdfs_io import run_slug
from airflow_provider_melon.runtime.outputs import hdfs_path
from airflow_provider_melon.spec import JobSpec
from airflow_provider_melon.submission import run_tag
from tests.waits import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TRIGGER_CLASS = "airflow_provider_melon.triggers.yarn.YarnApplicationTrigger"
CLI_RUN_ID = "cli__2026-01-02T00:00:00+00:00"


class Runs:
    """The triggered runs and what the watcher saw of their task instances."""

    def __init__(self, stack):
        self.stack = stack
        self.ids: dict[str, tuple[str, str]] = {}
        self.seen: dict[tuple[str, str, str, int], list[dict]] = defaultdict(list)
        self.finished: dict[str, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self.releases: dict[tuple[str, str], Path] = {}  # (name, task_id) -> file made once it is seen deferred

    def add(self, name: str, dag_id: str, run_id: str) -> None:
        self.ids[name] = (dag_id, run_id)

    def release_when_deferred(self, name: str, task_id: str, path: Path) -> None:
        """Make ``path`` once the watcher has seen that task instance deferred to a triggerer and the scheduler has
        taken in its worker's exit (what a job that waits for ``path`` needs to end only after the deferral was seen).

        The second condition is Airflow's, not ours: a trigger that fires before the scheduler has processed the
        executor's success event for the worker that deferred makes the scheduler read that stale event as a task
        killed outside it ("finished with state success, but the task instance's state attribute is queued") and
        fail the task (apache/airflow#67287, fixed on main by #68741, not in 3.3.2). A job released the moment the
        deferral shows lets the trigger fire within one poll, and on a loaded host the scheduler took 8 s to process
        that event (the make test run of 2026-12-05 17:51, docs/development.md)."""
        self.releases[(name, task_id)] = path

    def _defer_exit_processed(self, dag_id: str, run_id: str, task_id: str) -> bool:
        """Whether the scheduler's log says it processed the executor event of that task instance's deferral: its
        "TaskInstance Finished: dag_id=..., task_id=..., run_id=..., ... state=deferred" line (Airflow 3.0-3.3)."""
        head = f"TaskInstance Finished: dag_id={dag_id}, task_id={task_id}, run_id={run_id},"
        try:
            text = self.stack.log_file("scheduler").read_text(errors="replace")
        except OSError:
            return False
        return any(head in line and "state=deferred" in line for line in text.splitlines())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _watch(self) -> None:
        while not self._stop.is_set():
            for name, (dag_id, run_id) in list(self.ids.items()):
                try:
                    tis = self.stack.task_instances(dag_id, run_id)
                except Exception:  # noqa: BLE001 - a busy api-server: next round
                    continue
                for ti in tis:
                    self.seen[(dag_id, run_id, ti["task_id"], ti["map_index"])].append(
                        {
                            "t": time.time(),
                            "state": ti["state"],
                            "trigger": (ti.get("trigger") or {}).get("classpath"),
                            "triggerer_job": (ti.get("triggerer_job") or {}).get("id"),
                        }
                    )
                    release = self.releases.get((name, ti["task_id"]))
                    if (
                        release
                        and not release.exists()
                        and ti["state"] == "deferred"
                        and ti.get("triggerer_job")
                        and self._defer_exit_processed(dag_id, run_id, ti["task_id"])
                    ):
                        release.touch()
            self._stop.wait(1.5)

    def wait(self, name: str, timeout: float = 1200) -> tuple[str, str, dict]:
        dag_id, run_id = self.ids[name]
        if name not in self.finished:
            self.finished[name] = self.stack.wait_run(dag_id, run_id, timeout)
        run = self.finished[name]
        assert run["state"] == "success", f"{name}: run {run['state']}\n{self.stack.run_picture(dag_id, run_id)}"
        return dag_id, run_id, run

    def deferred_by(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[tuple[str, int]]:
        """(trigger class, triggerer job id) of every observation of that task instance in state deferred."""
        return [
            (o["trigger"], o["triggerer_job"])
            for o in self.seen[(dag_id, run_id, task_id, map_index)]
            if o["state"] == "deferred"
        ]


@pytest.fixture(scope="module")
def runs(airflow_stack, minicluster, tmp_path_factory):
    from airflow_provider_melon.cli import melon_hook_for_cluster

    stack, melon_hook = airflow_stack, melon_hook_for_cluster(minicluster.work_dir)
    # an application "submitted elsewhere", for the sensor DAG to wait on (by tag). It runs until the watcher has
    # seen the sensor deferred (the file ``release``; the mini cluster's containers share this host): a fixed
    # lifetime (it slept 30 s) raced the scheduler, and on a loaded host the sensor started after the app had ended
    # and never deferred (the make test-repeat round of 2026-12-03 08:54, docs/development.md)
    tag = f"external-{uuid.uuid4().hex[:8]}"
    code = tmp_path_factory.mktemp("external-code")
    release = tmp_path_factory.mktemp("external-release") / "go"
    spec = JobSpec.from_dict(
        {
            "name": "submitted-elsewhere",
            "framework": "generic",
            "code": str(code),
            "entrypoint": f"python -c \"import os, time\nwhile not os.path.exists('{release}'): time.sleep(0.5)\"",
            "tags": [tag],
            "roles": {"worker": {"memory": 256}},
        }
    )
    external_app = melon_hook.submit(spec)["app_id"]

    # the watcher runs before the first run is triggered: started after them (the CLI trigger takes seconds, more
    # on a loaded host), it first saw an HPO trial 59 s after its run was triggered, once its deferral was over
    # (the make test-repeat round of 2026-12-03 15:49, docs/development.md)
    r = Runs(stack)
    r.external_app = external_app
    r.start()
    try:
        r.add("mnist", "melon_mnist_pipeline", stack.trigger("melon_mnist_pipeline"))
        r.add("hpo", "melon_hpo_fanout", stack.trigger("melon_hpo_fanout"))
        r.add("hpo_cli", "melon_hpo_fanout", CLI_RUN_ID)  # watched from before the run exists: the CLI is slow
        cli = stack.cli(
            "dags", "trigger", "melon_hpo_fanout", "--run-id", CLI_RUN_ID, "--logical-date", "2026-01-02T00:00:00+00:00"
        )
        assert cli.returncode == 0, cli.stdout[-3000:] + cli.stderr[-3000:]
        r.add("ps", "melon_ps_planned", stack.trigger("melon_ps_planned"))
        r.add("watch", "melon_external_app_watch", stack.trigger("melon_external_app_watch", conf={"tag": tag}))
        r.release_when_deferred("watch", "wait_for_external_app", release)
        yield r
    finally:
        r.stop()
        release.touch()  # the app ends whatever the tests saw
        end_runs(stack, melon_hook, list(r.ids.values()))


def end_runs(stack, melon_hook, runs) -> None:
    """End the runs the fixture triggered, and their YARN applications, whatever the tests waited for. A test that
    selects one of this module's tests (the CI's Airflow 3.0 subset runs only the HPO test) leaves the others' runs
    training: the next module on the cluster then found the MNIST run's workers on its GPUs (the CI run of stop 58,
    ``test_would_it_fit_form``: "3 of 4 fit")."""
    ended = {"success", "failed"}
    for dag_id, run_id in runs:
        try:
            run = stack.api("GET", f"/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}")
        except LocalAirflowError:
            continue  # never created (the CLI trigger failed): nothing runs
        if run["state"] not in ended:  # failed first, so that no retry resubmits what is killed below
            stack.api("PATCH", f"/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}", {"state": "failed"})
        for app in melon_hook.yarn.find_applications([run_tag(run_id)], LIVE_STATES):
            melon_hook.yarn.kill_application(app["id"])
    wait_for(
        lambda: not any(melon_hook.yarn.find_applications([run_tag(run_id)], LIVE_STATES) for _, run_id in runs),
        120,
        "the fixture's runs' applications to end",
    )


def _app_window(app: dict) -> tuple[float, float]:
    return app["startedTime"] / 1000, app["finishedTime"] / 1000


def _max_overlap(windows: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in windows] + [(e, -1) for _, e in windows])
    best = cur = 0
    for _, delta in events:
        cur += delta
        best = max(best, cur)
    return best


def test_mnist_pipeline_triggered_like_the_ui(runs, airflow_stack, melon_hook):
    dag_id, run_id, run = runs.wait("mnist")
    assert run["logical_date"] is None  # the UI's Trigger button: no logical date, so no ts_nodash
    result = airflow_stack.xcom(dag_id, run_id, "publish")
    assert result["accuracy"] >= result["threshold"], result
    # the run's folder is named from its run id, and the published model is there
    assert result["published"].endswith(f"/models/mnist/{run_slug(run_id)}"), result
    assert "saved_model.pb" in melon_hook.hdfs.list(hdfs_path(result["published"]))
    apps = melon_hook.yarn.find_applications(["airflow-dag:melon_mnist_pipeline", run_tag(run_id)], match_all=True)
    assert {a["name"]: a["finalStatus"] for a in apps if a["name"] != "mnist-mwms-profile"} == {
        "mnist-mwms": "SUCCEEDED",
        "mnist-evaluate": "SUCCEEDED",
    }, apps


def test_hpo_runs_in_parallel_with_trials_held_by_the_triggerer(runs, airflow_stack, melon_hook):
    triggerers = airflow_stack.triggerer_job_ids()
    assert len(triggerers) == 1, triggerers  # the stack's one triggerer process
    outs = set()
    for name in ("hpo", "hpo_cli"):
        dag_id, run_id, run = runs.wait(name)
        best = airflow_stack.xcom(dag_id, run_id, "pick_best")
        assert best["lr"] in (0.01, 0.1, 0.5, 1.0) and 0 < best["accuracy"] <= 1, best
        where = airflow_stack.xcom(dag_id, run_id, "ingest")
        assert where["out"].endswith(f"/hpo/{run_slug(run_id)}"), where
        outs.add(where["out"])
        assert sorted(melon_hook.hdfs.list(where["out"])) == [f"trial-{i}" for i in range(4)]  # published outputs
        apps = [
            a
            for a in melon_hook.yarn.find_applications(
                ["airflow-dag:melon_hpo_fanout", run_tag(run_id)], match_all=True
            )
            if a["name"].startswith("hpo-trial-")
        ]
        assert sorted(a["name"] for a in apps) == [f"hpo-trial-{i}" for i in range(4)], apps
        assert all(a["finalStatus"] == "SUCCEEDED" for a in apps), apps
        trial_app = {int(a["name"].rsplit("-", 1)[1]): a["id"] for a in apps}
        for i in range(4):
            held = runs.deferred_by(dag_id, run_id, "trial", i)
            assert held, f"{name} trial[{i}] was never seen deferred: {runs.seen[(dag_id, run_id, 'trial', i)]}"
            assert {h for h in held if h[1] is not None} <= {(TRIGGER_CLASS, triggerers[0])}, held
            # the triggerer process wrote the trigger's own log lines for this task instance: its polls of this
            # trial's own app (the line it logs right before its event can miss the file, triggers/yarn.py)
            trigger_log = (
                airflow_stack.home
                / "logs"
                / f"dag_id={dag_id}"
                / f"run_id={run_id}"
                / "task_id=trial"
                / f"map_index={i}"
                / f"attempt=1.log.trigger.{triggerers[0]}.log"
            )
            assert f"YARN application {trial_app[i]}" in trigger_log.read_text(), (trial_app[i], trigger_log)
        overlap = _max_overlap([_app_window(a) for a in apps])
        print(f"{name}: {run_id}: trials' YARN apps ran up to {overlap} at once")
        assert overlap >= 2, [_app_window(a) for a in apps]
    assert len(outs) == 2  # two concurrent runs of one DAG never share an output folder
    cli_run = runs.finished["hpo_cli"]
    assert cli_run["logical_date"] and cli_run["logical_date"].startswith("2026-01-02")


def test_hpo_trials_start_at_the_gpu_memory_earlier_runs_taught(runs, airflow_stack, melon_hook):
    """``gpu_memory: auto:6GiB``: once the two concurrent runs above have ended, each of their trials is in
    the task's history (one file a run, in the user's 0700 profiles/ folder), and a third run's trials start at the
    figure those runs taught (they succeeded at 6144 MiB; no GPU here reports a peak). The trial's log says so, and
    the AM carries the same line as a label, which the UI's job page shows."""
    for name in ("hpo", "hpo_cli"):
        runs.wait(name)
    history = memory_history.folder(melon_hook.staging_dir, "melon_hpo_fanout/trial/map-0")  # each trial its own
    recorded = melon_hook.hdfs.list(history)
    assert len(recorded) >= 2 and melon_hook.hdfs.status(history)["permission"] == "700", recorded
    run_id = airflow_stack.trigger("melon_hpo_fanout")
    run = airflow_stack.wait_run("melon_hpo_fanout", run_id, 1200)
    assert run["state"] == "success", airflow_stack.run_picture("melon_hpo_fanout", run_id)
    learned = (
        f"roles.worker.gpu_memory auto: 6144 MiB (learned from the last {min(len(recorded), 5)} run(s): "
        "succeeded at 6144 MiB in run"
    )
    text = airflow_stack.task_log("melon_hpo_fanout", run_id, "trial", map_index=0)
    assert learned in text, text[-3000:]
    [app] = [
        a
        for a in melon_hook.yarn.find_applications(["airflow-dag:melon_hpo_fanout", run_tag(run_id)], match_all=True)
        if a["name"] == "hpo-trial-0"
    ]
    final = melon_hook.final_status(app["id"])
    assert final["labels"]["gpu_memory"].startswith(learned), final["labels"]
    assert final["tasks"][0]["initial_gpu_memory_mb"] == 6144, final["tasks"]


def test_trial_task_log_is_readable(runs, airflow_stack):
    dag_id, run_id, _ = runs.wait("hpo")
    text = airflow_stack.task_log(dag_id, run_id, "trial", map_index=2)
    assert "Submitting hpo-trial-2" in text and "staged hdfs://" in text, text[-3000:]
    assert "hdfs.client" not in text, [line for line in text.splitlines() if "hdfs.client" in line][:5]


def test_ps_planned(runs, melon_hook, minicluster):
    dag_id, run_id, _ = runs.wait("ps")
    [app] = melon_hook.yarn.find_applications(["airflow-dag:melon_ps_planned", run_tag(run_id)], match_all=True)
    assert (app["name"], app["finalStatus"]) == ("ps-planned", "SUCCEEDED"), app.get("diagnostics")
    logs = mc.container_logs(minicluster.work_dir, app["id"])
    assert sum("[ps-train] ps:" in text and "serving" in text for text in logs.values()) == 2, logs
    assert sum("[ps-train] worker:" in text and "serving" in text for text in logs.values()) == 2, logs
    assert any("[ps-train] batch 1024 per worker; 2 worker(s), 2 ps" in text for text in logs.values()), logs


def test_external_app_watch_sensor_deferred(runs, airflow_stack, melon_hook):
    dag_id, run_id, _ = runs.wait("watch")
    held = runs.deferred_by(dag_id, run_id, "wait_for_external_app")
    assert held and any(h == (TRIGGER_CLASS, airflow_stack.triggerer_job_ids()[0]) for h in held), held
    assert melon_hook.yarn.get_application(runs.external_app)["state"] == "FINISHED"
    assert runs.external_app in airflow_stack.task_log(dag_id, run_id, "wait_for_external_app")
