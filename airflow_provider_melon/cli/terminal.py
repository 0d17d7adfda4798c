"""What the ``melon`` job commands print: an application's summary and state, JSON, and the progress bars (rich)
(drawn on stderr only when it is a terminal)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID


def duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def app_summary(app: dict) -> dict:
    """The fields of an RM application the CLI shows (``--json`` prints this)."""
    finished = int(app.get("finishedTime") or 0)
    return {
        "id": app.get("id"),
        "name": app.get("name"),
        "user": app.get("user"),
        "queue": app.get("queue"),
        "type": app.get("applicationType"),
        "state": app.get("state"),
        "final_status": app.get("finalStatus"),
        "progress": float(app.get("progress") or 0.0),
        "elapsed_s": round(int(app.get("elapsedTime") or 0) / 1000, 1),
        "started": int(app.get("startedTime") or 0) or None,
        "finished": finished or None,
        "tags": list(app.get("applicationTagList") or []),
        "tracking_url": app.get("trackingUrl"),
        "diagnostics": (app.get("diagnostics") or "").strip(),
    }


def succeeded(app: dict) -> bool:
    return app.get("state") == "FINISHED" and app.get("finalStatus") == "SUCCEEDED"


def app_exit_code(app: dict) -> int:
    """0 while running or once SUCCEEDED; 1 once FAILED or KILLED."""
    return 0 if app.get("state") not in TERMINAL_STATES or succeeded(app) else 1  # exit_codes.OK / APP_FAILED


def app_state_text(app: dict) -> str:
    return f"{app.get('state')}/{app.get('finalStatus') or 'UNDEFINED'}"


def first_line(text: str, width: int = 160) -> str:
    line = " ".join(str(text or "").split("\n", 1)[0].split())
    return line if len(line) <= width else line[: width - 1] + "…"


#: where JSON goes while :func:`json_only_stdout` holds stdout (None: sys.stdout)
_json_out: Optional[Any] = None


def print_json(value: Any, *, one_line: bool = False) -> None:
    text = json.dumps(value, sort_keys=True) if one_line else json.dumps(value, indent=1, sort_keys=True)
    out = json_stream()
    out.write(text + "\n")
    out.flush()


def json_stream():
    """Where ``--json`` output goes: stdout, as :func:`json_only_stdout` kept it."""
    return _json_out or sys.stdout


@contextlib.contextmanager
def json_only_stdout(enabled: bool = True):
    """Under ``--json`` stdout carries only the JSON (:func:`print_json`): meanwhile file descriptor 1 and
    ``sys.stdout`` point at stderr, so whatever else writes there (Airflow's structlog at import, other providers,
    child processes) lands on stderr. A ``sys.stdout`` without a file descriptor (a capture) keeps the JSON."""
    global _json_out
    if not enabled:
        yield
        return
    out, saved, fd = sys.stdout, None, None
    try:
        fd, err_fd = out.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is not None:
        out.flush()
        saved = os.dup(fd)
        os.dup2(err_fd, fd)
        _json_out = open(saved, "w", encoding=getattr(out, "encoding", None) or "utf-8", closefd=False)
    else:
        _json_out = out
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        _json_out.flush()
        sys.stdout, _json_out = out, None
        if saved is not None and fd is not None:  # both or neither: saved is dup(fd)
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)


def _console(stream):
    """A rich console on ``stream``: styled on a terminal; plain, unwrapped text into pipes and files."""
    from rich.console import Console

    tty = bool(getattr(stream, "isatty", lambda: False)())
    return Console(
        file=stream,
        highlight=False,
        soft_wrap=not tty,
        width=None if tty else 100_000,
        force_terminal=tty,
        no_color=not tty,
    )


def print_table(header: tuple, rows: list, stream=None) -> None:
    """Columns, aligned (rich), one line a row: a header in bold on a terminal."""
    from rich import box
    from rich.table import Table

    stream = stream or sys.stdout
    table = Table(
        box=box.SIMPLE_HEAD if _console(stream).is_terminal else None,
        show_edge=False,
        pad_edge=False,
        header_style="bold",
    )
    for name in header:
        table.add_column(name, no_wrap=True)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    _console(stream).print(table)


class Progress:
    """A one-line progress bar on stderr (rich), drawn only when stderr is a terminal (never into pipes or files):
    ``update`` with a fraction (None: no bar, only the text), ``clear`` takes it off the screen."""

    def __init__(self, stream=None, enabled: Optional[bool] = None):
        self.stream = stream or sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)()) if enabled is None else enabled
        self._bar: Optional[tuple[RichProgress, TaskID]] = None  # the rich progress and its one task
        self._last = 0.0

    def update(self, fraction: Optional[float], text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        if self._bar is None:
            from rich.progress import BarColumn, TaskProgressColumn, TextColumn
            from rich.progress import Progress as RichProgress

            bar = RichProgress(
                BarColumn(bar_width=24),
                TaskProgressColumn(),
                TextColumn("{task.description}"),
                console=_console(self.stream),
                transient=True,
                auto_refresh=False,
            )
            bar.start()
            self._bar = bar, bar.add_task(text, total=None if fraction is None else 1.0)
        bar, task = self._bar
        frac = None if fraction is None else min(max(fraction, 0.0), 1.0)
        bar.update(task, description=text, completed=frac or 0.0, total=None if frac is None else 1.0)
        bar.refresh()

    def clear(self) -> None:
        if self._bar is not None:
            self._bar[0].stop()  # transient: the bar's line is erased
            self._bar = None


class _ReadProgress:
    """Bytes (or an open local file, streamed) to upload, read in blocks by the HTTP client (with a known
    length), reporting how far it got."""

    def __init__(self, data, size: int, report: Callable[[int], None]):
        self._buf = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
        self._len, self._report, self._start = size, report, self._buf.tell()

    def __len__(self) -> int:
        return self._len

    def read(self, size: int = -1) -> bytes:
        chunk = self._buf.read(size)
        self._report(self._buf.tell() - self._start)
        return chunk


class UploadProgress:
    """An ``hdfs`` client whose bigger writes (the staged code, runtime and AM jar) draw the progress bar; every
    other call passes through unchanged."""

    MIN_BYTES = 64 * 1024
    _TMP = re.compile(r"^\.(.+)\.[0-9a-f]{32}\.tmp$")  # hdfs_io writes beside the target, then renames

    def __init__(self, client, bar: Progress):
        self._client, self._bar = client, bar

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def write(self, hdfs_path: str, data=None, **kwargs):
        streamed = hasattr(data, "read") and hasattr(data, "fileno")  # a local file (hdfs_io.open_source)
        total = (
            os.fstat(data.fileno()).st_size - data.tell()
            if streamed
            else len(data)
            if isinstance(data, (bytes, bytearray))
            else 0
        )
        if not self._bar.enabled or total < self.MIN_BYTES:
            return self._client.write(hdfs_path, data=data, **kwargs)
        base = hdfs_path.rsplit("/", 1)[-1]
        match = self._TMP.match(base)
        name = match.group(1) if match else base

        def report(done: int) -> None:
            self._bar.update(
                done / total, f"staging {name} {done / 2**20:.1f}/{total / 2**20:.1f} MiB", force=done >= total
            )

        try:
            body = _ReadProgress(data if streamed else bytes(data), total, report)
            return self._client.write(hdfs_path, data=body, **kwargs)
        finally:
            self._bar.clear()


__all__ = ["Progress", "UploadProgress", "app_exit_code", "app_summary", "succeeded"]
