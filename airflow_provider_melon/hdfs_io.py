"""HDFS helpers for a DAG: :func:`run_slug` (a path component for an Airflow run id), :func:`put_once` (publish a
file once, safely under concurrency), :func:`quiet_client_logs`, :class:`MelonHdfsError`, and :func:`hdfs_home`
(``/user/<user>`` of the user MeLoN jobs on a yarn connection run as, so a DAG's HDFS folders go there, not under a
hard-coded user).

The public import path of these names (``from airflow_provider_melon.hdfs_io import run_slug``). The plumbing
itself is Airflow-free and lives in :mod:`airflow_provider_melon.hadoop.hdfs_io`; any other name of that module
is still reachable here.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_melon.hadoop import hdfs_io as _plumbing
from airflow_provider_melon.hadoop.hdfs_io import (  # noqa: F401  (the DAG-facing names)
    MelonHdfsError,
    hdfs_errors,
    put_file_hashing,
    put_once,
    quiet_client_logs,
    run_slug,
)


def hdfs_home(yarn_conn_id: str = "yarn_default") -> str:
    """``/user/<user>``: the HDFS home of the user that MeLoN jobs on ``yarn_conn_id`` run as, the same user whose
    ``/user/<user>/.melon`` holds their staging (``MelonHook.user``: the connection's ``proxy_user``, else its
    login, else ``HADOOP_USER_NAME``/the OS user). Reads the connection only, no network call. In a template:
    ``user_defined_macros={"hdfs_home": hdfs_home}`` then ``{{ hdfs_home() }}/melon-demo``."""
    from airflow_provider_melon.hooks.melon import MelonHook  # Airflow side only

    user = MelonHook(yarn_conn_id).user
    if not user or "/" in user:
        raise ValueError(f"yarn connection {yarn_conn_id!r}: no usable HDFS user ({user!r}); set its login")
    return f"/user/{user}"


def __getattr__(name: str) -> Any:
    """Every other name of :mod:`airflow_provider_melon.hadoop.hdfs_io` (this was that module before issue 25)."""
    try:
        return getattr(_plumbing, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


__all__ = ["MelonHdfsError", "hdfs_errors", "hdfs_home", "put_file_hashing", "put_once", "quiet_client_logs",
           "run_slug"]
