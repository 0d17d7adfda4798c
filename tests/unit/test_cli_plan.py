"""`melon plan`: the CLI sub-command hands everything after `plan` to planner.plan_main (JSON on stdout)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "airflow_provider_melon.cli"]


def run(*args):
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_melon_plan_prints_the_planners_json():
    r = run(
        "plan",
        "--params",
        "25e6",
        "--per-sample-ms",
        "2",
        "--workers",
        "4",
        "--bandwidth-gbps",
        "10",
        "--gpu-memory",
        "16GiB",
        "--optimizer",
        "momentum",
        "--activation-mb",
        "50",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # the hand-worked case of test_planner: batch 304 within 16 GiB, 2 PS keep transfer below compute
    assert (out["batch_size"], out["ps"], out["workers"]) == (304, 2, 4)
    assert out["step_compute_s"] == 0.608 and out["communication_bound"] is False


def test_melon_plan_passes_bad_arguments_and_help_through():
    bad = run(
        "plan",
        "--params",
        "1e6",
        "--per-sample-ms",
        "1",
        "--workers",
        "1",
        "--bandwidth-gbps",
        "1",
        "--gpu-memory",
        "lots",
    )
    assert (
        bad.returncode == 2
        and "melon plan:" in bad.stderr
        and "gpu_memory (--gpu-memory): unparsable size 'lots'" in bad.stderr
    )
    helped = run("plan", "--help")
    assert (
        helped.returncode == 0 and helped.stdout.startswith("usage: melon plan") and "--per-sample-ms" in helped.stdout
    )
    missing = run("plan", "--workers", "2")
    assert missing.returncode == 2 and "--params" in missing.stderr


def test_other_subcommands_still_reject_unknown_arguments():
    r = run("pack-env", "/tmp/x.tar.gz", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr
    assert "plan" in run("--help").stdout
