"""Outputs and inputs without HDFS code in the job: ``$MELON_OUTPUT_<NAME>`` folders published by the output task
(write beside, rename), ``$MELON_INPUT_<NAME>`` paths; bad cases fail naming the output."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from tests.counting_proxy import CountingProxy

pytestmark = pytest.mark.integration

WRITER = (
    'python -c "import os, pathlib\n'
    "role, index = os.environ['MELON_ROLE'], os.environ['MELON_INDEX']\n"
    "d = pathlib.Path(os.environ['MELON_OUTPUT_MODEL'])\n"
    "(d / 'weights.bin').write_bytes(b'w' * 1000)\n"
    "(d / 'sub').mkdir(); (d / 'sub' / 'who.txt').write_text(role + index)\n"
    "pathlib.Path(os.environ['MELON_OUTPUT_METRICS'], 'metrics.json').write_text('{\\\"acc\\\": 0.9}')\n"
    "print('INPUT', open(os.environ['MELON_INPUT_BLOB_TXT']).read())\""
)


@pytest.fixture
def blob(melon_hook):
    path = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}/blob.txt"
    melon_hook.hdfs.write(path, data=b"hello input", overwrite=True)
    return path


def _job(root: str, blob: str, **extra) -> dict:
    return {
        "name": "outputs",
        "framework": "generic",
        "entrypoint": WRITER,
        "inputs": [{"path": blob, "name": "blob.txt"}],
        "outputs": {"model": f"hdfs://{root}/model", "metrics": f"{root}/metrics.json"},
        "roles": {"chief": {"memory": 256}, "worker": {"instances": 2, "memory": 256}},
        **extra,
    }


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
    app_id = jobs.submit(
        {
            "name": "no-output",
            "framework": "generic",
            "entrypoint": "python -c \"print('nothing')\"",
            "outputs": {"model": f"{root}/model"},
            "roles": {"worker": {"memory": 256}},
        }
    )
    app = jobs.wait(app_id)
    assert app["finalStatus"] == "FAILED"
    assert "output 'model': the job wrote nothing to $MELON_OUTPUT_MODEL" in app["diagnostics"], app["diagnostics"]
    assert melon_hook.hdfs.status(root, strict=False) is None or melon_hook.hdfs.list(root) == []


# worker:0, the output task, writes its model only once the AM says the success role (chief:0) exited 0 and the
# application waits for it: before, the AM ended the job at the chief's exit and killed the worker mid-publish
PUBLISHER = """
import hashlib, json, os, sys, time, urllib.request

role, index = os.environ["MELON_ROLE"], int(os.environ["MELON_INDEX"])
if role != "worker" or index != 0:
    sys.exit(0)
deadline = time.monotonic() + 150
while True:
    status = json.load(urllib.request.urlopen(os.environ["MELON_AM_URL"] + "/status", timeout=10))
    chief = next(t for t in status["tasks"] if t["role"] == "chief")
    if chief["state"] == "SUCCEEDED" and status["state"] == "RUNNING" and "waiting for the output task worker:0" \\
            in status["diagnostics"]:
        break
    if time.monotonic() > deadline:
        sys.exit("the AM never waited for the output task: " + status["state"] + ": " + status["diagnostics"])
    time.sleep(0.5)
print("AM:", status["diagnostics"], flush=True)
if os.environ["PUBLISH"] == "nothing":
    sys.exit(0)
digest = hashlib.sha256()
with open(os.path.join(os.environ["MELON_OUTPUT_MODEL"], "weights.bin"), "wb") as f:
    for _ in range(24):  # 24 MiB, in 1 MiB blocks
        block = os.urandom(1 << 20)
        digest.update(block)
        f.write(block)
print("SHA256", digest.hexdigest(), flush=True)
"""


def _publisher_job(tmp_path, root: str, publish: str) -> dict:
    (tmp_path / "publisher.py").write_text(PUBLISHER)
    return {
        "name": "late-output",
        "framework": "generic",
        "code": str(tmp_path),
        "entrypoint": "python publisher.py",
        "env": {"PUBLISH": publish},
        "outputs": {"model": f"{root}/model"},
        "output_role": "worker",
        "roles": {"chief": {"memory": 256}, "worker": {"instances": 2, "memory": 256}},
    }


def _hdfs_sha256(hdfs, path: str) -> str:
    digest = hashlib.sha256()
    with hdfs.read(path, chunk_size=1 << 20) as chunks:
        for chunk in chunks:
            digest.update(chunk)
    return digest.hexdigest()


def test_the_app_succeeds_only_once_an_output_task_other_than_the_chief_has_published(jobs, melon_hook, tmp_path):
    root = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}"
    app_id = jobs.submit(_publisher_job(tmp_path, root, "model"))
    app = jobs.wait(app_id)
    stdout = "\n".join(jobs.container_logs(app_id).values())
    assert app["finalStatus"] == "SUCCEEDED", app["diagnostics"] + "\n" + jobs.picture(app_id)
    assert (
        "task chief:0 succeeded; waited for the output task worker:0, which published the outputs" in app["diagnostics"]
    ), app["diagnostics"]
    written = re.search(r"SHA256 ([0-9a-f]{64})", stdout)
    assert written, f"worker:0 never wrote its model:\n{stdout[-2000:]}\n{jobs.picture(app_id)}"
    status = melon_hook.hdfs.status(f"{root}/model/weights.bin", strict=False)
    assert status is not None, f"{root}/model is missing after SUCCEEDED: {melon_hook.hdfs.list(root)}"
    assert status["length"] == 24 << 20
    assert _hdfs_sha256(melon_hook.hdfs, f"{root}/model/weights.bin") == written.group(1)
    assert melon_hook.hdfs.list(root) == ["model"]  # no upload left beside it


def test_an_output_task_that_fails_to_publish_after_the_chief_fails_the_job_naming_the_output(
    jobs, melon_hook, tmp_path
):
    root = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}"
    app = jobs.wait(jobs.submit(_publisher_job(tmp_path, root, "nothing")))
    assert app["finalStatus"] == "FAILED", app["diagnostics"]
    assert app["diagnostics"].startswith("output task worker:0 on "), app["diagnostics"]
    assert "exited 5" in app["diagnostics"], app["diagnostics"]
    assert "output 'model': the job wrote nothing to $MELON_OUTPUT_MODEL" in app["diagnostics"], app["diagnostics"]


# ---------------------------------------------------------------------------------------- the WebHDFS client

STREAMER = """
import hashlib, sys, tracemalloc
from airflow_provider_melon.runtime.webhdfs import WebHdfs

url, user, local, path = sys.argv[1:5]
tracemalloc.start()
WebHdfs(url, user).create(path, local)
print("PEAK", tracemalloc.get_traced_memory()[1])
"""


def test_a_large_output_file_is_streamed_with_bounded_memory(minicluster, melon_hook, tmp_path):
    size, bound = 256 << 20, 32 << 20
    local = tmp_path / "checkpoint.bin"
    digest = hashlib.sha256()
    with open(local, "wb") as f:
        for _ in range(size >> 20):
            block = os.urandom(1 << 20)
            digest.update(block)
            f.write(block)
    path = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}/checkpoint.bin"
    melon_hook.hdfs.makedirs(path.rsplit("/", 1)[0])
    run = subprocess.run(
        [sys.executable, "-c", STREAMER, minicluster.webhdfs_url, minicluster.user, str(local), path],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    peak = int(re.search(r"PEAK (\d+)", run.stdout).group(1))
    assert peak < bound, f"uploading {size >> 20} MiB peaked at {peak >> 20} MiB of Python memory (bound {bound >> 20})"
    assert melon_hook.hdfs.status(path)["length"] == size
    assert _hdfs_sha256(melon_hook.hdfs, path) == digest.hexdigest()


def _nn(minicluster) -> str:
    return "http://%s:%d" % minicluster.nn_http


def _once(method: str, op: str, how: str):
    """A ``lose`` for the proxy: the first ``method`` request of ``op`` loses its ``how``; the rest go through."""
    seen: list[str] = []

    def lose(m: str, path: str):
        if m == method and f"op={op}" in path and not seen:
            seen.append(path)
            return how
        return None

    return lose, seen


@pytest.mark.parametrize("how", ["answer", "request"])
def test_a_publish_whose_rename_answer_is_lost_is_decided_from_both_paths(minicluster, melon_hook, tmp_path, how):
    """The NameNode applies the rename and its answer is lost ("answer"), or the rename never reaches it
    ("request"): either way the output is published whole, once, under its name."""
    from airflow_provider_melon.runtime import outputs
    from airflow_provider_melon.runtime.webhdfs import WebHdfs

    root = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}"
    (tmp_path / outputs.LOCAL_ROOT / "model").mkdir(parents=True)
    (tmp_path / outputs.LOCAL_ROOT / "model" / "weights.bin").write_bytes(b"w" * 1000)
    env = {
        "MELON_OUTPUTS_B64": base64.b64encode(json.dumps({"model": f"{root}/model"}).encode()).decode(),
        "MELON_OUTPUT_ROLE": "chief",
    }
    lose, seen = _once("PUT", "RENAME", how)
    with CountingProxy(_nn(minicluster), lose=lose) as proxy:
        published = outputs.publish(env, str(tmp_path), print, client=WebHdfs(proxy.url, minicluster.user))
    assert seen, "the proxy never saw the rename"
    assert published == {"model": f"{root}/model"}
    assert melon_hook.hdfs.list(root) == ["model"]  # no upload left beside it
    assert melon_hook.hdfs.list(f"{root}/model") == ["weights.bin"]  # not nested


def test_a_rename_onto_an_existing_folder_fails_instead_of_nesting(minicluster, melon_hook):
    from airflow_provider_melon.runtime.webhdfs import WebHdfs, WebHdfsError

    root = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}"
    melon_hook.hdfs.write(f"{root}/.model.tmp/weights.bin", data=b"w")
    melon_hook.hdfs.makedirs(f"{root}/model")
    with pytest.raises(WebHdfsError, match=r"RENAME .*\.model\.tmp -> .*/model: .*exists"):
        WebHdfs(minicluster.webhdfs_url, minicluster.user).rename(f"{root}/.model.tmp", f"{root}/model")
    assert melon_hook.hdfs.list(f"{root}/model") == []


def test_a_lost_rename_answer_the_paths_cannot_explain_is_an_error_naming_both(minicluster, melon_hook):
    from airflow_provider_melon.runtime.webhdfs import WebHdfs, WebHdfsError

    root = f"/user/root/it-outputs/{uuid.uuid4().hex[:8]}"
    melon_hook.hdfs.write(f"{root}/.model.tmp/weights.bin", data=b"w")
    lose, seen = _once("PUT", "RENAME", "answer")

    renames: list[str] = []

    def vanish(method: str, path: str):
        if "op=RENAME" in path:
            renames.append(path)
        how = lose(method, path)
        if how:  # someone else deletes the source as the rename goes out
            melon_hook.hdfs.delete(f"{root}/.model.tmp", recursive=True)
        return how

    with (
        CountingProxy(_nn(minicluster), lose=vanish) as proxy,
        pytest.raises(
            WebHdfsError,
            match=r"RENAME .*/\.model\.tmp -> .*/model: no answer .* the paths do not tell it was "
            r"applied: .*\.model\.tmp absent, .*/model absent",
        ),
    ):
        WebHdfs(proxy.url, minicluster.user).rename(f"{root}/.model.tmp", f"{root}/model")
    assert len(renames) == 1, f"sent once, not again blindly: {renames}"
