"""What ``melon doctor`` finds: one :class:`Finding` per check (ok, warn or fail, with the fix), as text or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


def one_line(exc: BaseException, width: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    for key, short in (
        ("Connection refused", "connection refused"),
        ("timed out", "timed out"),
        ("Name or service not known", "unknown host"),
    ):
        if key in text:
            return f"{type(exc).__name__}: {short}"
    return text[:width]


@dataclass
class Finding:
    check: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def ok(check: str, detail: str) -> Finding:
    return Finding(check, "ok", detail)


def warn(check: str, detail: str, fix: str) -> Finding:
    return Finding(check, "warn", detail, fix)


def fail(check: str, detail: str, fix: str) -> Finding:
    return Finding(check, "fail", detail, fix)


def render(findings: list[Finding]) -> str:
    width = max(len(f.check) for f in findings)
    lines = []
    for f in findings:
        lines.append(f"{f.status.upper():<4}  {f.check:<{width}}  {f.detail}")
        if f.fix:
            lines.append(f"{'':<4}  {'':<{width}}  fix: {f.fix}")
    failed = sum(f.status == "fail" for f in findings)
    warned = sum(f.status == "warn" for f in findings)
    lines.append(f"{len(findings)} checks: {len(findings) - failed - warned} ok, {warned} warning(s), {failed} failed")
    return "\n".join(lines)


def as_json(findings: list[Finding]) -> str:
    return json.dumps([asdict(f) for f in findings], indent=1)


__all__ = ["Finding", "as_json", "render"]
