"""The job's own output in the Airflow task log: :class:`LogFollower` streams containers' stdout/stderr, for the
operator's synchronous wait and the trigger alike. ``docs/internals.md``, "The job's output in the task log",
describes the rules.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Generator, Iterable, Optional

from airflow_provider_melon.hadoop.app_state import AM_TASK_ENDED
from airflow_provider_melon.hadoop.nodemanager import NodeManagerError
from airflow_provider_melon.hadoop.watch import Call, adrive, drive

log = logging.getLogger(__name__)

DEFAULT_LINES_PER_POLL = 200
DEFAULT_MAX_BYTES = 5 * 1024 * 1024
#: Largest tail asked of a NodeManager in one request.
FETCH_WINDOW = 1024 * 1024
#: Extra bytes asked beyond the last known length (the file grew since).
SLACK = 64 * 1024
#: A line longer than this without a newline is cut and shown, so the offset keeps moving.
MAX_LINE_BYTES = 64 * 1024
#: Reattached without offsets: how much of each container's existing output is shown.
RESUME_TAIL_BYTES = 16 * 1024
#: An unreachable node is asked again every this many polls (and once after the application ended).
RETRY_EVERY_POLLS = 6
MAX_FAILED_CONTAINERS = 5
FILES = ("stdout", "stderr")
STATE_VERSION = 1

#: The AM's decisions about a task in the log: ``[melon-am] worker:0 <what it decided>``.
AM_PREFIX = "[melon-am]"

_FAILED_TASK = re.compile(r"\btask ([A-Za-z][A-Za-z0-9_.-]*:\d+) on ")


def chief_of(roles: Iterable[tuple[str, bool]]) -> Optional[str]:
    """``role:0`` of the task that decides success from ``(role, untracked)`` pairs in the job's order: ``chief``
    or ``master`` if present, else the first tracked role (see ``JobSpec.success_role`` and the AM's TaskBook)."""
    roles = list(roles)
    for name in ("chief", "master"):
        if any(role == name for role, _ in roles):
            return f"{name}:0"
    for role, untracked in roles:
        if not untracked:
            return f"{role}:0"
    return None


def _chief_from_tasks(tasks: list[dict[str, Any]]) -> Optional[str]:
    order: list[str] = []
    for task in tasks:
        role = str(task.get("role") or "")
        if role and role not in order:
            order.append(role)
    return chief_of((role, role == "ps") for role in order)


def human_bytes(n: int) -> str:
    """A byte count for people: ``512 bytes``, ``64 KiB``, ``5.0 MiB``."""
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


#: a file's lines logged in one poll: (offset of its first line, offset after its last, the container's entry)
_Batch = tuple[int, int, dict[str, Any]]


@dataclass
class _Fetch:
    cid: str
    file: str
    size: int
    offset: Optional[int]  # None: not known (reattached): start at the tail
    retried: bool = False


@dataclass
class _Pending:
    """New complete lines of one file in this poll, before the per-poll cap."""

    cid: str
    file: str
    lines: list[str]
    end: int  # offset after these lines
    notes: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # offset of each line


class LogFollower:
    """Follows the job's containers' logs; see the module docstring. One instance per followed application.

    :param chief: ``role:index`` of the task that decides success (None: derived from the AM's task list).
    :param lines_per_poll: most job lines put in the task log per poll.
    :param max_bytes: most bytes of job output put in the task log per task run.
    :param state: :meth:`state` of an earlier follower (a re-created trigger), or ``{"resume": True}`` when the
        application ran before this follower and no offsets are known (reattach).
    """

    def __init__(
        self,
        chief: Optional[str] = None,
        *,
        lines_per_poll: int = DEFAULT_LINES_PER_POLL,
        max_bytes: int = DEFAULT_MAX_BYTES,
        state: Optional[dict[str, Any]] = None,
    ) -> None:
        self.chief = chief
        self.lines_per_poll = max(1, int(lines_per_poll))
        self.max_bytes = max(1, int(max_bytes))
        self._s = self._load(state)
        self._polls = 0
        self._lengths: dict[tuple[str, str], int] = {}  # last LogLength seen (sizes the next request)
        self._nodes: dict[str, str] = {}  # node id -> NM http address (from the RM)
        self._unreachable: dict[str, int] = {}  # container -> poll of its last failed attempt
        self._unreachable_error: dict[str, BaseException] = {}
        self._user: Optional[str] = None
        self._scheme = "http"
        self._aggregation: Optional[str] = None
        self._app: Optional[dict[str, Any]] = None
        #: the last two polls that logged job lines or the AM's decisions (see floor()), oldest first, each (bytes
        #: emitted before it, (container, file) -> (offset of its first line, offset after its last, the container's
        #: entry), the decisions taken in and held before it); _polled: this poll's
        self._batches: list[tuple[int, dict[tuple[str, str], _Batch], tuple[int, list[Any]]]] = []
        self._reshow_said: set[tuple[str, str]] = set()
        self._lag_s: Optional[float] = None  # the largest log lag measured since take_lag()

    # ---- state -----------------------------------------------------------------------------------------------
    @staticmethod
    def _load(state: Optional[dict[str, Any]]) -> dict[str, Any]:
        s = copy.deepcopy(state) if isinstance(state, dict) else {}
        return {
            "v": STATE_VERSION,
            "tasks": dict(s.get("tasks") or {}),  # task -> [container, node] last seen
            "follow": dict(s.get("follow") or {}),  # container -> {task, node, http, why, final, offsets}
            "done": list(s.get("done") or []),  # containers read to their end
            "reported": list(s.get("reported") or []),  # containers whose unavailability was said
            "emitted": int(s.get("emitted") or 0),
            "failed": int(s.get("failed") or 0),
            "capped": bool(s.get("capped")),
            "resume": bool(s.get("resume")),
            "seq": int(s.get("seq") or 0),  # polls that moved something: which of two states is later
            "events": int(s.get("events") or 0),  # the AM's last decision taken in (its event's seq)
            # decisions waiting for the output of the container they are about to be read to its end
            "held": [dict(e) for e in (s.get("held") or []) if isinstance(e, dict)],
            # container -> {file: offset}: lines before it were shown by an earlier trigger (maybe lost with it)
            "reshow": {str(c): dict(f) for c, f in (s.get("reshow") or {}).items() if isinstance(f, dict)},
        }

    def state(self) -> dict[str, Any]:
        """A JSON-able copy of what a successor needs to go on without repeating or losing lines."""
        return copy.deepcopy(self._s)

    def floor(self) -> dict[str, Any]:
        """What a trigger saves for a successor after a crash, before it logs the lines just read: the state one
        batch behind, marked up to where it got (``docs/internals.md``, "Across triggerer restarts")."""
        floor = self.state()
        for _, batch, _ in self._batches:
            for (cid, file), (start, end, entry) in batch.items():
                if cid not in floor["follow"]:  # read to its end in that poll: follow it again
                    floor["follow"][cid] = copy.deepcopy(entry)
                    floor["done"] = [c for c in floor["done"] if c != cid]
                offsets = floor["follow"][cid]["offsets"]
                offsets[file] = start if offsets.get(file) is None else min(start, offsets[file])
                marks = floor["reshow"].setdefault(cid, {})
                marks[file] = max(end, marks.get(file, 0))
        if self._batches:
            floor["emitted"] = self._batches[0][0]
            floor["events"], floor["held"] = copy.deepcopy(self._batches[0][2])
        return floor

    @staticmethod
    def resume_from(durable: Optional[dict[str, Any]], reached: Optional[dict[str, Any]]) -> dict[str, Any]:
        """The state a successor goes on from when only ``durable`` is known to be in the task log (remote logging)
        while a lost trigger got as far as ``reached``: every line in between is shown again, marked re-shown."""
        out = LogFollower._load(durable)
        got = LogFollower._load(reached)
        out["tasks"] = {**out["tasks"], **got["tasks"]}
        for cid, entry in got["follow"].items():  # containers found since: read again from their start
            if cid not in out["follow"] and cid not in out["done"]:
                out["follow"][cid] = dict(copy.deepcopy(entry), offsets={})
        for cid, entry in got["follow"].items():
            for file, offset in (entry.get("offsets") or {}).items():
                if offset:
                    marks = out["reshow"].setdefault(cid, {})
                    marks[file] = max(int(offset), marks.get(file, 0))
        for cid, files in got["reshow"].items():
            for file, offset in files.items():
                marks = out["reshow"].setdefault(cid, {})
                marks[file] = max(int(offset), marks.get(file, 0))
        out["seq"] = max(out["seq"], got["seq"])
        return out

    def take_lag(self) -> Optional[float]:
        """The log lag since the last call, in seconds: of the files whose new lines the polls showed, the longest
        time from the file's last write on its node (whole seconds, the NodeManager's clock) to the read that
        showed them; None when no poll showed a new line."""
        lag, self._lag_s = self._lag_s, None
        return lag

    @property
    def emitted_bytes(self) -> int:
        return int(self._s["emitted"])

    # ---- what to follow ----------------------------------------------------------------------------------------
    def _observe_app(self, app: Optional[dict[str, Any]]) -> None:
        if not app:
            return
        self._app = app
        self._user = app.get("user") or self._user
        for key in ("amContainerLogs", "trackingUrl"):
            url = str(app.get(key) or "")
            if "://" in url:
                self._scheme = url.split("://", 1)[0]
                break
        self._aggregation = app.get("logAggregationStatus") or self._aggregation

    @staticmethod
    def _containers(task: dict[str, Any]) -> list[tuple[str, Optional[str], Optional[int]]]:
        """``(container, node, exit code)`` of each container ``task`` ran in, in order, its current one last: the
        AM's ``containers`` history (an AM without it: the current one)."""
        out: list[tuple[str, Optional[str], Optional[int]]] = []
        for entry in task.get("containers") or []:
            if isinstance(entry, dict) and entry.get("container_id"):
                out.append((str(entry["container_id"]), entry.get("node_id"), entry.get("exit_code")))
        cid = task.get("container_id")
        if cid and cid not in [c for c, _, _ in out]:
            out.append((str(cid), task.get("node_id"), None))
        return out

    def _follow(self, cid: str, task: str, node: Optional[str], why: str, final: bool, n: int = 0) -> bool:
        """Follow ``cid``, the ``n``-th container of ``task`` (``final``: it has ended: read it to its end). True
        when newly followed."""
        if cid in self._s["done"]:
            return False
        entry = self._s["follow"].get(cid)
        new = entry is None
        if new:
            if why == "failed":
                if self._s["failed"] >= MAX_FAILED_CONTAINERS:
                    return False
                self._s["failed"] += 1
            entry = {"task": task, "node": node, "http": None, "why": why, "final": False, "offsets": {}, "n": n}
            self._s["follow"][cid] = entry
        entry["final"] = entry["final"] or final
        entry["node"] = entry.get("node") or node
        return new

    def _observe(self, status: Optional[dict[str, Any]], final: bool, diagnostics: str) -> None:
        tasks = [t for t in ((status or {}).get("tasks") or []) if isinstance(t, dict)]
        chief = self.chief or (_chief_from_tasks(tasks) if tasks else None)
        if chief and not self.chief:
            self.chief = chief
        for task in tasks:
            name = f"{task.get('role')}:{task.get('index')}"
            ran = self._containers(task)
            cid, node = task.get("container_id"), task.get("node_id")
            state = str(task.get("state") or "")
            prev = self._s["tasks"].get(name)
            if prev and prev[0] and prev[0] not in [c for c, _, _ in ran]:  # an AM without the history
                ran.insert(len(ran) - 1 if cid else len(ran), (prev[0], prev[1], None))
            for n, (past, past_node, code) in enumerate(ran[:-1] if cid else ran):
                # a container the task left (the AM re-runs a task only when its container ended): read to its end
                why = "chief" if name == chief else "failed"
                if code == 0 and why == "failed":
                    continue
                followed = self._follow(past, name, past_node, why, final=True, n=n)
                if (
                    (followed or why == "chief")
                    and cid
                    and prev
                    and past == prev[0] != cid
                    and "events" not in (status or {})
                ):  # an AM that does not say why: say it here
                    self._note(
                        f"{name}: its container {past} ended and the task was started again (attempt "
                        f"{task.get('attempt')}, {cid})"
                        + ("; the output of the ended one follows" if why == "failed" else "")
                    )
            if not cid:
                continue
            self._s["tasks"][name] = [cid, node]
            n = len(ran) - 1
            if name == chief:
                ended = state in AM_TASK_ENDED or ran[-1][2] is not None
                self._follow(cid, name, node, "chief", final=ended, n=n)
            if state == "FAILED" and self._follow(cid, name, node, "failed", final=True, n=n):
                code = task.get("exit_code")
                self._note(
                    f"{name} failed" + (f" (exit {code})" if code not in (None, "") else "") + "; its output follows"
                )
        for event in (status or {}).get("events") or []:
            if isinstance(event, dict) and int(event.get("seq") or 0) > self._s["events"]:
                self._s["events"] = int(event.get("seq") or 0)
                self._s["held"].append({k: event.get(k) for k in ("seq", "task", "container_id", "text")})
        if final:
            for match in _FAILED_TASK.finditer(diagnostics or ""):
                name = match.group(1)
                prev = self._s["tasks"].get(name)
                if prev and self._follow(prev[0], name, prev[1], "failed", final=True):
                    self._note(f"{name} failed the application; its output follows")
            for entry in self._s["follow"].values():
                entry["final"] = True
            if not self._s["follow"] and not self._s["done"] and not self._s["tasks"]:
                self._note(
                    "no job output to show: the application ended before its ApplicationMaster reported "
                    f"the tasks' containers; see {(self._app or {}).get('trackingUrl') or 'the RM'}"
                )
        if tasks and self._s["resume"]:
            # offsets are unknown only for what ran before this follower: containers seen later start at 0
            for cid, entry in self._s["follow"].items():
                for name in FILES:
                    entry["offsets"].setdefault(name, None)
            self._s["resume"] = False

    def _needs_nodes(self) -> bool:
        return any(
            not entry.get("http") and entry.get("node") and entry["node"] not in self._nodes
            for entry in self._s["follow"].values()
        )

    def _set_nodes(self, nodes: Any) -> None:
        for node in nodes or []:
            if isinstance(node, dict) and node.get("id") and node.get("nodeHTTPAddress"):
                self._nodes[str(node["id"])] = str(node["nodeHTTPAddress"])

    # ---- links and notes ---------------------------------------------------------------------------------------
    def _link(self, cid: str, file: Optional[str] = None) -> str:
        """The NodeManager's web page of the container's logs (of one whole ``file``), as YARN's UI links it."""
        entry = self._s["follow"].get(cid) or {}
        http = entry.get("http") or self._nodes.get(entry.get("node") or "") or entry.get("node") or "?"
        if "://" not in http:
            http = f"{self._scheme}://{http}"
        page = f"{http}/node/containerlogs/{cid}/{self._user or '?'}"
        return f"{page}/{file}/?start=0" if file else page

    def _note(self, text: str) -> None:
        self._out.append(text)

    def _report(self, cid: str, text: str) -> None:
        if cid not in self._s["reported"]:
            self._s["reported"].append(cid)
            self._note(text)

    def _finish(self, cid: str) -> None:
        self._s["follow"].pop(cid, None)
        if cid not in self._s["done"]:
            self._s["done"].append(cid)

    # ---- one poll ----------------------------------------------------------------------------------------------
    def _fetches(self) -> list[_Fetch]:
        """This round's reads: of each task, its earliest container not read to its end yet (a later one waits
        until it is, unless its node does not answer), if not read in this poll yet."""
        fetches = []
        reading: set[str] = set()  # tasks whose earlier container is being read
        for cid, entry in sorted(self._s["follow"].items(), key=lambda item: int(item[1].get("n") or 0)):
            if entry["task"] in reading:
                continue
            if not entry.get("http"):
                entry["http"] = self._nodes.get(entry.get("node") or "")
            if not entry.get("http"):
                if self._nodes_read or self._final:
                    self._report(
                        cid,
                        f"logs of {entry['task']} unavailable: its node {entry.get('node') or '?'} "
                        "is unknown to the ResourceManager",
                    )
                    if self._final:
                        self._finish(cid)
                continue
            failed_at = self._unreachable.get(cid)
            if failed_at is not None and not self._final and self._polls - failed_at < RETRY_EVERY_POLLS:
                continue
            reading.add(entry["task"])
            if cid in self._fetched:
                continue
            self._fetched.add(cid)
            for name in FILES:
                offset = entry["offsets"].get(name, 0)
                known = self._lengths.get((cid, name))
                if offset is None:
                    size = RESUME_TAIL_BYTES
                elif known is None:
                    size = FETCH_WINDOW
                else:
                    size = min(FETCH_WINDOW, max(0, known - offset) + SLACK)
                fetches.append(_Fetch(cid, name, -size, offset))
        return fetches

    def _absorb(self, fetch: _Fetch, result: Any, pending: list[_Pending]) -> Optional[_Fetch]:
        """One NM answer (a ContainerLogChunk or an exception). Returns a second, larger fetch when needed."""
        entry = self._s["follow"].get(fetch.cid)
        if entry is None:
            return None
        task = entry["task"]
        if isinstance(result, BaseException):
            status = getattr(result, "status", None)
            if status == 404:
                self._answered.setdefault(fetch.cid, set()).add(fetch.file)
                self._missing.setdefault(fetch.cid, set()).add(fetch.file)
                return None
            self._unreachable[fetch.cid] = self._polls
            self._unreachable_error[fetch.cid] = result
            if isinstance(result, NodeManagerError) and status is None:
                reason = result.message.split(":", 1)[0] or type(result).__name__
                self._report(
                    fetch.cid,
                    f"logs of {task} unavailable: node {entry.get('node') or entry['http']} "
                    f"unreachable ({reason}); full log: {self._link(fetch.cid)}",
                )
            else:
                self._report(fetch.cid, f"logs of {task} unavailable: {result}")
            return None
        self._unreachable.pop(fetch.cid, None)
        chunk = result
        self._lengths[(fetch.cid, fetch.file)] = chunk.length
        offset = fetch.offset
        notes: list[str] = []
        prefix = self._prefix(task, fetch.file)
        data, start = chunk.data, chunk.start
        if offset is None:  # reattached: start at the tail, at a line start
            offset = start
            if start > 0:
                cut = data.find(b"\n")
                skip = cut + 1 if cut >= 0 else len(data)
                offset = start + skip
                notes.append(
                    f"{prefix}... {offset} earlier bytes not shown (reattached to a running "
                    f"application); full log: {self._link(fetch.cid, fetch.file)}"
                )
        elif chunk.length < offset:  # the file was replaced (never seen with YARN): read it again from its start
            notes.append(f"{prefix}... the log file restarted")
            offset = 0
        if start > offset:
            if not fetch.retried and abs(fetch.size) < FETCH_WINDOW:
                return _Fetch(
                    fetch.cid, fetch.file, -min(FETCH_WINDOW, chunk.length - offset + SLACK), offset, retried=True
                )
            cut = data.find(b"\n")
            skip = cut + 1 if cut >= 0 else len(data)
            notes.append(
                f"{prefix}... {start + skip - offset} bytes skipped (more than {human_bytes(FETCH_WINDOW)} "
                f"since the last poll); full log: {self._link(fetch.cid, fetch.file)}"
            )
            offset = start + skip
        new = data[offset - start :]
        if entry["final"]:
            complete, rest = new, b""
        else:
            nl = new.rfind(b"\n")
            complete, rest = new[: nl + 1], new[nl + 1 :]
            if len(rest) > MAX_LINE_BYTES:
                complete, rest = new, b""
        if complete and chunk.modified is not None:  # new lines: how long since the node last wrote the file
            lag = max(0.0, time.time() - chunk.modified)
            self._lag_s = lag if self._lag_s is None else max(self._lag_s, lag)
        lines = complete.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        texts, starts, at = [], [], offset
        for raw in lines:
            starts.append(at)
            at += len(raw) + 1
            text = raw.decode("utf-8", errors="replace").rstrip("\r")
            if "\r" in text:  # progress bars: what a terminal would show
                text = text.rsplit("\r", 1)[-1] or text.replace("\r", " ")
            if len(raw) > MAX_LINE_BYTES:
                text = text[:MAX_LINE_BYTES] + f" [line cut at {MAX_LINE_BYTES} bytes]"
            texts.append(text)
        pending.append(_Pending(fetch.cid, fetch.file, texts, offset + len(complete), notes, starts))
        self._answered.setdefault(fetch.cid, set()).add(fetch.file)
        return None

    @staticmethod
    def _prefix(task: str, file: str) -> str:
        return f"{task} | " if file == "stdout" else f"{task} {file} | "

    def _allocate(self, pending: list[_Pending]) -> dict[int, int]:
        """Lines each file may show this poll: the cap shared fairly (small files keep all theirs)."""
        budget = self._lines_left
        alloc: dict[int, int] = {}
        order = sorted(range(len(pending)), key=lambda i: len(pending[i].lines))
        left = len(order)
        for i in order:
            share = budget // left if left else 0
            alloc[i] = min(len(pending[i].lines), share)
            budget -= alloc[i]
            left -= 1
        return alloc

    def _emit(self, pending: list[_Pending]) -> None:
        alloc = self._allocate(pending)
        for i, item in enumerate(pending):
            entry = self._s["follow"].get(item.cid)
            if entry is None:
                continue
            entry["offsets"][item.file] = item.end
            marks = self._s["reshow"].get(item.cid, {})
            shown_to = marks.pop(item.file, None) if item.end >= marks.get(item.file, -1) else marks.get(item.file)
            if not marks:
                self._s["reshow"].pop(item.cid, None)
            if self._s["capped"]:
                continue
            prefix = self._prefix(entry["task"], item.file)
            for note in item.notes:
                self._note(note)
            keep = alloc.get(i, 0)
            self._lines_left -= keep
            skipped = len(item.lines) - keep
            if skipped:
                self._note(
                    f"{prefix}... {skipped} lines skipped (more than {self.lines_per_poll} lines per poll); "
                    f"full log: {self._link(item.cid, item.file)}"
                )
            for text, start in zip(item.lines[skipped:], item.starts[skipped:]):
                size = len(text.encode("utf-8", errors="replace")) + 1
                if self._s["emitted"] + size > self.max_bytes:
                    self._cap()
                    break
                self._s["emitted"] += size
                if (item.cid, item.file) not in self._polled:
                    self._polled[(item.cid, item.file)] = (start, item.end, copy.deepcopy(entry))
                if shown_to is not None and start < shown_to:  # shown before a triggerer restart: mark it
                    if (item.cid, item.file) not in self._reshow_said:
                        self._reshow_said.add((item.cid, item.file))
                        self._note(
                            f"{prefix}... re-shown from {item.cid}/{item.file}@{start} after a triggerer restart"
                        )
                    self._out.append(f"{prefix[:-2]}[re-shown @{start}] | {text}")
                else:
                    self._out.append(prefix + text)

    def _cap(self) -> None:
        self._s["capped"] = True
        links = ", ".join(f"{e['task']}: {self._link(cid)}" for cid, e in self._s["follow"].items())
        self._note(
            f"... job log truncated: {human_bytes(self._s['emitted'])} shown, the limit for this task is "
            f"{human_bytes(self.max_bytes)} (job_log_max_bytes); "
            f"full log: {links or 'the YARN application page'}"
        )

    def _release(self) -> None:
        """The AM's decisions into the log, each once the container it is about has been read to its end (at
        once when that one is not followed or its node does not answer); a task's decisions in their order."""
        waiting: set[str] = set()
        held = []
        for event in self._s["held"]:
            cid, task = event.get("container_id"), str(event.get("task") or "?")
            if task in waiting or (cid in self._s["follow"] and cid not in self._unreachable):
                waiting.add(task)
                held.append(event)
                continue
            first, *more = str(event.get("text") or "").splitlines() or [""]
            self._note(f"{AM_PREFIX} {task} {first}".rstrip())
            self._out.extend(f"{AM_PREFIX} {task} | {line}" for line in more)  # e.g. a stderr tail it quotes
            self._released = True
        self._s["held"] = held

    def _close_final(self) -> None:
        """Containers read to their end this poll are done; one on an unreachable node waits for the next try
        (every RETRY_EVERY_POLLS polls) until the application has ended: then it is dropped (already said)."""
        for cid, entry in list(self._s["follow"].items()):
            complete = len(self._answered.get(cid, ())) == len(FILES)
            if not entry["final"] or not (complete or self._final) or cid not in self._fetched:
                continue  # (not read in this poll: a task's later container waits for the one before it)
            if len(self._missing.get(cid, ())) == len(FILES):
                if self._aggregation and self._aggregation not in ("DISABLED", "NOT_START"):
                    self._report(
                        cid,
                        f"logs of {entry['task']} are no longer on its node: log aggregation is on "
                        f"({self._aggregation}), the aggregated log: {self._link(cid)}",
                    )
                else:
                    self._report(
                        cid, f"logs of {entry['task']} not found on its node {entry.get('node')}; see {self._link(cid)}"
                    )
            self._finish(cid)

    def _begin(self, status: Optional[dict[str, Any]], app: Optional[dict[str, Any]], final: bool) -> bool:
        """A poll starts: its own fields set, what the AM and the RM say taken in. False: nothing to read."""
        self._before = json.dumps(self._s, sort_keys=True)
        self._polled: dict[tuple[str, str], _Batch] = {}  # this poll's batch, for floor()
        self._emitted_at_begin: int = self._s["emitted"]
        self._events_at_begin: tuple[int, list[Any]] = (self._s["events"], copy.deepcopy(self._s["held"]))
        self._released = False  # this poll logged a decision of the AM
        self._lines_left = self.lines_per_poll  # this poll's job lines still allowed
        self._out: list[str] = []
        self._polls += 1
        self._final = final  # this poll comes after the application ended
        self._nodes_read = False  # the RM's node list was read in this poll
        self._answered: dict[str, set[str]] = {}  # container -> files read (or found missing)
        self._missing: dict[str, set[str]] = {}  # container -> files the NM does not have (404)
        self._fetched: set[str] = set()  # containers read (or tried)
        self._observe_app(app)
        if self._s["capped"]:
            return False
        self._observe(status, final, str((app or {}).get("diagnostics") or ""))
        return bool(self._s["follow"] or self._s["held"])

    def _end(self) -> list[str]:
        if json.dumps(self._s, sort_keys=True) != self._before:
            self._s["seq"] += 1
        if self._polled or self._released:  # logged: floor() keeps them (and the batch before) behind
            self._batches = (self._batches + [(self._emitted_at_begin, self._polled, self._events_at_begin)])[-2:]
        return self._out

    # ---- drivers -----------------------------------------------------------------------------------------------
    def poll(
        self,
        hook: Any,
        status: Optional[dict[str, Any]] = None,
        *,
        app: Optional[dict[str, Any]] = None,
        final: bool = False,
    ) -> list[str]:
        """One round with a sync :class:`YarnHook`: ``status`` is the AM's ``/status`` (None when unknown or gone),
        ``app`` the RM's application, ``final`` once it has ended. Returns the lines to log; never raises."""

        def read(fetches: list[_Fetch]) -> list[Any]:  # one after the other: a node that failed is not asked again
            out: list[Any] = []
            for f in fetches:
                failed = self._unreachable_error.get(f.cid) if self._unreachable.get(f.cid) == self._polls else None
                try:
                    out.append(failed or hook.container_log(self._http(f.cid), f.cid, f.file, f.size))
                except Exception as exc:  # noqa: BLE001 - reported once per container by _absorb
                    out.append(exc)
                    if getattr(exc, "status", None) != 404:
                        self._unreachable[f.cid], self._unreachable_error[f.cid] = self._polls, exc
            return out

        return drive(self._poll(status, app, final), {"nodes": hook.nodes, "read": read})

    async def apoll(
        self,
        hook: Any,
        status: Optional[dict[str, Any]] = None,
        *,
        app: Optional[dict[str, Any]] = None,
        final: bool = False,
    ) -> list[str]:
        """:meth:`poll` with an :class:`AsyncYarnHook` (the trigger); the files are read concurrently."""

        def read(fetches: list[_Fetch]) -> Awaitable[list[Any]]:
            reads = (hook.container_log(self._http(f.cid), f.cid, f.file, f.size) for f in fetches)
            return asyncio.gather(*reads, return_exceptions=True)

        return await adrive(self._poll(status, app, final), {"nodes": hook.nodes, "read": read})

    def _poll(
        self, status: Optional[dict[str, Any]], app: Optional[dict[str, Any]], final: bool
    ) -> Generator[Call, Any, list[str]]:
        """One poll as the calls it needs (:mod:`~airflow_provider_melon.hadoop.watch`'s drivers run it)."""
        try:
            if not self._begin(status, app, final):
                return self._end()
            if self._needs_nodes():
                try:
                    self._set_nodes((yield ("nodes",)))
                    self._nodes_read = True
                except Exception as exc:  # noqa: BLE001 - the next poll asks again
                    log.debug("RM nodes unavailable for container logs: %s", exc)
            while True:  # rounds: a task's next container once the one before it was read to its end
                asked = bool(fetches := self._fetches())
                pending: list[_Pending] = []
                for _ in range(2):  # a file that grew past the window is read again with a larger one
                    results = yield ("read", fetches)
                    fetches = [again for f, r in zip(fetches, results) if (again := self._absorb(f, r, pending))]
                if not self._round(pending, asked):
                    break
        except Exception as exc:  # noqa: BLE001 - job logs are best effort; never fail the task
            log.debug("container log streaming failed", exc_info=True)
            self._out.append(f"... job log streaming hiccup: {exc}")
        return self._end()

    def _round(self, pending: list[_Pending], asked: bool) -> bool:
        """The end of one round of reads (``asked``: it read something): its lines, the containers read to their end
        closed, the AM's decisions about them. True when another round may read more (a task's next container)."""
        self._emit(pending)
        self._close_final()
        self._release()
        return asked and not self._s["capped"]

    def _http(self, cid: str) -> str:
        return str(self._s["follow"][cid]["http"])


__all__ = ["AM_PREFIX", "DEFAULT_LINES_PER_POLL", "DEFAULT_MAX_BYTES", "LogFollower", "chief_of", "human_bytes"]
