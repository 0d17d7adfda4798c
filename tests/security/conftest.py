"""The hostile-tenant suite: bob (another tenant), a user with no rights and a hostile app planted on the cluster try
what a curious or hostile tenant would, against the real clusters and a real Airflow; each try must be refused
while alice's work goes on.

Every attack is one row of the hostile-tenant table printed at the end of the run (attack, expected, got, refused;
:mod:`tests.evidence`), like the fault table.
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
from typing import Iterator, Optional

import pytest

from tests.evidence import record


@dataclass
class AttackRow:
    attack: str
    expected: str
    got: Optional[str] = None
    test: str = ""

    @property
    def refused(self) -> bool:
        return self.got == self.expected


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
            record(
                "hostile-tenant table",
                {
                    "attack": row.attack,
                    "expected": row.expected,
                    "got": row.got,
                    "refused": "yes" if row.refused else "NO",
                },
            )
        assert row.refused, f"attack {name!r}: expected {expected!r}, got {row.got!r}"

    return _attack
