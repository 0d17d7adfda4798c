"""gpu_memory: auto — the spec's forms, the learned figure (gpu/learned.py), and the resolution with its sources
(hadoop/memory_history.resolve). The HDFS store round trip per tenant is tested live (tests/integration/
test_oom_live.py)."""

from __future__ import annotations

import pytest

from airflow_provider_melon.gpu import learned
from airflow_provider_melon.hadoop import memory_history
from airflow_provider_melon.spec import JobSpec, JobSpecError, RoleSpec, override_gpu_memory


def _job(**role):
    return {"name": "j", "entrypoint": "python t.py", "roles": {"worker": {"instances": 1, **role}}}


def test_auto_forms_and_errors():
    assert RoleSpec(gpu_memory="auto").gpu_memory_auto
    assert RoleSpec(gpu_memory="auto").gpu_memory_first_mb is None
    assert RoleSpec(gpu_memory=" AUTO:2GiB ").gpu_memory_first_mb == 2048
    assert RoleSpec(gpu_memory="2GiB").gpu_memory_mb == 2048 and not RoleSpec(gpu_memory=2048).gpu_memory_auto
    with pytest.raises(ValueError, match="not resolved yet"):
        RoleSpec(gpu_memory="auto").gpu_memory_mb
    for bad in ("automatic", "auto:", "auto:lots"):
        with pytest.raises(JobSpecError, match=r"roles\.worker\.gpu_memory"):
            JobSpec.from_dict(_job(gpu_memory=bad))
    with pytest.raises(JobSpecError, match=r"roles\.worker\.oom_growth"):
        JobSpec.from_dict(_job(gpu_memory="1g", oom_growth=1.0))
    # round trip keeps the form
    spec = JobSpec.from_dict(_job(gpu_memory="auto:1GiB"))
    assert JobSpec.from_dict(spec.to_dict()).roles["worker"].gpu_memory_first_mb == 1024


def test_oom_growths_off_and_exclusive():
    assert RoleSpec(gpu_memory="1g").oom_growths == 2
    assert RoleSpec(gpu_memory="1g", oom_retry=False).oom_growths == 0
    assert RoleSpec(gpus=1).oom_growths == 0  # exclusive GPUs: an OOM is reported, never retried with more


def test_operator_override_is_an_auto_roles_first_figure():
    data = {"roles": {"a": {"gpu_memory": "auto"}, "b": {"gpu_memory": "1g"}, "c": {}}}
    assert override_gpu_memory(data, "838MiB") == ["a", "b"]
    assert data["roles"] == {"a": {"gpu_memory": "auto:838MiB"}, "b": {"gpu_memory": "838MiB"}, "c": {}}


def run(app, state="SUCCEEDED", expected=1024, peak=None, oom=False):
    return {"app_id": app, "state": state, "expected_mb": expected, "peak_mb": peak, "oom": oom}


def test_learned_figure_rules():
    assert learned.learned_mb([]) is None
    assert learned.learned_mb([run("a", state="KILLED")]) is None  # taught nothing
    mb, why = learned.learned_mb([run("a", expected=1536)])
    assert mb == 1536 and "succeeded at 1536 MiB in run a" in why
    mb, why = learned.learned_mb([run("a", expected=1536, peak=1300)])
    assert mb == 1430 and "peak 1300 MiB × 1.10" in why  # the measured peak beats the figure it ran at
    mb, why = learned.learned_mb([run("a", state="FAILED", expected=2304, oom=True)], growth=1.5)
    assert mb == 3456 and "out of memory at 2304 MiB" in why
    # the largest of the recent runs; runs older than RECENT are forgotten
    runs = [run("old", expected=9000)] + [run(f"r{i}", expected=1000 + i) for i in range(learned.RECENT)]
    assert learned.learned_mb(runs)[0] == 1000 + learned.RECENT - 1
    assert learned.learned_mb([run("a", peak=90000)], largest_gpu_mb=81920)[0] == 81920


def test_run_record_from_the_am_final_status():
    tasks = [
        {"role": "worker", "index": 0, "initial_gpu_memory_mb": 1024, "expected_gpu_memory_mb": 1536,
         "gpu_memory_peak_mb": None, "oom_growths": 1, "oom": {"cap_mb": 1024, "peak_mb": 1100}},
        {"role": "worker", "index": 1, "initial_gpu_memory_mb": 1024, "expected_gpu_memory_mb": 1024,
         "gpu_memory_peak_mb": 900, "oom_growths": 0, "oom": None},
        {"role": "ps", "index": 0},
    ]
    rec = learned.run_record("worker", tasks, app_id="application_1_0001", state="SUCCEEDED", at=5.5,
                             planned_mb=1024)
    assert rec == {"role": "worker", "app_id": "application_1_0001", "at": 5, "state": "SUCCEEDED",
                   "initial_mb": 1024, "expected_mb": 1536, "peak_mb": 1100, "oom": True, "growths": 1}


def test_resolve_names_its_source_and_the_field():
    roles = JobSpec.from_dict({"name": "j", "entrypoint": "x", "roles": {
        "chief": {"gpu_memory": "auto:1g"}, "worker": {"gpu_memory": "auto"}, "ps": {"gpu_memory": "512m"}}}).roles
    history = {"worker": [run("application_1_0001", expected=1536)]}
    figures, lines = memory_history.resolve(lambda r: history.get(r, []), roles)
    assert figures == {"chief": 1024, "worker": 1536}
    assert lines == ["roles.chief.gpu_memory auto: 1024 MiB (no history yet: the first run's figure, auto:<size> "
                     "or the operator's gpu_memory)",
                     "roles.worker.gpu_memory auto: 1536 MiB (learned from the last 1 run(s): succeeded at 1536 MiB "
                     "in run application_1_0001)"]
    with pytest.raises(ValueError, match=r"roles\.worker\.gpu_memory: 'auto' has no history"):
        memory_history.resolve(lambda r: [], roles)


@pytest.mark.parametrize("key", ["", "a/../b", "a b", "/"])
def test_history_key_must_be_plain_names(key):
    with pytest.raises(ValueError, match="memory history key"):
        memory_history.folder("/user/u/.melon", key)


def test_history_folder():
    assert memory_history.folder("/user/u/.melon", "dag/task") == "/user/u/.melon/profiles/dag/task/memory"
