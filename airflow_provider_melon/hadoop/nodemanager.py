"""Container logs of a YARN application, read from the NodeManagers' REST API.

This is the one NodeManager client: its error (:class:`NodeManagerError`), its URLs (:func:`nm_base_url`), the
parser of its log answer (:func:`parse_container_log`), the one-file read the job log follower uses
(:func:`read_container_log`, through ``YarnHook.container_log``), and the listing (:class:`NodeLogs`) and tailing
(:class:`LogTail`) of an application's logs. It needs no access to the nodes' disks.
``docs/internals.md``, "Reading container logs", says how containers are found and what a NodeManager serves.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Optional
from urllib.parse import quote, urlsplit

import requests

from airflow_provider_melon.hadoop.rm_json import YarnApiError, as_dict, as_list, extract_rm_message

log = logging.getLogger(__name__)

TASK_LAUNCH = re.compile(r"MelonAM: task (\S+) attempt (\d+) -> (container_[0-9a-z_]+) on (\S+)")
AM_LOG = "AppMaster.stdout"
#: files every YARN container has, written by the NodeManager, not by the task
BOILERPLATE = frozenset({"launch_container.sh", "directory.info", "prelaunch.out", "prelaunch.err"})
_CONTENTS = b"LogContents:\n"
_LENGTH = re.compile(rb"^LogLength:\s*(\d+)\s*$", re.MULTILINE)
_MODIFIED = re.compile(rb"^LogLastModifiedTime:\s*(.+?)\s*$", re.MULTILINE)
_CHUNK = 64 * 1024


class NodeManagerError(YarnApiError, RuntimeError):
    """A failed NodeManager call. With ``node``: ``str()`` is "NodeManager <node> returned <status>: <message>"
    (``status`` None: "unreachable", the node did not answer at all); without, the message as given (it names
    the NodeManager itself)."""

    def __init__(
        self, message: str, *, node: Optional[str] = None, status: Optional[int] = None, url: Optional[str] = None
    ):
        super().__init__(message, status=status, url=url)
        self.node = node
        self.fix = None
        if node is None:
            self.args = (str(message),)
            return
        head = f"NodeManager {node} returned {status}" if status is not None else f"NodeManager {node} unreachable"
        self.args = (f"{head}: {self.message}",)


class LogAnswerError(NodeManagerError, ValueError):
    """A NodeManager answered something that is not a container log (a proxy's login page, say)."""


@dataclass(frozen=True)
class ContainerLogChunk:
    """Bytes ``[start, start + len(data))`` of a container's log file, which was ``length`` bytes long when read."""

    length: int
    start: int
    data: bytes
    url: str
    #: the file's last write on its node (the header's ``LogLastModifiedTime``, whole seconds), None when not given
    modified: Optional[float] = None


def nm_base_url(address: Optional[str], rm_url: str) -> Optional[str]:
    """``host:port`` (the RM's ``nodeHTTPAddress``, which carries no scheme) or a URL of a NodeManager's web server →
    its base URL; the NodeManagers use the scheme of the RM (``rm_url``). None when there is no address."""
    if not address:
        return None
    address = str(address).strip().rstrip("/")
    if "://" in address:
        return address
    return f"{urlsplit(rm_url).scheme or 'http'}://{address}"


def parse_container_log(body: bytes, size: Optional[int], url: str = "") -> ContainerLogChunk:
    """The NodeManager's ``/containers/{id}/logs/{file}`` answer (Hadoop 3.5 ``LogToolUtils``): a header
    (``Container:``, ``LogAggregationType:``, ``LogType:``, ``LogLastModifiedTime:``, ``LogLength:<whole file>``,
    ``LogContents:``), then the bytes asked for (``size`` > 0: the first ``size``; < 0: the last ``-size``; None: all),
    then a footer (``End of LogType:...``). The bytes are located by length, not by the footer, so a log that
    itself prints "End of LogType:" is read right. Raises :class:`LogAnswerError` (a ``ValueError``)."""
    head_end = body.find(_CONTENTS)
    match = _LENGTH.search(body[: head_end if head_end >= 0 else 4096])
    if head_end < 0 or not match:
        raise LogAnswerError(f"not a NodeManager log answer: {body[:120]!r}")
    length = int(match.group(1))
    wanted = length if size is None else min(abs(size), length)
    begin = head_end + len(_CONTENTS)
    data = body[begin : begin + wanted]
    if len(data) < wanted:  # the answer was cut short: keep what came
        footer = data.rfind(b"End of LogType:")
        data = data[:footer] if footer >= 0 else data
    start = length - wanted if size is not None and size < 0 else 0
    return ContainerLogChunk(length=length, start=start, data=data, url=url, modified=_modified(body[:head_end]))


def _modified(head: bytes) -> Optional[float]:
    """``LogLastModifiedTime:Mon Nov 30 19:27:34 +0000 2026`` (Hadoop's ``EEE MMM dd HH:mm:ss Z yyyy``) → seconds
    since the epoch; None when absent or unreadable."""
    match = _MODIFIED.search(head)
    if not match:
        return None
    try:
        return datetime.strptime(match.group(1).decode("ascii"), "%a %b %d %H:%M:%S %z %Y").timestamp()
    except (UnicodeDecodeError, ValueError):
        return None


def read_container_log(
    session: Any,
    base_url: str,
    node_http: str,
    container_id: str,
    filename: str = "stdout",
    size: Optional[int] = None,
    *,
    params: Optional[dict[str, Any]] = None,
    timeout: Any = None,
) -> ContainerLogChunk:
    """Part of a container's log file (``GET /ws/v1/node/containers/{id}/logs/{file}?size=``, Hadoop 3.5: ``size``
    > 0 the first bytes, < 0 the last bytes, absent the whole file; there is no start offset, so callers ask for
    the tail and place it by the whole file's ``LogLength``, see :func:`parse_container_log`). ``session`` carries
    the auth. Redirects are followed (an NM that no longer holds the logs may redirect to the aggregated log server,
    which answers in the same format). Raises :class:`NodeManagerError` (status None: unreachable)."""
    url = f"{base_url}/ws/v1/node/containers/{quote(str(container_id), safe='')}/logs/{quote(str(filename), safe='')}"
    try:
        resp = session.get(
            url, params=params, timeout=timeout, allow_redirects=True, headers={"Accept": "text/plain, */*"}
        )
    except requests.RequestException as err:
        raise NodeManagerError(f"{type(err).__name__}: {err}", node=node_http, url=url) from None
    if resp.status_code >= 400:
        message, _ = extract_rm_message(resp)
        raise NodeManagerError(message, node=node_http, status=resp.status_code, url=resp.url)
    try:
        return parse_container_log(resp.content, size, resp.url)
    except ValueError as err:
        raise NodeManagerError(str(err), node=node_http, status=resp.status_code, url=resp.url) from None


@dataclass
class ContainerRef:
    """One container: its id, what ran in it (``am``, ``worker:0``; ``#n`` for a retry) and its NodeManager."""

    id: str
    label: str
    node_id: Optional[str] = None
    nm_url: Optional[str] = None

    @property
    def sort_key(self) -> tuple[int, int]:
        parts = self.id.split("_")  # container_[e<epoch>_]<cluster ts>_<app>_<attempt>_<seq>
        try:
            return int(parts[-2]), int(parts[-1])
        except (IndexError, ValueError):
            return 0, 0


def parse_log_answer(body: bytes, requested: Optional[int]) -> tuple[int, bytes]:
    """``(file length, bytes served)`` of a NodeManager's log answer (:func:`parse_container_log`)."""
    chunk = parse_container_log(body, requested)
    return chunk.length, chunk.data


class NodeLogs:
    """Find an application's containers and read their log files from the NodeManagers (see the module doc)."""

    def __init__(self, yarn: Any, app_id: str):
        """``yarn``: an RM client with ``active_rm``, ``nodes()``, ``app_attempts()``, ``app_containers()`` and
        ``get_url()`` (a :class:`~airflow_provider_melon.hooks.yarn.YarnHook`)."""
        self.yarn = yarn
        self.app_id = app_id
        self.containers: dict[str, ContainerRef] = {}
        self.unreachable: set[str] = set()  # NodeManager URLs that did not answer
        self._nodes: Optional[dict[str, str]] = None
        self._am_logs: dict[str, LogTail] = {}

    # ---- where ---------------------------------------------------------------------------------------------
    def nm_url(self, address: Optional[str]) -> Optional[str]:
        """``host:port`` (or a URL) of a NodeManager's web server → its base URL."""
        return nm_base_url(address, self.yarn.active_rm)

    def node_url(self, node_id: str) -> Optional[str]:
        if self._nodes is None or node_id not in self._nodes:
            self._nodes = {str(n.get("id")): n.get("nodeHTTPAddress") for n in self.yarn.nodes()}
        return self.nm_url(self._nodes.get(node_id))

    def _add(self, ref: ContainerRef) -> None:
        known = self.containers.get(ref.id)
        if known is None:
            self.containers[ref.id] = ref
            return
        if known.label == "container" and ref.label != "container":
            known.label = ref.label
        known.nm_url = known.nm_url or ref.nm_url
        known.node_id = known.node_id or ref.node_id

    def discover(self, running: bool) -> list[ContainerRef]:
        """The app's containers known so far (AM containers, the tasks its AM launched, and, while ``running``,
        the RM's containers of the current attempt), in id order."""
        attempts = sorted(self.yarn.app_attempts(self.app_id), key=lambda a: int(a.get("id") or 0))
        for attempt in attempts:
            cid = attempt.get("containerId")
            if not cid:
                continue
            number = int(attempt.get("id") or 1)
            self._add(
                ContainerRef(
                    cid,
                    "am" if number == 1 else f"am#{number}",
                    attempt.get("nodeId"),
                    self.nm_url(attempt.get("nodeHttpAddress")),
                )
            )
            tail = self._am_logs.setdefault(cid, LogTail(self, self.containers[cid], AM_LOG))
            for line in tail.lines():
                match = TASK_LAUNCH.search(line)
                if match:
                    task, retry, task_cid, node_id = match.groups()
                    self._add(
                        ContainerRef(
                            task_cid, task if retry == "0" else f"{task}#{retry}", node_id, self.node_url(node_id)
                        )
                    )
        if running and attempts and attempts[-1].get("appAttemptId"):
            try:
                listed = self.yarn.app_containers(self.app_id, attempts[-1]["appAttemptId"])
            except Exception as exc:  # noqa: BLE001 - the attempt just ended: the AM's log named them all
                log.debug("containers of %s: %s", attempts[-1]["appAttemptId"], exc)
                listed = []
            for c in listed:
                if c.get("containerId"):
                    self._add(
                        ContainerRef(
                            c["containerId"], "container", c.get("nodeId"), self.nm_url(c.get("nodeHttpAddress"))
                        )
                    )
        return sorted(self.containers.values(), key=lambda c: c.sort_key)

    # ---- what ----------------------------------------------------------------------------------------------
    def _get(
        self, ref: ContainerRef, path: str, params: Optional[dict[str, Any]] = None, accept: str = "application/json"
    ) -> Optional[requests.Response]:
        """GET a container's log resource from its NodeManager; None when it does not serve it (404) or is down."""
        if not ref.nm_url:
            return None
        url = f"{ref.nm_url}/ws/v1/node/containers/{quote(ref.id, safe='')}/logs{path}"
        try:
            resp: requests.Response = self.yarn.get_url(url, params, headers={"Accept": accept})
        except requests.RequestException as exc:
            if ref.nm_url not in self.unreachable:
                log.warning("NodeManager %s unreachable: %s", ref.nm_url, type(exc).__name__)
            self.unreachable.add(ref.nm_url)
            return None
        self.unreachable.discard(ref.nm_url)
        if resp.status_code in (404, 410):
            return None
        if resp.status_code != 200:
            raise NodeManagerError(
                f"NodeManager {ref.nm_url} answered {resp.status_code} for {url}: {' '.join(resp.text.split())[:200]}"
            )
        return resp

    def files(self, ref: ContainerRef) -> Optional[dict[str, int]]:
        """Log file name → size, or None when the NodeManager serves no log of this container (any more: an
        ended app's log folder deleted, it answers an empty list)."""
        resp = self._get(ref, "")
        if resp is None:
            return None
        try:
            body = resp.json()
        except ValueError as exc:
            raise NodeManagerError(f"NodeManager {ref.nm_url}: not JSON: {resp.text[:120]!r}") from exc
        out: dict[str, int] = {}
        for info in _log_infos(body):
            for entry in as_list(info.get("containerLogInfo")):
                entry = as_dict(entry)
                if entry.get("fileName"):
                    out[str(entry["fileName"])] = int(entry.get("fileSize") or 0)
        return out or None  # a container's log folder always holds files (launch_container.sh, ...) until deleted

    def fetch(self, ref: ContainerRef, name: str, size: Optional[int] = None) -> Optional[tuple[int, bytes]]:
        """``(file length, bytes)``: the first ``size`` bytes, the last ``-size``, or all; None when not served."""
        resp = self._get(
            ref,
            f"/{quote(name, safe='')}",
            None if size is None else {"size": size},
            accept="text/plain, application/octet-stream",
        )
        return None if resp is None else parse_log_answer(resp.content, size)


def _log_infos(body: Any) -> Iterable[dict[str, Any]]:
    """The ``containerLogsInfo`` objects of a NodeManager's answer (one, or a list: local and aggregated)."""
    if isinstance(body, list):
        for item in body:
            yield from _log_infos(item)
        return
    body = as_dict(body)
    if "containerLogInfo" in body:
        yield body
        return
    for key in ("containerLogsInfo", "containerLogsInfoes"):
        if key in body:
            yield from _log_infos(as_list(body[key], "containerLogsInfo"))


class LogTail:
    """One log file of one container, read on from where the last read stopped (byte offsets: nothing read twice).
    :meth:`lines` gives complete lines only; :meth:`flush` the rest once the container is done."""

    def __init__(self, logs: NodeLogs, ref: ContainerRef, name: str):
        self.logs, self.ref, self.name = logs, ref, name
        self.offset = 0
        self.pending = b""
        self.served = False  # the NodeManager has served this file at least once

    def read(self, size_hint: Optional[int] = None) -> bytes:
        """The bytes appended since the last read (b"" when none or when not served). ``size_hint``: the file's size
        from the NodeManager's listing; equal to the offset means nothing new, so nothing is fetched."""
        if size_hint is not None and size_hint == self.offset:
            return b""
        want = _CHUNK if size_hint is None else max(size_hint - self.offset, 0) + _CHUNK
        for _ in range(3):  # the last `want` bytes, widened until they reach back to the offset
            got = self.logs.fetch(self.ref, self.name, -want)
            if got is None:
                return b""
            total, data = got
            self.served = True
            if total < self.offset:  # truncated or replaced: read it again from its start
                self.offset, self.pending = 0, b""
            start = total - len(data)
            if start <= self.offset:
                new = data[self.offset - start :]
                self.offset = total
                return new
            want = total - self.offset + _CHUNK
        got = self.logs.fetch(self.ref, self.name)
        if got is None:
            return b""
        total, data = got
        new, self.offset = data[self.offset :], total
        return new

    def lines(self, size_hint: Optional[int] = None) -> list[str]:
        buf = self.pending + self.read(size_hint)
        *complete, self.pending = buf.split(b"\n")
        return [line.decode("utf-8", "replace") for line in complete]

    def flush(self) -> list[str]:
        rest, self.pending = self.pending, b""
        return [rest.decode("utf-8", "replace")] if rest else []


def wanted_file(name: str, only: Optional[Iterable[str]]) -> bool:
    """Files shown: those named with ``--file``, else all but the NodeManager's own (launch script, prelaunch)."""
    return name in set(only) if only else name not in BOILERPLATE


def gone_message(app_id: str, app: dict[str, Any]) -> str:
    """Why no NodeManager serves an ended app's logs, and where they may be instead."""
    aggregation = str(app.get("logAggregationStatus") or "").upper()
    if aggregation in ("", "DISABLED", "NOT_START"):
        why = (
            "log aggregation is off, and NodeManagers delete an ended app's logs after "
            "yarn.nodemanager.log.retain-seconds"
        )
    else:
        why = f"log aggregation {aggregation}: read them with `yarn logs -applicationId {app_id}`"
    return f"the logs of {app_id} are gone: no NodeManager serves them any more ({why})"
