import io
import os
import time
import zipfile
from unittest import mock

import pytest

from airflow_provider_melon.hadoop.bundle import deterministic_zip, folder_files, runtime_files
from airflow_provider_melon.hooks.melon import MelonHook
from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.runtime.outputs import hdfs_path


def test_zip_is_deterministic_across_mtimes_and_skips_caches(tmp_path):
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("b")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"junk")
    first = deterministic_zip(folder_files(tmp_path))
    os.utime(tmp_path / "a.py", (time.time() + 100, time.time() + 100))
    assert deterministic_zip(folder_files(tmp_path)) == first
    names = zipfile.ZipFile(io.BytesIO(first)).namelist()
    assert names == ["a.py", "sub/b.txt"]
    (tmp_path / "a.py").write_text("A = 2\n")
    assert deterministic_zip(folder_files(tmp_path)) != first


def test_runtime_archive_holds_only_what_containers_import():
    names = {name for name, _ in runtime_files()}
    assert "airflow_provider_melon/__init__.py" in names
    assert "airflow_provider_melon/runtime/executor.py" in names and "airflow_provider_melon/gpu/ledger.py" in names
    assert not any(n.startswith(("airflow_provider_melon/hooks", "airflow_provider_melon/operators")) for n in names)


def test_hdfs_path_strips_the_authority_and_is_none_outside_hdfs():
    assert hdfs_path("hdfs://nn:8020/a/b") == "/a/b"
    assert hdfs_path("hdfs:///a/b") == "/a/b"
    assert hdfs_path("hdfs://nn:8020") == "/"
    assert hdfs_path("/a/b") == "/a/b"
    for elsewhere in ("file:///a/b", "s3a://bucket/a/b", "a/b"):
        assert hdfs_path(elsewhere) is None


def test_the_hook_refuses_a_path_outside_hdfs_before_asking_hdfs():
    client = mock.Mock()
    hook = MelonHook(yarn_hook=YarnHook(rm_urls=["http://rm:8088"], user="alice"), hdfs_client=client)
    for elsewhere in ("s3a://bucket/env.tar.gz", "envs/env.tar.gz"):
        with pytest.raises(ValueError, match=f"{elsewhere!r} is not in HDFS"):
            hook.file_status(elsewhere)
    assert not hook.in_staging_dir("s3a://bucket/x")
    client.status.assert_not_called()


def test_explicit_yarn_hook_reads_no_airflow_connection():
    yarn = YarnHook(rm_urls=["http://rm:8088"], user="alice")
    with mock.patch.object(YarnHook, "get_connection", side_effect=AssertionError("no connection lookups")):
        hook = MelonHook(yarn_hook=yarn, hdfs_client=object(), fs_default_fs="hdfs://nn:8020")
    assert hook.user == "alice" and hook.cache_dir == "/user/alice/.melon/cache"
    assert hook.hdfs_uri("/x") == "hdfs://nn:8020/x"


def test_connection_extras_configure_the_hook():
    conn = mock.Mock(
        extra_dejson={
            "fs_default_fs": "hdfs://nn:9000",
            "python": "/opt/py/bin/python",
            "am_classpath": "/conf:/jars/*",
            "container_env": {"A": "1"},
        }
    )
    with mock.patch.object(YarnHook, "get_connection", return_value=conn):
        hook = MelonHook(yarn_hook=YarnHook("my_yarn"), hdfs_client=object(), user="bob")
    assert (hook.fs_default_fs, hook.default_python, hook.am_classpath) == (
        "hdfs://nn:9000",
        "/opt/py/bin/python",
        "/conf:/jars/*",
    )
    assert hook.container_env == {"A": "1"}


def test_staging_user_is_the_yarn_connections_login(monkeypatch):
    """Staging lands in the HDFS home of the user the application runs as (the connection's login), not the OS
    user of the Airflow worker (a container's root)."""
    from airflow.sdk import Connection

    monkeypatch.setenv("USER", "root")
    conn = Connection(
        conn_id="yarn_x",
        conn_type="yarn",
        host="http://rm:8088",
        login="airflow",
        extra='{"fs_default_fs": "hdfs://nn:8020"}',
    )
    with mock.patch.object(YarnHook, "get_connection", return_value=conn):
        hook = MelonHook(yarn_hook=YarnHook("yarn_x"), hdfs_client=object())
    assert hook.user == "airflow" and hook.cache_dir == "/user/airflow/.melon/cache"
    assert hook.yarn.user == "airflow"  # the RM calls act as the same user


def test_staging_dir_comes_from_the_provider_config(monkeypatch):
    monkeypatch.setenv("AIRFLOW__MELON__STAGING_DIR", "/shared/melon/{user}")
    hook = MelonHook(yarn_hook=YarnHook(rm_urls=["http://rm:8088"], user="carol"), hdfs_client=object())
    assert hook.cache_dir == "/shared/melon/carol/cache"


def test_zip_streamed_to_a_file_is_the_same_bytes_and_hash_is_chunked(tmp_path):
    from airflow_provider_melon.hadoop import bundle
    from airflow_provider_melon.hadoop.hdfs_io import file_sha256

    (tmp_path / "a.py").write_text("print(1)\n" * 1000)
    (tmp_path / "blob").write_bytes(os.urandom(3 * bundle.CHUNK_BYTES + 17))  # more than one block
    files = folder_files(tmp_path)
    out = io.BytesIO()
    bundle.write_deterministic_zip(files, out)
    assert out.getvalue() == deterministic_zip(files)
    with zipfile.ZipFile(out) as zf:
        assert zf.read("blob") == (tmp_path / "blob").read_bytes()
    import hashlib

    assert file_sha256(tmp_path / "blob") == hashlib.sha256((tmp_path / "blob").read_bytes()).hexdigest()


def test_split_code_files_by_size(tmp_path):
    from airflow_provider_melon.hadoop.bundle import split_code_files

    (tmp_path / "train.py").write_text("x")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(b"\0" * 100)
    (tmp_path / "data" / "edge.bin").write_bytes(b"\0" * 99)
    small, large = split_code_files(folder_files(tmp_path), 100)
    assert sorted(n for n, _ in small) == ["data/edge.bin", "train.py"]
    assert [n for n, _ in large] == ["data/big.bin"]


def _hook_on(client) -> MelonHook:
    return MelonHook(
        yarn_hook=YarnHook(rm_urls=["http://rm:8088"], user="alice"), hdfs_client=client, fs_default_fs="hdfs://nn:8020"
    )


def test_a_file_gone_right_after_its_write_is_an_hdfs_error_naming_it():
    """HDFS answers no status for a file just written (someone deleted it meanwhile; a real NameNode cannot be made
    to do this on demand, hence the stand-in client): a one-line HDFS error naming the path, not a TypeError."""
    from airflow_provider_melon.hadoop.hdfs_io import MelonHdfsError

    client = mock.Mock()
    client.status.return_value = None
    with pytest.raises(MelonHdfsError, match="HDFS status /user/alice/run/spec.json failed: gone right after"):
        _hook_on(client).put_bytes("/user/alice/run/spec.json", b"{}", cached=False)
    client.write.assert_called_once()


def test_gpu_memory_records_only_the_tasks_that_name_their_role():
    """An AM final status whose task names no role: no record under a ``null`` role in the memory history."""
    final = {
        "state": "FINISHED",
        "tasks": [
            {"role": "worker", "initial_gpu_memory_mb": 1024, "gpu_memory_peak_mb": 900},
            {"initial_gpu_memory_mb": 2048, "gpu_memory_peak_mb": 1500},
        ],
    }
    with mock.patch("airflow_provider_melon.hadoop.memory_history.record_run", return_value="/h/app.json") as record:
        assert _hook_on(mock.Mock()).record_run("k", "application_1_0001", final) == "/h/app.json"
    records = record.call_args.args[4]
    assert list(records) == ["worker"] and records["worker"]["peak_mb"] == 900
