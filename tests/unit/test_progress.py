"""runtime.report: what the job's code writes, as the executor reads it."""

import json

import pytest

from airflow_provider_melon.runtime import StepReporter, report
from airflow_provider_melon.runtime.progress import read_progress


def test_report_round_trips_through_the_executor(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    monkeypatch.setenv("MELON_PROGRESS_FILE", str(path))
    assert report(step=3, total=10, loss=0.25, accuracy=0.9, nan=float("nan"))
    assert read_progress(str(path)) == {"step": 3, "total": 10, "loss": 0.25, "metrics": {"accuracy": 0.9}}
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # written beside, renamed: no temp file left


def test_report_outside_melon_is_a_no_op(monkeypatch):
    monkeypatch.delenv("MELON_PROGRESS_FILE", raising=False)
    assert report(step=1, total=2) is False


@pytest.mark.parametrize(
    "kwargs, field", [({"step": "three"}, "step"), ({"loss": [1]}, "loss"), ({"accuracy": "high"}, "accuracy")]
)
def test_bad_values_name_the_field(kwargs, field, monkeypatch, tmp_path):
    monkeypatch.setenv("MELON_PROGRESS_FILE", str(tmp_path / "p.json"))
    with pytest.raises(TypeError, match=f"report\\(\\): {field} must be a number"):
        report(**kwargs)
    with pytest.raises(ValueError, match="total must be positive"):
        report(step=1, total=0)


def test_step_reporter_counts_steps(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    monkeypatch.setenv("MELON_PROGRESS_FILE", str(path))
    r = StepReporter(total=5, every=2)
    for i in range(5):
        r.step(loss=1.0 / (i + 1))
    assert json.loads(path.read_text()) == {"step": 5, "total": 5, "loss": 0.2}  # the last step is always written


def test_keras_callback_reports_epochs(tmp_path, monkeypatch):
    pytest.importorskip("tf_keras")
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    monkeypatch.setenv("MELON_PROGRESS_FILE", str(tmp_path / "p.json"))
    import numpy as np
    import tf_keras as keras

    from airflow_provider_melon.runtime import keras_callback

    model = keras.Sequential([keras.layers.Input(shape=(2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    model.fit(np.zeros((8, 2)), np.zeros((8, 1)), epochs=3, verbose=0, callbacks=[keras_callback()])
    got = read_progress(str(tmp_path / "p.json"))
    assert (got["step"], got["total"]) == (3, 3) and "mae" in got["metrics"] and "loss" in got, got
