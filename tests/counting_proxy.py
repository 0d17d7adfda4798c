"""A loopback HTTP proxy in front of a real ResourceManager that counts the requests going through it (for the
shared poller's live test and ``benchmarks/bench_triggers.py``): real counts, not estimates. In front of a real
NameNode's WebHDFS it also loses what a real cluster cannot lose on demand: an answer (the request is applied, the
reply never comes) or a request (never forwarded)."""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional
from urllib.parse import urlsplit


def kind(path: str, method: str = "GET") -> str:
    """``list`` (GET /ws/v1/cluster/apps), ``app`` (GET /ws/v1/cluster/apps/{id}), ``kill`` (PUT
    /ws/v1/cluster/apps/{id}/state), ``nodes`` (GET /ws/v1/cluster/nodes), else ``other``."""
    path = urlsplit(path).path.rstrip("/")
    if method == "PUT" and path.startswith("/ws/v1/cluster/apps/") and path.endswith("/state"):
        return "kill"
    if path == "/ws/v1/cluster/apps":
        return "list"
    if path == "/ws/v1/cluster/nodes":
        return "nodes"
    if path.startswith("/ws/v1/cluster/apps/") and path.count("/") == 5:
        return "app"
    return "other"


class CountingProxy:
    """Forwards every request to ``target`` (``http://host:port``) and counts them by :func:`kind`.

    ``url`` is the proxy's address; :meth:`snapshot` the counts so far; use as a context manager. ``lose(method,
    path)`` (path with its query), called for each request: ``"answer"`` forwards it and closes the connection
    without a reply, ``"request"`` closes it without forwarding, None forwards as usual."""

    def __init__(self, target: str, port: int = 0, lose: Optional[Callable[[str, str], Optional[str]]] = None):
        parts = urlsplit(target)
        self.target_host, self.target_port = parts.hostname, parts.port or 80
        self.counts: Counter = Counter()
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the hooks' sessions use it

            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                with proxy.lock:
                    proxy.counts[kind(self.path, self.command)] += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "content-length")
                }
                lost = lose(self.command, self.path) if lose else None
                if lost == "request":
                    self.close_connection = True
                    return
                conn = http.client.HTTPConnection(proxy.target_host, proxy.target_port, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    if lost == "answer":
                        self.close_connection = True
                        return
                    self.send_response(resp.status)
                    for key, value in resp.getheaders():
                        if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="counting-proxy", daemon=True)

    def snapshot(self) -> Counter:
        with self.lock:
            return Counter(self.counts)

    def __enter__(self) -> "CountingProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
