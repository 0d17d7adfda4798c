"""Naming a GPU out-of-memory failure of the user's process. Stdlib only.

In shared GPU mode the user's process is capped at the task's expected GPU memory. A task that needs more crashes
with the framework's out-of-memory error. :func:`recognise` finds that error in the exit code and the tail of the
process's stderr (:func:`stderr_tail`), so the executor can exit :data:`EXIT_GPU_OOM` (76) and the
ApplicationMaster can tell "needs more GPU memory" from any other crash. :func:`host_memory` tells a failure of
the host's memory apart. ``docs/internals.md``, "Recognising a GPU out-of-memory failure", lists the signatures.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Optional

__all__ = ["EXIT_GPU_OOM", "TAIL_BYTES", "SIGNATURE_CHARS", "recognise", "host_memory", "stderr_tail", "stderr_size"]

EXIT_GPU_OOM = 76
TAIL_BYTES = 64 * 1024
SIGNATURE_CHARS = 200
EXECUTOR_PREFIX = "[melon-executor]"

#: the frameworks' out-of-memory texts (one line each)
_OOM = re.compile(
    r"\bOOM when allocating tensor"  # TensorFlow (the op's error)
    r"|\bResourceExhaustedError\b"  # TensorFlow's exception class
    r"|\bran out of memory trying to allocate\b"  # TensorFlow's BFC allocator
    r"|(?<![\w.])(?:torch\.(?:cuda\.)?)?OutOfMemoryError\b"  # PyTorch's exception class (not java.lang.'s)
    r"|\bCUDA out of memory\b"  # PyTorch's caching allocator
    r"|\bCUDA error: out of memory\b"  # CUDA itself (e.g. creating the context)
    r"|\bRESOURCE_EXHAUSTED: Out of memory\b"  # XLA (JAX)
    r"|\bCUDA_ERROR_OUT_OF_MEMORY\b"  # the driver's name, via XLA/TF's stream executor
    r"|\bCU(?:BLAS|DNN|SPARSE|SOLVER)_STATUS_ALLOC_FAILED\b"  # cuBLAS/cuDNN/... handles and workspaces
    r"|\bCuda failure 'out of memory'"  # NCCL's CUDACHECK (cudaGetErrorString)
    r"|\[melon-cap\] this task ran out of GPU memory",  # the cap bootstrap's hint (framework.SITECUSTOMIZE)
    re.IGNORECASE,
)
#: an allocation on the host (TensorFlow's CPU device or allocator), not on a GPU
_HOST = re.compile(r"/device:CPU:\d+|\bby allocator cpu\b", re.IGNORECASE)
#: TensorFlow's ``{{function_node __wrapped__Fill_device_/job:...}}`` annotation: noise in a signature
_TF_ANNOTATION = re.compile(r"\{\{[^{}]*\}\}\s*")


def _last_match(exit_code: Optional[int], text: Optional[str]) -> Optional[tuple[str, int]]:
    if not exit_code or not text:
        return None
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not line or line.startswith(EXECUTOR_PREFIX):
            continue
        line = _TF_ANNOTATION.sub("", line).strip()
        match = _OOM.search(line)
        if match:
            return line, match.start()
    return None


def recognise(exit_code: Optional[int], text: Optional[str]) -> Optional[str]:
    """The line of ``text`` (the tail of the process's stderr) that names an out-of-memory failure — the last
    such line, without TensorFlow's ``{{function_node ...}}`` annotations, in at most :data:`SIGNATURE_CHARS`
    characters — or None: always None for exit code 0 (or None), for no text, or when no line matches. The
    executor's own ``[melon-executor]`` lines are skipped."""
    found = _last_match(exit_code, text)
    return None if found is None else _shorten(*found)


def host_memory(exit_code: Optional[int], text: Optional[str]) -> bool:
    """Whether the out-of-memory failure :func:`recognise` names was of the host's memory, not a GPU's: TensorFlow
    names the device and allocator (``on /job:.../device:CPU:0 by allocator cpu``; on a GPU ``device:GPU:0 by
    allocator GPU_0_bfc``). Such a task needs no more GPU memory, and the executor keeps its exit code."""
    found = _last_match(exit_code, text)
    return found is not None and _HOST.search(found[0]) is not None


def _shorten(line: str, start: int) -> str:
    """``line`` in at most :data:`SIGNATURE_CHARS` characters, keeping the match (which begins at ``start``)."""
    if len(line) <= SIGNATURE_CHARS:
        return line
    if start + 40 > SIGNATURE_CHARS - 1:  # the match would be cut: begin at it
        line = "…" + line[start:]
        if len(line) <= SIGNATURE_CHARS:
            return line
    return line[: SIGNATURE_CHARS - 1] + "…"


def _regular(fd: int) -> Optional[os.stat_result]:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def stderr_size(fd: int = 2) -> Optional[int]:
    """The size of the file fd ``fd`` writes to, None when it is not a regular file (mark it before the user's
    process starts, and :func:`stderr_tail` reads only what came after)."""
    st = _regular(fd)
    return None if st is None else st.st_size


def stderr_tail(fd: int = 2, since: Optional[int] = None, limit: int = TAIL_BYTES) -> Optional[str]:
    """The last ``limit`` bytes (64 KiB) of the regular file that fd ``fd`` (the executor's stderr, which the
    user's process inherits) writes to, from offset ``since`` on at the earliest; decoded as UTF-8 (bad bytes
    replaced). None when fd ``fd`` is not a regular file (a pipe, a terminal): then there is no tail."""
    st = _regular(fd)
    if st is None:
        return None
    end = st.st_size
    begin = max(0, end - limit, since or 0)
    if end <= begin:
        return ""
    try:
        data = os.pread(fd, end - begin, begin)
    except OSError:  # EBADF: opened for writing only (a shell's 2>file); read the same file anew
        reopened = _pread_reopened(fd, st, end - begin, begin)
        if reopened is None:
            return None
        data = reopened
    return data.decode("utf-8", errors="replace")


def _pread_reopened(fd: int, st: os.stat_result, size: int, offset: int) -> Optional[bytes]:
    try:
        rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    except OSError:
        return None
    try:
        again = os.fstat(rfd)
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
            return None
        return os.pread(rfd, size, offset)
    except OSError:
        return None
    finally:
        os.close(rfd)
