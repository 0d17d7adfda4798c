"""Retries reattach instead of resubmitting; kills kill. Real Airflow task runs, real RM."""

from __future__ import annotations

import json
import os
import signal

import pytest

from airflow_provider_melon.hadoop.app_state import LIVE_STATES
from airflow_provider_melon.version_compat import RESUMABLE_JOBS
from tests.waits import causes, rm_cause, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _log_tail(path, lines: int = 30):
    """The ``airflow tasks test`` process's output, as a wait's cause."""

    def picture() -> str:
        text = path.read_text(errors="replace") if path.exists() else "(no output yet)"
        return f"task output {path.name} (tail):\n" + "\n".join(text.splitlines()[-lines:])

    return picture


@pytest.mark.parametrize(
    "task_id,date,how",
    [
        # Airflow 3.3 ResumableJobMixin, task state store; below 3.3 (no task state store: version_compat's stand-in)
        # the durable task reattaches by its tags as well
        ("train", "2026-02-01", "Reconnecting to existing job" if RESUMABLE_JOBS else "found by tags"),
        ("train_by_tags", "2026-02-03", "found by tags"),  # any version: the app's tags
    ],
)
def test_retry_after_a_crashed_worker_reattaches(airflow, melon_hook, tmp_path, task_id, date, how):
    before = {a["id"] for a in melon_hook.yarn.find_applications(["airflow-dag:melon_e2e_probe"])}
    # The app runs until the test releases it, once the retry has reattached: else, on a loaded machine, the retry's
    # start-up can outlast it and find it SUCCEEDED (a valid path, but not the one under test; it failed so once
    # with a fixed 50 s app). 600 s is only a backstop; the finally releases it in any case.
    release = tmp_path / "release"
    params = ("--task-params", json.dumps({"seconds": 600, "release_file": str(release)}))
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    try:
        first = airflow.popen("tasks", "test", "melon_e2e_probe", task_id, date, *params, log=first_log)
        app = wait_for(
            lambda: [
                a
                for a in melon_hook.yarn.find_applications(["airflow-dag:melon_e2e_probe"])
                if a["id"] not in before and a["state"] in LIVE_STATES
            ],
            120,
            "the first submission",
            cause=causes(_log_tail(first_log), rm_cause(melon_hook)),
        )[0]
        # Kill only once the first try follows the app: its first poll line comes after ResumableJobMixin has
        # put the id in the task state store. (Killed between submit and that line, the retry still reattaches,
        # by tags, which the other case tests: CI once hit exactly that window.)
        wait_for(
            lambda: f"YARN application {app['id']}: - ->" in first_log.read_text(errors="replace"),
            120,
            "the first try to poll the app",
            cause=causes(_log_tail(first_log), rm_cause(melon_hook, app["id"])),
        )
        # The worker dies without running on_kill (SIGKILL): the YARN application lives on.
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
        assert melon_hook.yarn.get_application(app["id"])["state"] in LIVE_STATES

        second = airflow.popen("tasks", "test", "melon_e2e_probe", task_id, date, *params, log=second_log)
        wait_for(
            lambda: (lambda out: app["id"] in out and how in out)(second_log.read_text(errors="replace")),
            300,
            f"the retry to say '{how}' of {app['id']}",
            cause=causes(_log_tail(second_log), rm_cause(melon_hook, app["id"])),
        )
        release.touch()
        assert second.wait(300) == 0, _log_tail(second_log, 60)()
    finally:
        release.touch()
    mine = [a for a in melon_hook.yarn.find_applications(["airflow-dag:melon_e2e_probe"]) if a["id"] not in before]
    assert [a["id"] for a in mine] == [app["id"]], "the retry must reattach, not resubmit"
    assert melon_hook.yarn.get_application(app["id"])["finalStatus"] == "SUCCEEDED"


def test_killing_the_task_kills_the_application(airflow, melon_hook, tmp_path):
    date = "2026-02-02"
    before = {a["id"] for a in melon_hook.yarn.find_applications(["airflow-dag:melon_e2e_probe"])}
    # 300 s: `airflow tasks test`'s own start-up, the submission and the AM's container start on a loaded machine
    # (a run beside the other test worker took 50 s to start the task and had no RUNNING app after 120 s)
    proc = airflow.popen(
        "tasks",
        "test",
        "melon_e2e_probe",
        "train",
        date,
        "--task-params",
        '{"seconds": 120}',
        log=tmp_path / "kill.log",
    )
    app = wait_for(
        lambda: [
            a
            for a in melon_hook.yarn.find_applications(["airflow-dag:melon_e2e_probe"])
            if a["id"] not in before and a["state"] == "RUNNING"
        ],
        300,
        "a RUNNING app",
        cause=causes(_log_tail(tmp_path / "kill.log"), rm_cause(melon_hook)),
    )[0]
    os.kill(proc.pid, signal.SIGTERM)  # what a user marking the task failed does to its worker
    # bounded, not timed (the app sleeps 120 s: KILLED before that is the kill, not the job ending)
    wait_for(
        lambda: melon_hook.yarn.get_application(app["id"])["state"] == "KILLED",
        60,
        "the app KILLED",
        cause=causes(_log_tail(tmp_path / "kill.log"), rm_cause(melon_hook, app["id"])),
    )
    proc.wait(60)


def test_tasks_whose_readable_tags_collide_each_train_their_own_app(airflow, melon_hook):
    """Two chained tasks of a task group whose ids share their first 87+ characters, and two whose ids differ only
    in case, get the same readable tags (cut at 100 characters, lower-cased by YARN): each must submit and train
    its own application — none may reattach to the other's SUCCEEDED one."""
    from tests.e2e.dags.melon_e2e_long_ids import GROUP

    ids = [f"{GROUP}.train_a", f"{GROUP}.train_b", "Train_case", "train_case"]
    assert len(ids[0]) > 87 and ids[0][:87] == ids[1][:87]
    before = {a["id"] for a in melon_hook.yarn.find_applications(["airflow-dag:melon_e2e_long_ids"])}
    result = airflow.run("dags", "test", "melon_e2e_long_ids", "2026-03-01", timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    apps = [a for a in melon_hook.yarn.find_applications(["airflow-dag:melon_e2e_long_ids"]) if a["id"] not in before]
    picture = [
        (a["id"], a["state"], a["finalStatus"], [t for t in a["applicationTagList"] if "task" in t]) for a in apps
    ]
    reattached = [line.split("] ", 1)[-1][:160] for line in out.splitlines() if "Reattaching" in line]
    assert not reattached, (reattached, picture)
    assert len(apps) == len(ids) and all(a["finalStatus"] == "SUCCEEDED" for a in apps), picture
    assert len({a["id"] for a in apps}) == len(ids), picture
