"""Flake measurement: run test suites N times in one go and print a table of test -> passes/fails.

    make test-repeat N=3                                   # integration, e2e and fault suites, 3 times
    make test-repeat N=10 SUITES="tests/faults tests/e2e"  # only those, 10 times
    make test-repeat N=2 LOAD=1                            # with a process eating one core beside each run

Each round is one pytest process over all the suites (the order CI runs them in), with its JUnit XML kept under
``tests/results/repeat-<stamp>/round-<k>.xml``. The table (also written to ``tests/results/repeat-<stamp>.txt``, a
run's artifact, ignored by git) lists every test that ran, how many rounds it passed, failed or was skipped, its
slowest duration and, for a failure, the first line of its message. Last it prints the run's row for the table in
``benchmarks/results/test-rounds.md``, the one record that is committed. The script exits 1 if any round failed a
test, 0 otherwise; a round that collected nothing (pytest's exit code 5) counts as a failure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SUITES = ("tests/faults", "tests/e2e", "tests/integration")


def _burn() -> None:  # pragma: no cover - a load generator
    while True:
        pass


def parse_junit(path: Path) -> dict[str, tuple[str, float, str]]:
    """``{nodeid: (outcome, seconds, message)}`` of one JUnit XML file; outcome is passed/failed/skipped."""
    out: dict[str, tuple[str, float, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        seconds = float(case.get("time") or 0.0)
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message = (child.get("message") or child.text or "").strip().splitlines()[:1]
                message = message[0][:120] if message else child.tag
                break
            if child.tag == "skipped":
                outcome, message = "skipped", (child.get("message") or "")[:120]
        out[name] = (outcome, seconds, message)
    return out


def table(rounds: list[dict[str, tuple[str, float, str]]]) -> tuple[str, int]:
    """The text table over ``rounds`` and the number of failed (test, round) pairs."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    slowest: dict[str, float] = defaultdict(float)
    first_failure: dict[str, str] = {}
    for results in rounds:
        for name, (outcome, seconds, message) in results.items():
            counts[name][outcome] += 1
            slowest[name] = max(slowest[name], seconds)
            if outcome == "failed":
                first_failure.setdefault(name, message)
    width = max((len(n) for n in counts), default=10)
    lines = [f"{'test':<{width}}  pass  fail  skip  missing  slowest_s  first failure", "-" * (width + 60)]
    failed = 0
    for name in sorted(counts):
        c = counts[name]
        missing = len(rounds) - sum(c.values())
        failed += c["failed"] + missing
        lines.append(
            f"{name:<{width}}  {c['passed']:4d}  {c['failed']:4d}  {c['skipped']:4d}  {missing:7d}  "
            f"{slowest[name]:9.1f}  {first_failure.get(name, '')}"
        )
    return "\n".join(lines), failed


def summary_row(
    stamp: str,
    commit: str,
    suites: list[str],
    workers: int,
    load: bool,
    rounds: list[dict[str, tuple[str, float, str]]],
    durations_s: list[float],
) -> str:
    """The run's row of the table in ``benchmarks/results/test-rounds.md``: when, at which commit, which suites,
    how, the failed (test, round) pairs with the tests' names, and each round's minutes."""
    failures: dict[str, int] = defaultdict(int)
    for results in rounds:
        for name, (outcome, _, _) in results.items():
            if outcome == "failed":
                failures[name.split("::")[-1]] += 1
    failed = sum(failures.values())
    named = ", ".join(f"`{name}`" + (f" ×{n}" if n > 1 else "") for name, n in sorted(failures.items()))
    when = f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}"
    minutes = ", ".join(f"{d / 60:.1f}" for d in durations_s)
    return (
        f"| {when} | `{commit}` | {' '.join(s.removeprefix('tests/') for s in suites)} | {workers} | "
        f"{'one core busy' if load else 'none'} | {failed}{': ' + named if failed else ''} | {minutes} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--rounds", type=int, default=3, help="how many times to run the suites (default 3)")
    parser.add_argument(
        "--suites", default=" ".join(DEFAULT_SUITES), help="space-separated test paths, run in this order each round"
    )
    parser.add_argument("--load", action="store_true", help="keep one core busy with a spinning process")
    parser.add_argument("--timeout", type=int, default=900, help="pytest-timeout per test, seconds")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="pytest-xdist workers, as `make test` runs them (default 2; 0: one process)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.workers < 0:
        parser.error("--workers must be 0 or more")
    suites = args.suites.split()
    for suite in suites:
        if not (REPO / suite).exists():
            parser.error(f"--suites: {suite} does not exist under {REPO}")

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%MZ")
    out_dir = REPO / "tests" / "results" / f"repeat-{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    commit = (
        subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    burner = multiprocessing.Process(target=_burn, daemon=True) if args.load else None
    if burner:
        burner.start()
    rounds, codes, durations = [], [], []
    try:
        for k in range(1, args.rounds + 1):
            xml = out_dir / f"round-{k}.xml"
            cmd = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-rs",
                "-p",
                "no:cacheprovider",
                "-p",
                "tests.instafail",
                f"--timeout={args.timeout}",
                f"--junitxml={xml}",
                "-n",
                str(args.workers),
                "--dist",
                "loadgroup",
                *suites,
            ]
            failures = out_dir / f"round-{k}.failures.txt"  # written as they happen (tests/instafail.py)
            print(
                f"[repeat] round {k}/{args.rounds}: {' '.join(cmd[1:])} (failures as they happen: {failures})",
                flush=True,
            )
            t0 = time.monotonic()
            code = subprocess.call(cmd, cwd=REPO, env={**os.environ, "MELON_INSTAFAIL_FILE": str(failures)})
            durations.append(time.monotonic() - t0)
            codes.append(code)
            rounds.append(parse_junit(xml) if xml.exists() else {})
            print(f"[repeat] round {k}: pytest exit {code} in {durations[-1] / 60:.1f} min", flush=True)
    finally:
        if burner:
            burner.terminate()
    text, failed = table(rounds)
    bad_rounds = [k for k, c in enumerate(codes, 1) if c != 0]
    header = (
        f"# make test-repeat: {args.rounds} rounds of {' '.join(suites)} at {commit}, {stamp}\n"
        f"# host: {platform.node()} {os.cpu_count()} cores, pytest-xdist workers: {args.workers}, "
        f"load generator: {'one core' if args.load else 'none'}"
        f", load average at end {os.getloadavg()[0]:.1f}\n"
        f"# rounds' pytest exit codes: {codes}; durations (min): {[round(d / 60, 1) for d in durations]}\n"
        f"# result: {failed} failed (test, round) pairs; rounds not green: {bad_rounds or 'none'}\n"
    )
    (REPO / "tests" / "results" / f"repeat-{stamp}.txt").write_text(header + text + "\n")
    print(header + text)
    print(
        "\n[repeat] the run's row for benchmarks/results/test-rounds.md:\n"
        + summary_row(stamp, commit, suites, args.workers, args.load, rounds, durations)
    )
    return 1 if failed or bad_rounds else 0


if __name__ == "__main__":
    sys.exit(main())
