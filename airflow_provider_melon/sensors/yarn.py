"""YarnApplicationSensor: wait for a YARN application submitted elsewhere (by id or by tags).

Exactly one of ``application_id`` / ``tags``. With ``tags`` the sensor follows the newest application
that carries all of them (YARN lower-cases tags; so does the lookup); while there is none yet it keeps
waiting. It succeeds when the application's state is in ``target_states`` and fails (``AirflowException``
with the RM diagnostics) when its state — or, once terminal, its final status — is in ``failure_states``,
or when it ended in a state that is no target. ``deferrable=True`` waits in the triggerer with
:class:`YarnApplicationTrigger` (same rules); the sensor's ``timeout`` becomes the trigger's deadline.
"""

from __future__ import annotations

import time
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from airflow_provider_melon.hadoop.app_state import (
    DEFAULT_FAILURE_STATES,
    DEFAULT_TARGET_STATES,
    classify,
    outcome_message,
)
from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.triggers.yarn import MIN_POLL_INTERVAL, YarnApplicationTrigger
from airflow_provider_melon.version_compat import (
    AirflowException,
    AirflowSensorTimeout,
    BaseSensorOperator,
    conf,
)

if TYPE_CHECKING:
    from airflow_provider_melon.version_compat import Context


class YarnApplicationSensor(BaseSensorOperator):
    """Waits for a YARN application (see the module docstring).

    :param application_id: the application (templated).
    :param tags: instead, the newest application carrying all these tags (templated).
    :param target_states: RM states that end the wait successfully.
    :param failure_states: RM states / final statuses that fail the task.
    :param yarn_conn_id: ResourceManager connection.
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param poll_interval: seconds between polls (at least 5; also ``poke_interval`` in poke mode).
    """

    template_fields: Sequence[str] = ("application_id", "tags")
    ui_color = "#dcedc8"

    def __init__(
        self,
        *,
        application_id: Optional[str] = None,
        tags: Union[None, str, Sequence[str]] = None,
        target_states: Sequence[str] = DEFAULT_TARGET_STATES,
        failure_states: Sequence[str] = DEFAULT_FAILURE_STATES,
        yarn_conn_id: str = "yarn_default",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: Optional[float] = None,
        max_consecutive_failures: int = 5,
        log_every_n: int = 6,
        **kwargs: Any,
    ) -> None:
        if poll_interval is None:
            poll_interval = kwargs.get("poke_interval") or conf.getfloat("melon", "poll_interval", fallback=10.0)
            if isinstance(poll_interval, timedelta):
                poll_interval = poll_interval.total_seconds()
        if float(poll_interval) < MIN_POLL_INTERVAL:
            raise ValueError(f"poll_interval must be at least {MIN_POLL_INTERVAL:g} seconds, got {poll_interval!r}")
        kwargs.setdefault("poke_interval", float(poll_interval))
        super().__init__(**kwargs)
        if (application_id is None) == (tags is None):
            raise ValueError("give exactly one of application_id or tags")
        if isinstance(tags, str):
            tags = [t.strip() for t in tags.split(",") if t.strip()]
        if tags is not None and not tags:
            raise ValueError("tags must not be empty")
        overlap = set(target_states) & set(failure_states)
        if overlap:
            raise ValueError(f"states in both target_states and failure_states: {', '.join(sorted(overlap))}")
        self.application_id = application_id
        self.tags = list(tags) if tags is not None else None
        self.target_states = tuple(s.upper() for s in target_states)
        self.failure_states = tuple(s.upper() for s in failure_states)
        self.yarn_conn_id = yarn_conn_id
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self.max_consecutive_failures = max_consecutive_failures
        self.log_every_n = log_every_n

    @cached_property
    def hook(self) -> YarnHook:
        return YarnHook(self.yarn_conn_id)

    def _find(self) -> Optional[dict]:
        if self.tags is None:
            if not self.application_id:  # a templated id (an upstream XCom, say) that rendered empty
                raise ValueError(f"application_id is empty after rendering ({self.application_id!r}): no application")
            return self.hook.get_application(self.application_id)
        apps = self.hook.find_applications(self.tags, match_all=True)
        if not apps:
            self.log.info("No YARN application with tags %s yet", ", ".join(self.tags))
            return None
        return apps[0]  # newest first

    def poke(self, context: "Context") -> bool:
        app = self._find()
        if app is None:
            return False
        app_id = str(app.get("id") or self.application_id)  # the RM's apps carry their id
        verdict = classify(app, self.target_states, self.failure_states)
        self.log.info("YARN application %s: %s (final status %s)", app_id, app.get("state"), app.get("finalStatus"))
        if verdict == "error":
            raise AirflowException(outcome_message(app_id, app, verdict, self.target_states))
        if verdict == "success":
            context["ti"].xcom_push(key="app_id", value=app_id)
            return True
        return False

    def execute(self, context: "Context") -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):  # already there: no deferral
            return None
        deadline = time.time() + float(self.timeout) if self.timeout else None
        self.defer(
            trigger=YarnApplicationTrigger(
                app_id=self.application_id,
                tags=self.tags,
                yarn_conn_id=self.yarn_conn_id,
                poll_interval=self.poll_interval,
                deadline=deadline,
                cancel_on_kill=False,
                max_consecutive_failures=self.max_consecutive_failures,
                log_every_n=self.log_every_n,
                target_states=self.target_states,
                failure_states=self.failure_states,
                stream_progress=False,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: "Context", event: dict[str, Any]) -> None:
        status = (event or {}).get("status")
        if status == "success":
            context["ti"].xcom_push(key="app_id", value=event.get("app_id"))
            self.log.info("%s", event.get("message"))
            return None
        if status == "timeout":
            raise AirflowSensorTimeout(event.get("message") or "YARN application sensor timed out")
        raise AirflowException((event or {}).get("message") or f"Unexpected trigger event: {event!r}")


__all__ = ["YarnApplicationSensor"]
