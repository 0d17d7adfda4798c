"""MelonPlanOperator: the planner's numbers through an operator, validation naming the field (the real DAG run
is tests/e2e/test_example_dags.py::test_ps_planned)."""

from __future__ import annotations

from unittest import mock

import pytest

from airflow_provider_melon.operators.plan import MelonPlanOperator
from airflow_provider_melon.planner import plan
from airflow_provider_melon.version_compat import AirflowFailException

# The planner's own hand-worked case (tests/unit/test_planner.py): 25M float32 params, 4 workers, 10 Gbit/s,
# 2 ms/sample, batch capped at 64 -> compute 0.128 s; transfer with k PS = 2*25e6*4*4/(k*1.25e9) = 0.64/k s.
CASE = dict(
    model_params="25e6", per_sample_ms="2", workers="4", bandwidth_gbps="10", gpu_memory="16GiB", max_batch="64"
)


def run(**kw):
    op = MelonPlanOperator(task_id="plan", **kw)
    ti = mock.Mock()
    result = op.execute({"ti": ti})
    return result, {c.kwargs["key"]: c.kwargs["value"] for c in ti.xcom_push.call_args_list}


def test_rendered_strings_give_the_planners_numbers():
    result, xcom = run(**CASE)
    expected = plan(25e6, 4, 0.002, 4, 10, 16384, max_batch=64)
    # even 4 PS take 0.64/4 = 0.16 s > 0.128 s, and one worker's own NIC needs 2*P*b/W = 0.16 s: 1 worker
    assert (result["batch_size"], result["ps"], result["workers"]) == (64, 4, 1)
    assert result["communication_bound"] is True and result["ps"] == expected.ps
    assert result["step_compute_s"] == pytest.approx(expected.step_compute_s)
    assert xcom["batch_size"] == 64 and xcom["ps"] == 4 and xcom["workers"] == expected.workers
    assert xcom["plan"] == result


def test_compute_bound_case_picks_the_fewest_ps():
    result, xcom = run(**{**CASE, "per_sample_ms": 4, "max_batch": 128})  # compute 0.512 s: 0.64/2 = 0.32 fits
    assert (xcom["batch_size"], xcom["ps"], xcom["workers"]) == (128, 2, 4)
    assert result["communication_bound"] is False and result["step_transfer_s"] == pytest.approx(0.32)


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("workers", "0", "workers"),
        ("per_sample_ms", "-1", "per_sample_ms"),
        ("gpu_memory", "lots", "gpu_memory"),
        ("dtype", "float7", "dtype"),
        ("model_params", "None", "model_params"),
    ],
)
def test_bad_input_fails_naming_the_field(field, value, words):
    with pytest.raises(AirflowFailException) as err:
        run(**{**CASE, field: value})
    assert words in str(err.value) and "invalid planner input" in str(err.value)


def test_a_model_that_does_not_fit_fails_with_the_numbers():
    with pytest.raises(AirflowFailException, match=r"does not fit: .* MiB at batch 1 > 1024 MiB"):
        run(**{**CASE, "model_params": "1e9", "gpu_memory": "1GiB"})


def test_templated_fields_cover_every_input():
    assert set(MelonPlanOperator.template_fields) >= {
        "model_params",
        "per_sample_ms",
        "workers",
        "bandwidth_gbps",
        "gpu_memory",
        "activation_mb",
        "max_batch",
        "max_ps",
    }
