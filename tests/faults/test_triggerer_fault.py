"""Airflow's triggerer killed (SIGKILL) in 10 trials, each at a random point of the trigger's poll cycle, while a train
task is deferred and its job prints 200 lines (a run takes as many trials as land while its job runs; another run
takes the rest, until all 10 have landed; after a run's last trial its job prints the rest without pausing): the
YARN application keeps running, the task stays deferred, and each new triggerer resumes the trigger; the task
succeeds, with one application, and every job line reaches the task log at least once and in order. The new
trigger goes on from the offsets the old one saved (an XCom) before it logged its last lines — one batch behind —,
so the lines the old one may have logged into a log that never got them come again, marked
``[re-shown @<offset>]``; no line comes again unmarked."""

from __future__ import annotations

import json
import random
import re
import time

import pytest

from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.submission import run_tag
from airflow_provider_melon.triggers.yarn import LOG_STATE_XCOM_KEY
from tests.waits import airflow_cause, causes, rm_cause, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAG_ID, TASK_ID = "melon_fault_probe", "train"
LINES, PER_SECOND, TRIALS = 200, 0.5, 10
POLL_S = 5  # the probe DAG's poll_interval: a trial kills at a random point of one cycle
# A triggerer takes over the triggers of one whose last heartbeat is older than ITS OWN
# [triggerer] triggerer_health_check_threshold (Trigger.assign_unassigned; 30 s by default). The successors this test
# starts use 10 s (5 of the stack's 2 s heartbeats): the killed one never beats again, and no other triggerer runs
# for the low threshold to misjudge, so each trial waits 20 s less for the takeover and nothing else changes.
SUCCESSOR_ENV = {"AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10"}
PLAIN = re.compile(r"worker:0 \| probe (\d+)\b")
MARKED = re.compile(r"worker:0 \[re-shown @(\d+)\] \| probe (\d+)\b")


def _ti(stack, run_id: str) -> dict:
    """The train task instance; ``{}`` while the api-server does not answer (a loaded machine: not the fault)."""
    try:
        tis = stack.task_instances(DAG_ID, run_id)
    except OSError:  # timeouts included
        return {}
    [ti] = [t for t in tis if t["task_id"] == TASK_ID]
    return ti


def _wait_ti(stack, run_id: str, cond, timeout: float, what: str) -> dict:
    """The task instance once ``cond(ti)`` holds; the failure shows the run's task instances and the task's log."""
    return wait_for(
        lambda: (lambda ti: ti if cond(ti) else None)(_ti(stack, run_id)),
        timeout,
        what,
        every=1,
        cause=airflow_cause(stack, DAG_ID, run_id, TASK_ID),
    )


def job_lines(task_log: str) -> list[tuple[int, bool]]:
    """(probe number, marked re-shown) of each job line of the task log, in order."""
    out = []
    for line in task_log.splitlines():
        if m := MARKED.search(line):
            out.append((int(m.group(2)), True))
        elif m := PLAIN.search(line):
            out.append((int(m.group(1)), False))
    return out


def events(trigger_log: str) -> list[str]:
    """A trigger log's events less the job's own lines (for a failure message)."""
    out = []
    for line in trigger_log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            out.append(line[:200])
            continue
        if "| probe" not in str(entry.get("event")):
            out.append(f"{entry.get('timestamp', '')[11:23]} {str(entry.get('event'))[:200]}")
    return out[:60]


def test_triggerer_killed_while_a_train_task_is_deferred(airflow_stack, melon_hook, fault_row, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}")
    trials: list[tuple[str, int, float]] = []  # (run, triggerer id, seconds after the save it followed)
    for attempt in range(TRIALS):  # a run whose job ended before all trials landed is followed by another
        if len(trials) >= TRIALS:
            break
        with fault_row(
            f"Airflow triggerer SIGKILLed while a train task was deferred (run {attempt + 1}, "
            f"{TRIALS - len(trials)} trials to go)",
            hook=melon_hook,
            where="mini cluster + real Airflow",
        ) as row:
            trials += _run_with_kills(
                airflow_stack, melon_hook, rng, TRIALS - len(trials), row, tmp_path / f"hurry-{attempt}"
            )
    print(f"seed {seed}: trials (run, killed triggerer, seconds after a save) {trials}")
    assert len(trials) == TRIALS, f"only {len(trials)} of {TRIALS} trials landed while a job ran: {trials}"


def _run_with_kills(stack, melon_hook, rng: random.Random, most: int, row, hurry) -> list[tuple[str, int, float]]:
    """One run of the probe DAG with up to ``most`` triggerer kills while its job streams; every check on it. Once
    the kills are done, ``hurry`` is made: the job prints its remaining lines without pausing."""
    run_id = stack.trigger(DAG_ID, conf={"lines": LINES, "per_second": PER_SECOND, "hurry_file": str(hurry)})
    ti = _wait_ti(
        stack,
        run_id,
        lambda t: t.get("state") == "deferred" and t.get("triggerer_job"),
        300,
        "the train task deferred to a triggerer",
    )
    [app] = melon_hook.yarn.find_applications([f"airflow-dag:{DAG_ID}", run_tag(run_id)], match_all=True)
    row.app_id = app["id"]
    cause = causes(airflow_cause(stack, DAG_ID, run_id, TASK_ID), rm_cause(melon_hook, app["id"]))

    def saved_seq() -> int:
        try:
            value = stack.xcom(DAG_ID, run_id, TASK_ID, LOG_STATE_XCOM_KEY)
        except Exception:  # noqa: BLE001 - not saved yet
            return 0
        return (json.loads(value) if isinstance(value, str) else value)["state"]["seq"]

    def ended() -> bool:
        return melon_hook.yarn.get_application(app["id"])["state"] in TERMINAL_STATES

    killed: list[tuple[str, int, float]] = []
    triggerer = ti["triggerer_job"]["id"]
    while len(killed) < most:
        # the current trigger streams: it saved offsets since it took over (read now: a save of the killed one
        # landed before this)
        seq = saved_seq()
        wait_for(
            lambda: saved_seq() > seq or ended(),
            240,
            f"the trigger on triggerer {triggerer} to save job log offsets past seq {seq}",
            every=0.3,
            cause=cause,
        )
        if ended():
            break  # the job is over: the next run takes the remaining trials
        delay = rng.uniform(0, POLL_S)  # a random point of the trigger's poll cycle
        time.sleep(delay)
        if ended():
            break
        stack.kill_component("triggerer")
        killed.append((run_id, triggerer, round(delay, 2)))
        row.injected()
        # no triggerer at all: nothing fails, the task stays deferred and the application runs on
        assert wait_for(lambda: _ti(stack, run_id).get("state"), 60, "the task's state", cause=cause) == "deferred"
        stack.start_component("triggerer", env=SUCCESSOR_ENV)
        taken = _wait_ti(
            stack,
            run_id,
            lambda t: (t.get("triggerer_job") or {}).get("id") not in (None, triggerer) or t.get("state") == "success",
            240,
            f"a new triggerer to take the trigger over from {triggerer}",
        )
        row.recovered()
        if taken.get("state") == "success":
            break
        triggerer = taken["triggerer_job"]["id"]

    hurry.touch()  # the trials are over: the rest of the job's lines come at once (the new trigger shows them all)
    run = stack.wait_run(DAG_ID, run_id, timeout=600)
    assert run["state"] == "success", stack.run_picture(DAG_ID, run_id, TASK_ID)
    apps = melon_hook.yarn.find_applications([f"airflow-dag:{DAG_ID}", run_tag(run_id)], match_all=True)
    assert [a["id"] for a in apps] == [app["id"]] and apps[0]["finalStatus"] == "SUCCEEDED", apps
    if not killed:
        return killed  # the job ended before a trial landed: nothing more to check of this run

    # each triggerer that ran the trigger has its own log of it; each after a kill went on from saved offsets
    first = ti["triggerer_job"]["id"]
    logs_dir = stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / f"task_id={TASK_ID}"
    trigger_logs = {int(p.name.split(".")[-2]): p.read_text() for p in logs_dir.glob("attempt=1.log.trigger.*.log")}
    assert {t for _, t, _ in killed} <= set(trigger_logs), (killed, sorted(trigger_logs))
    later = [text for tid, text in sorted(trigger_logs.items()) if tid != first]
    assert len(later) >= len(killed), (killed, sorted(trigger_logs))
    resumed = [
        tid for tid, text in trigger_logs.items() if "goes on from the offsets the previous trigger saved" in text
    ]
    assert set(resumed) >= {tid for tid in trigger_logs if tid != first}, {
        tid: events(text) for tid, text in trigger_logs.items() if tid not in resumed
    }
    # The app's end is in the resumed task's own log, with the rest of the job log (triggers/yarn.py: a trigger's
    # last lines before its event can miss its log file; a run here lost the final batch's last 21 lines and the
    # outcome line that way, before the rest moved to the resumed task).
    task_log = stack.task_log(DAG_ID, run_id, TASK_ID)
    assert f"YARN application {app['id']} SUCCEEDED in" in task_log, task_log[-3000:]
    assert "worker:0 | probe done" in task_log
    shown = job_lines(task_log)
    missing = sorted(set(range(LINES)) - {n for n, _ in shown})
    assert not missing, f"job lines lost across {len(killed)} triggerer kills: {missing}"
    plain = [n for n, marked in shown if not marked]
    assert plain == sorted(set(plain)), f"a line came again unmarked, or out of order: {plain}"
    first_seen = list(dict.fromkeys(n for n, _ in shown))
    assert first_seen == list(range(LINES)), f"job lines out of order: {first_seen}"
    # every kill came after a save one batch behind: each new trigger shows that batch again, marked
    marked = sum(m for _, m in shown)
    assert marked > 0, "no line was re-shown after a triggerer kill: the restore point is not one batch behind"
    print(f"{run_id}: {marked} lines re-shown (marked) after {len(killed)} kills")
    return killed
