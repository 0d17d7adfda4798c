import logging

import pytest
from hdfs.util import HdfsError

from airflow_provider_melon.hadoop.hdfs_io import MelonHdfsError, hdfs_errors, put_once, quiet_client_logs, run_slug

JAVA_TRACE = (
    "Cannot create file/user/root/x. Name node is in safe mode.\n"
    "\tat org.apache.hadoop.hdfs.server.namenode.FSNamesystem.checkNameNodeSafeMode(FSNamesystem.java:1570)\n"
    "\tat org.apache.hadoop.hdfs.server.namenode.FSNamesystem.startFile(FSNamesystem.java:2531)\n"
)


@pytest.mark.parametrize(
    "run_id",
    [
        "manual__2026-11-30T14:57:19.941365+00:00",
        "scheduled__2026-01-01T00:00:00+00:00",
        "a:b",
        "a b/c",
    ],
)
def test_run_slug_is_a_safe_hdfs_name(run_id):
    slug = run_slug(run_id)
    assert slug and all(c.isalnum() or c in "._-" for c in slug), slug
    assert run_slug(run_id) == slug  # stable


def test_run_slug_keeps_safe_ids_and_separates_lookalikes():
    assert run_slug("backfill_2026-01-01") == "backfill_2026-01-01"
    assert run_slug("a:b") != run_slug("a_b") and run_slug("a:b") != run_slug("a+b")
    with pytest.raises(ValueError, match="run_id"):
        run_slug("")


def test_hdfs_errors_become_one_line_with_the_fix(caplog):
    caplog.set_level(logging.DEBUG, logger="airflow_provider_melon.hadoop.hdfs_io")
    with pytest.raises(MelonHdfsError) as info:
        with hdfs_errors("write", "/user/root/x"):
            raise HdfsError(JAVA_TRACE, exception="SafeModeException")
    text = str(info.value)
    assert "\n" not in text and "FSNamesystem" not in text
    assert text.startswith("HDFS write /user/root/x failed: SafeModeException: Cannot create file")
    assert "dfsadmin -safemode leave" in text
    assert "checkNameNodeSafeMode" in caplog.text  # the whole trace at debug


def test_connection_errors_name_the_connection_fix():
    import requests

    with pytest.raises(MelonHdfsError, match="nothing listens at the WebHDFS address"):
        with hdfs_errors("status", "/"):
            raise requests.ConnectionError("HTTPConnectionPool: Max retries exceeded ([Errno 111] Connection refused)")


def test_client_chatter_is_demoted_to_debug(caplog):
    quiet_client_logs()
    quiet_client_logs()  # idempotent: one filter
    logger = logging.getLogger("hdfs.client")
    assert len(logger.filters) == 1
    caplog.set_level(logging.INFO)
    logger.info("Fetching status for '/x'.")
    logger.warning("a real warning")
    assert [r.getMessage() for r in caplog.records if r.name == "hdfs.client"] == ["a real warning"]
    caplog.set_level(logging.DEBUG, logger="hdfs.client")
    logger.info("Writing to '/y'.")
    [record] = [r for r in caplog.records if r.getMessage() == "Writing to '/y'."]
    assert record.levelname == "DEBUG"


class _RacingClient:
    """An in-memory HDFS in which another writer's identical copy lands between our upload and our rename."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.deleted: list[str] = []

    def status(self, path, strict=True):
        if path in self.files:
            return {"type": "FILE", "length": len(self.files[path]), "modificationTime": 1}
        return None

    def write(self, path, data, overwrite=False):
        if path in self.files and not overwrite:
            raise HdfsError(f"{path} for client 127.0.0.1 already exists", exception="FileAlreadyExistsException")
        self.files[path] = bytes(data)

    def rename(self, src, dst):
        self.files[dst] = self.files[src]  # the other writer wins the race ...
        raise HdfsError("Unable to rename %r to %r.", src, dst)

    def delete(self, path):
        self.deleted.append(path)
        return self.files.pop(path, None) is not None


def test_losing_the_rename_race_counts_as_cached_and_cleans_up():
    client = _RacingClient()
    status, uploaded = put_once(client, "/c/abc/code.zip", b"zipbytes")
    assert (status["length"], uploaded) == (8, False)
    assert sorted(client.files) == ["/c/abc/code.zip"]  # temp file and lock removed
    assert any(p.endswith(".tmp") for p in client.deleted) and "/c/abc/.code.zip.lock" in client.deleted


@pytest.mark.parametrize(
    "exc, retriable",
    [
        (HdfsError(JAVA_TRACE, exception="SafeModeException"), True),
        (HdfsError("Failed to find datanode, suggest to check cluster health.", exception="IOException"), True),
        (HdfsError("End of File Exception between local host ...; java.io.EOFException"), True),
        (ConnectionRefusedError("[Errno 111] Connection refused"), True),
        (HdfsError("Permission denied: user=bob, access=WRITE", exception="AccessControlException"), False),
        (HdfsError("File /x already exists", exception="FileAlreadyExistsException"), False),
    ],
)
def test_transient_causes_are_retriable_and_others_are_not(exc, retriable):
    with pytest.raises(MelonHdfsError) as info:
        with hdfs_errors("write", "/x"):
            raise exc
    assert info.value.retriable is retriable


class FlakyClient:
    """An in-memory HDFS whose writes of temporary files and deletes fail while ``down`` (the NameNode away)."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.down = False

    def status(self, path, strict=False):
        if path in self.files:
            return {"type": "FILE", "length": len(self.files[path]), "modificationTime": 1}
        return None

    def write(self, path, data, overwrite=False):
        if path in self.files and not overwrite:
            raise HdfsError(f"{path} already exists", exception="FileAlreadyExistsException")
        if self.down and path.endswith(".tmp"):
            self.files[path] = data[:3]  # half written
            raise ConnectionResetError("[Errno 104] Connection reset by peer")
        self.files[path] = data

    def rename(self, src, dst):
        self.files[dst] = self.files.pop(src)

    def delete(self, path):
        if self.down:
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        return self.files.pop(path, None) is not None


def test_a_retry_cleans_up_and_does_not_wait_on_its_own_lock(caplog):
    client = FlakyClient()
    client.down = True  # the NameNode goes away mid-upload: the half-written file and our lock stay behind
    with pytest.raises(MelonHdfsError) as info:
        put_once(client, "/c/a/code.zip", b"x" * 10)
    assert info.value.retriable
    assert "/c/a/.code.zip.lock" in client.files and any(p.endswith(".tmp") for p in client.files)
    assert "/c/a/code.zip" not in client.files  # nothing half-written under the target
    client.down = False
    caplog.set_level(logging.WARNING, logger="airflow_provider_melon.hadoop.hdfs_io")
    st, uploaded = put_once(client, "/c/a/code.zip", b"x" * 10, lock_wait=30)  # the retry
    assert uploaded and st["length"] == 10
    assert sorted(client.files) == ["/c/a/code.zip"]  # our orphans removed, no lock left
    assert "upload lock" not in caplog.text  # it did not wait out its own lock as a stranger's


def test_block_reader_rewinds_for_a_resend_and_hashes_what_was_sent_once(tmp_path):
    """requests-kerberos seeks the body back to where it started after a 401 (SPNEGO on WebHDFS): the upload is
    read again from the start, and the hash is of the file, not of the file twice."""
    import hashlib
    import io
    import os

    from airflow_provider_melon.hadoop.hdfs_io import BlockReader

    data = os.urandom(3 * 1024 * 1024 + 5)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    with open(path, "rb") as handle:
        body = BlockReader(handle, len(data), hashing=True)
        start = body.tell()
        body.read()  # the first send, cut short by a 401
        body.seek(start)
        sent = b"".join(iter(lambda: body.read(16384), b""))
        assert sent == data
        assert body.sha256.hexdigest() == hashlib.sha256(data).hexdigest()
        body.seek(start)  # requests-kerberos rewinds after the final response too: the hash of what was sent stays
        assert body.sha256.hexdigest() == hashlib.sha256(data).hexdigest()
        with pytest.raises(io.UnsupportedOperation):
            body.seek(5)
