"""Staging big files against the real HDFS (and YARN) of the mini cluster: memory stays bounded (files are
streamed from disk), a code folder's big files are their own objects (a change elsewhere does not upload them
again), and a job still finds every file at its path in the folder."""

import os
import tracemalloc
import uuid

import pytest

from airflow_provider_melon.hooks.melon import CODE_FILE_KEY
from airflow_provider_melon.runtime.outputs import hdfs_path
from airflow_provider_melon.spec import JobSpec

pytestmark = pytest.mark.integration

MiB = 1 << 20


def _spec(code_dir, **extra):
    return JobSpec.from_dict(
        {
            "name": "staging-size",
            "code": str(code_dir),
            "entrypoint": "python train.py",
            "roles": {"worker": {"instances": 1}},
            **extra,
        }
    )


def _random_file(path, size: int) -> None:
    """Incompressible bytes, written in blocks (the test itself must not hold them in memory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        for _ in range(size // MiB):
            out.write(os.urandom(MiB))


def _peak_while(fn):
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_big_files_are_streamed_not_read_into_memory(melon_hook, tmp_path):
    """64 MiB through each path (a code folder's big file, the zipped archive, a local env archive) while
    Python's allocations peak far below the file: before streaming each one cost its size (bytes in memory)."""
    code = tmp_path / f"code-{uuid.uuid4().hex[:8]}"
    (code / "train.py").parent.mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    _random_file(code / "data" / "big.bin", 64 * MiB)
    report, peak = _peak_while(lambda: melon_hook.stage(_spec(code)))
    big = report.files[CODE_FILE_KEY + "data/big.bin"]
    assert big.uploaded_bytes == big.size == 64 * MiB
    assert peak < 8 * MiB, f"peak {peak / MiB:.1f} MiB while staging a 64 MiB file"

    zipped = tmp_path / f"zipped-{uuid.uuid4().hex[:8]}"
    zipped.mkdir()
    (zipped / "train.py").write_text("print('hi')\n")
    _random_file(zipped / "blob.bin", 32 * MiB)
    melon_hook.code_split_bytes = 1 << 40  # everything into the archive: the zip is built in a temporary file
    report, peak = _peak_while(lambda: melon_hook.stage(_spec(zipped)))
    assert report.files["code"].uploaded_bytes > 32 * MiB
    assert peak < 8 * MiB, f"peak {peak / MiB:.1f} MiB while zipping and staging a 32 MiB folder"

    env = tmp_path / f"env-{uuid.uuid4().hex[:8]}.tar.gz"
    _random_file(env, 64 * MiB)
    spec = _spec(code, environment={"archive": f"file://{env}", "python": "env/bin/python"})
    report, peak = _peak_while(lambda: melon_hook.stage(spec))
    staged = report.files["env_archive"]
    assert staged.uploaded_bytes == staged.size == 64 * MiB and "/.melon/cache/" in staged.url
    assert peak < 8 * MiB, f"peak {peak / MiB:.1f} MiB while staging a 64 MiB env archive"
    assert melon_hook.stage(spec).uploaded_bytes == 0  # content-addressed: a repeat uploads nothing


def test_editing_code_reuploads_the_archive_not_the_big_file(melon_hook, tmp_path):
    code = tmp_path / f"code-{uuid.uuid4().hex[:8]}"
    code.mkdir()
    nonce = uuid.uuid4().hex  # new content on every run: nothing cached by an earlier one
    (code / "train.py").write_text(f"print('v1 {nonce}')\n")
    _random_file(code / "data" / "big.bin", 9 * MiB)  # over the default 8 MiB threshold
    first = melon_hook.stage(_spec(code))
    big = first.files[CODE_FILE_KEY + "data/big.bin"]
    assert big.uploaded_bytes == 9 * MiB
    assert first.files["code"].size < MiB  # the archive holds train.py only

    (code / "train.py").write_text(f"print('v2 {nonce}')\n")
    second = melon_hook.stage(_spec(code))
    assert second.files["code"].url != first.files["code"].url
    assert second.uploaded_bytes == second.files["code"].uploaded_bytes == second.files["code"].size
    assert second.files[CODE_FILE_KEY + "data/big.bin"].uploaded_bytes == 0
    assert melon_hook.stage(_spec(code)).uploaded_bytes == 0


LIST_AND_READ = (
    "import hashlib, os\n"
    "for rel in ('train.py', 'data/small.txt', 'data/big.bin'):\n"
    "    with open(rel, 'rb') as f:\n"
    "        print('FILE', rel, hashlib.sha256(f.read()).hexdigest())\n"
    "print('LIST', sorted(os.listdir('data')))\n"
    "print('VERSION', open('version.txt').read().strip())\n"
)


def test_job_sees_big_and_small_files_at_their_paths_after_a_change(jobs, tmp_path):
    """YARN localizes the big file on its own; the executor puts it back at data/big.bin beside the archive's
    data/small.txt. After an edit (only the archive re-uploaded), the job sees the new small file and the same
    big one."""
    import hashlib

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(LIST_AND_READ)
    (code / "data").mkdir()
    (code / "data" / "small.txt").write_text("small\n")
    (code / "version.txt").write_text("v1\n")
    _random_file(code / "data" / "big.bin", 9 * MiB)
    digest = {
        rel: hashlib.sha256((code / rel).read_bytes()).hexdigest()
        for rel in ("train.py", "data/small.txt", "data/big.bin")
    }

    def run() -> str:
        app_id = jobs.submit(
            {
                "name": "code-files",
                "code": str(code),
                "entrypoint": "python train.py",
                "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
            }
        )
        app = jobs.wait(app_id)
        assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
        (out,) = jobs.container_logs(app_id).values()
        return out

    out = run()
    for rel, sha in digest.items():
        assert f"FILE {rel} {sha}" in out, out
    assert "LIST ['big.bin', 'small.txt']" in out and "VERSION v1" in out, out

    (code / "version.txt").write_text("v2\n")
    (code / "data" / "small.txt").write_text("small, changed\n")
    report = jobs.hook.stage(_spec(code))
    assert report.files[CODE_FILE_KEY + "data/big.bin"].uploaded_bytes == 0
    out = run()
    assert f"FILE data/big.bin {digest['data/big.bin']}" in out, out
    changed = hashlib.sha256(b"small, changed\n").hexdigest()
    assert f"FILE data/small.txt {changed}" in out and "VERSION v2" in out, out


def test_new_big_file_is_hashed_while_it_uploads_and_a_sample_collision_is_still_exact(melon_hook, tmp_path):
    """put_file_hashing: new content is read once (uploaded and hashed together) and lands at its real
    SHA-256; a second file with the same size and the same sampled MiBs (so the same sample key) but other
    bytes in between is hashed in full and staged as its own object; repeats upload nothing."""
    import hashlib

    from airflow_provider_melon.hadoop.hdfs_io import sample_key

    one = tmp_path / "one.bin"
    _random_file(one, 9 * MiB)
    two = tmp_path / "two.bin"
    data = bytearray(one.read_bytes())
    data[2 * MiB] ^= 0xFF  # outside the first, middle and last MiB
    two.write_bytes(bytes(data))
    assert sample_key(one) == sample_key(two)

    from unittest import mock

    with mock.patch("airflow_provider_melon.hadoop.hdfs_io.file_sha256", side_effect=AssertionError("a second read")):
        first = melon_hook.stage_file("blob", one)  # new content: read once, while uploading
    digest = hashlib.sha256(one.read_bytes()).hexdigest()
    assert first.uploaded_bytes == 9 * MiB and first.url.endswith(f"/cache/{digest}/blob")
    index = f"{melon_hook.cache_dir}/by-sample/{sample_key(one)}"
    assert melon_hook.hdfs.list(index) == [digest]  # lock and temporary file gone, digest recorded
    with melon_hook.hdfs.read(hdfs_path(first.url)) as remote:
        assert hashlib.sha256(remote.read()).hexdigest() == digest
    assert melon_hook.stage_file("blob", one).uploaded_bytes == 0

    other = melon_hook.stage_file("blob", two)
    assert other.uploaded_bytes == 9 * MiB
    assert other.url.endswith(f"/cache/{hashlib.sha256(bytes(data)).hexdigest()}/blob")
    assert sorted(melon_hook.hdfs.list(index)) == sorted([digest, hashlib.sha256(bytes(data)).hexdigest()])
    assert melon_hook.stage_file("blob", two).uploaded_bytes == 0


def test_concurrent_stagers_of_a_new_big_file_upload_it_once(minicluster, tmp_path):
    """Three hooks (as three Airflow tasks) stage the same new 12 MiB file at once: one uploads it (under the
    sample key's lock), the others wait and find it cached."""
    from concurrent.futures import ThreadPoolExecutor

    from airflow_provider_melon.cli import melon_hook_for_cluster

    blob = tmp_path / "blob.bin"
    _random_file(blob, 12 * MiB)
    hooks = [melon_hook_for_cluster(minicluster.work_dir) for _ in range(3)]
    with ThreadPoolExecutor(3) as pool:
        staged = list(pool.map(lambda h: h.stage_file("blob", blob), hooks))
    assert len({s.url for s in staged}) == 1
    assert sorted(s.uploaded_bytes for s in staged) == [0, 0, 12 * MiB]
