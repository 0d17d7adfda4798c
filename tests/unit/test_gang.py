"""Gang formation's Python side: the spec fields, the plan the AM reads, and the progress line while it forms.
(The AM's behaviour: appmaster GangHoldTest; on a cluster: tests/integration/test_gang_live.py.)"""

import pytest

from airflow_provider_melon import submission
from airflow_provider_melon.hadoop.app_state import progress_line
from airflow_provider_melon.spec import JobSpec, JobSpecError
from airflow_provider_melon.submission import StagedFile

JOB = {"name": "g", "entrypoint": "python t.py", "roles": {"worker": {"instances": 3, "gpus": 1}}}


def test_the_hold_defaults_on_and_travels_in_the_plan_with_the_queue_timeout():
    spec = JobSpec.from_dict(JOB)
    assert spec.gang_hold_s == 60 and spec.queue_timeout_s is None
    runtime = StagedFile("hdfs:///r.zip", 1, 1)
    plan = submission.build_plan(spec, code=None, runtime=runtime, inputs={}, default_python="python3")
    assert plan["gang_hold_s"] == 60 and plan["queue_timeout_s"] == 0
    spec = JobSpec.from_dict({**JOB, "gang_hold_s": 0, "queue_timeout_s": 900})
    plan = submission.build_plan(spec, code=None, runtime=runtime, inputs={}, default_python="python3")
    assert plan["gang_hold_s"] == 0 and plan["queue_timeout_s"] == 900


@pytest.mark.parametrize("field, value", [("gang_hold_s", -1), ("gang_hold_s", 501), ("queue_timeout_s", 0)])
def test_bad_gang_settings_name_the_field(field, value):
    with pytest.raises(JobSpecError) as err:
        JobSpec.from_dict({**JOB, field: value})
    assert field in str(err.value)


def test_the_progress_line_says_where_gang_formation_stands_until_it_has_formed():
    waiting = {
        "state": "RUNNING",
        "gang": {"hold_s": 60, "formed": False, "message": "waiting for the gang: 1 of 3 containers granted"},
        "tasks": [{"role": "worker", "index": 0, "state": "ALLOCATED"}],
    }
    assert "(waiting for the gang: 1 of 3 containers granted)" in progress_line(waiting)
    formed = {**waiting, "gang": {**waiting["gang"], "formed": True, "message": "gang granted"}}
    assert "gang" not in progress_line(formed)
    off = {**waiting, "gang": {"hold_s": 0, "formed": False, "message": "gang hold off"}}
    assert "gang" not in progress_line(off)
