"""`airflow dags test` (tasks in one process, triggers inline, a logical date set) still runs the main example DAG
against the real mini cluster: a fast extra beside tests/e2e/test_real_airflow.py, where every example DAG runs
on a real scheduler and triggerer."""

from __future__ import annotations

import json
import time

import pytest

from airflow_provider_melon.runtime.outputs import hdfs_path

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _marker(output: str, marker: str) -> dict:
    lines = [line.split(marker + " ", 1)[1] for line in output.splitlines() if marker + " {" in line]
    assert lines, f"{marker} not in the DAG's output"
    return json.loads(lines[-1])


def test_mnist_pipeline(airflow, melon_hook):
    started_ms = int(time.time() * 1000)
    result = airflow.run("dags", "test", "melon_mnist_pipeline", timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    published = _marker(out, "MELON_RESULT")
    assert published["accuracy"] >= published["threshold"]
    path = hdfs_path(published["published"])
    assert "saved_model.pb" in melon_hook.hdfs.list(path)
    # train and evaluate ran as YARN applications tagged with this DAG, in this run (not an earlier one)
    apps = [
        a
        for a in melon_hook.yarn.find_applications(["airflow-dag:melon_mnist_pipeline"])
        if int(a.get("startedTime") or 0) >= started_ms
    ]
    assert sorted(a["name"] for a in apps if a["name"] in ("mnist-mwms", "mnist-evaluate")) == [
        "mnist-evaluate",
        "mnist-mwms",
    ], [(a["id"], a["name"], a["finalStatus"]) for a in apps]
    assert all(a["finalStatus"] == "SUCCEEDED" for a in apps if a["name"] in ("mnist-mwms", "mnist-evaluate"))


def test_pytorch_pipeline(airflow, melon_hook):
    """DDP under torchrun in two containers → the model published to HDFS → evaluated from it."""
    started_ms = int(time.time() * 1000)
    result = airflow.run("dags", "test", "melon_pytorch_pipeline", timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    report = _marker(out, "MELON_RESULT")
    assert report["accuracy"] >= report["threshold"]
    assert "model.pt" in melon_hook.hdfs.list(hdfs_path(report["model"]))
    apps = {
        a["name"]: a
        for a in melon_hook.yarn.find_applications(["airflow-dag:melon_pytorch_pipeline"])
        if int(a.get("startedTime") or 0) >= started_ms
    }
    assert sorted(apps) == ["ddp-evaluate", "ddp-torchrun"], sorted(apps)
    assert all(a["finalStatus"] == "SUCCEEDED" for a in apps.values())
