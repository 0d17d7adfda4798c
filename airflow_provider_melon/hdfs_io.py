"""A DAG's HDFS home: :func:`hdfs_home` (``/user/<user>`` of the user MeLoN jobs on a yarn connection run as, so a
DAG's HDFS folders go there, not under a hard-coded user).

The HDFS plumbing a DAG may also use (``run_slug``, ``put_once``, ``quiet_client_logs``, ``MelonHdfsError``) is
Airflow-free and lives in :mod:`airflow_provider_melon.hadoop.hdfs_io`; import it from there.
"""

from __future__ import annotations

# The example DAGs import these two from here until they import them from their home (hadoop.hdfs_io).
from airflow_provider_melon.hadoop.hdfs_io import put_once, run_slug  # noqa: F401


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
