"""Defensive parsing of ResourceManager REST JSON, and the RM's error answers as :class:`YarnApiError` (pure,
stdlib only).

Hadoop 3.5 (Jersey 2) omits empty fields, renders empty maps/lists as ``""``/``null``, and may give a
one-element list as a bare object. Used by ``hooks/yarn.py`` and by ``minicluster.py`` (which runs without
Airflow), so both read node resources the same way.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    import requests

GPU_RESOURCE = "yarn.io/gpu"
GPU_MEMORY_RESOURCE = "melon.io/gpu-memory"
#: Resource names always present (0 when the RM does not report them) in a normalised ``resources`` dict.
KNOWN_RESOURCES = ("memory-mb", "vcores", GPU_RESOURCE, GPU_MEMORY_RESOURCE)


def as_list(value: Any, key: str | None = None) -> list[Any]:
    """A JSON list that may arrive as ``null``, ``""``, ``{}``, a bare object, or wrapped as ``{key: [...]}``."""
    if value is None or value == "" or value == {}:
        return []
    if key is not None and isinstance(value, dict) and key in value:
        return as_list(value[key])
    if isinstance(value, list):
        return [v for v in value if v is not None and v != ""]
    return [value]


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def to_number(value: Any, default: int = 0) -> int | float:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    try:
        return int(str(value))
    except ValueError:
        try:
            return float(str(value))
        except ValueError:
            return default


_UNIT_FACTORS_TO_MI = {
    "": None,
    "Mi": 1,
    "Ki": 1 / 1024,
    "Gi": 1024,
    "Ti": 1024 * 1024,
    "Pi": 1024**3,
    "M": 1000**2 / 1024**2,
    "k": 1000 / 1024**2,
    "K": 1000 / 1024**2,
    "G": 1000**3 / 1024**2,
    "T": 1000**4 / 1024**2,
}


def _in_mi(value: int | float, units: str | None) -> int | float:
    """Convert a memory-like value in ``units`` to MiB (unknown/absent units: as is)."""
    factor = _UNIT_FACTORS_TO_MI.get(units) if isinstance(units, str) else None
    if not factor or factor == 1:
        return value
    try:
        converted = value * factor
        return int(converted) if float(converted).is_integer() else converted
    except OverflowError:  # an absurd value (an int beyond float range): kept as the RM gave it
        return value


def parse_resource(resource: Any) -> dict[str, Any]:
    """Normalise a Resource JSON (``{memory, vCores, resourceInformations}``) and add a flat ``resources``
    dict ``{"memory-mb", "vcores", "yarn.io/gpu", "melon.io/gpu-memory", ...}``.

    ``resourceInformations`` may be ``{"resourceInformation": [...]}``, a bare list, a single object
    instead of a list, ``""`` or absent; then ``memory``/``vCores`` alone give memory-mb/vcores.
    ``melon.io/gpu-memory`` is reported in MiB whatever units the RM used.
    """
    res = dict(as_dict(resource))
    flat: dict[str, Any] = {name: 0 for name in KNOWN_RESOURCES}
    units: dict[str, str] = {}
    if "memory" in res:
        flat["memory-mb"] = to_number(res.get("memory"))
    if "vCores" in res:
        flat["vcores"] = to_number(res.get("vCores"))
    infos = res.get("resourceInformations")
    for info in as_list(infos, "resourceInformation"):
        if not isinstance(info, dict) or not info.get("name"):
            continue
        name = str(info["name"])
        value = to_number(info.get("value"))
        unit = info.get("units") or ""
        if name == GPU_MEMORY_RESOURCE:
            value = _in_mi(value, unit)
        flat[name] = value
        units[name] = unit
    res["resources"] = flat
    if units:
        res["units"] = units
    return res


def _subtract(total: dict[str, Any], used: dict[str, Any]) -> dict[str, Any]:
    return {k: total.get(k, 0) - used.get(k, 0) for k in set(total) | set(used)}


def normalise_node(node: Any) -> dict[str, Any]:
    """A node from ``/ws/v1/cluster/nodes`` with ``totalResource``/``usedResource``/``availableResource``
    each carrying a flat ``resources`` dict (see :func:`parse_resource`). Missing sections are rebuilt from
    the legacy flat fields (``usedMemoryMB``, ``availMemoryMB``, ``usedVirtualCores``, …) or by subtraction.
    """
    n = dict(as_dict(node))
    legacy_used = {"memory": n.get("usedMemoryMB"), "vCores": n.get("usedVirtualCores")}
    legacy_avail = {"memory": n.get("availMemoryMB"), "vCores": n.get("availableVirtualCores")}
    used = parse_resource(n.get("usedResource") or {k: v for k, v in legacy_used.items() if v is not None})
    avail_raw = n.get("availableResource")
    total_raw = n.get("totalResource")
    if total_raw:
        total = parse_resource(total_raw)
    else:
        avail_tmp = parse_resource(avail_raw or {k: v for k, v in legacy_avail.items() if v is not None})
        # Hadoop 3.1 lists no totalResource: its available plus its used, in their units
        total = {
            "resources": {
                k: avail_tmp["resources"].get(k, 0) + used["resources"].get(k, 0)
                for k in set(avail_tmp["resources"]) | set(used["resources"])
            },
            "units": {**as_dict(used.get("units")), **as_dict(avail_tmp.get("units"))},
        }
    if avail_raw:
        avail = parse_resource(avail_raw)
    else:
        avail = {"resources": _subtract(total["resources"], used["resources"])}
    n["totalResource"], n["usedResource"], n["availableResource"] = total, used, avail
    return n


def split_tags(value: Any) -> list[str]:
    """``applicationTags`` (a comma-separated string, a list, or absent) → lower-cased tag list."""
    if not value:
        return []
    items = value.split(",") if isinstance(value, str) else as_list(value, "tag")
    return [str(t).strip().lower() for t in items if str(t).strip()]


# ---- the RM's error answers ------------------------------------------------------------------------------------

#: Longest RM message kept in a YarnApiError (a proxy's error page can be megabytes)
MAX_MESSAGE = 500


def _rm_fix(status: int | None, message: str) -> str | None:
    """The fix a user can apply for a failed RM call, where the status and message tell it."""
    if status is None:
        return (
            "check the yarn connection's host (the RM web address, e.g. http://rm:8088; list both RMs "
            "of an HA pair) and that the ResourceManager is up"
        )
    if status == 401:
        return (
            "the RM wants Kerberos (SPNEGO): set auth=kerberos in the yarn connection's extra and provide "
            "a ticket (airflow kerberos) or keytab"
        )
    if status == 403 and "impersonate" in message:
        return _proxy_fix(message)
    if status == 403:
        return "the user lacks the ACL for this (queue acl_submit_applications, application ACLs, yarn.admin.acl)"
    if status == 404 and "application" in message.lower():
        return "the RM does not know this application (wrong id, or an RM restarted without recovery)"
    if status == 400 and "maximum" in message.lower():
        return "the request exceeds yarn.scheduler.maximum-allocation-*: ask for less per container"
    return None


def _proxy_fix(message: str) -> str:
    """The fix for "User: airflow is not allowed to impersonate bob" (Hadoop's proxy-user check)."""
    match = re.search(r"User:\s*(\S+?)(?:@\S+)?\s+(?:\(auth:\S+\)\s+)?is not allowed to impersonate\s+(\S+)", message)
    service, user = match.groups() if match else ("<service user>", "<user>")
    return (
        f"the cluster does not let {service} act for {user} (doAs): add {user} (or a group of theirs) to "
        f"hadoop.proxyuser.{service}.users / hadoop.proxyuser.{service}.groups and the Airflow host to "
        f"hadoop.proxyuser.{service}.hosts in core-site.xml, then `hdfs dfsadmin -refreshSuperUserGroupsConfiguration`"
        f" and `yarn rmadmin -refreshSuperUserGroupsConfiguration`; or run the task as another user (run_as)"
    )


class YarnApiError(Exception):
    """A failed RM call: ``status`` (``None`` when no HTTP answer came, or none that could be read:
    ``unreadable``), ``url`` and the RM's ``message``. ``str()`` is one line: what failed, the RM's own message
    (without a Java stack trace) and, where known, the fix."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        url: str | None = None,
        exception: str | None = None,
        unreadable: bool = False,
    ):
        self.status = status
        self.url = url
        self.message = " ".join(str(message).split("\n\tat ", 1)[0].split())
        if len(self.message) > MAX_MESSAGE:
            self.message = self.message[:MAX_MESSAGE] + "…"
        self.exception = None if exception is None else str(exception)
        self.fix = None if unreadable else _rm_fix(status, self.message)
        where = f" for {url}" if url else ""
        if status is not None:
            head = f"YARN RM returned {status}{where}"
        else:
            head = f"YARN RM answer unreadable{where}" if unreadable else f"YARN RM unreachable{where}"
        super().__init__(f"{head}: {self.message}" + (f" — fix: {self.fix}" if self.fix else ""))

    @classmethod
    def from_response(cls, resp: requests.Response) -> YarnApiError:
        message, exception = extract_rm_message(resp)
        return cls(message, status=resp.status_code, url=resp.url, exception=exception)


def extract_rm_message(resp: requests.Response) -> tuple[str, str | None]:
    """The RM's error message: ``RemoteException.message`` when JSON, else the (trimmed) body text."""
    text = ""
    try:
        text = resp.text or ""
    except Exception:  # pragma: no cover - undecodable body
        pass
    try:
        body = json.loads(text) if text else None
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict):
        remote = body.get("RemoteException") or body.get("remoteException")
        if isinstance(remote, dict):
            msg = remote.get("message") or remote.get("exception") or json.dumps(remote)
            return str(msg), remote.get("exception") or remote.get("javaClassName")
        for key in ("message", "diagnostics", "error"):
            if body.get(key):
                return str(body[key]), None
    text = " ".join(text.split())
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE] + "…"
    return text or (resp.reason or f"HTTP {resp.status_code}"), None


def gpu_summary(nodes: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """GPU count and GPU memory (MiB) per node and in total, of normalised nodes: ``{"nodes": [...], "total": {...}}``."""
    rows = []
    for n in nodes:
        tot, used = n["totalResource"]["resources"], n["usedResource"]["resources"]
        rows.append(
            {
                "id": n.get("id"),
                "host": n.get("nodeHostName"),
                "state": n.get("state"),
                "http_address": n.get("nodeHTTPAddress"),
                "gpus": tot.get(GPU_RESOURCE, 0),
                "gpus_used": used.get(GPU_RESOURCE, 0),
                "gpu_memory_mb": tot.get(GPU_MEMORY_RESOURCE, 0),
                "gpu_memory_used_mb": used.get(GPU_MEMORY_RESOURCE, 0),
                "memory_mb": tot.get("memory-mb", 0),
                "memory_used_mb": used.get("memory-mb", 0),
                "vcores": tot.get("vcores", 0),
                "vcores_used": used.get("vcores", 0),
            }
        )
    total = {
        k: sum(r[k] for r in rows)
        for k in (
            "gpus",
            "gpus_used",
            "gpu_memory_mb",
            "gpu_memory_used_mb",
            "memory_mb",
            "memory_used_mb",
            "vcores",
            "vcores_used",
        )
    }
    total["nodes"] = len(rows)
    return {"nodes": rows, "total": total}
