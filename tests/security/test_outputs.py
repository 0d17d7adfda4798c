"""Outputs that lose nothing, tried as a hostile tenant (or a hostile app) would: an output gone from HDFS when the
operator completes a SUCCEEDED application, and a folder planted at the output's path at the last moment, between
the publish's check and its rename. Against the real mini cluster's HDFS (the proxy only lets the test act at the
moment the rename goes to the NameNode)."""

from __future__ import annotations

import base64
import json
import uuid
from unittest import mock

import pytest

from airflow_provider_melon.hadoop.app_state import make_event_payload
from airflow_provider_melon.operators.train import MelonTrainOperator
from airflow_provider_melon.runtime import outputs
from airflow_provider_melon.runtime.webhdfs import WebHdfs
from airflow_provider_melon.version_compat import AirflowException
from tests.counting_proxy import CountingProxy

pytestmark = pytest.mark.integration

WRITER = (
    'python -c "import os, pathlib\n'
    "pathlib.Path(os.environ['MELON_OUTPUT_MODEL'], 'weights.bin').write_bytes(b'w' * 1000)\""
)


def test_an_output_gone_when_the_operator_completes_fails_the_task_and_declares_no_asset(attack, jobs, melon_hook):
    root = f"/user/root/sec-outputs/{uuid.uuid4().hex[:8]}"
    job = {
        "name": "vanishing-output",
        "framework": "generic",
        "entrypoint": WRITER,
        "outputs": {"model": f"{root}/model"},
        "roles": {"worker": {"memory": 256}},
    }
    app_id = jobs.submit(job)
    app = jobs.wait(app_id)
    assert app["finalStatus"] == "SUCCEEDED", app["diagnostics"]
    assert melon_hook.hdfs.status(f"{root}/model", strict=False) is not None, "the job published its model"
    melon_hook.hdfs.delete(f"{root}/model", recursive=True)  # what a hostile app with write access would do

    op = MelonTrainOperator(task_id="train", job={**job, "code": str(jobs.code)}, deferrable=False, poll_interval=5)
    op.__dict__["hook"] = melon_hook  # the session's cluster, no Airflow connection
    ti = mock.Mock(dag_id="sec_outputs", task_id="train", run_id="manual__sec_outputs", map_index=-1)
    event = make_event_payload("success", app_id, app, f"YARN application {app_id} reached FINISHED")
    with attack(
        "output gone from HDFS when the operator completes a SUCCEEDED app",
        expected="task failed naming 'model'; no asset",
    ) as row:
        try:
            op.execute_complete(
                {"ti": ti, "run_id": "manual__sec_outputs"},
                event,
                outputs=job["outputs"],
                roles={"worker": 1},
                fs_default_fs=melon_hook.fs_default_fs,
            )
            row.got = f"task succeeded; assets {[a.uri for a in op.outlets]}"
        except AirflowException as exc:
            assets = [a.uri for a in op.outlets or []]
            row.got = ("task failed naming 'model'" if "'model'" in str(exc) else f"task failed: {exc}") + (
                "; no asset" if not assets else f"; assets {assets}"
            )
    assert not [c for c in ti.xcom_push.call_args_list if c.kwargs.get("key") == "outputs"]


def test_a_folder_planted_at_the_output_path_before_the_rename_does_not_swallow_the_upload(
    attack, minicluster, melon_hook, tmp_path
):
    root = f"/user/root/sec-outputs/{uuid.uuid4().hex[:8]}"
    (tmp_path / outputs.LOCAL_ROOT / "model").mkdir(parents=True)
    (tmp_path / outputs.LOCAL_ROOT / "model" / "weights.bin").write_bytes(b"w" * 1000)
    env = {
        "MELON_OUTPUTS_B64": base64.b64encode(json.dumps({"model": f"{root}/model"}).encode()).decode(),
        "MELON_OUTPUT_ROLE": "chief",
    }
    planted: list[str] = []

    def plant(method: str, path: str):
        if method == "PUT" and "op=RENAME" in path and not planted:
            melon_hook.hdfs.makedirs(f"{root}/model")  # just before the rename reaches the NameNode
            planted.append(path)
        return None

    with (
        CountingProxy("http://%s:%d" % minicluster.nn_http, lose=plant) as proxy,
        attack(
            "a folder planted at the output's path between the publish's check and its rename",
            expected="publish refused naming 'model'; nothing nested; no upload left",
        ) as row,
    ):
        client = WebHdfs(proxy.url, minicluster.user)
        try:
            outputs.publish(env, str(tmp_path), print, client=client)
            row.got = f"published into the planted folder: {melon_hook.hdfs.list(f'{root}/model')}"
        except outputs.OutputError as exc:
            inside, beside = melon_hook.hdfs.list(f"{root}/model"), melon_hook.hdfs.list(root)
            row.got = (
                ("publish refused naming 'model'" if "'model'" in str(exc) else f"refused: {exc}")
                + ("; nothing nested" if not inside else f"; nested {inside}")
                + ("; no upload left" if beside == ["model"] else f"; left {beside}")
            )
    assert planted, "the proxy never saw the rename"
