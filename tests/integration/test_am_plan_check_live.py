"""The AM checks its plan against plan.schema.json (inside its jar) before it reads it: a plan that breaks the
schema ends the application FAILED at once, YARN's diagnostics naming the field."""

from __future__ import annotations

import pytest

from airflow_provider_melon import submission

pytestmark = pytest.mark.integration


def test_a_plan_breaking_the_schema_is_refused_naming_the_field(jobs, monkeypatch):
    build_plan = submission.build_plan

    def out_of_bounds(*args, **kwargs):  # what a provider of another version might write
        plan = build_plan(*args, **kwargs)
        plan["roles"][0]["oom_growth"] = 0.5
        return plan

    monkeypatch.setattr(submission, "build_plan", out_of_bounds)
    app_id = jobs.submit(
        {
            "name": "bad-plan",
            "framework": "generic",
            "entrypoint": "python -c \"print('never runs')\"",
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
        }
    )
    app = jobs.wait(app_id, timeout=120)
    assert app["finalStatus"] == "FAILED", app
    assert "bad plan: /roles/0/oom_growth: must have a minimum value of" in app["diagnostics"], app["diagnostics"]
    assert "(is 0.5)" in app["diagnostics"], app["diagnostics"]
    # final, not a crash that YARN retries; and no task was asked for
    assert len(jobs.hook.yarn.app_attempts(app_id)) == 1
    assert all("never runs" not in text for text in jobs.container_logs(app_id, "stdout").values())
