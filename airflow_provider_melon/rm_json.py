"""Defensive parsing of ResourceManager REST JSON (pure, stdlib only).

Hadoop 3.5 (Jersey 2) omits empty fields, renders empty maps/lists as ``""``/``null``, and may give a
one-element list as a bare object. Used by ``hooks/yarn.py`` and by ``minicluster.py`` (which runs without
Airflow), so both read node resources the same way.
"""

from __future__ import annotations

from typing import Any

GPU_RESOURCE = "yarn.io/gpu"
GPU_MEMORY_RESOURCE = "melon.io/gpu-memory"
#: Resource names always present (0 when the RM does not report them) in a normalised ``resources`` dict.
KNOWN_RESOURCES = ("memory-mb", "vcores", GPU_RESOURCE, GPU_MEMORY_RESOURCE)


def as_list(value: Any, key: str | None = None) -> list:
    """A JSON list that may arrive as ``null``, ``""``, ``{}``, a bare object, or wrapped as ``{key: [...]}``."""
    if value is None or value == "" or value == {}:
        return []
    if key is not None and isinstance(value, dict) and key in value:
        return as_list(value[key])
    if isinstance(value, list):
        return [v for v in value if v is not None and v != ""]
    return [value]


def as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _to_number(value: Any, default: int = 0) -> int | float:
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
    "": None, "Mi": 1, "Ki": 1 / 1024, "Gi": 1024, "Ti": 1024 * 1024, "Pi": 1024**3,
    "M": 1000**2 / 1024**2, "k": 1000 / 1024**2, "K": 1000 / 1024**2, "G": 1000**3 / 1024**2,
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
        flat["memory-mb"] = _to_number(res.get("memory"))
    if "vCores" in res:
        flat["vcores"] = _to_number(res.get("vCores"))
    infos = res.get("resourceInformations")
    for info in as_list(infos, "resourceInformation"):
        if not isinstance(info, dict) or not info.get("name"):
            continue
        name = str(info["name"])
        value = _to_number(info.get("value"))
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
        total = {"resources": {k: avail_tmp["resources"].get(k, 0) + used["resources"].get(k, 0)
                               for k in set(avail_tmp["resources"]) | set(used["resources"])}}
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
