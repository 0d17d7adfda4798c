"""The ``melon`` job commands' exit codes, their errors, the classification of any exception into an exit code
and the one line printed, and the JSON object that stands for an error under ``--json``."""

from __future__ import annotations

from typing import Optional
from urllib.parse import urlsplit

from airflow_provider_melon.cli.terminal import first_line
from airflow_provider_melon.dev import minicluster as mc

EXIT_CODES = """\
exit codes of submit, status, ls, logs, kill, wait, prune:
  0    success: the app SUCCEEDED (wait, status, submit --wait) or is still running (status)
  1    the app FAILED or was KILLED (wait, status, submit --wait); any other error
  2    bad usage or a bad job spec (the message names the field)
  3    the cluster is unreachable (ResourceManager, NameNode, NodeManagers)
  4    not found: no such application, or its logs are gone
  124  wait --timeout (or kill --timeout) expired before the app ended
with --json an error is a JSON object on stdout too: {"error", "exit_code", "message", ...}"""

OK, APP_FAILED, USAGE, UNREACHABLE, NOT_FOUND, TIMED_OUT, INTERRUPTED = 0, 1, 2, 3, 4, 124, 130

#: the ``error`` of a ``--json`` error object, by exit code
ERROR_NAMES = {
    APP_FAILED: "failed",
    USAGE: "usage",
    UNREACHABLE: "unreachable",
    NOT_FOUND: "not_found",
    TIMED_OUT: "timed_out",
    INTERRUPTED: "interrupted",
}


class CliError(Exception):
    """A failure with its exit code; ``str()`` is the one line printed."""

    code = APP_FAILED


class UsageError(CliError):
    code = USAGE


class Unreachable(CliError):
    code = UNREACHABLE


class NotFound(CliError):
    code = NOT_FOUND


def _base(url: Optional[str]) -> str:
    parts = urlsplit(url or "")
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else "?"


def _cause(message: str) -> str:
    """The gist of a transport error (requests' messages nest the whole connection pool's story)."""
    for key, text in (
        ("refused", "connection refused"),
        ("timed out", "timed out"),
        ("Timeout", "timed out"),
        ("Name or service not known", "unknown host"),
        ("nodename nor servname", "unknown host"),
        ("standby", "standby ResourceManager and no active one known"),
    ):
        if key in message:
            return text
    return first_line(message, 200)


def exit_code_for(exc: BaseException, args=None) -> tuple[int, str]:
    """An exception → (exit code, one-line message)."""
    from airflow_provider_melon.hadoop.hdfs_io import MelonHdfsError
    from airflow_provider_melon.hadoop.nodemanager import NodeManagerError
    from airflow_provider_melon.spec import JobSpecError

    if isinstance(exc, CliError):
        return exc.code, str(exc)
    if isinstance(exc, JobSpecError):
        return USAGE, f"{getattr(args, 'spec', 'job spec')}: {exc}"
    if isinstance(exc, mc.MiniClusterError):
        return USAGE, str(exc)
    name = type(exc).__name__
    if name == "AirflowNotFoundException":
        return USAGE, f"{exc} (an Airflow connection: `airflow connections add`, or AIRFLOW_CONN_<ID>)"
    from airflow_provider_melon.hadoop.rm_json import YarnApiError  # Airflow-free: no Airflow needed to tell

    if isinstance(exc, NodeManagerError):  # a YarnApiError too, but not about the ResourceManager
        return APP_FAILED, str(exc)
    if isinstance(exc, YarnApiError):
        if exc.status is None or exc.status == 307:
            return UNREACHABLE, f"cannot reach the ResourceManager {_base(exc.url)}: {_cause(exc.message)}"
        if exc.status == 404 and getattr(args, "app_id", None):
            return NOT_FOUND, f"no application {args.app_id} on this cluster ({exc.message})"
        return APP_FAILED, str(exc)
    if isinstance(exc, MelonHdfsError):
        return (UNREACHABLE if exc.retriable else APP_FAILED), str(exc)
    import requests

    if isinstance(exc, requests.RequestException):
        return UNREACHABLE, f"{name}: {exc}"
    if isinstance(exc, ValueError) and "ResourceManager URL" in str(exc):
        return USAGE, str(exc)
    return APP_FAILED, f"{name}: {first_line(str(exc), 400)}" + (
        "" if getattr(args, "verbose", False) else " (-v for the traceback)"
    )


def error_json(code: int, message: str, args=None, exc: Optional[BaseException] = None) -> dict:
    """What ``--json`` prints for an error: ``error`` (:data:`ERROR_NAMES`), ``exit_code``, ``message`` (the line
    stderr gets), and the fields that apply: the ``command`` (and ``memory``'s ``action``), its ``app_id``, ``spec``,
    ``key`` or ``conn_id``, and the failed call's
    ``url``, HTTP ``status``, NodeManager ``node``, HDFS ``op`` and ``path`` and the ``fix``."""
    out: dict = {"error": ERROR_NAMES.get(code, "failed"), "exit_code": code, "message": message}
    for name in ("command", "action", "app_id", "spec", "key", "conn_id"):
        value = getattr(args, name, None)
        if isinstance(value, str):
            out[name] = value
    for name in ("url", "status", "node", "op", "path", "fix"):
        value = getattr(exc, name, None)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            out[name] = value
    return out


__all__ = [
    "APP_FAILED",
    "ERROR_NAMES",
    "EXIT_CODES",
    "INTERRUPTED",
    "NOT_FOUND",
    "OK",
    "TIMED_OUT",
    "UNREACHABLE",
    "USAGE",
    "CliError",
    "NotFound",
    "Unreachable",
    "UsageError",
    "error_json",
    "exit_code_for",
]
