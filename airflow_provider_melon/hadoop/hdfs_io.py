"""HDFS writes that are safe under concurrency, HDFS errors a person can read, and run-scoped path names.

:func:`put_once` publishes data at a path once, however many tasks try at the same moment; :func:`hdfs_errors`
turns an HDFS or connection error into a one-line :class:`MelonHdfsError`; :func:`quiet_client_logs` demotes the
``hdfs`` package's request logs; :func:`run_slug` names a run's folder. Airflow-free: the hook, the CLI and a
DAG import these from here. ``docs/internals.md``, "HDFS helpers", says how each works.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import re
import socket
import time
import uuid
from typing import Any, BinaryIO, Iterator, Optional, Union
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

_LOCK_WAIT_S = 60.0
_LOCK_WAIT_BYTES_PER_S = 5 * 1024 * 1024  # waiters allow the lock holder at least this upload rate
_POLL_S = 0.5
#: RemoteException names (or message fragments) → the fix a user can apply.
_FIXES = (
    (
        "is not allowed to impersonate",
        "the cluster does not let the webhdfs connection's user act for this user "
        "(doAs): add the user (or a group of theirs) to hadoop.proxyuser.<login>.users "
        "/ .groups and the Airflow host to .hosts in core-site.xml, then `hdfs dfsadmin "
        "-refreshSuperUserGroupsConfiguration`; or run the task as another user",
    ),
    (
        "SafeModeException",
        "the NameNode is in safe mode (starting up or low on space): wait, or ask the admin "
        "to run `hdfs dfsadmin -safemode leave`",
    ),
    (
        "AccessControlException",
        "the HDFS user (the webhdfs connection's login, or the proxy user) lacks "
        "permission on the path: fix its owner/mode or use a path under /user/<user>",
    ),
    ("Permission denied", "the HDFS user lacks permission on the path: fix its owner/mode"),
    ("FileNotFoundException", "the path does not exist in HDFS: check the spelling or create it first"),
    ("File does not exist", "the path does not exist in HDFS: check the spelling or create it first"),
    ("DSQuotaExceededException", "the directory's space quota is used up: free space or raise the quota"),
    ("NSQuotaExceededException", "the directory's name quota is used up: remove files or raise the quota"),
    (
        "StandbyException",
        "the NameNode addressed is standby: point the webhdfs connection at the active one "
        "(or list both NameNodes in its host)",
    ),
    ("could only be written to 0 of the", "no DataNode accepted the block: check that DataNodes are up and have space"),
    (
        "Connection refused",
        "nothing listens at the WebHDFS address: check the webhdfs connection's host/port "
        "and that the NameNode's HTTP server is up",
    ),
    ("Authentication failure", "WebHDFS refused the credentials: check the connection's login / Kerberos setup"),
)
_JAVA_FRAME = re.compile(r"\s+at [\w$.<>]+\(.*?\)")


#: causes that pass (a NameNode restarting or failing over, DataNodes re-registering): worth retrying
_TRANSIENT = (
    "SafeModeException",
    "RetriableException",
    "could only be written to 0 of the",
    "Connection refused",
    "Connection reset",
    "Connection aborted",
    "RemoteDisconnected",
    "Read timed out",
    "Max retries exceeded",
    "EOFException",
    "ConnectException",
    "SocketTimeoutException",
    "Failed to find datanode",
)


class MelonHdfsError(RuntimeError):
    """An HDFS operation failed; ``str()`` is one line: operation, path, cause, fix. ``retriable``: the cause is
    one that passes (the NameNode restarting, in safe mode, unreachable for a moment)."""

    def __init__(self, op: str, path: str, cause: str, fix: Optional[str] = None, retriable: bool = False):
        self.op, self.path, self.cause, self.fix, self.retriable = op, path, cause, fix, retriable
        super().__init__(f"HDFS {op} {path} failed: {cause}" + (f" — fix: {fix}" if fix else ""))


def _first_line(text: str) -> str:
    """The cause without the Java stack trace (the first line of a RemoteException message)."""
    text = _JAVA_FRAME.split(str(text), 1)[0]
    line = " ".join(text.split())
    return line[:400] + ("…" if len(line) > 400 else "")


def describe(op: str, path: str, exc: BaseException) -> MelonHdfsError:
    """The one-line error for ``exc`` raised by ``op`` on ``path``."""
    raw = str(getattr(exc, "message", None) or exc)
    exception = getattr(exc, "exception", None) or ""
    cause = _first_line(raw) or type(exc).__name__
    if exception and exception not in cause:
        cause = f"{exception}: {cause}"
    fix = next((fix for key, fix in _FIXES if key in raw or key in exception), None)
    retriable = isinstance(exc, (ConnectionError, TimeoutError)) or any(
        key in raw or key in exception for key in _TRANSIENT
    )
    try:
        import requests

        retriable = retriable or isinstance(exc, (requests.ConnectionError, requests.Timeout))
    except ImportError:  # pragma: no cover
        pass
    return MelonHdfsError(op, path, cause, fix, retriable)


def _transport_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        from hdfs.util import HdfsError

        errors.append(HdfsError)
    except ImportError:  # pragma: no cover - hdfs is a dependency of the HDFS provider
        pass
    try:
        import requests

        errors.append(requests.RequestException)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


@contextlib.contextmanager
def hdfs_errors(op: str, path: str) -> Iterator[None]:
    """Re-raise HDFS client/transport errors inside the block as one-line :class:`MelonHdfsError`."""
    try:
        yield
    except MelonHdfsError:
        raise
    except _transport_errors() as exc:
        log.debug("HDFS %s %s failed; full error:\n%s", op, path, exc)
        raise describe(op, path, exc) from None


# ---- client log chatter ---------------------------------------------------------------------------------------
class _DemoteInfo(logging.Filter):
    """INFO records become DEBUG (and are dropped unless the logger is enabled for DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_DEMOTE = _DemoteInfo()
CHATTY_LOGGERS = ("hdfs.client", "hdfs.util", "hdfs.ext.kerberos")


def quiet_client_logs() -> None:
    """Demote the INFO chatter of the ``hdfs`` package's loggers to DEBUG (idempotent)."""
    for name in CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        if _DEMOTE not in logger.filters:
            logger.addFilter(_DEMOTE)


# ---- concurrent-safe publishing -------------------------------------------------------------------------------
def _split(path: str) -> tuple[str, str]:
    parent, _, name = path.rstrip("/").rpartition("/")
    return parent or "/", name


def _status(client: Any, path: str) -> Optional[dict[str, Any]]:
    with hdfs_errors("status", path):
        status: Optional[dict[str, Any]] = client.status(path, strict=False)
        return status


def _already_exists(exc: BaseException) -> bool:
    text = f"{getattr(exc, 'exception', '') or ''} {exc}"
    return any(
        key in text
        for key in (
            "FileAlreadyExistsException",
            "AlreadyBeingCreatedException",
            "already exists",
            "already being created",
        )
    )


#: our own temporary files and locks whose clean-up failed (the NameNode was away): removed by the next put_once,
#: so a retried upload does not wait on its own lock
_ORPHANS: set[str] = set()


def _delete_quietly(client: Any, path: str) -> None:
    try:
        client.delete(path)
        _ORPHANS.discard(path)
    except Exception as exc:  # noqa: BLE001 - clean-up is best effort; the name is unique
        _ORPHANS.add(path)
        log.debug("could not delete %s: %s", path, exc)


#: what :func:`put_once` publishes: the bytes themselves, or a local file streamed from disk (never read whole)
Source = Union[bytes, os.PathLike[str]]


def source_size(data: Source) -> int:
    """The length of ``data`` (bytes) or of the local file it names."""
    return len(data) if isinstance(data, (bytes, bytearray)) else os.stat(data).st_size


#: block size for reading local files to upload or hash: memory stays bounded by it, not by the file size
BLOCK_BYTES = 1 << 20


class BlockReader:
    """A local file as the HTTP client reads it: a known length (Content-Length) and :data:`BLOCK_BYTES` per
    read, whatever block size the client asks for (urllib3 asks for 16 KiB: 64 times the Python-level work per
    GiB on a CPU the upload shares). ``hashing``: SHA-256 of what was read, in :attr:`sha256`."""

    def __init__(self, handle: BinaryIO, size: int, hashing: bool = False):
        self._handle, self._size = handle, size
        self.sha256 = hashlib.sha256() if hashing else None
        self._rewound = False

    def __len__(self) -> int:
        return self._size

    def fileno(self) -> int:
        return self._handle.fileno()

    def tell(self) -> int:
        return self._handle.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Rewind for a resend (requests-kerberos seeks the body back to where it started after a 401, and after
        every other response too): back to the start, the hash starts again with the next read (so a rewind after
        the last send keeps the hash of what it sent); anywhere else only when not hashing."""
        if self.sha256 is not None:
            if (offset, whence) != (0, io.SEEK_SET):
                raise io.UnsupportedOperation("a hashing upload can only be rewound to its start")
            self._rewound = True
        return self._handle.seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        block = self._handle.read(BLOCK_BYTES)
        if self.sha256 is not None:
            if self._rewound:
                self.sha256, self._rewound = hashlib.sha256(), False
            self.sha256.update(block)
        return block


@contextlib.contextmanager
def open_source(data: Source, *, hashing: bool = False) -> Iterator[Any]:
    """What the HTTP client sends: the bytes, or the open file as a :class:`BlockReader`, which requests streams
    with a Content-Length (so client memory stays bounded whatever the file's size)."""
    if isinstance(data, (bytes, bytearray)):
        yield data
        return
    with open(data, "rb") as handle:
        yield BlockReader(handle, os.fstat(handle.fileno()).st_size, hashing)


class SourceChangedError(RuntimeError):
    """A local file's bytes as uploaded are not the content it was hashed as (it was rewritten meanwhile): nothing
    was published under the digest."""


def write_beside_and_rename(client: Any, path: str, data: Source, sha256: Optional[str] = None) -> bool:
    """Upload to a unique name beside ``path``, then rename into place. True if this call put it there;
    False if another writer's copy (same size) arrived first. ``sha256``: the digest ``data`` must have — of a
    local file, the bytes read while uploading are hashed and checked before the rename
    (:class:`SourceChangedError` if they differ)."""
    parent, name = _split(path)
    tmp = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
    try:
        with hdfs_errors("write", tmp), open_source(data, hashing=sha256 is not None) as body:
            client.write(tmp, data=body, overwrite=False)
        sent = getattr(body, "sha256", None)
        if sha256 is not None and sent is not None and sent.hexdigest() != sha256:
            raise SourceChangedError(
                f"{os.fsdecode(data)} changed while it was staged (sha256 {sha256[:16]}… when hashed, "
                f"{sent.hexdigest()[:16]}… as uploaded): nothing was stored under {path}; stage it again once it "
                "no longer changes"
            )
        try:
            with hdfs_errors("rename", f"{tmp} -> {path}"):
                client.rename(tmp, path)
            return True
        except MelonHdfsError:
            st = _status(client, path)
            if st and st.get("type") == "FILE" and int(st.get("length", -1)) == source_size(data):
                return False  # someone else's identical copy is in place
            raise
    finally:
        _delete_quietly(client, tmp)  # gone already after the rename: a no-op then


def put_once(
    client: Any, path: str, data: Source, *, lock_wait: Optional[float] = None, sha256: Optional[str] = None
) -> tuple[dict[str, Any], bool]:
    """Make ``path`` hold ``data`` (an immutable, e.g. content-addressed, object: bytes, or a local file's path,
    streamed from disk). Returns ``(status, uploaded)``. ``sha256``: the digest ``path`` is named by; a local file
    whose uploaded bytes have another one is not published (:class:`SourceChangedError`).

    A file already at ``path`` with the same length counts as cached. A file of another length is replaced
    (write beside, delete, rename). Concurrent callers upload once: see the module docstring.
    """
    for orphan in sorted(_ORPHANS):
        _delete_quietly(client, orphan)
    size = source_size(data)
    wait_bound = lock_wait if lock_wait is not None else _LOCK_WAIT_S + size / _LOCK_WAIT_BYTES_PER_S
    parent, name = _split(path)
    lock = f"{parent}/.{name}.lock"
    waited_since: Optional[float] = None
    while True:
        st = _status(client, path)
        if st and st.get("type") == "FILE" and int(st.get("length", -1)) == size:
            return st, False
        if st is not None:  # a different object under this name: replace it (not expected for cache paths)
            log.warning("%s holds %s bytes, expected %d: replacing it", path, st.get("length"), size)
            with hdfs_errors("delete", path):
                client.delete(path)
            continue
        owner = f"{socket.gethostname()} pid {os.getpid()}".encode()
        try:
            with hdfs_errors("create", lock):
                client.write(lock, data=owner, overwrite=False)
        except MelonHdfsError as exc:
            if not _already_exists(exc):
                raise
            # Another task is uploading the same object: wait for it (bounded), then check again.
            now = time.monotonic()
            waited_since = now if waited_since is None else waited_since
            if now - waited_since < wait_bound:
                time.sleep(_POLL_S)
                continue
            log.warning(
                "%s: the upload lock %s is older than %.0f s (its holder died?): uploading here", path, lock, wait_bound
            )
            uploaded = write_beside_and_rename(client, path, data, sha256)
            _delete_quietly(client, lock)
            return _status(client, path) or {}, uploaded
        try:
            uploaded = write_beside_and_rename(client, path, data, sha256)
        finally:
            _delete_quietly(client, lock)
        return _status(client, path) or {}, uploaded


# ---- big local files: hashed while they upload --------------------------------------------------------------
_SAMPLE_BYTES = 1 << 20


def sample_key(path: os.PathLike[str]) -> str:
    """A cheap key of a local file's content: its size and SHA-256 of its first, middle and last MiB. Equal
    contents always give equal keys, so a key that was never seen is content never staged."""
    size = os.stat(path).st_size
    digest = hashlib.sha256(size.to_bytes(8, "big"))
    with open(path, "rb") as handle:
        for offset in (0, max(size // 2 - _SAMPLE_BYTES // 2, 0), max(size - _SAMPLE_BYTES, 0)):
            handle.seek(offset)
            digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()[:32]


def file_sha256(path: os.PathLike[str]) -> str:
    """SHA-256 of a local file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def put_file_hashing(
    client: Any, cache_dir: str, name: str, local: os.PathLike[str], *, lock_wait: Optional[float] = None
) -> tuple[str, dict[str, Any], bool]:
    """Publish a big local file at ``<cache_dir>/<sha256>/<name>`` reading it once when it is new. Returns
    ``(path, status, uploaded)``.

    Hashing first and uploading after reads the file twice, and on a busy client the hash is a good part of
    the upload's time. So the file's :func:`sample_key` is looked up first in ``<cache_dir>/by-sample/<key>/``,
    which lists (as empty files) the digests of every object staged with that key:

    * nothing there: the content was never staged. Under a create-exclusive lock in that folder it is
      uploaded beside the index while being hashed, then renamed to its content address and its digest added
      to the index. Other callers with the same key wait for the lock (bounded) and then take the path below.
    * digests there: the file is hashed (as :func:`put_once` callers do) and, if its digest is among them and
      the object is in place, it is cached (0 bytes); otherwise it is uploaded with :func:`put_once`.
    """
    size = source_size(local)
    index = f"{cache_dir}/by-sample/{sample_key(local)}"
    wait_bound = lock_wait if lock_wait is not None else _LOCK_WAIT_S + size / _LOCK_WAIT_BYTES_PER_S
    lock, waited_since = f"{index}/.lock", None
    while True:
        with hdfs_errors("list", index):
            entries = set(client.list(index)) if _status(client, index) else set()
        digests = {e for e in entries if not e.startswith(".")}
        if digests or (entries and waited_since is not None and time.monotonic() - waited_since > wait_bound):
            return _put_known(client, cache_dir, name, local, index, digests)
        try:
            with hdfs_errors("create", lock):
                client.write(lock, data=b"", overwrite=False)  # empty: no DataNode block to set up
        except MelonHdfsError as exc:
            if not _already_exists(exc):
                raise
            waited_since = waited_since or time.monotonic()
            if time.monotonic() - waited_since > wait_bound:  # its holder died? hash and upload here
                return _put_known(client, cache_dir, name, local, index, digests)
            time.sleep(_POLL_S)
            continue
        try:
            return _upload_hashing(client, cache_dir, name, local, index, size)
        finally:
            _delete_quietly(client, lock)


def _put_known(
    client: Any, cache_dir: str, name: str, local: os.PathLike[str], index: str, digests: set[str]
) -> tuple[str, dict[str, Any], bool]:
    digest = file_sha256(local)
    path = f"{cache_dir}/{digest}/{name}"
    status, uploaded = put_once(client, path, local, sha256=digest)
    if digest not in digests:
        with hdfs_errors("write", f"{index}/{digest}"):
            client.write(f"{index}/{digest}", data=b"", overwrite=True)
    return path, status, uploaded


def _upload_hashing(
    client: Any, cache_dir: str, name: str, local: os.PathLike[str], index: str, size: int
) -> tuple[str, dict[str, Any], bool]:
    tmp = f"{index}/.{uuid.uuid4().hex}.tmp"
    try:
        with hdfs_errors("write", tmp), open_source(local, hashing=True) as body:
            client.write(tmp, data=body, overwrite=False)
        digest = body.sha256.hexdigest()
        path = f"{cache_dir}/{digest}/{name}"
        with hdfs_errors("mkdirs", path):
            client.makedirs(f"{cache_dir}/{digest}")
        try:
            with hdfs_errors("rename", f"{tmp} -> {path}"):
                client.rename(tmp, path)
        except MelonHdfsError:
            st = _status(client, path)
            if not (st and st.get("type") == "FILE" and int(st.get("length", -1)) == size):
                raise  # (another writer's identical copy in place is fine: the bytes were sent all the same)
        with hdfs_errors("write", f"{index}/{digest}"):
            client.write(f"{index}/{digest}", data=b"", overwrite=True)
        return path, _status(client, path) or {}, True
    finally:
        _delete_quietly(client, tmp)


# ---- run-scoped names -----------------------------------------------------------------------------------------
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run_slug(run_id: str) -> str:
    """A safe, unique path component for an Airflow run id.

    ``manual__2026-11-30T14:57:19.941365+00:00`` → ``manual__2026-11-30T14_57_19.941365_00_00-7c5e0a1b``: HDFS
    forbids ``:`` in names, so unsafe characters become ``_`` and a short hash of the original keeps two run
    ids that differ only in those characters apart. A run id that is already safe is returned as it is.
    """
    if not run_id or not isinstance(run_id, str):
        raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
    safe = _UNSAFE.sub("_", run_id).strip("._") or "run"
    if safe == run_id:
        return run_id
    return f"{safe}-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"


def hdfs_asset_uri(path: str, fs_default_fs: Optional[str] = None) -> Optional[str]:
    """A fully qualified ``hdfs://host:port/path`` for an output path, or None when it cannot be one.

    The HDFS provider's asset-uris handler rejects ``hdfs://`` URIs without a namenode host, so
    ``hdfs:///x`` and ``/x`` are qualified with ``fs_default_fs`` when it is known.
    """
    if not isinstance(path, str) or not path:
        return None
    if path.startswith("hdfs://"):
        parts = urlsplit(path)
        if parts.netloc and parts.path:
            return path
        path = parts.path
    if path.startswith("/") and fs_default_fs and fs_default_fs.startswith("hdfs://"):
        return fs_default_fs.rstrip("/") + path
    return None
