"""TensorBoard next to the TensorBoard task, served to browsers through the AM and the RM web proxy.

Stdlib only, like the executor that uses it. :class:`TensorBoard` starts ``python -m tensorboard.main`` on the
job's log dir, learns its port and returns once the page answers. ``docs/internals.md``, "TensorBoard", says
how it is started, why it has no GPU and how the proxy reaches it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from typing import Callable, List, Mapping, Optional

PATH_PREFIX = "/tensorboard"
_SERVING = re.compile(r"^TensorBoard \S+ at http://(?P<host>.+):(?P<port>\d+)" + PATH_PREFIX + "/")


class TensorBoardError(Exception):
    """TensorBoard could not be started; the message says why."""


def missing() -> Optional[str]:
    """Why TensorBoard cannot run under this interpreter (the job's Python), or None when it can."""
    import importlib.util  # here, not at the top: every executor imports this module, few run TensorBoard

    try:
        found = importlib.util.find_spec("tensorboard") is not None
    except (ImportError, ValueError) as exc:
        found, detail = False, f": {exc}"
    else:
        detail = ""
    if found:
        return None
    return (
        f"the job's Python ({sys.executable}) has no tensorboard module{detail}; install tensorboard into the "
        f"job's environment (it comes with the provider's tensorflow extra)"
    )


def command(logdir: str, bind_host: str, python: str = sys.executable, port: int = 0) -> List[str]:
    return [
        python,
        "-m",
        "tensorboard.main",
        "--logdir",
        logdir,
        "--host",
        bind_host,
        "--port",
        str(port),
        "--path_prefix",
        PATH_PREFIX,
    ]


def serving_port(line: str) -> Optional[int]:
    """The port of TensorBoard's "TensorBoard 2.x at http://host:port/tensorboard/ ..." line, else None."""
    m = _SERVING.match(line.strip())
    return int(m.group("port")) if m else None


class TensorBoard:
    """One TensorBoard child process (in the executor's process group, so YARN's kill reaches it too)."""

    def __init__(
        self,
        logdir: str,
        *,
        host: str,
        bind_host: str,
        cwd: Optional[str],
        env: Mapping[str, str],
        log: Callable[[str], None],
        start_timeout_s: float = 180.0,
        port: int = 0,
    ):
        self.logdir = logdir
        #: where it listens: a port of MELON_PORT_RANGE (the AM proxies it, maybe from another node), 0: its choice
        self.listen_port = port
        self.host = host
        self.bind_host = bind_host
        self.cwd = cwd
        self.env = dict(env)
        self.log = log
        self.start_timeout_s = start_timeout_s
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self._port: Optional[int] = None
        self._port_seen = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def _read_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            sys.stderr.write(f"[tensorboard] {line}\n")
            sys.stderr.flush()
            port = serving_port(line)
            if port is not None and self._port is None:
                self._port = port
                self._port_seen.set()
        self._port_seen.set()  # TensorBoard exited: stop waiting

    def start(self) -> str:
        """Start TensorBoard and wait until its page answers; returns its origin ``http://<host>:<port>``."""
        if "://" not in self.logdir:
            os.makedirs(os.path.join(self.cwd or ".", self.logdir), exist_ok=True)
        env = dict(self.env, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
        argv = command(self.logdir, self.bind_host, port=self.listen_port)
        self.log(f"starting TensorBoard: {' '.join(argv[1:])}")
        with self._lock:  # stop() from another thread either prevents the start or sees the process
            if self._stopping.is_set():
                raise TensorBoardError("stopped while starting")
            try:
                self.proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=self.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            except (OSError, ValueError) as exc:
                raise TensorBoardError(f"cannot start TensorBoard: {exc}") from None
        threading.Thread(target=self._read_output, name="melon-tensorboard-log", daemon=True).start()
        deadline = time.monotonic() + self.start_timeout_s
        self._port_seen.wait(self.start_timeout_s)
        if self._port is None:
            stopped = self._stopping.is_set()
            try:  # its output has ended: it exits (or it is stuck, then stop() ends it)
                rc: Optional[int] = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                rc = None
            self.stop()
            if stopped:
                raise TensorBoardError("stopped while starting")
            raise TensorBoardError(
                f"TensorBoard exited {rc} before serving (its output is above)"
                if rc is not None
                else f"TensorBoard did not start serving within {self.start_timeout_s:g}s"
            )
        import urllib.error
        import urllib.request

        local = f"http://{self.bind_host if self.bind_host != '0.0.0.0' else '127.0.0.1'}:{self._port}"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            try:
                with opener.open(local + PATH_PREFIX + "/", timeout=10) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if self.proc.poll() is not None or time.monotonic() >= deadline or self._stopping.is_set():
                self.stop()
                raise TensorBoardError(f"TensorBoard on port {self._port} did not answer")
            time.sleep(0.5)
        return f"http://{self.host}:{self._port}"

    def stop(self, grace_s: float = 5.0) -> None:
        with self._lock:
            self._stopping.set()
            proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.log(f"TensorBoard stopped (exit {proc.returncode})")
