"""Pruning a user's staging folder (``melon prune``): what goes, what stays, and why.

:func:`decide` (pure) picks, for a cutoff ``now - older_than`` of at least :data:`MIN_AGE_S`, the cache objects,
application plans, index entries and leftovers that no live application needs; :func:`prune` lists the folder
and the RM's live applications and deletes them. Deleting an object costs at most a re-upload.
``docs/internals.md``, "Pruning the staging folder", gives the layout, the rules and the one race left.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional

from airflow_provider_melon.hadoop.app_state import LIVE_STATES
from airflow_provider_melon.hadoop.hdfs_io import hdfs_errors
from airflow_provider_melon.runtime.outputs import hdfs_path

log = logging.getLogger(__name__)

#: YARN states of an application that may still localize (or re-localize, on an AM restart) staged files
INDEX = "by-sample"
#: the shortest ``older_than`` a prune accepts (module docstring: in-flight uploads, submissions not yet live)
MIN_AGE_S = 3600
_MIN_AGE_TEXT = "1h"


@dataclass(frozen=True)
class Entry:
    """A thing in the staging folder: ``kind`` is ``object`` (a cache/<sha256>/ folder), ``plan`` (an apps/<id>/
    folder), ``index`` (a by-sample/<key>/<sha256> entry), ``index-dir`` (a by-sample/<key>/ folder),
    ``leftover`` (a .lock or .tmp file)."""

    kind: str
    path: str
    bytes: int = 0
    last_used_ms: int = 0
    #: object: its digest; index: the digest it names; plan: the application id
    key: str = ""


@dataclass
class Decision:
    delete: list[Entry] = field(default_factory=list)
    #: entry → why it stays (only the ones old enough to go otherwise: "in use by <app id>", "application live")
    kept: list[tuple[Entry, str]] = field(default_factory=list)

    @property
    def freed_bytes(self) -> int:
        return sum(e.bytes for e in self.delete)

    def as_dict(self) -> dict[str, Any]:
        return {
            "delete": [asdict(e) for e in self.delete],
            "freed_bytes": self.freed_bytes,
            "kept": [{**asdict(e), "why": why} for e, why in self.kept],
        }


def decide(entries: Iterable[Entry], *, live_apps: Iterable[str], in_use: dict[str, str], cutoff_ms: int) -> Decision:
    """What :func:`prune` deletes (module docstring). ``in_use``: staged path → the live application that uses it."""
    entries, live = list(entries), set(live_apps)
    out = Decision()
    for e in entries:
        if e.last_used_ms >= cutoff_ms or e.kind not in ("object", "plan", "leftover"):
            continue
        users = (
            sorted({app for path, app in in_use.items() if path == e.path or path.startswith(e.path + "/")})
            if e.kind == "object"
            else []
        )
        if users:
            out.kept.append((e, f"in use by {', '.join(users)}"))
        elif e.kind == "plan" and e.key in live:
            out.kept.append((e, "application live"))
        else:
            out.delete.append(e)
    kept_objects = {e.key for e in entries if e.kind == "object"} - {e.key for e in out.delete if e.kind == "object"}
    out.delete += [e for e in entries if e.kind == "index" and e.key not in kept_objects]
    going = {e.path for e in out.delete}
    for folder in (e for e in entries if e.kind == "index-dir" and e.last_used_ms < cutoff_ms):
        inside = [
            e.path for e in entries if e.kind in ("index", "leftover") and posixpath.dirname(e.path) == folder.path
        ]
        if all(path in going for path in inside):
            out.delete.append(folder)
    return out


def _last_used(st: dict[str, Any]) -> int:
    return max(int(st.get("modificationTime") or 0), int(st.get("accessTime") or 0))


def _listing(client: Any, path: str) -> list[tuple[str, dict[str, Any]]]:
    with hdfs_errors("list", path):
        listing: list[tuple[str, dict[str, Any]]] = (
            client.list(path, status=True) if client.status(path, strict=False) else []
        )
        return listing


def collect(client: Any, staging_dir: str) -> list[Entry]:
    """The staging folder's prunable entries (one listing per cache object: a prune is rare, and exact)."""
    cache, apps = f"{staging_dir}/cache", f"{staging_dir}/apps"
    entries: list[Entry] = []
    for name, st in _listing(client, cache):
        path = f"{cache}/{name}"
        if name == INDEX:
            continue
        if st.get("type") != "DIRECTORY":
            continue
        files = _listing(client, path)  # the object, and any .lock/.tmp of an upload (a crashed one's go with it)
        last = max([_last_used(s) for _, s in files] + [_last_used(st)])
        entries.append(Entry("object", path, sum(int(s.get("length") or 0) for _, s in files), last, name))
    for key, st in _listing(client, f"{cache}/{INDEX}"):
        folder = f"{cache}/{INDEX}/{key}"
        entries.append(Entry("index-dir", folder, 0, _last_used(st), key))
        for n, s in _listing(client, folder):
            if n.startswith("."):
                entries.append(Entry("leftover", f"{folder}/{n}", int(s.get("length") or 0), _last_used(s)))
            else:
                entries.append(Entry("index", f"{folder}/{n}", 0, _last_used(s), n))
    for app_id, st in _listing(client, apps):
        entries.append(Entry("plan", f"{apps}/{app_id}", 0, _last_used(st), app_id))
    return entries


def staged_paths(plan: dict[str, Any]) -> set[str]:
    """The HDFS paths a plan's application localizes: its ``local_resources`` and ``staged`` (the AM jar too)."""
    urls = [r.get("url") for r in plan.get("local_resources") or [] if isinstance(r, dict)]
    urls += list(plan.get("staged") or [])
    return {path for u in urls if isinstance(u, str) and (path := hdfs_path(u))}


def in_use(client: Any, staging_dir: str, live_apps: Iterable[str]) -> dict[str, str]:
    """staged path → a live application that uses it, read from the live applications' plans. A live application
    (of any user) whose plan is in this folder but cannot be read stops the prune (what it uses is unknown; nothing
    is deleted)."""
    used: dict[str, str] = {}
    for app_id in sorted(live_apps):
        path = f"{staging_dir}/apps/{app_id}/melon-plan.json"
        with hdfs_errors("status", path):
            found = client.status(path, strict=False)
        if found is None:
            continue  # not staged from this folder (another tool's app, or another staging_dir)
        with hdfs_errors("read", path), client.read(path) as reader:
            plan = json.loads(reader.read())
        for staged in staged_paths(plan):
            used.setdefault(staged, app_id)
    return used


def prune(hook: Any, older_than_s: float, *, dry_run: bool = False, now_ms: Optional[int] = None) -> Decision:
    """Delete what :func:`decide` says, through ``hook`` (a :class:`~airflow_provider_melon.hooks.melon.MelonHook`:
    its HDFS client, staging folder and YARN hook). ``dry_run``: decide only."""
    check_age(older_than_s)
    client, staging = hook.hdfs, hook.staging_dir
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    # every user's: a shared staging folder holds other users' plans and objects (module docstring)
    live = [a["id"] for a in hook.yarn.list_applications(states=LIVE_STATES)]
    entries = collect(client, staging)
    planned = {e.key for e in entries if e.kind == "plan"}  # the live apps staged here (one read each, not all)
    decision = decide(
        entries,
        live_apps=live,
        in_use=in_use(client, staging, [a for a in live if a in planned]),
        cutoff_ms=now_ms - int(older_than_s * 1000),
    )
    if dry_run:
        return decision
    done: list[Entry] = []
    for e in decision.delete:
        if e.kind == "object":  # used since the listing (a submission found it cached): keep it
            if any(_last_used(s) > e.last_used_ms for _, s in _listing(client, e.path)):
                decision.kept.append((e, "used while pruning"))
                continue
        with hdfs_errors("delete", e.path):
            client.delete(e.path, recursive=e.kind in ("object", "plan", "index-dir"))
        done.append(e)
    decision.delete = done
    log.info("pruned %s: %d entries, %d bytes freed", staging, len(done), decision.freed_bytes)
    return decision


def parse_age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``90s`` or plain seconds → seconds (``--older-than``)."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    value = str(text).strip().lower()
    scale = units.get(value[-1:], None)
    number = value[:-1] if scale else value
    try:
        seconds = float(number) * (scale or 1)
    except ValueError:
        raise ValueError(
            f"--older-than {text!r}: expected a number of days, hours, minutes or seconds (7d, 12h, 30m, 90s, 3600)"
        ) from None
    if seconds != seconds:
        raise ValueError(f"--older-than {text!r}: must be {_MIN_AGE_TEXT} or more")
    check_age(seconds, text)
    return seconds


def check_age(seconds: float, text: Optional[str] = None) -> None:
    """Refuse a cutoff under :data:`MIN_AGE_S` (it would delete uploads in flight and submissions' fresh plans)."""
    if seconds < MIN_AGE_S:
        shown = repr(text) if text is not None else f"{seconds:g} s"
        raise ValueError(
            f"--older-than {shown}: must be {_MIN_AGE_TEXT} or more (younger entries may be uploads in "
            "flight or plans of applications being submitted)"
        )


__all__ = [
    "Decision",
    "Entry",
    "MIN_AGE_S",
    "check_age",
    "collect",
    "decide",
    "in_use",
    "parse_age",
    "prune",
    "staged_paths",
]
