"""One place for what differs between Airflow 3.x minor versions (the provider targets 3.3, imports on 3.0+).

Operators, sensors and links import the task-SDK base classes from here: ``airflow.sdk`` first, then
``airflow.providers.common.compat.sdk`` (which maps them on older releases). Behaviour that only exists on
a newer Airflow is switched on the ``AIRFLOW_V_3_x_PLUS`` flags below:

* ``ResumableJobMixin`` (3.3): the sync operator path stores the YARN application id in the task state
  store and reconnects on retry. Below 3.3 a stand-in submits on every try (the tag lookup still reattaches).
* ``BaseTrigger.on_kill()`` (3.3): a deferred task that a user marks failed/success or clears kills its
  application. Below 3.3 the trigger falls back to the "task no longer deferred" check on cancellation.
* :func:`stream_to_stderr` (3.0): the CLI's log records go to stderr; 3.0's ``RedirectStdHandler`` cannot be
  re-pointed, so it is replaced.
"""

from __future__ import annotations

import logging
import sys
from typing import Any


def _airflow_version() -> tuple[int, int, int]:
    from packaging.version import Version

    try:
        from airflow import __version__
    except ImportError:  # pragma: no cover - Airflow is a dependency
        return (0, 0, 0)
    release = Version(__version__).release + (0, 0, 0)
    return release[0], release[1], release[2]


AIRFLOW_VERSION = _airflow_version()
AIRFLOW_V_3_0_PLUS = AIRFLOW_VERSION >= (3, 0, 0)
AIRFLOW_V_3_1_PLUS = AIRFLOW_VERSION >= (3, 1, 0)
AIRFLOW_V_3_2_PLUS = AIRFLOW_VERSION >= (3, 2, 0)
AIRFLOW_V_3_3_PLUS = AIRFLOW_VERSION >= (3, 3, 0)

try:
    from airflow.sdk import BaseHook, BaseOperator, BaseOperatorLink, BaseSensorOperator, Context
except ImportError:  # pragma: no cover - older task SDKs: the compat provider maps the names
    from airflow.providers.common.compat.sdk import (  # type: ignore[no-redef]
        BaseHook,
        BaseOperator,
        BaseOperatorLink,
        BaseSensorOperator,
        Context,
    )

try:
    from airflow.sdk import Asset
except ImportError:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Asset  # type: ignore[no-redef]

try:
    from airflow.sdk import XCom
except ImportError:  # pragma: no cover
    from airflow.providers.common.compat.sdk import XCom  # type: ignore[no-redef]

try:
    from airflow.sdk.configuration import conf
except ImportError:  # pragma: no cover
    from airflow.configuration import conf  # type: ignore[no-redef]

try:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout
except ImportError:  # pragma: no cover
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowFailException,
        AirflowSensorTimeout,
    )

try:
    from airflow.sdk.exceptions import TaskDeferred
except ImportError:  # pragma: no cover - Airflow 3.0: only in airflow.exceptions
    from airflow.exceptions import TaskDeferred  # type: ignore[no-redef]

try:  # Airflow 3.3: the real mixin (task_state_store)
    from airflow.sdk import ResumableJobMixin
except ImportError:  # pragma: no cover - below 3.3
    try:
        from airflow.providers.common.compat.sdk import ResumableJobMixin  # type: ignore[no-redef]
    except ImportError:

        class ResumableJobMixin:  # type: ignore[no-redef]
            """Stand-in below Airflow 3.3 without a recent common-compat: every try submits (or tag-attaches)."""

            external_id_key: str = "remote_job_id"

            def __init__(self, *, durable: bool = True, **kwargs: Any) -> None:
                super().__init__(**kwargs)
                self.durable = False

            def execute_resumable(self, context: Any) -> Any:
                external_id = self.submit_job(context)  # type: ignore[attr-defined]
                self.poll_until_complete(external_id, context)  # type: ignore[attr-defined]
                return self.get_job_result(external_id, context)  # type: ignore[attr-defined]


#: True when ``ResumableJobMixin`` is the real 3.3 one (durable by task state store), not a stand-in.
RESUMABLE_JOBS = AIRFLOW_V_3_3_PLUS and ResumableJobMixin.__module__.startswith("airflow.sdk")


def trigger_has_on_kill() -> bool:
    """Whether the triggerer calls ``BaseTrigger.on_kill()`` on user kills (Airflow 3.3)."""
    from airflow.triggers.base import BaseTrigger

    return AIRFLOW_V_3_3_PLUS and hasattr(BaseTrigger, "on_kill")


def stream_to_stderr(logger: logging.Logger, handler: logging.StreamHandler) -> None:
    """Make ``handler`` of ``logger`` write to stderr instead of stdout. Airflow 3.0 (its default logging config's
    ``airflow.utils.log.logging_mixin.RedirectStdHandler("stdout")``, whose ``stream`` is a read-only property: the
    current ``sys.stdout``) needs the handler replaced by a ``RedirectStdHandler("stderr")`` (the current
    ``sys.stderr``, whatever it is when a record is written) with the same level, formatter and filters; 3.1+ log
    through plain handlers whose stream can be set."""
    try:
        handler.setStream(sys.stderr)
    except AttributeError:  # Airflow 3.0: RedirectStdHandler
        replacement = type(handler)("stderr")
        replacement.setLevel(handler.level)
        replacement.setFormatter(handler.formatter)
        for f in handler.filters:
            replacement.addFilter(f)
        logger.removeHandler(handler)
        logger.addHandler(replacement)


__all__ = [
    "AIRFLOW_V_3_0_PLUS", "AIRFLOW_V_3_1_PLUS", "AIRFLOW_V_3_2_PLUS", "AIRFLOW_V_3_3_PLUS", "AIRFLOW_VERSION",
    "AirflowException", "AirflowFailException", "AirflowSensorTimeout", "Asset", "BaseHook", "BaseOperator",
    "BaseOperatorLink", "BaseSensorOperator", "Context",
    "RESUMABLE_JOBS", "ResumableJobMixin", "TaskDeferred", "XCom", "conf", "stream_to_stderr", "trigger_has_on_kill",
]
