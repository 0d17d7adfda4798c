"""A torchrun worker that dies with its agent: ``python worker.py <program> [args...]`` execs the program bound to
its parent.

torchrun starts each worker in a session of its own, outside the process group YARN kills when it stops or loses a
container; without this, the worker of a killed container would live on outside YARN's accounting, still a member of
its training group. Run by path (stdlib only: the container's runtime may not be importable from the job's folder).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: prctl(2)'s PR_SET_PDEATHSIG (linux/prctl.h): the signal the process gets when its parent dies; kept across execve
PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent exits; False where prctl is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc: int = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)  # ctypes: a C int
        return rc == 0
    except (OSError, AttributeError):
        return False


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: worker.py <program> [args...]\n")
        return 2
    parent = os.getppid()
    bound = die_with_parent()
    if bound and os.getppid() != parent:  # the agent died before the binding: nobody waits for this worker
        return 128 + signal.SIGKILL
    os.execvp(argv[0], argv)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
