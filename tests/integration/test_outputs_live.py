"""Outputs and inputs without HDFS code in the job: ``$MELON_OUTPUT_<NAME>`` folders published by the output task
(write beside, rename), ``$MELON_INPUT_<NAME>`` paths; bad cases fail naming the output."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.integration

WRITER = ("python -c \"import os, pathlib\n"
          "role, index = os.environ['MELON_ROLE'], os.environ['MELON_INDEX']\n"
          "d = pathlib.Path(os.environ['MELON_OUTPUT_MODEL'])\n"
          "(d / 'weights.bin').write_bytes(b'w' * 1000)\n"
          "(d / 'sub').mkdir(); (d / 'sub' / 'who.txt').write_text(role + index)\n"
          "pathlib.Path(os.environ['MELON_OUTPUT_METRICS'], 'metrics.json').write_text('{\\\"acc\\\": 0.9}')\n"
          "print('INPUT', open(os.environ['MELON_INPUT_BLOB_TXT']).read())\"")


@pytest.fixture
def blob(melon_hook):
    path = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}/blob.txt"
    melon_hook.hdfs.write(path, data=b"hello input", overwrite=True)
    return path


def _job(root: str, blob: str, **extra) -> dict:
    return {"name": "outputs", "framework": "generic", "entrypoint": WRITER,
            "inputs": [{"path": blob, "name": "blob.txt"}],
            "outputs": {"model": f"hdfs://{root}/model", "metrics": f"{root}/metrics.json"},
            "roles": {"chief": {"memory": 256}, "worker": {"instances": 2, "memory": 256}}, **extra}


def test_outputs_are_published_by_the_output_task(jobs, melon_hook, blob):
    root = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}"
    app_id = jobs.submit(_job(root, blob))
    app = jobs.wait(app_id)
    assert app["finalStatus"] == "SUCCEEDED", app["diagnostics"]
    hdfs = melon_hook.hdfs
    # the chief's folder, whole, under the declared name; metrics.json (one file named as the target) is the file
    assert sorted(hdfs.list(f"{root}/model")) == ["sub", "weights.bin"]
    with hdfs.read(f"{root}/model/sub/who.txt") as r:
        assert r.read() == b"chief0"
    assert hdfs.status(f"{root}/model/weights.bin")["length"] == 1000
    with hdfs.read(f"{root}/metrics.json") as r:
        assert r.read() == b'{"acc": 0.9}'
    assert sorted(hdfs.list(root)) == ["metrics.json", "model"]  # nothing left beside them
    assert any("INPUT hello input" in text for text in jobs.container_logs(app_id).values())


def test_existing_output_is_refused_before_submit_unless_overwrite(jobs, melon_hook, blob):
    from airflow_provider_melon.spec import JobSpec

    root = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}"
    melon_hook.hdfs.write(f"{root}/metrics.json", data=b"old", overwrite=True)
    with pytest.raises(FileExistsError, match=r"outputs.metrics: .*metrics.json exists; set overwrite_outputs"):
        melon_hook.submit(JobSpec.from_dict({**_job(root, blob), "code": str(jobs.code)}))
    app_id = jobs.submit(_job(root, blob, overwrite_outputs=True))
    assert jobs.wait(app_id)["finalStatus"] == "SUCCEEDED"
    with melon_hook.hdfs.read(f"{root}/metrics.json") as r:
        assert r.read() == b'{"acc": 0.9}'


def test_a_declared_output_left_empty_fails_naming_it(jobs, melon_hook):
    root = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}"
    app_id = jobs.submit({"name": "no-output", "framework": "generic", "entrypoint": "python -c \"print('nothing')\"",
                          "outputs": {"model": f"{root}/model"}, "roles": {"worker": {"memory": 256}}})
    app = jobs.wait(app_id)
    assert app["finalStatus"] == "FAILED"
    assert "output 'model': the job wrote nothing to $MELON_OUTPUT_MODEL" in app["diagnostics"], app["diagnostics"]
    assert melon_hook.hdfs.status(root, strict=False) is None or melon_hook.hdfs.list(root) == []
