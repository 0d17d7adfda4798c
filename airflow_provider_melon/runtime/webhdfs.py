"""The few WebHDFS calls a task needs to publish its outputs, on the standard library only (the job's Python may
have nothing else). Simple auth (``user.name``), or on a Kerberos cluster the container's HDFS delegation token
(``delegation=``, from :func:`~airflow_provider_melon.runtime.tokens.container_hdfs_token`); every call bounded in
time and retried a few times on connection errors (a NameNode restarting). A file's bytes are streamed from disk
(a 20 GB checkpoint never sits in memory). RENAME is not idempotent, so it is never sent again blindly: see
:meth:`WebHdfs.rename`."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, BinaryIO, Optional

TIMEOUT_S = 60
RETRIES = 4


class WebHdfsError(RuntimeError):
    pass


class Unanswered(WebHdfsError):
    """The call may have reached the NameNode, but no answer came back (connection lost, timeout)."""


class WebHdfs:
    def __init__(self, url: str, user: str, delegation: Optional[str] = None):
        self.url = url.split(";")[0].rstrip("/")  # the first of an HA list
        if not self.url.endswith("/webhdfs/v1"):
            self.url += "/webhdfs/v1"
        # a token names its owner: with one, WebHDFS refuses a user.name that differs, so it is sent alone
        self.auth = {"delegation": delegation} if delegation else {"user.name": user}

    def _call(
        self,
        method: str,
        path: str,
        op: str,
        data: Any = None,
        url: Optional[str] = None,
        length: Optional[int] = None,
        idempotent: bool = True,
        label: Optional[str] = None,
        **params: Any,
    ) -> tuple[int, bytes]:
        """One WebHDFS call; ``data`` a body or a callable giving a fresh one (a file at its start: streamed, with
        ``length`` as its Content-Length). Not ``idempotent``: an unanswered call raises :class:`Unanswered`
        at once instead of being sent again. Errors name ``label`` (default: the op and the path)."""
        label = label or f"{op} {path}"
        if url is None:
            query = urllib.parse.urlencode({"op": op, **self.auth, **params})
            url = f"{self.url}{urllib.parse.quote(path)}?{query}"
        headers = {"Content-Type": "application/octet-stream"}
        if length is not None:
            headers["Content-Length"] = str(length)
        for attempt in range(RETRIES):
            body = data() if callable(data) else data
            req = urllib.request.Request(url, data=body, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                    return resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                text = exc.read().decode(errors="replace")
                if exc.code == 404:
                    return 404, text.encode()
                try:
                    message = json.loads(text)["RemoteException"]["message"].splitlines()[0]
                except (ValueError, KeyError, TypeError, IndexError):
                    message = text[:300]
                if "SafeModeException" in text or "RetriableException" in text:
                    pass  # transient: retried below
                else:
                    raise WebHdfsError(f"WebHDFS {label}: HTTP {exc.code}: {message}") from None
                last: Exception = WebHdfsError(f"WebHDFS {label}: {message}")
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                last = WebHdfsError(f"WebHDFS {label}: {getattr(exc, 'reason', exc)}")
                if not idempotent:
                    raise Unanswered(str(last)) from None
            time.sleep(min(8.0, 0.5 * 2**attempt))
        raise last

    def status(self, path: str) -> Optional[dict[str, Any]]:
        code, body = self._call("GET", path, "GETFILESTATUS")
        return None if code == 404 else json.loads(body)["FileStatus"]

    def mkdirs(self, path: str) -> None:
        self._call("PUT", path, "MKDIRS")

    def create(self, path: str, local_file: str) -> None:
        """Upload ``local_file`` to ``path`` (no overwrite): the NameNode names a DataNode, the data goes there."""
        _, body = self._call("PUT", path, "CREATE", overwrite="false", noredirect="true")
        location = json.loads(body)["Location"]
        with open(local_file, "rb") as f:

            def rewound() -> BinaryIO:
                f.seek(0)
                return f

            # a file object with its length: http.client sends it in blocks, never the whole file at once
            self._call("PUT", path, "CREATE(data)", data=rewound, url=location, length=os.fstat(f.fileno()).st_size)

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, which must not exist (``renameoptions=NONE``: an existing ``dst`` is an error,
        never a folder to move ``src`` into). Raises :class:`WebHdfsError` naming both paths.

        A rename whose answer is lost may have been applied, so it is not sent again blindly; the status of both
        paths decides: ``src``'s inode (``fileId``, which a rename keeps) now at ``dst`` and ``src`` gone:
        done; ``src`` still there and no ``dst``: not applied, sent again; anything else: an error saying what
        each path holds."""
        before = self.status(src)
        if before is None:
            raise WebHdfsError(f"WebHDFS RENAME {src} -> {dst}: {src} does not exist")
        for _ in range(RETRIES):
            try:
                code, body = self._call(
                    "PUT",
                    src,
                    "RENAME",
                    idempotent=False,
                    label=f"RENAME {src} -> {dst}",
                    destination=dst,
                    renameoptions="NONE",
                )
            except Unanswered as exc:
                lost = exc
            else:
                if code == 404:
                    raise WebHdfsError(
                        f"WebHDFS RENAME {src} -> {dst}: HTTP 404: {body.decode(errors='replace')[:300]}"
                    )
                return
            now_src, now_dst = self.status(src), self.status(dst)
            if now_src is None and now_dst is not None and now_dst.get("fileId") == before.get("fileId"):
                return  # applied; only its answer was lost
            if now_src is not None and now_src.get("fileId") == before.get("fileId") and now_dst is None:
                continue  # not applied: safe to send again
            raise WebHdfsError(
                f"WebHDFS RENAME {src} -> {dst}: no answer ({lost}) and the paths do not tell it "
                f"was applied: {src} {_held(now_src, before)}, {dst} {_held(now_dst, before)}"
            )
        raise lost

    def delete(self, path: str) -> None:
        self._call("DELETE", path, "DELETE", recursive="true")

    def upload_tree(self, local: str, path: str) -> int:
        """``local`` (a file, or a folder and all below it) to ``path``; returns the files uploaded."""
        if os.path.isfile(local):
            self.create(path, local)
            return 1
        count = 0
        self.mkdirs(path)
        for root, dirs, files in os.walk(local):
            rel = os.path.relpath(root, local)
            target = path if rel == "." else f"{path}/{rel}"
            for d in dirs:
                self.mkdirs(f"{target}/{d}")
            for name in files:
                self.create(f"{target}/{name}", os.path.join(root, name))
                count += 1
        return count


def _held(status: Optional[dict[str, Any]], source: dict[str, Any]) -> str:
    if status is None:
        return "absent"
    return "holds the source" if status.get("fileId") == source.get("fileId") else "holds something else"
