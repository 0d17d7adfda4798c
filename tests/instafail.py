"""``pytest -p tests.instafail``: each failure's report appended, as it happens, to ``$MELON_INSTAFAIL_FILE``.

pytest prints failures and writes its JUnit XML only when the session ends, so a round of ``make test-repeat``
that is stopped (or hangs past its timeout) would leave no trace of a failure it had already seen."""

from __future__ import annotations

import os

_ON_WORKER = False


def pytest_configure(config) -> None:
    global _ON_WORKER
    _ON_WORKER = hasattr(config, "workerinput")  # a pytest-xdist worker: its reports reach the controller


def pytest_runtest_logreport(report) -> None:
    path = os.environ.get("MELON_INSTAFAIL_FILE")
    if path and report.failed and not _ON_WORKER:  # written once, by the controller (or a lone pytest)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"=== {report.nodeid} ({report.when}, {report.duration:.1f}s)\n{report.longreprtext}\n\n")
