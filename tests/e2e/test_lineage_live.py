"""OpenLineage under a real Airflow run: `airflow tasks test` of a train task against the mini cluster, with the
OpenLineage provider's listener on and its events written by the openlineage client's file transport (set as
``[openlineage] transport``). The task's COMPLETE event names its HDFS input and output and its YARN application."""

from __future__ import annotations

import json

import pytest

from tests.conftest import AirflowRunner

pytest.importorskip("airflow.providers.openlineage", reason="the openlineage provider is in the test extra")

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_train_task_reports_its_hdfs_datasets_and_yarn_application(airflow, melon_hook, minicluster, tmp_path):
    melon_hook.hdfs.write("/tmp/melon-e2e-lineage/in.txt", data=b"lineage\n", overwrite=True)
    events = tmp_path / "openlineage.jsonl"
    env = {
        **airflow.env,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events), "append": True}),
    }
    result = AirflowRunner(env).run("tasks", "test", "melon_e2e_lineage", "train", timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    assert events.exists(), f"no OpenLineage event written:\n{out[-4000:]}"
    sent = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    [complete] = [e for e in sent if e["eventType"] == "COMPLETE" and e["job"]["name"] == "melon_e2e_lineage.train"]
    namenode = "hdfs://" + minicluster.fs_default_fs.split("://", 1)[1].rstrip("/")
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [(namenode, "/tmp/melon-e2e-lineage/in.txt")]
    assert [(d["namespace"], d["name"]) for d in complete["outputs"]] == [(namenode, "/tmp/melon-e2e-lineage/model")]
    assert complete["job"]["facets"]["melon_yarnApplication"]["name"] == "e2e-lineage"
    app_id = complete["run"]["facets"]["melon_yarnApplication"]["applicationId"]
    app = melon_hook.yarn.get_application(app_id)
    assert (app["name"], app["finalStatus"]) == ("e2e-lineage", "SUCCEEDED")
