"""The history of a task's runs in HDFS: their GPU memory (``gpu_memory: auto``), context reserve and training time
(``priority: auto``); the figures: ``gpu/learned.py``.

One JSON file per finished run, ``<staging_dir>/profiles/<key>/memory/<application id>.json``: concurrent runs of
the same task each write their own file, so none overwrites another's record. ``key`` is ``<dag_id>/<task_id>``
for an Airflow task (the profile step's folder, ``operators/profile.py``), ``<dag_id>/<task_id>/map-<index>`` for a
mapped task instance, the train operator's ``memory_key`` when given, and ``jobs/<job name>`` for ``melon submit``
unless it names one. ``melon memory show|forget`` (``cli/memory.py``) reads and deletes it. The staging folder is
the user's, 0700 (each tenant learns from its own runs only); the ``profiles/<key>/memory`` folders are made 0700
too. The oldest files beyond ``learned.KEEP`` are deleted when a run is recorded.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from typing import Any, Callable, Mapping, Optional, Sequence

from airflow_provider_melon.gpu import learned
from airflow_provider_melon.hadoop.hdfs_io import hdfs_errors, write_beside_and_rename

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r"[A-Za-z0-9_.+@=,~-]+")
_APP = re.compile(r"application_(\d+)_(\d+)\.json")


def folder(staging_dir: str, key: str) -> str:
    """``<staging_dir>/profiles/<key>/memory``; ``key`` is one or more plain names joined by ``/``."""
    parts = [p for p in str(key).split("/") if p]
    bad = [p for p in parts if not _SEGMENT.fullmatch(p) or p in (".", "..")]
    if not parts or bad:
        raise ValueError(
            f"memory history key {key!r}: each '/'-separated part must be a plain name (letters, digits, '_.+@=,~-')"
        )
    return posixpath.join(staging_dir, "profiles", *parts, "memory")


def task_key(
    dag_id: str, task_id: str, run_id: Optional[str] = None, map_index: int = -1, *, memory_key: Optional[str] = None
) -> str:
    """The history key of an Airflow task instance (the train operator's): its ``memory_key`` when given (checked
    as :func:`folder` does; ValueError naming ``memory_key``), else ``<dag_id>/<task_id>``, and for an instance of a
    mapped task ``<dag_id>/<task_id>/map-<index>``: mapped trials usually differ in what they need (a model, a batch
    size), and one shared history would give every trial the largest's figure, or grow them all after one's OOM.
    ``run_id`` is not part of it: every run of the task learns from the earlier ones."""
    if memory_key:
        key = str(memory_key).strip().strip("/")
        try:
            folder("/", key)
        except ValueError as exc:
            raise ValueError(f"memory_key: {exc}") from None
        return key
    return f"{dag_id}/{task_id}" + (f"/map-{int(map_index)}" if int(map_index) >= 0 else "")


def _order(name: str) -> tuple[int, int]:
    m = _APP.fullmatch(name)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _exists(client: Any, path: str) -> bool:
    """Whether ``path`` exists. A refusal (another user's 0700 folder) raises: the client's ``status(strict=False)``
    answers None for any error, which would show a folder one may not read as an empty history."""
    with hdfs_errors("status", path):
        try:
            client.status(path, strict=True)
        except Exception as exc:  # noqa: BLE001 - only "not found" means no history
            if "FileNotFoundException" in f"{getattr(exc, 'exception', '') or ''} {exc}":
                return False
            raise
    return True


def read_history(client: Any, staging_dir: str, key: str) -> list[dict[str, Any]]:
    """Every kept run file of the task, oldest first: ``{"version", "app_id", "roles": {role: record}}`` each (files
    that cannot be read or parsed are skipped with a warning; no folder yet is no history)."""
    where = folder(staging_dir, key)
    if not _exists(client, where):
        return []
    with hdfs_errors("list", where):
        names = sorted((n for n in client.list(where) if _APP.fullmatch(n)), key=_order)
    docs: list[dict[str, Any]] = []
    for name in names[-learned.KEEP :]:
        try:
            with hdfs_errors("read", f"{where}/{name}"), client.read(f"{where}/{name}") as reader:
                doc = json.loads(reader.read().decode("utf-8"))
        except Exception as exc:  # noqa: BLE001 - one bad file must not stop a submission
            log.warning("memory history: skipping %s/%s: %s", where, name, exc)
            continue
        if isinstance(doc, dict) and isinstance(doc.get("roles"), dict):
            docs.append(doc)
    return docs


def role_runs(docs: Sequence[Mapping[str, Any]], role: str) -> list[dict[str, Any]]:
    """The role's records in the run files ``docs`` (:func:`read_history`), oldest first."""
    return [doc["roles"][role] for doc in docs if isinstance(doc["roles"].get(role), dict)]


def forget(client: Any, staging_dir: str, key: str) -> int:
    """Delete the task's history (its whole ``memory`` folder): the next ``gpu_memory: auto`` run starts at its
    first-run figure again. Returns how many run files there were (0: no history)."""
    where = folder(staging_dir, key)
    if not _exists(client, where):
        return 0
    with hdfs_errors("list", where):
        count = sum(1 for n in client.list(where) if _APP.fullmatch(n))
    with hdfs_errors("delete", where):
        client.delete(where, recursive=True)
    return count


def record_run(
    client: Any,
    staging_dir: str,
    key: str,
    app_id: str,
    records: Mapping[str, Mapping[str, Any]],
    ran_s: Optional[float] = None,
) -> str:
    """Write one run's records (role → record) and its training time ``ran_s`` (``learned.ran_s``; left out when
    None) and drop the oldest files past ``learned.KEEP``; returns the path."""
    where = folder(staging_dir, key)
    with hdfs_errors("mkdir", where):
        if client.status(where, strict=False) is None:
            client.makedirs(where, permission="700")
    path = f"{where}/{app_id}.json"
    doc: dict[str, Any] = {"version": 1, "app_id": app_id, "roles": dict(records)}
    if ran_s is not None:
        doc["ran_s"] = ran_s
    body = json.dumps(doc, sort_keys=True).encode()
    with hdfs_errors("status", path):
        if client.status(path, strict=False) is not None:  # a retry that read the same result: one record a run
            with hdfs_errors("delete", path):
                client.delete(path)
    write_beside_and_rename(client, path, body)
    with hdfs_errors("list", where):
        names = sorted((n for n in client.list(where) if _APP.fullmatch(n)), key=_order)
    for old in names[: -learned.KEEP]:
        try:
            client.delete(f"{where}/{old}")
        except Exception as exc:  # noqa: BLE001 - only housekeeping
            log.debug("memory history: could not delete %s/%s: %s", where, old, exc)
    return path


def resolve(
    runs_of: Callable[[str], Sequence[Mapping[str, Any]]],
    roles: Mapping[str, Any],
    largest_gpu_mb: Optional[int] = None,
    context_mb: int = 0,
) -> tuple[dict[str, int], list[str]]:
    """The figure of each ``gpu_memory: auto`` role of ``roles`` (name → RoleSpec) and one line per role saying
    where it came from: learned (``runs_of(role)`` → its records, oldest first; at most ``largest_gpu_mb`` less
    the role's context reserve, its ``gpu_context`` or else ``context_mb``, when the cluster's largest GPU is known),
    else the role's first-run figure (``auto:<size>``, which the operator's ``gpu_memory``, a profile step's, sets).
    ValueError naming the field when neither exists."""
    figures: dict[str, int] = {}
    lines: list[str] = []
    for name, role in roles.items():
        if not getattr(role, "gpu_memory_auto", False):
            continue
        context = role.gpu_context_mb if getattr(role, "gpu_context_mb", None) is not None else context_mb
        found = learned.learned_mb(
            runs_of(name), growth=role.oom_growth, largest_gpu_mb=largest_gpu_mb, context_mb=context
        )
        if found is not None:
            figures[name], why = found
        elif role.gpu_memory_first_mb:
            figures[name], why = (
                role.gpu_memory_first_mb,
                "no history yet: the first run's figure, auto:<size> or the operator's gpu_memory",
            )
        else:
            raise ValueError(
                f"roles.{name}.gpu_memory: 'auto' has no history for this task yet and no first-run "
                f"figure: write 'auto:<size>' (e.g. auto:4GiB) or give the operator's gpu_memory"
            )
        lines.append(f"roles.{name}.gpu_memory auto: {figures[name]} MiB ({why})")
    return figures, lines


def resolve_contexts(
    runs_of: Callable[[str], Sequence[Mapping[str, Any]]],
    roles: Mapping[str, Any],
    first_mb: Callable[[str], tuple[int, str]],
) -> tuple[dict[str, int], list[str]]:
    """The context reserve of each shared role (``gpu_memory``, no ``gpus``) whose spec sets none (``gpu_context``),
    and one line per role saying where it came from: the larger of its first-run figure (``first_mb(role)`` →
    ``(MiB, why)``) and what its history teaches (:func:`learned.learned_context_mb`)."""
    figures: dict[str, int] = {}
    lines: list[str] = []
    for name, role in roles.items():
        if not getattr(role, "gpu_memory", None) or getattr(role, "gpus", None) or role.gpu_context_mb is not None:
            continue
        first, why = first_mb(name)
        found = learned.learned_context_mb(runs_of(name), growth=role.oom_growth)
        if found is not None and found[0] > first:
            first, why = found
        figures[name] = first
        lines.append(f"roles.{name}.gpu_context: {first} MiB ({why})")
    return figures, lines
