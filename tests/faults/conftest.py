"""The fault suite's own mini cluster, and the figures each fault test reports.

Faults are injected on real daemons in one of two ways: process kills (a task container's process group, the AM's
JVM, Airflow's triggerer) with signals, as a crashed process or host would die; or the launcher's fault controls
(:func:`airflow_provider_melon.dev.minicluster.control`: a NodeManager going silent, the NameNode or the RM
restarting). The cluster here is not the session's: three NodeManagers (so a lost node's tasks have somewhere to
go), a 12 s NodeManager expiry (the RM finds a silent node LOST after 12 s instead of 10 min) and RM recovery
(work-preserving, state in the work dir). It is started for the tests that need it and stopped after them (package scope).

Each test records a row (fault, recovered, seconds to recover, duplicate applications, lost outputs) with
:func:`fault_row`; the row is built when the test ends, passed or failed, from what the cluster shows then (the
applications carrying the test's identity tag, the declared outputs present on HDFS, whether the recovery was seen
and the application ended as it should), so a broken recovery shows as "no". The table is printed at the end.
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import pytest

from tests.conftest import Jobs, running_cluster
from tests.evidence import record


@pytest.fixture(scope="package")
def fault_cluster():
    # MELON_FAULT_CLUSTER_DIR: a running one, while iterating on these tests
    yield from running_cluster(
        "MELON_FAULT_CLUSTER_DIR",
        "melon-faults-",
        "MELON_FAULT_PORT_BASE",
        nodemanagers=3,
        nm_expiry_ms=12_000,
        rm_recovery=True,
        timeout=300,
    )


@pytest.fixture
def fault_hook(fault_cluster):
    from airflow_provider_melon.cli import melon_hook_for_cluster

    return melon_hook_for_cluster(fault_cluster.work_dir)


@pytest.fixture
def fault_jobs(fault_hook, fault_cluster, tmp_path_factory):
    j = Jobs(fault_hook, fault_cluster, tmp_path_factory)
    yield j
    j.kill_all()


class FaultRow:
    """What a fault test tells its row: when the fault was injected (:meth:`injected`) and when the cluster showed
    the recovery (:meth:`recovered`); ``app_id`` once known (for the identity tag of an app submitted elsewhere)."""

    def __init__(self, identity: Optional[str]):
        self.identity = identity
        self.app_id: Optional[str] = None
        self.t0: Optional[float] = None
        self.recovered_at: Optional[float] = None

    @property
    def tags(self) -> list[str]:
        """The tags to submit with: the identity tag the row counts applications by."""
        return [self.identity] if self.identity else []

    def injected(self) -> None:
        self.t0 = time.monotonic()

    def recovered(self) -> float:
        self.recovered_at = time.monotonic()
        return self.recovered_at - (self.t0 or self.recovered_at)


def _identity_of(hook, app_id: str) -> Optional[str]:
    from airflow_provider_melon.spec import IDENTITY_TAG_PREFIX

    tags = hook.yarn.get_application(app_id).get("applicationTags") or ""
    return next((t for t in tags.split(",") if t.startswith(IDENTITY_TAG_PREFIX)), None)


def _whole(hook, output) -> bool:
    """A declared output is there: ``path``, or ``(path, sha256)``: there with exactly those bytes."""
    import hashlib

    path, want = (output, None) if isinstance(output, str) else output
    if not hook.hdfs.status(path, strict=False):
        return False
    if want is None:
        return True
    digest = hashlib.sha256()
    with hook.hdfs.read(path, chunk_size=1 << 20) as reader:
        for chunk in reader:
            digest.update(chunk)
    return digest.hexdigest() == want


@pytest.fixture
def fault_row(request):
    """``with fault_row(fault, hook=..., outputs=[hdfs path or (path, sha256)], end=("FINISHED", "SUCCEEDED")) as
    row:`` (an output with a digest counts as lost unless its bytes match) — the
    test calls ``row.injected()`` and, once the cluster shows the recovery, ``row.recovered()``; it submits with
    ``tags=row.tags`` (or sets ``row.app_id``). The row is recorded when the block ends, however it ends."""

    @contextmanager
    def row(
        fault: str,
        *,
        hook,
        outputs=(),
        end: Optional[tuple] = ("FINISHED", "SUCCEEDED"),
        apps: bool = True,
        where: str = "mini cluster",
    ):
        from airflow_provider_melon.submission import identity_tag

        rec = FaultRow(identity_tag("fault-suite", "faults", request.node.name, uuid.uuid4().hex) if apps else None)
        try:
            yield rec
        finally:
            seen: dict = {"fault": fault, "where": where}
            try:
                identity = _identity_of(hook, rec.app_id) if rec.app_id else rec.identity
                found = hook.yarn.find_applications([identity]) if apps and identity else []
                seen["duplicate_apps"] = max(0, len(found) - 1) if apps else "-"
                ended = (found[0].get("state"), found[0].get("finalStatus")) if found else None
                seen["lost_outputs"] = sum(not _whole(hook, out) for out in outputs)
                ok = rec.recovered_at is not None and (end is None or ended == tuple(end))
                seen["recovered"] = "yes" if ok else f"no (app {ended})" if end and ended != tuple(end) else "no"
            except Exception as exc:  # noqa: BLE001 - the row says it could not look
                seen.setdefault("recovered", f"unknown ({type(exc).__name__})")
            seen.setdefault("duplicate_apps", "?")
            seen.setdefault("lost_outputs", "?")
            seen["seconds"] = round(rec.recovered_at - rec.t0, 1) if rec.recovered_at and rec.t0 else "-"
            record(
                "fault table",
                {
                    "fault": seen["fault"],
                    "recovered": seen["recovered"],
                    "seconds": seen["seconds"],
                    "dup apps": seen["duplicate_apps"],
                    "lost": seen["lost_outputs"],
                    "where": seen["where"],
                },
            )
            print(f"FAULT {seen}")

    return row


# ---- processes of the mini cluster's containers (they are local processes) ---------------------------------------
def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def container_group(container_prefix: str, **env) -> int:
    """The process group of the container whose ``CONTAINER_ID`` starts with ``container_prefix`` and whose
    environment has ``env``: the NodeManager starts each container's command in its own session (``setsid``),
    whose leader has the container's environment. A process of the container that leads a session of its own
    (torchrun starts each worker so) is not it: its parent is in the container's session."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        e = _environ(pid)
        if re.sub(r"^container_e\d+_", "container_", e.get("CONTAINER_ID", "")).startswith(container_prefix) and all(
            e.get(k) == v for k, v in env.items()
        ):
            try:
                if os.getpgid(pid) != pid:  # the leader only: its parent (the NM's launcher) is in the NM's group
                    continue
                parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                parent_session = os.getsid(parent)
            except (ProcessLookupError, OSError, ValueError, IndexError):
                continue
            if _environ(parent_session).get("CONTAINER_ID") != e.get("CONTAINER_ID"):
                return pid
    raise AssertionError(f"no container process {container_prefix}* with {env}")


def app_containers_prefix(app_id: str, attempt: int = 1) -> str:
    """``container_<cluster ts>_<app>_<attempt>_`` (an RM epoch, ``e05_`` after restarts, is left out)."""
    return f"container_{app_id[len('application_') :]}_{attempt:02d}_"


def sigkill_group(pgid: int) -> None:
    os.killpg(pgid, signal.SIGKILL)
