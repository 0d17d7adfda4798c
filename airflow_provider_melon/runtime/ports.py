"""The port a task's framework listens on (TensorFlow's gRPC server, torch's TCPStore): chosen so nothing else on
the node takes it between the executor's reservation and the framework's own bind. ``MELON_PORT_RANGE``'s rule
(:func:`parse_range`) is the AM's too, for its HTTP port (``appmaster/am/.../PortRange.java``).

:func:`listen_range` picks the ports to use (``MELON_PORT_RANGE``, else ports outside the kernel's ephemeral
range, else the kernel's choice) and :func:`reserve` binds a free one at random. ``docs/internals.md``, "The task
executor" → "The framework's port", says why the ephemeral range is avoided.
"""

from __future__ import annotations

import errno
import os
import random
import re
import socket
from typing import Callable, Iterable, Optional, Tuple

#: the variable that names the range, for the executors' ports and the AM's HTTP port (appmaster's PortRange.java)
VAR = "MELON_PORT_RANGE"
PROC_NET = "/proc/sys/net/ipv4"
MIN_ROOM = 1000  # fewer free ports than this above the ephemeral range: use the ports below it instead
BELOW = 10000
TRIES = 64

PortRange = Tuple[int, int]


#: ``low-high``: ASCII digits, at most five each (``PortRange.java`` holds the same pattern;
#: ``tests/data/port_range_cases.json`` is both sides' test)
RANGE = re.compile(r"\s*([0-9]{1,5})\s*-\s*([0-9]{1,5})\s*", re.ASCII)


def parse_range(text: str, name: str = VAR) -> PortRange:
    """``"lo-hi"`` → ``(lo, hi)``, 1024 <= lo <= hi <= 65535; a clear error naming ``name`` otherwise."""
    found = RANGE.fullmatch(text)
    if not found:
        raise ValueError(f"{name}={text!r}: expected 'low-high', e.g. '50100-50200'")
    lo, hi = int(found.group(1)), int(found.group(2))
    if not 1024 <= lo <= hi <= 65535:
        raise ValueError(f"{name}={text!r}: needs 1024 <= low <= high <= 65535")
    return lo, hi


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _reserved(text: Optional[str]) -> frozenset[int]:
    """``ip_local_reserved_ports``: ``"8080,9000-9010"`` → the set of ports."""
    out: set[int] = set()
    for part in (text or "").replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def listen_range(chosen: Optional[PortRange], proc: str = PROC_NET) -> Tuple[Optional[PortRange], frozenset[int], str]:
    """``(range or None, ports to skip, why)``: where the executor picks its port (see the module docstring);
    ``chosen``: ``MELON_PORT_RANGE`` as :func:`parse_range` read it (None: not set)."""
    if chosen:
        return chosen, frozenset(), "MELON_PORT_RANGE"
    text = _read(os.path.join(proc, "ip_local_port_range"))
    if not text:
        return None, frozenset(), "no ip_local_port_range: the kernel's choice"
    lo, hi = (int(x) for x in text.split())
    skip = _reserved(_read(os.path.join(proc, "ip_local_reserved_ports")))
    if 65535 - hi >= MIN_ROOM:
        return (hi + 1, 65535), skip, f"above the ephemeral range {lo}-{hi}"
    if lo - 1024 >= MIN_ROOM:
        return (max(1024, lo - BELOW), lo - 1), skip, f"below the ephemeral range {lo}-{hi}"
    return None, frozenset(), f"the ephemeral range {lo}-{hi} leaves no room: the kernel's choice"


def reserve(
    bind_host: str,
    port_range: Optional[PortRange],
    skip: Iterable[int] = (),
    choose: Callable[[int, int], int] = random.randint,
) -> socket.socket:
    """A socket bound (not listening) to a free port of ``port_range`` on ``bind_host`` (port 0 without a range).
    ``OSError`` when :data:`TRIES` ports of the range were all taken."""
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    if port_range is None:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.bind((bind_host, 0))
        return sock
    skip = frozenset(skip)
    lo, hi = port_range
    last: Optional[OSError] = None
    for _ in range(TRIES):
        port = choose(lo, hi)
        if port in skip:
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((bind_host, port))
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
            last = exc
    raise OSError(errno.EADDRINUSE, f"no free port in {lo}-{hi} on {bind_host} after {TRIES} tries ({last})")
