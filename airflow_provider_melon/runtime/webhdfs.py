"""The few WebHDFS calls a task needs to publish its outputs, on the standard library only (the job's Python may
have nothing else). Simple auth (``user.name``), or on a Kerberos cluster the container's HDFS delegation token
(``delegation=``, from :func:`~airflow_provider_melon.runtime.tokens.container_hdfs_token`); every call bounded in
time and retried a few times on connection errors (a NameNode restarting)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Optional

TIMEOUT_S = 60
RETRIES = 4


class WebHdfsError(RuntimeError):
    pass


class WebHdfs:
    def __init__(self, url: str, user: str, delegation: Optional[str] = None):
        self.url = url.split(";")[0].rstrip("/")  # the first of an HA list
        if not self.url.endswith("/webhdfs/v1"):
            self.url += "/webhdfs/v1"
        # a token names its owner: with one, WebHDFS refuses a user.name that differs, so it is sent alone
        self.auth = {"delegation": delegation} if delegation else {"user.name": user}

    def _call(self, method: str, path: str, op: str, data: Any = None, url: Optional[str] = None,
              **params: Any) -> tuple[int, bytes]:
        if url is None:
            query = urllib.parse.urlencode({"op": op, **self.auth, **params})
            url = f"{self.url}{urllib.parse.quote(path)}?{query}"
        for attempt in range(RETRIES):
            body = data() if callable(data) else data
            req = urllib.request.Request(url, data=body, method=method,
                                         headers={"Content-Type": "application/octet-stream"})
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
                    raise WebHdfsError(f"WebHDFS {op} {path}: HTTP {exc.code}: {message}") from None
                last: Exception = WebHdfsError(f"WebHDFS {op} {path}: {message}")
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                last = WebHdfsError(f"WebHDFS {op} {path}: {getattr(exc, 'reason', exc)}")
            time.sleep(min(8.0, 0.5 * 2 ** attempt))
        raise last

    def status(self, path: str) -> Optional[dict]:
        code, body = self._call("GET", path, "GETFILESTATUS")
        return None if code == 404 else json.loads(body)["FileStatus"]

    def mkdirs(self, path: str) -> None:
        self._call("PUT", path, "MKDIRS")

    def create(self, path: str, local_file: str) -> None:
        """Upload ``local_file`` to ``path`` (no overwrite): the NameNode names a DataNode, the data goes there."""
        _, body = self._call("PUT", path, "CREATE", overwrite="false", noredirect="true")
        location = json.loads(body)["Location"]

        def read() -> bytes:
            with open(local_file, "rb") as f:
                return f.read()

        self._call("PUT", path, "CREATE(data)", data=read, url=location)

    def rename(self, src: str, dst: str) -> bool:
        _, body = self._call("PUT", src, "RENAME", destination=dst)
        return bool(json.loads(body).get("boolean"))

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
