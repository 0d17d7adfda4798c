"""Extra links on MeLoN tasks: the YARN application page, the ApplicationMaster's status page, TensorBoard.

Each link has a fixed ``xcom_key``. The operator pushes the link's URL under that key right after the
application is submitted (:meth:`MelonLink.persist`), so the button works while the task is deferred or
still running; ``get_link`` reads the URL back from XCom (the API server does the same through the key).
A link with no URL in XCom (e.g. TensorBoard when the job asks for no ``tensorboard`` and either declares no
``tensorboard_log_dir`` or the connection has no ``tensorboard_url``) renders as no link.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Optional
from urllib.parse import quote

from airflow_provider_melon.version_compat import BaseOperatorLink, XCom

if TYPE_CHECKING:  # the key BaseOperatorLink.get_link names (3.3's task SDK; 3.0/3.1: airflow.models' twin)
    from airflow.sdk.types import TaskInstanceKey


def yarn_application_url(rm_url: str, app_id: str) -> str:
    """The RM web UI page of an application: ``<rm>/cluster/app/<id>``."""
    return f"{rm_url.rstrip('/')}/cluster/app/{app_id}"


def am_status_url(rm_url: str, app_id: str) -> str:
    """The MeLoN AM's status page through the RM web proxy: ``<rm>/proxy/<id>/``."""
    return f"{rm_url.rstrip('/')}/proxy/{app_id}/"


def tensorboard_url(base_url: Optional[str], logdir: Optional[str]) -> Optional[str]:
    """TensorBoard for ``logdir`` at ``base_url`` (the ``tensorboard_url`` connection extra), or None.

    ``base_url`` may hold a ``{logdir}`` placeholder (``http://tb:6006/#scalars&logdir={logdir}``, or a
    launcher such as ``http://tb-launcher/open?path={logdir}``); without one, ``?logdir=<logdir>`` is appended.
    """
    if not base_url or not logdir:
        return None
    quoted = quote(logdir, safe="/:")
    if "{logdir}" in base_url:
        return base_url.replace("{logdir}", quoted)
    sep = "&" if "?" in base_url else "?"
    return f"{base_url}{sep}logdir={quoted}"


def proxied_tensorboard_url(rm_url: str, app_id: str) -> str:
    """The TensorBoard a job with ``tensorboard`` runs beside its chief, through the AM and the RM web proxy:
    ``<rm>/proxy/<id>/tensorboard/``."""
    return f"{am_status_url(rm_url, app_id)}tensorboard/"


class MelonLink(BaseOperatorLink):
    """A link whose URL the operator stored in XCom under :attr:`xcom_key`."""

    name: ClassVar[str] = "MeLoN"
    xcom_key: ClassVar[str] = "melon_link"

    def get_link(self, operator: Any, *, ti_key: "TaskInstanceKey") -> str:
        url = XCom.get_value(ti_key=ti_key, key=self.xcom_key)
        return str(url) if url else ""

    @classmethod
    def persist(cls, context: Any, url: Optional[str]) -> None:
        """Push ``url`` under this link's key (nothing when there is no URL)."""
        if url:
            context["ti"].xcom_push(key=cls.xcom_key, value=url)


class YarnApplicationLink(MelonLink):
    """The ResourceManager's page of the application (``<rm>/cluster/app/<id>``)."""

    name = "YARN Application"
    xcom_key = "melon_yarn_app_url"

    @classmethod
    def url(cls, rm_url: str, app_id: str) -> str:
        return yarn_application_url(rm_url, app_id)


class MelonAmStatusLink(MelonLink):
    """The MeLoN ApplicationMaster's status page through the RM proxy (``<rm>/proxy/<id>/``)."""

    name = "MeLoN AM Status"
    xcom_key = "melon_am_status_url"

    @classmethod
    def url(cls, rm_url: str, app_id: str) -> str:
        return am_status_url(rm_url, app_id)


class TensorBoardLink(MelonLink):
    """TensorBoard: the one MeLoN starts for a job with ``tensorboard`` (through the RM proxy), or the
    connection's ``tensorboard_url`` template on the job's log dir (which wins when both exist)."""

    name = "TensorBoard"
    xcom_key = "melon_tensorboard_url"

    @classmethod
    def url(cls, base_url: Optional[str], logdir: Optional[str]) -> Optional[str]:
        return tensorboard_url(base_url, logdir)


def persist_job_links(
    context: Any,
    rm: Optional[str],
    app_id: str,
    app: Optional[dict],
    *,
    tensorboard_link: bool = False,
    tensorboard: bool = False,
    tensorboard_dir: Optional[str] = None,
    tensorboard_template: Optional[str] = None,
) -> None:
    """A job's links, as soon as it has an application: XComs ``app_id``, ``tracking_url`` and ``am_status_url``,
    and each link's URL (the RM's at ``rm``, its web UI; none without). ``tensorboard_link`` (a job with a
    TensorBoard or its log folder): the connection's ``tensorboard_template`` (an external TensorBoard) wins;
    else the one MeLoN runs (``tensorboard``), through the RM proxy."""
    ti = context["ti"]
    am_url = am_status_url(rm, app_id) if rm else None
    tracking = (app or {}).get("trackingUrl") or am_url
    ti.xcom_push(key="app_id", value=app_id)
    if tracking:
        ti.xcom_push(key="tracking_url", value=tracking)
    if am_url:
        ti.xcom_push(key="am_status_url", value=am_url)
    if rm:
        YarnApplicationLink.persist(context, yarn_application_url(rm, app_id))
        MelonAmStatusLink.persist(context, am_url)
    if tensorboard_link:
        TensorBoardLink.persist(
            context,
            tensorboard_url(tensorboard_template, tensorboard_dir)
            or (proxied_tensorboard_url(rm, app_id) if tensorboard and rm else None),
        )


__all__ = [
    "MelonAmStatusLink",
    "MelonLink",
    "TensorBoardLink",
    "YarnApplicationLink",
    "am_status_url",
    "persist_job_links",
    "proxied_tensorboard_url",
    "tensorboard_url",
    "yarn_application_url",
]
