"""The async twin of :class:`~airflow_provider_melon.hooks.yarn.YarnHook`, for triggers (also importable as
``airflow_provider_melon.hooks.yarn.AsyncYarnHook``)."""

from __future__ import annotations

import threading
from typing import Any, Iterable

import requests

from airflow_provider_melon.hadoop.nodemanager import ContainerLogChunk
from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.version_compat import run_in_thread


class AsyncYarnHook:
    """Async twin of :class:`YarnHook` for triggers: the same methods, as coroutines.

    Design choice: every call runs the *sync* hook in a worker thread (``version_compat.run_in_thread``:
    ``asyncio.to_thread``, or asgiref's on Airflow 3.0/3.1). This gives
    one behaviour by construction — Kerberos SPNEGO (requests-kerberos has no async counterpart), HA
    failover with the remembered active RM, timeouts, retries and defensive parsing are the very same
    code. The Airflow connection is fetched lazily inside that thread on the first call, so the triggerer's
    event loop never blocks on it. RM calls are few and short (a poll every several seconds), so a thread
    per in-flight call is cheap.
    """

    conn_name_attr = YarnHook.conn_name_attr
    default_conn_name = YarnHook.default_conn_name
    conn_type = YarnHook.conn_type
    hook_name = YarnHook.hook_name

    def __init__(self, yarn_conn_id: str = YarnHook.default_conn_name, **kwargs: Any):
        self.yarn_conn_id = yarn_conn_id
        self._kwargs = kwargs
        self._hook: YarnHook | None = None
        self._hook_lock = threading.Lock()

    @property
    def sync_hook(self) -> YarnHook:
        """The wrapped sync hook (created on first use; its connection is looked up on its first call)."""
        with self._hook_lock:
            if self._hook is None:
                self._hook = YarnHook(self.yarn_conn_id, **self._kwargs)
            return self._hook

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        def run() -> Any:
            return getattr(self.sync_hook, name)(*args, **kwargs)

        return await run_in_thread(run)  # version_compat: a thread that may look up the connection

    async def cluster_info(self) -> dict[str, Any]:
        return await self._call("cluster_info")

    async def cluster_metrics(self) -> dict[str, Any]:
        return await self._call("cluster_metrics")

    async def scheduler(self) -> dict[str, Any]:
        return await self._call("scheduler")

    async def find_active_rm(self) -> str | None:
        return await self._call("find_active_rm")

    async def ha_states(self) -> dict[str, dict[str, Any] | str]:
        return await self._call("ha_states")

    async def rm_conf(self, name: str) -> str | None:
        return await self._call("rm_conf", name)

    async def nodes(self, states: Iterable[str] | str | None = None) -> list[dict[str, Any]]:
        return await self._call("nodes", states)

    async def node_gpu_summary(self, states: Iterable[str] | str | None = ("RUNNING",)) -> dict[str, Any]:
        return await self._call("node_gpu_summary", states)

    async def new_application(self) -> dict[str, Any]:
        return await self._call("new_application")

    async def submit_application(self, context: dict[str, Any]) -> str:
        return await self._call("submit_application", context)

    async def get_application(self, app_id: str) -> dict[str, Any]:
        return await self._call("get_application", app_id)

    async def get_state(self, app_id: str) -> str:
        return await self._call("get_state", app_id)

    async def kill_application(self, app_id: str) -> dict[str, Any]:
        return await self._call("kill_application", app_id)

    async def app_attempts(self, app_id: str) -> list[dict[str, Any]]:
        return await self._call("app_attempts", app_id)

    async def app_containers(self, app_id: str, attempt_id: str) -> list[dict[str, Any]]:
        return await self._call("app_containers", app_id, attempt_id)

    async def list_applications(self, **filters: Any) -> list[dict[str, Any]]:
        return await self._call("list_applications", **filters)

    async def find_applications(self, tags: Iterable[str] | str, states: Iterable[str] | str | None = None,
                                *, match_all: bool = False, application_type: str | None = None
                                ) -> list[dict[str, Any]]:
        return await self._call("find_applications", tags, states, match_all=match_all,
                                application_type=application_type)

    async def application_logs_url(self, app: dict[str, Any] | str) -> str:
        return await self._call("application_logs_url", app)

    async def application_url(self, app_id: str) -> str:
        return await self._call("application_url", app_id)

    async def am_status(self, app_id: str, path: str = "/status", *, retries: int = 0) -> dict[str, Any] | None:
        return await self._call("am_status", app_id, path, retries=retries)

    async def get_url(self, url: str, params: dict[str, Any] | None = None, **kw: Any) -> requests.Response:
        return await self._call("get_url", url, params, **kw)
    async def node_base_url(self, node_http: str) -> str:
        return await self._call("node_base_url", node_http)

    async def container_log(self, node_http: str, container_id: str, filename: str = "stdout",
                            size: int | None = None) -> ContainerLogChunk:
        return await self._call("container_log", node_http, container_id, filename, size)

    async def test_connection(self) -> tuple[bool, str]:
        return await self._call("test_connection")

    def close(self) -> None:
        if self._hook is not None:
            self._hook.close()


__all__ = ["AsyncYarnHook"]
