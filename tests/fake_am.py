"""An in-test ApplicationMaster HTTP API on loopback, for the executor's tests (a real subprocess talks to it)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = "s3cret-hex"


class FakeAM:
    """Plays the AM's HTTP API: gang registration (202 until everyone is in, always 202 on a task's first call),
    heartbeats, 403 on a wrong secret."""

    def __init__(self, tasks, secret=SECRET, preregistered=None):
        self.expected = set(tasks)
        self.secret = secret
        self.addresses = dict(preregistered or {})  # "role:index" -> "host:port"
        self.registrations, self.heartbeats, self.answers = [], [], []
        self.lock = threading.Lock()
        am = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.headers.get("X-Melon-Secret") != am.secret:
                    return self._reply(403, {"error": "forbidden"})
                with am.lock:
                    if self.path == "/register":
                        key = f"{body['role']}:{body['index']}"
                        first = key not in am.addresses
                        am.registrations.append(body)
                        am.addresses[key] = f"{body['host']}:{body['port']}"
                        missing = [t for t in am.expected if t not in am.addresses]
                        if first or missing:
                            am.answers.append((key, 202))
                            return self._reply(202, {"waiting": len(missing)})
                        cluster = {}
                        for t in sorted(am.addresses, key=lambda t: (t.split(":")[0], int(t.split(":")[1]))):
                            cluster.setdefault(t.split(":")[0], []).append(am.addresses[t])
                        am.answers.append((key, 200))
                        return self._reply(200, {"cluster": cluster})
                    if self.path == "/heartbeat":
                        am.heartbeats.append(body)
                        return self._reply(200, {})
                return self._reply(404, {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
