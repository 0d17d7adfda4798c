"""On the real mini cluster (2 NMs x 2 GPUs x 16 GiB of melon.io/gpu-memory): the train operator's pre-flight
refuses a role larger than any GPU without submitting anything, and MelonProfileOperator runs the mnist job's
chief for a few steps on YARN, reads the profile back from HDFS and pushes what the train task needs.

The operators run their real ``execute`` with the session's MelonHook (RM + WebHDFS of the cluster) in place
of the Airflow connections; the task instance is a mock that records XCom pushes.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from unittest import mock

import pytest

from airflow_provider_melon import submission
from airflow_provider_melon.gpu import profiler
from airflow_provider_melon.operators.profile import MelonProfileOperator
from airflow_provider_melon.operators.train import MelonTrainOperator

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MNIST = REPO / "dags" / "training" / "mnist"


def context(dag_id: str, task_id: str):
    run_id = f"manual__{uuid.uuid4().hex[:12]}"
    ti = mock.Mock(dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=-1, stats_tags={})
    return {"ti": ti, "run_id": run_id}


def pushed(ctx) -> dict:
    return {c.kwargs["key"]: c.kwargs["value"] for c in ctx["ti"].xcom_push.call_args_list}


def bind(op, melon_hook):
    op.hook = melon_hook  # the cached_property's slot: the cluster's hook instead of the Airflow connections
    return op


def test_preflight_refuses_a_role_above_the_largest_gpu_and_submits_nothing(melon_hook, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    (tmp_path / "noop.py").write_text("print('never runs')\n")
    op = bind(
        MelonTrainOperator(
            task_id="too_big",
            deferrable=False,
            poll_interval=5,
            job={
                "name": "too-big",
                "framework": "tensorflow",
                "code": str(tmp_path),
                "entrypoint": "python noop.py",
                "roles": {
                    "chief": {"memory": 256, "gpu_memory": "20GiB"},
                    "worker": {"memory": 256, "gpu_memory": "4GiB"},
                },
            },
        ),
        melon_hook,
    )
    ctx = context("preflight_live", "too_big")
    before = melon_hook.yarn.list_applications()
    with pytest.raises(AirflowFailException) as err:
        op.execute(ctx)
    msg = str(err.value)
    assert "role chief: expected GPU memory 20480 MiB per task exceeds the largest GPU of any node, 16384 MiB" in msg, (
        msg
    )
    assert "32768 MiB over 2 GPU(s)" in msg and "4 GPU(s) and 65536 MiB of GPU memory in all" in msg
    after = melon_hook.yarn.list_applications()
    assert len(after) == len(before)
    assert not melon_hook.yarn.find_applications(["airflow-dag:preflight_live"])
    assert "app_id" not in pushed(ctx)


def test_a_submission_reads_the_clusters_nodes_once(melon_hook, minicluster, jobs, tmp_path):
    """The learned figure's cap (``gpu_memory: auto``), the pre-flight check and the slot a shared task asks for
    all judge the RM's node list, and one read of it serves all three (on a cluster of a thousand nodes the list is
    megabytes): counted at a proxy in front of the real RM."""
    from airflow_provider_melon.cli import melon_hook_for_cluster
    from airflow_provider_melon.hooks.yarn import YarnHook
    from tests.counting_proxy import CountingProxy

    (tmp_path / "noop.py").write_text("print('noop')\n")
    job = {
        "name": "nodes-once",
        "framework": "generic",
        "code": str(tmp_path),
        "entrypoint": "python noop.py",
        "roles": {"worker": {"memory": 256, "gpu_memory": "auto:1GiB"}},
    }
    with CountingProxy(minicluster.rm_web_url) as proxy:
        hook = melon_hook_for_cluster(minicluster.work_dir)
        hook.yarn = YarnHook(rm_urls=[proxy.url], user=minicluster.user)
        op = bind(MelonTrainOperator(task_id="nodes_once", job=job, deferrable=False, poll_interval=5), hook)
        app_id, _ = op._attach_or_submit(context("nodes_once_live", "nodes_once"))
        jobs.submitted.append(app_id)  # killed at the end
        counts = proxy.snapshot()
    assert counts["nodes"] == 1, counts
    with melon_hook.hdfs.read(f"{hook.staging_dir}/apps/{app_id}/{submission.PLAN_FILE}") as reader:
        plan = json.load(reader)
    assert [r["gpu_slot_mb"] for r in plan["roles"]] == [16384 // 4], plan["roles"]  # the slot came from that read


def test_profile_operator_runs_one_task_and_pushes_the_expected_memory(melon_hook, minicluster):
    sys.path.insert(0, str(MNIST))
    try:
        from data import make_dataset, to_npz_bytes
    finally:
        sys.path.remove(str(MNIST))
    dataset = f"/user/{melon_hook.user}/melon-test/profile-{uuid.uuid4().hex[:8]}/mnist.npz"
    melon_hook.hdfs.write(dataset, data=to_npz_bytes(make_dataset()), overwrite=True)
    job = {
        "name": "mnist-mwms",
        "framework": "tensorflow",
        "code": str(MNIST),
        "entrypoint": "python train.py --epochs 2",
        "inputs": [{"path": dataset, "name": "mnist.npz"}],
        "outputs": {"model": f"/user/{melon_hook.user}/melon-test/never-published-{uuid.uuid4().hex[:8]}"},
        "roles": {"chief": {"memory": "2g", "gpu_memory": "2GiB"}, "worker": {"memory": "2g", "gpu_memory": "2GiB"}},
    }
    op = bind(
        MelonProfileOperator(task_id="profile", job=job, steps=3, deferrable=False, poll_interval=5, timeout=420),
        melon_hook,
    )
    ctx = context("profile_live", "profile")
    result = op.execute(ctx)

    xcoms = pushed(ctx)
    app_id = xcoms["app_id"]
    app = melon_hook.yarn.get_application(app_id)
    assert app["name"] == "mnist-mwms-profile" and app["finalStatus"] == "SUCCEEDED"
    # the document in HDFS is this application's
    with melon_hook.hdfs.read(op.profile_path_for(ctx)) as reader:
        doc = json.load(reader)
    assert doc["app_id"] == app_id == result["app_id"]
    assert doc["steps"] == 3 and doc["returncode"] == 0
    assert result["method"] == xcoms["profile"]["method"] == doc["method"]
    # the pushed size is the profile's expected memory, and the train task takes it as its gpu_memory
    assert xcoms["expected_gpu_memory"] == f"{doc['expected_mb']}MiB"
    assert doc["expected_mb"] == profiler.expected_mb(doc["peak_mb"]) or doc["method"] == "nvml"
    assert xcoms["packing_pays"] is doc["packing_pays"]
    train = MelonTrainOperator(task_id="train", job=job, gpu_memory=xcoms["expected_gpu_memory"])
    assert {r.gpu_memory_mb for r in train.load_spec().roles.values()} == {doc["expected_mb"]}
    if doc["method"] == "analytic":  # no GPU here: the chief's Keras model, estimated as train.py reported it
        assert doc["reason"].startswith("no GPU:")
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
        import tf_keras as keras  # noqa: PLC0415

        from airflow_provider_melon.gpu.memory_model import from_keras_model  # noqa: PLC0415

        sys.path.insert(0, str(MNIST))
        try:
            from train import build_model  # noqa: PLC0415
        finally:
            sys.path.remove(str(MNIST))
        model = build_model(10, 784)
        assert isinstance(model, keras.Model)
        assert doc["peak_mb"] == pytest.approx(from_keras_model(model).allocator_mb(64), abs=0.06)
        assert doc["gpu_memory_mb"] == 16384  # the cluster's largest GPU, passed for packing_pays
        assert 0 < doc["step_time_s"] < 5
