"""The run's evidence tables (the fault table, the hostile-tenant table), printed at the end of every run.

Tests record rows wherever they run; on pytest-xdist workers the rows travel to the controller with the worker's
output, and the process that reports prints each table once and writes it to ``tests/results/<table>.md`` under the
run's root directory (a run's artifact, not committed). Loaded by ``tests/conftest.py``."""

from __future__ import annotations

import json

import pytest

WORKER_OUTPUT_KEY = "melon_evidence"

#: table name → its rows, each a dict of column → cell, in the order they were recorded
TABLES: dict[str, list[dict]] = {}


def record(table: str, row: dict) -> None:
    """Add ``row`` to ``table`` (its keys are the columns, in their order; values are printed with ``str``)."""
    TABLES.setdefault(table, []).append({k: str(v) for k, v in row.items()})


def render(rows: list[dict]) -> str:
    """A Markdown table of ``rows``, the columns in the order they first appear."""
    heads = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[r.get(h, "") for h in heads] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]

    def line(values):
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"

    return "\n".join([line(heads), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells)])


def pytest_sessionfinish(session) -> None:
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: hand the rows to the controller
        session.config.workeroutput[WORKER_OUTPUT_KEY] = json.dumps(TABLES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist, on the controller: a worker ended; take its rows."""
    for table, rows in json.loads(getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY, "{}")).items():
        TABLES.setdefault(table, []).extend(rows)


def pytest_terminal_summary(terminalreporter, config) -> None:
    if hasattr(config, "workeroutput"):
        return
    for table, rows in sorted(TABLES.items()):
        text = render(rows)
        terminalreporter.write_sep("=", f"{table}: {len(rows)} rows")
        terminalreporter.write_line(text)
        results = config.rootpath / "tests" / "results"
        results.mkdir(parents=True, exist_ok=True)
        (results / f"{table}.md").write_text(text + "\n", encoding="utf-8")
