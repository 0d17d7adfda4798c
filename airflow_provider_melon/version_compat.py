"""One place for what differs between Airflow 3.x minor versions (the provider targets 3.3, imports on 3.0+).

Operators, sensors and links import the task-SDK base classes from here: ``airflow.sdk`` first, then
``airflow.providers.common.compat.sdk``, which maps them on older releases. Behaviour that only exists on a newer
Airflow is switched on the ``AIRFLOW_V_3_x_PLUS`` flags and the named constants below. ``docs/internals.md``,
"Airflow versions", lists the differences.
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

try:  # the task SDK's XCom: ``airflow.sdk`` exports none (3.0–3.3), the compat provider maps it from here too
    from airflow.sdk.execution_time.xcom import XCom
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


#: What each Airflow 3 line does to a trigger whose deferred task a user marks failed/success or clears (the task
#: instance leaves DEFERRED, the scheduler deletes the trigger row, the triggerer drops it), read in the triggerer's
#: ``TriggerRunner.cancel_triggers``/``run_trigger`` of each line:
#:
#: * 3.0–3.2: the trigger's asyncio task is cancelled with no reason, exactly as when the triggerer stops or hands
#:   the trigger on; there is no ``BaseTrigger.on_kill``. The trigger tells the two apart in its own cancellation
#:   path by asking its task instance's state (``RuntimeTaskInstance.get_task_states``, which the 3.0+ triggerer
#:   serves): no longer ``deferred`` (``failed``, ``success``, or no state after a clear) → kill.
#: * 3.3.0+ (apache/airflow#65590): the triggerer cancels with a user-action message and then awaits
#:   ``trigger.on_kill()`` (bounded by ``[triggerer] on_kill_timeout``); a plain stop calls no ``on_kill``. But a
#:   triggerer whose heartbeat lapsed (a busy host, a GC pause) and whose triggers were meanwhile handed to another
#:   triggerer cancels them down the *same* user-action path on recovery, so ``on_kill`` also runs for a trigger that
#:   another triggerer now follows (apache/airflow#73454, still open at 3.3.2): the trigger's ``on_kill`` therefore
#:   asks the task's state too and leaves the application running while the task is still deferred
#:   (:data:`TRIGGER_ON_KILL_ALSO_ON_HANDOVER`).
TRIGGER_KILL_PATHS = {
    "3.0": "cancel + task state",
    "3.1": "cancel + task state",
    "3.2": "cancel + task state",
    "3.3": "on_kill + task state",
}

#: Airflow 3.3+: ``on_kill()`` also runs for a trigger handed over to another triggerer (apache/airflow#73454, open
#: at 3.3.2, so true for every 3.3+ release known here): ``on_kill`` must check that the task left DEFERRED.
TRIGGER_ON_KILL_ALSO_ON_HANDOVER = AIRFLOW_V_3_3_PLUS


#: Airflow 3.0 reads an unset ``[api_auth] jwt_issuer`` as ``[]`` and signs every JWT with ``"iss": []``, which PyJWT
#: 2.11+ refuses ("Issuer (iss) must be a string"): every ``POST /auth/token`` of the api-server is a 500 and no task
#: gets its execution-API token. The FAB provider 3.9+ (and Flask-JWT-Extended 4.7.4) require PyJWT 2.11+, so such a
#: 3.0 deployment must set ``jwt_issuer`` (Airflow recommends it anyway); 3.1+ leave a falsy issuer out of the token.
#: The embedded Airflow (``local_airflow.LocalAirflow``) sets one below 3.1.
JWT_ISSUER_MUST_BE_SET = not AIRFLOW_V_3_1_PLUS

#: Airflow 3.0: the REST API's ``xcomEntries/...?deserialize=true`` answers 400 ("XCom deserialization is disabled in
#: configuration") unless ``[api] enable_xcom_deserialize_support`` is on; 3.1 dropped the option (always allowed).
#: The embedded Airflow (``dev/local_airflow.LocalAirflow``, whose ``xcom()`` reads values so) turns it on below 3.1.
XCOM_DESERIALIZE_NEEDS_CONFIG = not AIRFLOW_V_3_1_PLUS

#: Airflow 3.0 / 3.1: a trigger's sync SDK call (the hook's connection, a task state) made from a plain worker thread
#: (``asyncio.to_thread``) reaches the triggerer's comms through asgiref's ``async_to_sync``, which, outside an
#: asgiref thread, runs it on a second event loop: its read interleaves with the main loop's, the runner raises
#: "Response read out of order" and the triggerer's runner process dies (seen by ``make compat`` with several deferred
#: trials on 3.0.6 and 3.1.8). 3.2 sends such calls to the main loop (``run_coroutine_threadsafe``). Below 3.2 the
#: provider's trigger threads are asgiref's (``sync_to_async``), whose ``async_to_sync`` goes back to the main loop.
TRIGGER_THREADS_THROUGH_ASGIREF = not AIRFLOW_V_3_2_PLUS

#: Airflow 3.1+: outlets a task adds at run time (outputs known only then: a templated path) become asset events.
#: Airflow 3.0's api-server refuses a success with an outlet that is not an active asset from parse time
#: (``AirflowInactiveAssetInInletOrOutletException`` in ``register_asset_changes_in_db``: the task fails after it
#: pushed its result; seen by ``make compat`` on 3.0.6 with the HPO example's templated outputs). On 3.0 only the
#: parse-time outlets (a literal job's ``hdfs://`` outputs) are the task's assets.
RUNTIME_OUTLETS = AIRFLOW_V_3_1_PLUS


#: Airflow 3.1+: the api-server's ``get_user`` (behind ``requires_authenticated``) takes the login from an
#: ``Authorization: Bearer`` header, else from the ``_token`` cookie the login page sets. Airflow 3.0's reads only the
#: bearer header (its UI sends its token that way, from localStorage), so a browser opening a MeLoN page (a plain
#: navigation: the cookie, no header) was never authenticated on 3.0: every page redirected to the login page, also
#: right after a login (``make compat``, 3.0.6). Below 3.1 the plugin authenticates its routes with a dependency of
#: its own that reads the header, else the cookie, and has 3.0's ``get_user`` validate the token
#: (``plugin.app.user_from_bearer_or_cookie``).
API_SERVER_READS_THE_LOGIN_COOKIE = AIRFLOW_V_3_1_PLUS

#: Airflow 3.1 only: the UI builds a task-instance external view's URL (the "YARN job" tab, ``melon/ti?...``) by
#: putting the run id in raw; 3.2+ ``encodeURIComponent`` it (read in 3.1.8's and 3.2.2's UI bundles; 3.0 has no
#: such tabs). A run id's ``+`` (every ``manual__``/``scheduled__`` id ends ``+00:00``) then reaches the page's
#: query string as a ``+``, which a query string reads as a space: the tab asked for a run that does not exist and
#: showed no job (``make compat``, 3.1.8). Run ids hold no spaces (``[scheduler] allowed_run_id_pattern``,
#: ``^[A-Za-z0-9_.~:+-]+$`` by default), so on 3.1 :func:`tab_run_id` reads a space in one as the ``+`` it was.
TAB_RUN_ID_UNENCODED = AIRFLOW_V_3_1_PLUS and not AIRFLOW_V_3_2_PLUS


def tab_run_id(run_id: str) -> str:
    """The run id a task-instance tab's query string meant (see :data:`TAB_RUN_ID_UNENCODED`)."""
    return run_id.replace(" ", "+") if TAB_RUN_ID_UNENCODED else run_id


#: Airflow 3.3+: ``SimpleAuthManager.get_url_login(next_url=...)`` puts the return URL in the login URL. 3.0.6, 3.1.8
#: and 3.2.2's ignore ``next_url`` (read in their sources; Airflow's own ``/api/v2/auth/login?next=`` appends it
#: itself), so the UI plugin's login redirect sent a browser to the login page with no way back to the MeLoN page it
#: had opened (``make compat``, 3.0.6). Below 3.3, :func:`login_url` appends ``next`` when the auth manager's URL
#: has none (SimpleAuthManager's login page reads it; the FAB auth manager's URL already carries it).
LOGIN_URL_HAS_NEXT = AIRFLOW_V_3_3_PLUS


def login_url(auth_manager: Any, next_url: str) -> str:
    """The auth manager's login page URL with ``next_url`` as its return URL (see :data:`LOGIN_URL_HAS_NEXT`)."""
    url = auth_manager.get_url_login(next_url=next_url)
    if LOGIN_URL_HAS_NEXT:
        return url
    from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    if "next" in parse_qs(parts.query):
        return url
    query = "&".join(q for q in (parts.query, urlencode({"next": next_url})) if q)
    return urlunsplit(parts._replace(query=query))


def with_runtime_outlets(outlets: Any, assets: list, log: Any) -> list:
    """A task's outlets plus the ``assets`` of its outputs not among them yet (none on 3.0: :data:`RUNTIME_OUTLETS`)."""
    known = {getattr(a, "uri", None) for a in outlets or []}
    added = [a for a in assets if a.uri not in known]
    if added and not RUNTIME_OUTLETS:
        log.info("Airflow 3.0: outputs known only at run time are not assets: %s", ", ".join(a.uri for a in added))
        added = []
    return list(outlets or []) + added


async def run_in_thread(fn: Any, *args: Any, executor: Any = None, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a worker thread of ``executor`` (None: the loop's default), from a trigger: the
    thread may make sync SDK calls (see :data:`TRIGGER_THREADS_THROUGH_ASGIREF`)."""
    import asyncio
    import functools

    call = functools.partial(fn, *args, **kwargs)
    if TRIGGER_THREADS_THROUGH_ASGIREF:
        from asgiref.sync import sync_to_async

        return await sync_to_async(call, thread_sensitive=False, executor=executor)()
    if executor is None:
        return await asyncio.to_thread(call)
    return await asyncio.get_running_loop().run_in_executor(executor, call)


def remote_logging() -> bool:
    """Whether task logs go to remote storage (``[logging] remote_logging``): the triggerer then uploads a
    trigger's log only when the trigger ends (every 3.x line)."""
    try:
        return conf.getboolean("logging", "remote_logging", fallback=False)
    except Exception:  # noqa: BLE001 - an unreadable setting: local logs
        return False


def trigger_has_on_kill() -> bool:
    """Whether the triggerer calls ``BaseTrigger.on_kill()`` on user kills (Airflow 3.3+; see
    :data:`TRIGGER_KILL_PATHS`)."""
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


def connection_form_widgets(fields: dict) -> dict:
    """The connection form's extra fields as wtforms fields (Airflow < 3.2; from 3.2 on, the provider info's
    ``conn-fields`` win), from a provider-info field declaration."""
    from wtforms import IntegerField, StringField

    try:
        from flask_babel import lazy_gettext
    except ImportError:  # pragma: no cover - depends on the UI packages installed

        def lazy_gettext(text: str) -> str:  # type: ignore[misc]
            return text

    try:
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget

        widget_kw: dict[str, Any] = {"widget": BS3TextFieldWidget()}
    except ImportError:  # Airflow 3 without the FAB provider: the React UI needs no widget
        widget_kw = {}
    widgets: dict[str, Any] = {}
    for name, spec in fields.items():
        field_cls = IntegerField if spec["schema"]["type"] in ("integer", ["integer", "null"]) else StringField
        widgets[name] = field_cls(lazy_gettext(spec["label"]), description=spec.get("description", ""), **widget_kw)
    return widgets


__all__ = [
    "RUNTIME_OUTLETS",
    "TRIGGER_THREADS_THROUGH_ASGIREF",
    "XCOM_DESERIALIZE_NEEDS_CONFIG",
    "run_in_thread",
    "with_runtime_outlets",
    "AIRFLOW_V_3_0_PLUS",
    "AIRFLOW_V_3_1_PLUS",
    "AIRFLOW_V_3_2_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "AIRFLOW_VERSION",
    "AirflowException",
    "AirflowFailException",
    "AirflowSensorTimeout",
    "Asset",
    "BaseHook",
    "BaseOperator",
    "JWT_ISSUER_MUST_BE_SET",
    "LOGIN_URL_HAS_NEXT",
    "login_url",
    "API_SERVER_READS_THE_LOGIN_COOKIE",
    "TAB_RUN_ID_UNENCODED",
    "tab_run_id",
    "BaseOperatorLink",
    "BaseSensorOperator",
    "Context",
    "RESUMABLE_JOBS",
    "ResumableJobMixin",
    "TRIGGER_KILL_PATHS",
    "TRIGGER_ON_KILL_ALSO_ON_HANDOVER",
    "TaskDeferred",
    "XCom",
    "conf",
    "connection_form_widgets",
    "remote_logging",
    "stream_to_stderr",
    "trigger_has_on_kill",
]
