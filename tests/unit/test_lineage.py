"""OpenLineage of a train task, through the OpenLineage provider's own code: its ExtractorManager finds the
operator's ``get_openlineage_facets_on_complete`` (as the provider's listener does after a successful task), and
its adapter emits the COMPLETE event through the openlineage client's file transport, configured as a deployment
configures it (``[openlineage] transport``). The event read back holds the HDFS inputs and outputs as datasets
and the YARN application as facets."""

from __future__ import annotations

import json
import types
from datetime import datetime, timezone

import pytest

pytest.importorskip("airflow.providers.openlineage", reason="the openlineage provider is in the test extra")

from airflow.providers.openlineage.extractors.manager import ExtractorManager  # noqa: E402
from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter  # noqa: E402
from airflow.utils.state import TaskInstanceState  # noqa: E402

from airflow_provider_melon.operators.train import MelonTrainOperator  # noqa: E402

APP = "application_1700000000000_0042"


@pytest.fixture
def operator(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_LINEAGE",
        json.dumps(
            {
                "conn_type": "yarn",
                "host": "http://rm.example:8088",
                "extra": {"fs_default_fs": "hdfs://nn.example:8020", "web_ui_url": "http://rm-ui.example:8088"},
            }
        ),
    )
    (tmp_path / "code").mkdir()
    job = {
        "name": "mnist",
        "framework": "tensorflow",
        "code": str(tmp_path / "code"),
        "entrypoint": "python t.py",
        "queue": "gpu",
        "roles": {"chief": {"gpu_memory": "4GiB"}},
        "inputs": [{"path": "hdfs:///data/mnist.npz"}, {"path": "hdfs://other-nn:9000/shared/vocab.txt"}],
        "outputs": {"model": "hdfs:///models/mnist", "metrics": "/models/mnist-metrics"},
    }
    op = MelonTrainOperator(task_id="train", job=job, yarn_conn_id="yarn_lineage")
    # as a successful run leaves the operator: the job loaded, the application known
    op._spec = op.load_spec()
    op._app_id = APP
    return op


def test_the_openlineage_provider_emits_the_hdfs_datasets_and_the_yarn_application(operator, tmp_path, monkeypatch):
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv(
        "AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({"type": "file", "log_file_path": str(events), "append": True})
    )
    ti = types.SimpleNamespace(
        task=operator, dag_id="train_dag", task_id="train", run_id="manual__1", try_number=1, map_index=-1
    )
    lineage = ExtractorManager().extract_metadata(
        dagrun=types.SimpleNamespace(run_id="manual__1"),
        task=operator,
        task_instance_state=TaskInstanceState.SUCCESS,
        task_instance=ti,
    )
    OpenLineageAdapter().complete_task(
        run_id="01936b7a-0000-7000-8000-000000000001",
        job_name="train_dag.train",
        end_time=datetime.now(timezone.utc).isoformat(),
        task=lineage,
        nominal_start_time=None,
        nominal_end_time=None,
        owners=["airflow"],
        tags=[],
        job_description=None,
    )

    [line] = [line for line in events.read_text().splitlines() if line.strip()]
    event = json.loads(line)
    assert event["eventType"] == "COMPLETE"
    assert sorted((d["namespace"], d["name"]) for d in event["inputs"]) == [
        ("hdfs://nn.example:8020", "/data/mnist.npz"),
        ("hdfs://other-nn:9000", "/shared/vocab.txt"),
    ]
    assert sorted((d["namespace"], d["name"]) for d in event["outputs"]) == [
        ("hdfs://nn.example:8020", "/models/mnist"),
        ("hdfs://nn.example:8020", "/models/mnist-metrics"),
    ]
    app = event["job"]["facets"]["melon_yarnApplication"]
    assert (app["name"], app["applicationType"], app["queue"], app["framework"]) == (
        "mnist",
        "MELON",
        "gpu",
        "tensorflow",
    )
    assert event["job"]["facets"]["jobType"]["integration"] == "AIRFLOW"  # the provider's own job type facet
    run = event["run"]["facets"]["melon_yarnApplication"]
    assert run["applicationId"] == APP
    assert run["trackingUrl"] == f"http://rm-ui.example:8088/cluster/app/{APP}"


def test_an_unqualified_path_without_a_known_namenode_is_left_out(operator):
    from airflow_provider_melon.operators.lineage import hdfs_dataset

    assert hdfs_dataset("hdfs:///data/x", None) is None
    assert hdfs_dataset("/data/x", "hdfs://nn:8020").namespace == "hdfs://nn:8020"
