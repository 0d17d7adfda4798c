"""Which memory ran out when the user's process died, decided from the error that ended it. Stdlib only.

In shared GPU mode the user's process is capped at the task's expected GPU memory. When it dies, the executor asks
:func:`decide` whether it died of memory, and of which:

- :data:`CAP`: the framework's own allocator reached the cap (``torch.OutOfMemoryError``, TensorFlow's ``OOM when
  allocating tensor`` on a GPU, XLA's ``RESOURCE_EXHAUSTED: Out of memory``): the task needs more expected memory;
- :data:`OUTSIDE`: an allocation outside that allocator failed (the CUDA context, cuBLAS, cuDNN or NCCL buffers,
  ``CUDA error: out of memory``): the task needs a larger context reserve, not more expected memory;
- :data:`HOST`: the host's memory (``MemoryError``, TensorFlow's CPU allocator, a JVM's heap): no GPU setting helps.

Only the error that ended the process counts (:func:`fatal_error`): the exception the cap bootstrap recorded in the
process itself (``MELON_FATAL_FILE``, :func:`read_records`), else the last traceback's exception or the runtime's
last fatal line in the tail of its stderr. A warning, a retried allocation or an exception the user's code caught
earlier in the output is not the error that ended it. A fatal error that only says a library failed to start
(TensorFlow's ``without BLAS support``, ``cuDNN failed to initialize``, NCCL's ``unhandled cuda error``) takes its
cause from the runtime's error lines before it. :func:`at_cap` then weighs a :data:`CAP` claim against the
allocator's own figures: an allocator that never came near its cap did not run out at the cap.

``docs/internals.md`` ("Deciding which memory ran out") lists the rules; ``tests/oom_texts.py`` is the corpus of real
messages, each with its source and verdict.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

__all__ = [
    "EXIT_GPU_OOM",
    "CAP",
    "OUTSIDE",
    "HOST",
    "AT_CAP",
    "TAIL_BYTES",
    "SIGNATURE_CHARS",
    "FatalError",
    "Verdict",
    "fatal_error",
    "read_records",
    "from_records",
    "classify",
    "decide",
    "at_cap",
    "stderr_tail",
    "stderr_size",
]

EXIT_GPU_OOM = 76
#: the framework's allocator ran out at its cap: grow the expected memory
CAP = "cap"
#: an allocation outside the framework's allocator failed (context, cuBLAS, cuDNN, NCCL): grow the context reserve
OUTSIDE = "outside"
#: the host's memory ran out: the exit code is kept
HOST = "host"
#: an allocator that needed at least this share of its cap ran out at the cap; below it, something else ran out
AT_CAP = 0.9
TAIL_BYTES = 64 * 1024
SIGNATURE_CHARS = 200
EXECUTOR_PREFIX = "[melon-executor]"
#: how much of an exception's text is kept (a TensorFlow graph error runs to a few lines; the rest is noise)
FATAL_CHARS = 4000
#: a request no GPU could grant (1 PiB), when the error does not say the GPU's size: a corrupt size, not a shortage
NO_GPU_HAS_MB = float(1 << 30)
#: the exceptions that only wrap a child's failure (torchrun's agent): the child's own error is the fatal one
WRAPPERS = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError",)


@dataclass(frozen=True)
class FatalError:
    """The error that ended the process: its text (``Type: message``, possibly several lines), the exception's
    classes, most derived first, when the process recorded them itself, and where it begins in the stderr tail (-1:
    recorded in the process, not found in the tail)."""

    text: str
    types: tuple[str, ...] = ()
    at: int = -1


@dataclass(frozen=True)
class Verdict:
    """Which memory ran out: ``kind`` (:data:`CAP`, :data:`OUTSIDE`, :data:`HOST`), the error's line that says so
    (``signature``, at most :data:`SIGNATURE_CHARS`), the rule that decided (``why``), and what the error tells of
    the allocator, MiB: the allocation it failed (``request_mb``), what it held then (``held_mb``: PyTorch's
    message says it) and the GPU's whole memory (``total_mb``)."""

    kind: str
    signature: str
    why: str
    request_mb: Optional[float] = None
    held_mb: Optional[float] = None
    total_mb: Optional[float] = None


# ---- the fatal error -----------------------------------------------------------------------------------------------

_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):[ \t]*$", re.M)
#: per-rank prefixes torch's launchers put on a worker's lines ("[rank3]: ", "[default0]:")
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:[ ]?", re.M)
#: a line of some log, not of an exception's message: glog/absl, TensorFlow's older timestamped lines, Python logging,
#: PyTorch's c10 warnings, NCCL's WARN/INFO lines, our own
_LOG_LINE = re.compile(
    r"^(?:[IWEF]\d{4} \d\d:\d\d:\d\d"
    r"|[IWEF] [\w/.-]+:\d+\] "
    r"|\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d"
    r"|\[[IWEF]\d{4} "
    r"|\S+:\d+:\d+ \[\d+\] (?:\S+ )?NCCL (?:WARN|INFO)"
    r"|\[melon-"
    r"|Traceback \(most recent call last\):"
    r"|(?:During handling of the above exception|The above exception was the direct cause)"
    r")"
)
#: the runtime's own fatal line: glog/absl's FATAL (TensorFlow, XLA: it aborts the process; TensorFlow 1.x printed it
#: with a date, or before 1.3 without one), C++'s report of an exception nobody caught (its ``what()`` follows on the
#: next lines), or a JVM's report of the exception that ended a thread
_FATAL_LINE = re.compile(
    r"^(?:F\d{4} \d\d:\d\d:\d\d[.\d]*\s+\d+ \S+:\d+\] "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.\d]*: F \S+:\d+\] "
    r"|F [\w/.-]+:\d+\] "
    r"|terminate called after throwing an instance of "
    r"|Exception in thread \"[^\"]*\" [\w.$]+)",
    re.M,
)
#: where a C++ exception's ``what()`` stops being its message (PyTorch appends the C++ stack)
_WHAT_END = re.compile(r"^(?:Exception raised from |frame #\d+:|\*\*\* )")


def _clean(text: str) -> str:
    return _RANK_PREFIX.sub("", text.replace("\r\n", "\n"))


def _exception_after(text: str, header_end: int) -> Optional[tuple[str, int]]:
    """The exception of the traceback whose header ends at ``header_end``: its first line that is not a frame,
    and the lines after it up to the next log line (or blank line followed by one)."""
    lines = text[header_end:].split("\n")
    offset = header_end
    start = None
    for i, line in enumerate(lines):
        if start is None:
            if line and not line[0].isspace():
                start = i
                begin = offset
        elif _LOG_LINE.match(line):
            break
        offset += len(line) + 1
    else:
        i = len(lines)
    if start is None:
        return None
    body = "\n".join(lines[start:i]).strip()
    return (body[:FATAL_CHARS], begin) if body else None


def _runtime_fatal(text: str, match: "re.Match[str]") -> str:
    """The runtime's fatal line at ``match``, with a C++ exception's ``what()`` lines after it."""
    end = text.find("\n", match.start())
    line = text[match.start() : end if end >= 0 else len(text)]
    if not line.startswith("terminate called"):
        return line[:FATAL_CHARS]
    what = [line]
    for more in text[end + 1 :].split("\n") if end >= 0 else []:
        if _WHAT_END.match(more) or _LOG_LINE.match(more) or (not more.strip() and len(what) > 1):
            break
        what.append(more.strip())
    return "\n".join(w for w in what if w)[:FATAL_CHARS]


def _type_of(text: str) -> str:
    head = text.split("\n", 1)[0]
    name = head.split(":", 1)[0].strip() if ":" in head else head.strip()
    return name if re.fullmatch(r"[\w.]+", name) else ""


def fatal_error(text: Optional[str], signalled: bool = False) -> Optional[FatalError]:
    """The error that ended the process, from the tail of its stderr: the exception of the last Python traceback
    (skipping a wrapper of a child's failure, :data:`WRAPPERS`), or the runtime's last fatal line, whichever comes
    last; None when there is neither. ``signalled``: the process was ended by a signal (exit code 128 + n), which a
    Python exception never does, so only a runtime's fatal line (it aborts: SIGABRT) can have ended it."""
    if not text:
        return None
    text = _clean(text)
    found: list[FatalError] = []
    if not signalled:
        for header in reversed(list(_TRACEBACK.finditer(text))):
            exc = _exception_after(text, header.end())
            if exc is None:
                continue
            body, at = exc
            if _type_of(body) in WRAPPERS or _type_of(body).rsplit(".", 1)[-1] == "ChildFailedError":
                continue
            found.append(FatalError(body, (_type_of(body),) if _type_of(body) else (), at))
            break
    fatal_lines = list(_FATAL_LINE.finditer(text))
    if fatal_lines:
        last = fatal_lines[-1]
        found.append(FatalError(_runtime_fatal(text, last), (), last.start()))
    return max(found, key=lambda f: f.at) if found else None


def read_records(path: Optional[str]) -> list[dict[str, Any]]:
    """The exceptions that ended a process of the task, as the cap bootstrap recorded them (``MELON_FATAL_FILE``, one
    JSON object a line: ``type``, ``types`` (its classes, most derived first), ``message``, ``pid``), in the order
    they were written; unreadable lines are skipped, a missing file is none."""
    if not path:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("type"), str):
            out.append(record)
    return out


def from_records(records: Sequence[Mapping[str, Any]], main_pid: Optional[int] = None) -> Optional[FatalError]:
    """The fatal error of the user's process itself (``main_pid``, the executor's child) when it died of an
    exception; else of the first process of the task that did (the others usually followed it: a DDP peer, the
    process a shell wrapper started), skipping a wrapper of a child's failure (torchrun's agent); None when no
    record names one."""
    usable = [r for r in records if str(r.get("type") or "") and str(r.get("type")) not in WRAPPERS]
    own = [r for r in usable if main_pid is not None and r.get("pid") == main_pid]
    for record in own[:1] or usable[:1]:
        kind = str(record["type"])
        types = tuple(str(t) for t in record.get("types") or () if isinstance(t, str)) or (kind,)
        message = str(record.get("message") or "")
        short = kind.rsplit(".", 1)[-1] if kind.startswith("builtins.") else kind
        return FatalError((f"{short}: {message}" if message else short)[:FATAL_CHARS], types)
    return None


# ---- which memory --------------------------------------------------------------------------------------------------

_UNITS = {"b": 1, "bytes": 1, "kib": 1 << 10, "kb": 1 << 10, "mib": 1 << 20, "mb": 1 << 20, "m": 1 << 20}
_UNITS.update({"gib": 1 << 30, "gb": 1 << 30, "g": 1 << 30, "tib": 1 << 40, "tb": 1 << 40, "pib": 1 << 50})
_UNITS.update({"eib": 1 << 60, "eb": 1 << 60})
_SIZE = r"(\d+(?:\.\d+)?)\s*(bytes|[KMGTPE]?i?B|[MG])\b"


def _mib(number: str, unit: str) -> Optional[float]:
    factor = _UNITS.get(unit.lower())
    return None if factor is None else float(number) * factor / (1 << 20)


#: TensorFlow's element sizes, by the type name its OOM message prints
_TF_BYTES = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int32": 4, "int64": 8, "int8": 1, "uint8": 1,
             "int16": 2, "uint16": 2, "bool": 1, "complex64": 8, "complex128": 16, "uint32": 4, "uint64": 8}  # fmt: skip


@dataclass(frozen=True)
class _Rule:
    kind: Optional[str]  # None: not a memory failure at all
    why: str
    pattern: "re.Pattern[str]"


def _rule(kind: Optional[str], why: str, pattern: str) -> _Rule:
    return _Rule(kind, why, re.compile(pattern, re.IGNORECASE | re.MULTILINE))


#: in order: the first rule whose pattern the fatal error's text matches decides
_RULES = (
    _rule(HOST, "the host's memory (Python's MemoryError)", r"\A(?:[\w.]*\.)?_?\w*MemoryError\b(?![^\n]*\bCUDA\b)"),
    _rule(HOST, "the host's memory (TensorFlow's CPU device)", r"OOM when allocating.*(?:/device:CPU:\d|allocator (?:cpu|mklcpu))"),
    _rule(HOST, "the host's memory (PyTorch's CPU allocator)", r"DefaultCPUAllocator: (?:can't allocate|not enough) memory"),
    _rule(HOST, "the host's memory (a JVM's heap)", r"OutOfMemoryError: (?:Java heap space|GC overhead limit|Metaspace|"
          r"Direct buffer memory|unable to create (?:new )?native thread|Requested array size|Compressed class space)"),
    _rule(None, "a gRPC message over its size limit, not memory", r"(?:Received|Sent) message larger than max"),
    _rule(CAP, "PyTorch's caching allocator", r"(?:^|\b)(?:torch\.(?:cuda\.)?)?OutOfMemoryError: CUDA out of memory|"
          r"^RuntimeError: CUDA out of memory\."),
    _rule(CAP, "TensorFlow's GPU allocator", r"OOM when allocating tensor.*device:GPU:\d|OOM when allocating tensor"
          r".*allocator GPU_\d+_bfc|EigenAllocator for GPU ran out of memory"),
    _rule(CAP, "XLA's allocator (JAX)", r"RESOURCE_EXHAUSTED: (?:Out of memory (?:while trying to allocate|allocating) "
          r"\d+ bytes|Failed to allocate request for)"),
    _rule(OUTSIDE, "the CUDA context (TensorFlow)", r"CUDA runtime implicit initialization on GPU:\d+ failed\. Status: out of memory"),
    _rule(OUTSIDE, "cuBLAS's handle or workspace", r"CUBLAS_STATUS_ALLOC_FAILED|failed to create cublas handle: the resource allocation failed"),
    _rule(OUTSIDE, "cuDNN's handle or workspace", r"CUDNN_STATUS_ALLOC_FAILED|CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"),
    _rule(OUTSIDE, "another CUDA library's workspace", r"CU(?:SOLVER|SPARSE)_STATUS_ALLOC_FAILED|CUFFT_ALLOC_FAILED"),
    _rule(OUTSIDE, "NCCL's buffers", r"Cuda failure (?:2 )?'out of memory'|Failed to CUDA calloc"),
    _rule(OUTSIDE, "a CUDA allocation outside the framework's allocator", r"CUDA error: out of memory|"
          r"cuda runtime error \(2\) : out of memory|CUDA driver error: out of memory|CUDA_ERROR_OUT_OF_MEMORY"),
)  # fmt: skip

#: a fatal error that only says a library failed to start: its cause is in the runtime's error lines before it
_CONSEQUENCE = re.compile(
    r"without BLAS support|Blas (?:x?GEMM|SGEMM) launch failed|Failed to initialize BLAS support"
    r"|cuDNN failed to initialize|DNN library (?:is not found|initialization failed)"
    r"|NCCL error.*(?:unhandled cuda error|internal error|remote process exited)|NCCL Error \d+: unhandled cuda error",
    re.IGNORECASE,
)
#: the causes such a consequence may have, in the lines before it: a library's handle or buffers that could not be
#: allocated (not the allocator's own "failed to allocate ... CUDA_ERROR_OUT_OF_MEMORY" lines, which it retries)
_CAUSES = tuple(r for r in _RULES if r.kind == OUTSIDE and r.why.startswith(("cuBLAS", "cuDNN", "another", "NCCL")))


def _shorten(line: str, start: int = 0) -> str:
    """``line`` in at most :data:`SIGNATURE_CHARS` characters, keeping the match (which begins at ``start``)."""
    line = re.sub(r"\{\{[^{}]*\}\}\s*", "", line).strip()  # TensorFlow's {{function_node ...}} annotation
    if len(line) <= SIGNATURE_CHARS:
        return line
    if start + 40 > SIGNATURE_CHARS - 1:  # the match would be cut: begin at it
        line = "…" + line[start:]
        if len(line) <= SIGNATURE_CHARS:
            return line
    return line[: SIGNATURE_CHARS - 1] + "…"


def _signature(text: str, match: "re.Match[str]") -> str:
    """The line of ``text`` that holds ``match``, prefixed by the exception's type when it is a later line."""
    begin = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.start())
    line = text[begin : end if end >= 0 else len(text)]
    if begin > 0:
        head = text.split("\n", 1)[0]
        name = _type_of(head)
        if name and not line.startswith(name):
            line = f"{name}: {line.strip()}"
            return _shorten(line, len(name) + 2 + match.start() - begin)
    return _shorten(line, match.start() - begin)


def _figures(text: str) -> dict[str, Optional[float]]:
    """What an allocator's message says, MiB: the request it failed, what it held, the GPU's total."""
    out: dict[str, Optional[float]] = {"request_mb": None, "held_mb": None, "total_mb": None}
    m = re.search(r"Tried to allocate (?:more than )?" + _SIZE, text)
    if m:
        out["request_mb"] = _mib(m.group(1), m.group(2))
    m = re.search(r"total capacity of " + _SIZE, text) or re.search(_SIZE + r" total capacity", text)
    if m:
        out["total_mb"] = _mib(m.group(1), m.group(2))
    m = re.search(
        r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch,.*?and " + _SIZE + r" is reserved", text
    )
    if m:  # PyTorch >= 2.1: what its allocator held when it failed (allocated + reserved but unallocated)
        a, b = _mib(m.group(1), m.group(2)), _mib(m.group(3), m.group(4))
        out["held_mb"] = None if a is None or b is None else a + b
    else:  # PyTorch 1.x: "... reserved in total by PyTorch)", or earlier "X already allocated; ...; Y cached)"
        m = re.search(_SIZE + r" reserved in total by PyTorch", text)
        c = re.search(_SIZE + r" already allocated;.*?" + _SIZE + r" cached\)", text)
        if m:
            out["held_mb"] = _mib(m.group(1), m.group(2))
        elif c:
            a, b = _mib(c.group(1), c.group(2)), _mib(c.group(3), c.group(4))
            out["held_mb"] = None if a is None or b is None else a + b
    m = re.search(r"OOM when allocating tensor (?:with|of) shape ?\[([\d,\s]*)\] and type (\w+)", text)
    if m and m.group(2) in _TF_BYTES:
        count = 1
        for dim in filter(None, (d.strip() for d in m.group(1).split(","))):
            count *= int(dim)
        out["request_mb"] = count * _TF_BYTES[m.group(2)] / (1 << 20)
    m = re.search(r"(?:trying to allocate|allocating) (\d+) bytes|\((\d+)B\) on device", text)
    if m and out["request_mb"] is None:
        out["request_mb"] = int(m.group(1) or m.group(2)) / (1 << 20)
    return out


def _cause(tail: str, before: int) -> Optional[Verdict]:
    """The last runtime error line before offset ``before`` of ``tail`` (-1: anywhere) naming a failed allocation
    outside the framework's allocator."""
    region = tail if before < 0 else tail[:before]
    best: Optional[tuple[int, _Rule, str]] = None
    for line_match in re.finditer(r"^.*$", region, re.M):
        line = line_match.group(0)
        if line.startswith(EXECUTOR_PREFIX):
            continue
        for rule in _CAUSES:
            m = rule.pattern.search(line)
            if m:
                best = (line_match.start(), rule, _shorten(line, m.start()))
                break
    if best is None:
        return None
    return Verdict(OUTSIDE, best[2], f"{best[1].why}, the cause the fatal error points to")


def classify(fatal: FatalError, tail: str = "") -> Optional[Verdict]:
    """Which memory the fatal error says ran out, None when it is no memory failure (or one MeLoN cannot fix: a
    request larger than the whole GPU). ``tail``: the stderr tail it came from, where a fatal error that only says a
    library failed to start (:data:`_CONSEQUENCE`) finds its cause."""
    text = fatal.text
    if any(t.rsplit(".", 1)[-1] in ("MemoryError", "_ArrayMemoryError") for t in fatal.types) or any(
        t == "builtins.MemoryError" for t in fatal.types
    ):
        return Verdict(HOST, _shorten(text.split("\n", 1)[0]), "the host's memory (a MemoryError)")
    for rule in _RULES:
        m = rule.pattern.search(text)
        if not m:
            continue
        if rule.kind is None:
            return None
        verdict = Verdict(rule.kind, _signature(text, m), rule.why, **_figures(text))
        if verdict.kind == CAP and verdict.request_mb and verdict.request_mb > (verdict.total_mb or NO_GPU_HAS_MB):
            return None  # more than the whole GPU: a corrupt size (after an NCCL timeout, say), not a shortage
        return verdict
    if _CONSEQUENCE.search(text):
        return _cause(_clean(tail), fatal.at)
    return None


def decide(
    exit_code: Optional[int],
    tail: Optional[str],
    records: Sequence[Mapping[str, Any]] = (),
    main_pid: Optional[int] = None,
) -> Optional[Verdict]:
    """Whether a process that exited ``exit_code`` died of memory, and of which (:func:`classify`), from the fatal
    error: the exception the process recorded (``records``, :func:`read_records`; its own, ``main_pid``, first),
    else the one its stderr's ``tail`` ends with (:func:`fatal_error`). None for exit 0 (or None), or when no fatal
    error is found."""
    if not exit_code:
        return None
    fatal = from_records(records, main_pid)
    text = tail or ""
    if fatal is None:
        fatal = fatal_error(text, signalled=exit_code > 128)
    return None if fatal is None else classify(fatal, text)


def at_cap(verdict: Verdict, cap_mb: Optional[float], counter_mb: Optional[float]) -> tuple[bool, Optional[int]]:
    """Whether a :data:`CAP` verdict ran out at the cap ``cap_mb``, and the memory the allocator needed (MiB, None
    when unknown): what it held when it failed plus the request it failed (PyTorch's message says both), else its
    own peak counter ``counter_mb`` plus that request. A need below :data:`AT_CAP` of the cap did not run out at the
    cap: the GPU itself was full, taken by memory outside the allocator. Without a cap or a need the verdict
    stands."""
    held = verdict.held_mb if verdict.held_mb is not None else counter_mb
    need = None if held is None else int(round(held + (verdict.request_mb or 0)))
    if verdict.kind != CAP or not cap_mb or need is None:
        return verdict.kind == CAP, need
    return need >= AT_CAP * cap_mb, need


# ---- the stderr tail -----------------------------------------------------------------------------------------------


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
