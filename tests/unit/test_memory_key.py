"""The key of a train task's GPU memory history (``gpu_memory: auto``): mapped trials learn apart, by map index or
by a user-given, templated ``memory_key``. MelonHook and YarnHook are mocked at their public methods, as in
test_operator.py, whose helpers these tests use."""

from __future__ import annotations

from unittest import mock

import pytest

from airflow_provider_melon.hooks.melon import MelonHook
from tests.unit.test_operator import DAG_ID, TASK_ID, app, hooks, job, make_context, make_op, yarn_conn  # noqa: F401


def _auto_job():
    return job(roles={"worker": {"instances": 1, "memory": "2g", "gpu_memory": "auto:4GiB"}})


def _first_figures(self, spec, key):
    """What resolve_learned does without history: each auto role at its first-run figure."""
    roles = {
        name: role.model_copy(update={"gpu_memory": role.gpu_memory_first_mb})
        for name, role in spec.roles.items()
        if role.gpu_memory_auto
    }
    return spec.model_copy(update={"roles": spec.roles | roles}), {}


@pytest.fixture
def keys(hooks):  # noqa: F811 - the fixture imported above
    """The history keys the task resolved (before submitting) and recorded (after the end) under."""
    hooks.get_app.return_value = app("FINISHED", "SUCCEEDED")
    with (
        mock.patch.object(MelonHook, "resolve_learned", autospec=True, side_effect=_first_figures) as resolve,
        mock.patch.object(MelonHook, "record_run", autospec=True, return_value=None) as record,
    ):
        yield lambda: ([c.args[2] for c in resolve.call_args_list], [c.args[1] for c in record.call_args_list])


def test_each_mapped_trial_has_its_own_history(keys):
    for index in (0, 1):
        ctx = make_context()
        ctx["ti"].map_index = index
        make_op(job=_auto_job()).execute(ctx)
    resolved, recorded = keys()
    assert resolved == recorded == [f"{DAG_ID}/{TASK_ID}/map-0", f"{DAG_ID}/{TASK_ID}/map-1"]


def test_an_unmapped_task_keeps_its_dag_and_task_key(keys):
    make_op(job=_auto_job()).execute(make_context())
    assert keys() == ([f"{DAG_ID}/{TASK_ID}"], [f"{DAG_ID}/{TASK_ID}"])


def test_a_user_given_memory_key_is_templated_and_replaces_the_map_index(keys):
    op = make_op(job=_auto_job(), memory_key="{{ params.model }}/bs-{{ params.batch }}")
    assert "memory_key" in op.template_fields
    ctx = make_context()
    ctx["ti"].map_index = 4
    op.render_template_fields({"params": {"model": "resnet50", "batch": 64}} | ctx)
    op.execute(ctx)
    assert keys() == (["resnet50/bs-64"], ["resnet50/bs-64"])


def test_a_bad_memory_key_fails_naming_the_field(keys):
    from airflow_provider_melon.version_compat import AirflowException

    with pytest.raises(AirflowException, match="memory_key"):
        make_op(job=_auto_job(), memory_key="../alice/dag").execute(make_context())
