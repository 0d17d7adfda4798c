"""Progress from the job's own code to MeLoN: ``report(step=..., total=..., loss=..., **metrics)``. Stdlib only.

:func:`report` writes the latest values for the executor to heartbeat; :func:`keras_callback` reports each Keras
epoch; :class:`StepReporter` serves hand-written loops; :func:`read_progress` is the executor's side. Outside a
MeLoN container ``report`` does nothing and returns False, so the same script runs anywhere.
``docs/internals.md``, "Progress reports", follows a report from the script to YARN and the operator.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Optional

from airflow_provider_melon.runtime.protocol import MAX_METRICS, Progress


def _number(name: str, value: Any) -> float:
    try:
        number = float(value.item() if hasattr(value, "item") else value)  # numpy / torch scalars
    except (TypeError, ValueError):
        raise TypeError(f"report(): {name} must be a number, got {type(value).__name__} {value!r}") from None
    return number


def report(
    step: Optional[int] = None, total: Optional[int] = None, loss: Optional[float] = None, **metrics: Any
) -> bool:
    """Report progress: ``step`` of ``total`` (e.g. epochs or optimizer steps), the current ``loss`` and any
    other numeric ``metrics`` (accuracy=0.97, lr=1e-3; at most 32, non-finite values dropped). Returns whether
    it was written (False outside MeLoN)."""
    path = os.environ.get("MELON_PROGRESS_FILE")
    body: dict[str, Any] = {}
    if step is not None:
        body["step"] = int(_number("step", step))
    if total is not None:
        total = int(_number("total", total))
        if total <= 0:
            raise ValueError(f"report(): total must be positive, got {total}")
        body["total"] = total
    if loss is not None:
        loss = _number("loss", loss)
        if math.isfinite(loss):
            body["loss"] = loss
    clean = {}
    for name, value in list(metrics.items())[:MAX_METRICS]:
        number = _number(name, value)
        if math.isfinite(number):
            clean[str(name)[:64]] = number
    if clean:
        body["metrics"] = clean
    if not path:
        return False
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(body, f)
    os.replace(tmp, path)
    return True


def read_progress(path: str) -> Progress:
    """``{"step", "total", "loss", "metrics"}`` from the user's progress file (what
    :func:`airflow_provider_melon.runtime.report` writes; a missing/half-written file -> {})."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}

    def number(v: object) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    out: Progress = {}
    if number(data.get("step")):
        out["step"] = int(data["step"])
    if number(data.get("total")) and data["total"] > 0:
        out["total"] = int(data["total"])
    if number(data.get("loss")):
        out["loss"] = float(data["loss"])
    if isinstance(data.get("metrics"), dict):
        metrics = {str(k)[:64]: float(v) for k, v in list(data["metrics"].items())[:MAX_METRICS] if number(v)}
        if metrics:
            out["metrics"] = metrics
    return out


class StepReporter:
    """``r = StepReporter(total=len(loader) * epochs)``; then ``r.step(loss=loss.item(), lr=...)`` each step."""

    def __init__(self, total: Optional[int] = None, every: int = 1):
        self.total, self.every, self.count = total, max(1, int(every)), 0

    def step(self, loss: Optional[float] = None, **metrics: Any) -> None:
        self.count += 1
        if self.count % self.every == 0 or (self.total and self.count >= self.total):
            report(step=self.count, total=self.total, loss=loss, **metrics)


def keras_callback(total_epochs: Optional[int] = None) -> Any:
    """A Keras callback reporting each epoch's end (imports Keras only when called: tf_keras if
    ``TF_USE_LEGACY_KERAS`` is set, else keras)."""
    if os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True"):
        import tf_keras as keras  # noqa: PLC0415
    else:
        import keras  # noqa: PLC0415

    class MelonProgress(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped here
        def on_epoch_end(self, epoch: int, logs: Optional[dict[str, Any]] = None) -> None:
            logs = dict(logs or {})
            total = total_epochs or (self.params or {}).get("epochs")
            loss = logs.pop("loss", None)
            report(
                step=epoch + 1,
                total=total,
                loss=loss,
                **{k: v for k, v in logs.items() if isinstance(v, (int, float)) or hasattr(v, "item")},
            )

    return MelonProgress()
