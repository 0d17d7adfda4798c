"""Content-addressed staging against the real HDFS of the mini cluster."""

import logging
import os
import time
import uuid

import pytest

from airflow_provider_melon.runtime.outputs import hdfs_path
from airflow_provider_melon.spec import JobSpec

pytestmark = pytest.mark.integration


def _spec(code_dir):
    return JobSpec.from_dict(
        {
            "name": "staging",
            "code": str(code_dir),
            "entrypoint": "python train.py",
            "roles": {"worker": {"instances": 1}},
        }
    )


def test_second_submit_of_unchanged_code_uploads_nothing(melon_hook, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hello')\n")
    (code / "pkg").mkdir()
    (code / "pkg" / "util.py").write_text("X = 1\n")
    first = melon_hook.stage(_spec(code))
    second = melon_hook.stage(_spec(code))
    assert first.files["code"].uploaded_bytes == first.files["code"].size > 0
    assert second.uploaded_bytes == 0
    assert second.files["code"] == first.files["code"].__class__(
        first.files["code"].url, first.files["code"].size, first.files["code"].timestamp, 0
    )
    # The local resource carries HDFS's real length and modification time.
    status = melon_hook.hdfs.status(hdfs_path(first.files["code"].url))
    assert status["length"] == first.files["code"].size
    assert status["modificationTime"] == first.files["code"].timestamp
    assert "/.melon/cache/" in first.files["code"].url

    # A changed file is a new object: uploaded again, under another digest.
    (code / "train.py").write_text("print('changed')\n")
    third = melon_hook.stage(_spec(code))
    assert third.files["code"].url != first.files["code"].url
    assert third.files["code"].uploaded_bytes == third.files["code"].size
    assert third.files["runtime"].uploaded_bytes == 0


def test_missing_hdfs_input_is_a_clear_error(melon_hook, tmp_path):
    (tmp_path / "c").mkdir()
    spec = JobSpec.from_dict(
        {
            "name": "x",
            "code": str(tmp_path / "c"),
            "entrypoint": "true",
            "roles": {"worker": {}},
            "inputs": [{"path": "/no/such/data.bin"}],
        }
    )
    with pytest.raises(FileNotFoundError, match="/no/such/data.bin"):
        melon_hook.stage(spec)


def test_empty_code_folder_stages_no_archive(melon_hook, tmp_path):
    (tmp_path / "empty").mkdir()
    assert "code" not in melon_hook.stage(_spec(tmp_path / "empty")).files


def _cache_listing(hook, url: str) -> list[str]:
    parent = hdfs_path(url).rsplit("/", 1)[0]
    return sorted(hook.hdfs.list(parent))


def test_concurrent_stagers_of_one_folder_upload_once(minicluster, melon_hook, tmp_path):
    """10 tasks stage the same new folder at the same moment: one upload, every task gets the same file, and a
    watcher polling the cache path never sees a partial file there."""
    import hashlib
    import threading

    from airflow_provider_melon.cli import melon_hook_for_cluster
    from airflow_provider_melon.hadoop.bundle import deterministic_zip, folder_files

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('train')\n")
    (code / "weights.bin").write_bytes(os.urandom(6 * 1024 * 1024))  # new content: not cached yet
    data = deterministic_zip(folder_files(code))
    target = f"{melon_hook.cache_dir}/{hashlib.sha256(data).hexdigest()}/code.zip"
    hooks = [melon_hook_for_cluster(minicluster.work_dir) for _ in range(10)]  # one HDFS client each
    barrier = threading.Barrier(len(hooks) + 1)
    reports, errors, seen_sizes = [None] * len(hooks), [], []
    done = threading.Event()

    def stage(i):
        barrier.wait()
        try:
            reports[i] = hooks[i].stage(_spec(code))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    def watch():
        client = melon_hook_for_cluster(minicluster.work_dir).hdfs
        barrier.wait()
        while not done.is_set():
            st = client.status(target, strict=False)
            if st is not None:
                seen_sizes.append(st["length"])
            time.sleep(0.02)

    threads = [threading.Thread(target=stage, args=(i,)) for i in range(len(hooks))]
    watcher = threading.Thread(target=watch)
    for t in threads + [watcher]:
        t.start()
    for t in threads:
        t.join(300)
    done.set()
    watcher.join(30)

    assert not errors, errors
    uploads = [r.files["code"].uploaded_bytes for r in reports]
    print(f"10 concurrent stagers of a {len(data)}-byte archive: {sum(1 for u in uploads if u)} upload(s)")
    assert sorted(uploads) == [0] * 9 + [len(data)]
    assert len({(r.files["code"].url, r.files["code"].timestamp) for r in reports}) == 1
    assert seen_sizes and set(seen_sizes) == {len(data)}  # the target was only ever whole
    assert _cache_listing(melon_hook, reports[0].files["code"].url) == ["code.zip"]  # no lock, no temp file
    with melon_hook.hdfs.read(target) as reader:
        assert hashlib.sha256(reader.read()).hexdigest() == target.rsplit("/", 2)[1]


def test_a_lock_left_by_a_dead_stager_is_taken_over(melon_hook, caplog):
    from airflow_provider_melon.hadoop.hdfs_io import put_once

    data = os.urandom(4096)
    path = f"{melon_hook.cache_dir}/dead-{uuid.uuid4().hex}/blob.bin"
    melon_hook.hdfs.write(path.rsplit("/", 1)[0] + "/.blob.bin.lock", data=b"crashed pid 1")
    started = time.monotonic()
    status, uploaded = put_once(melon_hook.hdfs, path, data, lock_wait=2)
    assert uploaded and status["length"] == len(data)
    assert 2 <= time.monotonic() - started < 30  # waited for the holder, then gave up on it
    assert sorted(melon_hook.hdfs.list(path.rsplit("/", 1)[0])) == ["blob.bin"]
    assert "older than" in caplog.text


def test_an_hdfs_error_is_one_readable_line(melon_hook, caplog):
    from airflow_provider_melon.hadoop.hdfs_io import MelonHdfsError

    base = f"/user/{melon_hook.user}/errors-{uuid.uuid4().hex}"
    melon_hook.hdfs.write(f"{base}/a-file", data=b"x")
    caplog.set_level(logging.DEBUG, logger="airflow_provider_melon.hadoop.hdfs_io")
    with pytest.raises(MelonHdfsError) as info:
        melon_hook.put_bytes(f"{base}/a-file/plan.json", b"{}", cached=False)
    message = str(info.value)
    assert "\n" not in message and "\tat " not in message, message
    assert message.startswith(f"HDFS write {base}/a-file/plan.json failed: ") and "ParentNotDirectory" in message
    assert "at org.apache.hadoop" in caplog.text  # the whole NameNode trace is kept at debug level
