"""The hostile-tenant suite: bob (another tenant), a user with no rights and a hostile app planted on the cluster try
what a curious or hostile tenant would, against the real clusters and a real Airflow; each try must be refused
while alice's work goes on.

Every attack is one row of the table printed at the end of the run (attack, expected, got), like the fault table.
A row is built from what the test *observed* — the status code, what the page rendered, what the cluster holds —
in a ``finally``, so an attack that was not refused (or a test that broke before it could tell) shows as a row
whose ``got`` differs from ``expected``, never as a missing row::

    def test_bob_reads_alice_am(attack):
        with attack("bob reads alice's AM directly", expected="403") as row:
            row.got = str(requests.get(url).status_code)
        # the context manager asserts row.got == row.expected on the way out
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "results"


@dataclass
class AttackRow:
    attack: str
    expected: str
    got: Optional[str] = None
    test: str = ""

    @property
    def refused(self) -> bool:
        return self.got == self.expected


ROWS: list[AttackRow] = []


@pytest.fixture
def attack(request):
    """``with attack(name, expected=...) as row: ... row.got = <what was observed>``: records the row (always) and
    fails the test unless ``row.got == row.expected``."""

    @contextlib.contextmanager
    def _attack(name: str, *, expected: str) -> Iterator[AttackRow]:
        row = AttackRow(name, expected, test=request.node.nodeid)
        try:
            yield row
        except BaseException as exc:
            if row.got is None:
                row.got = f"not observed: {type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
            raise
        finally:
            if row.got is None:
                row.got = "not observed"
            ROWS.append(row)
        assert row.refused, f"attack {name!r}: expected {expected!r}, got {row.got!r}"

    return _attack


def table(rows: list[AttackRow]) -> str:
    heads = ("attack", "expected", "got", "refused")
    cells = [(r.attack, r.expected, r.got or "", "yes" if r.refused else "NO") for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]
    line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"  # noqa: E731
    return "\n".join([line(heads), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells)])


def pytest_terminal_summary(terminalreporter):
    if not ROWS:
        return
    text = table(ROWS)
    terminalreporter.write_sep("=", f"hostile-tenant table: {sum(r.refused for r in ROWS)} of {len(ROWS)} refused")
    terminalreporter.write_line(text)
