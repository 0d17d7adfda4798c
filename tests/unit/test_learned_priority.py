"""priority: auto -- a task's run time recorded after each run (gpu/learned.ran_s), its estimate (the median of the
recent ones) and the YARN application priority it gives (longest first), resolved by the hook before submission.
The round trip through HDFS and a real ResourceManager: tests/integration/test_cli_live.py (the OOM test's two
runs)."""

from __future__ import annotations

from unittest import mock

import pytest

from airflow_provider_melon import submission
from airflow_provider_melon.gpu import learned
from airflow_provider_melon.hadoop import memory_history
from airflow_provider_melon.hooks.melon import MelonHook
from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.spec import JobSpec, JobSpecError

JOB = {"name": "j", "entrypoint": "python t.py", "roles": {"worker": {"instances": 1}}}


def _app(state="SUCCEEDED", launched=1_000_000, finished=1_000_000 + 95_500):
    return {"finalStatus": state, "startedTime": launched - 30_000, "launchTime": launched, "finishedTime": finished}


def _final(waited=5.5, formed=True):
    return {"gang": {"formed": formed, "waiting_s": waited}, "tasks": []}


def test_a_run_time_is_the_time_from_the_formed_gang_to_the_end():
    # 95.5 s from the AM's launch to the end, 5.5 of them waiting for the gang; the 30 s queued before it not counted
    assert learned.ran_s(_app(), _final()) == 90.0
    assert learned.ran_s(_app("FAILED"), _final()) is None  # a failed run says nothing of a whole run's length
    assert learned.ran_s(_app(), _final(formed=False)) is None
    assert learned.ran_s(_app(), None) is None and learned.ran_s(None, _final()) is None
    assert learned.ran_s({**_app(), "launchTime": 0}, _final()) is None


def test_the_estimate_is_the_median_of_the_recent_run_times():
    docs = [{"ran_s": 6000.0}] + [{"ran_s": t} for t in (600.0, 660.0, 30000.0, 720.0, 700.0)] + [{"roles": {}}]
    estimate, why = learned.learned_duration_s(docs)
    # the last 5 with a run time; the first (6000 s) is older than those, and one 30000 s run moves the median little
    assert estimate == 700.0 and "median run time of the last 5 successful run(s): 11.7 min" == why
    assert learned.learned_duration_s([{"ran_s": 600.0}, {"ran_s": 900.0}])[0] == 750.0
    assert learned.learned_duration_s([]) is None
    assert learned.learned_duration_s([{"roles": {}}, {"ran_s": None}, {"ran_s": True}, {"ran_s": -3}]) is None
    # JSON parsers read Infinity and NaN: no estimate, not a priority of log2(inf) that raises
    assert learned.learned_duration_s([{"ran_s": float("inf")}, {"ran_s": float("nan")}]) is None
    assert learned.ran_s({**_app(), "finishedTime": float("inf")}, _final()) is None


@pytest.mark.parametrize(
    "seconds, priority",
    [
        (5, 1),
        (60, 1),
        (61, 2),
        (75, 2),  # 2 ** (1/3) minutes is 75.6 s
        (76, 3),
        (120, 4),
        (121, 5),
        (40 * 60, 17),
        (64 * 60, 19),
        (65 * 60, 20),
        (203 * 60, 24),
        (204 * 60, 25),  # 2 ** (23 / 3) minutes is 203.2: the top, MAX_PRIORITY
        (256 * 60, 25),
        (257 * 60, 25),
        (8 * 3600, 25),
    ],
)
def test_each_doubling_of_the_run_time_is_three_priorities_more(seconds, priority):
    assert learned.priority(seconds) == priority


def test_the_spec_takes_auto_or_a_number_and_names_the_field_otherwise():
    assert JobSpec.from_dict(JOB).priority == "auto"
    assert JobSpec.from_dict({**JOB, "priority": 3}).priority == 3
    for bad in ("high", 2**31, 1.5):
        with pytest.raises(JobSpecError, match="priority"):
            JobSpec.from_dict({**JOB, "priority": bad})


def _context(spec):
    staged = submission.StagedFile("hdfs://nn/x", 1, 1)
    return submission.build_submission(
        spec, app_id="application_1_0001", am_jar=staged, plan=staged, secret="s", tags=[]
    )


def test_an_unresolved_auto_is_submitted_below_every_learned_priority():
    assert _context(JobSpec.from_dict(JOB))["priority"] == 0
    assert _context(JobSpec.from_dict({**JOB, "priority": 4}))["priority"] == 4


def _hook(**kwargs):
    return MelonHook(yarn_hook=YarnHook(rm_urls=["http://rm:8088"], user="alice"), hdfs_client=object(), **kwargs)


def test_the_hook_gives_auto_the_priority_of_the_learned_run_time_and_keeps_a_number():
    docs = [
        {"version": 1, "app_id": f"application_1_000{i}", "roles": {}, "ran_s": t}
        for i, t in enumerate((3000, 4200, 3900))
    ]
    with mock.patch.object(memory_history, "read_history", return_value=docs) as read:
        spec, notes = _hook().resolve_learned(JobSpec.from_dict(JOB), "dag/task")
        assert spec.priority == learned.priority(65 * 60) == 20
        assert notes == {
            "priority": [
                "priority auto: 20 (median run time of the last 3 successful run(s): 65.0 min; longer runs start first)"
            ]
        }
        fixed = JobSpec.from_dict({**JOB, "priority": 2})
        assert _hook().resolve_learned(fixed, "dag/task") == (fixed, {})  # nothing to learn: no history read
        assert read.call_count == 1
    with mock.patch.object(memory_history, "read_history", side_effect=OSError("HDFS down")):
        spec, notes = _hook().resolve_learned(JobSpec.from_dict(JOB), "dag/task")
    assert spec.priority == "auto" and notes["priority"] == [
        "priority auto: 0 (no successful run time in the history yet)"
    ]


def test_a_run_without_a_shared_gpu_is_recorded_for_its_run_time_alone():
    final = {"state": "SUCCEEDED", "tasks": [{"role": "worker"}], **_final()}
    with mock.patch.object(memory_history, "record_run", return_value="/h/a.json") as record:
        assert _hook().record_run("k", "application_1_0001", final, _app()) == "/h/a.json"
        assert record.call_args.args[4] == {} and record.call_args.kwargs["ran_s"] == 90.0
        # neither a shared role nor a run time: nothing to record
        assert _hook().record_run("k", "application_1_0002", final, _app("FAILED")) is None
    assert record.call_count == 1


SHARED = {
    **JOB,
    "roles": {
        "worker": {"instances": 2, "gpu_memory": "4GiB", "large": True},
        "ps": {"instances": 1},  # no GPU: stays as it is
    },
}


def _history(*run_s):
    return [{"version": 1, "app_id": f"application_1_{i:04d}", "roles": {}, "ran_s": t} for i, t in enumerate(run_s)]


def test_a_run_learned_to_take_hours_gets_whole_gpus_and_a_short_one_shares():
    with mock.patch.object(memory_history, "read_history", return_value=_history(3.5 * 3600, 3.2 * 3600)):
        spec, notes = _hook().resolve_learned(JobSpec.from_dict(SHARED), "dag/task")
    worker = spec.roles["worker"]
    assert (worker.gpus, worker.gpu_memory, worker.instances, worker.large) == (1, None, 2, True)
    assert spec.roles["ps"] == JobSpec.from_dict(SHARED).roles["ps"]
    assert spec.priority == 24  # 201 minutes
    assert notes["alone"] == [
        "roles.worker: a whole GPU per task, not a share (learned run time 3.4 h, alone_after_s 3 h: a neighbour "
        "would stretch it by up to 1.7x)"
    ]
    with mock.patch.object(memory_history, "read_history", return_value=_history(3.5 * 3600)):
        spec, _ = _hook().resolve_learned(JobSpec.from_dict({**SHARED, "priority": 2}), "dag/task")
    assert (spec.priority, spec.roles["worker"].gpus) == (2, 1)  # a priority of its own still runs alone
    with mock.patch.object(memory_history, "read_history", return_value=_history(2.9 * 3600)):
        spec, notes = _hook().resolve_learned(JobSpec.from_dict(SHARED), "dag/task")
    assert spec.roles["worker"].gpu_memory == 4096 and "alone" not in notes


def test_alone_after_s_comes_from_the_connection_and_0_turns_it_off():
    assert _hook().alone_after_s == learned.ALONE_AFTER_S == 3 * 3600
    with mock.patch.object(MelonHook, "_yarn_extra", return_value={"alone_after_s": "7200"}):
        assert _hook().alone_after_s == 7200.0
    with mock.patch.object(memory_history, "read_history", return_value=_history(20 * 3600)):
        spec, notes = _hook(alone_after_s=0).resolve_learned(JobSpec.from_dict(SHARED), "dag/task")
    assert (
        spec.roles["worker"].gpu_memory == 4096 and spec.priority == learned.MAX_PRIORITY == 25 and "alone" not in notes
    )
    for bad in ("soon", -1):
        with pytest.raises(ValueError, match="alone_after_s"):
            _hook(alone_after_s=bad)
