"""The container side of the AM secret: Hadoop's token storage file (WRITABLE format) parsed in Python."""

from __future__ import annotations

import pytest

from airflow_provider_melon.runtime import tokens
from airflow_provider_melon.runtime.executor import Config, Fatal


def _vint(n: int) -> bytes:  # Hadoop WritableUtils.writeVInt
    if -112 <= n <= 127:
        return n.to_bytes(1, "big", signed=True)
    lead = -112
    if n < 0:
        n, lead = ~n, -120
    size = (n.bit_length() + 7) // 8
    return (lead - size).to_bytes(1, "big", signed=True) + n.to_bytes(size, "big")


def _blob(b: bytes) -> bytes:
    return _vint(len(b)) + b


def token_file(secrets: dict[str, bytes], token_alias="t") -> bytes:
    out = b"HDTS" + b"\x00" + _vint(1)
    out += _blob(token_alias.encode()) + _blob(b"\x01" * 300) + _blob(b"pw") + _blob(b"HDFS_DELEGATION_TOKEN")
    out += _blob(b"127.0.0.1:8020")
    out += _vint(len(secrets))
    for k, v in secrets.items():
        out += _blob(k.encode()) + _blob(v)
    return out


def test_reads_tokens_and_secrets_with_long_vints():
    toks, secrets = tokens.read_token_file(token_file({"melon.am.secret": b"abc", "other": b"x" * 200}))
    assert toks["t"]["kind"] == "HDFS_DELEGATION_TOKEN" and len(toks["t"]["identifier"]) == 300
    assert secrets == {"melon.am.secret": b"abc", "other": b"x" * 200}


def test_bad_files_raise_token_file_error():
    with pytest.raises(tokens.TokenFileError, match="HDTS"):
        tokens.read_token_file(b"nope")
    with pytest.raises(tokens.TokenFileError, match="format 1"):
        tokens.read_token_file(b"HDTS\x01")
    with pytest.raises(tokens.TokenFileError, match="truncated"):
        tokens.read_token_file(token_file({"melon.am.secret": b"abc"})[:-2])


def test_executor_takes_the_secret_from_the_token_file(tmp_path):
    path = tmp_path / "container_tokens"
    path.write_bytes(token_file({"melon.am.secret": b"f00d"}))
    env = {
        "MELON_ROLE": "worker",
        "MELON_INDEX": "0",
        "MELON_AM_URL": "http://am:1",
        "MELON_ENTRYPOINT": "true",
        "HADOOP_TOKEN_FILE_LOCATION": str(path),
    }
    assert Config.from_env(env).secret == "f00d"
    path.write_bytes(token_file({}))
    with pytest.raises(Fatal, match="MELON_SECRET"):
        Config.from_env(env)


def _url_token_fields(s: str) -> tuple:
    """Decode ``Token.encodeToUrlString`` independently of the product: base64url, then Token.readFields."""
    import base64

    r = tokens._Reader(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
    return r.blob(), r.blob(), r.blob().decode(), r.blob().decode()


def test_container_hdfs_token_is_the_webhdfs_delegation_string(tmp_path):
    """The HDFS token of the container's token file, in the URL-safe unpadded form WebHDFS's delegation= takes
    (long identifier: a two-byte vint length)."""
    path = tmp_path / "container_tokens"
    path.write_bytes(token_file({"melon.am.secret": b"abc"}))
    s = tokens.container_hdfs_token({"HADOOP_TOKEN_FILE_LOCATION": str(path)})
    assert s and "=" not in s and "+" not in s and "/" not in s
    assert _url_token_fields(s) == (b"\x01" * 300, b"pw", "HDFS_DELEGATION_TOKEN", "127.0.0.1:8020")


def test_no_token_file_or_no_hdfs_token_means_simple_auth(tmp_path):
    from airflow_provider_melon.runtime.webhdfs import WebHdfs

    assert tokens.container_hdfs_token({}) is None
    path = tmp_path / "container_tokens"
    path.write_bytes(token_file({}).replace(b"HDFS_DELEGATION_TOKEN", b"YARN_AM_RM_TOKEN_XXXX"))
    assert tokens.container_hdfs_token({"HADOOP_TOKEN_FILE_LOCATION": str(path)}) is None
    assert WebHdfs("http://nn:9870", "alice").auth == {"user.name": "alice"}
    # with a token, user.name is not sent: WebHDFS refuses a user.name that differs from the token's owner
    assert WebHdfs("http://nn:9870", "alice", delegation="tok").auth == {"delegation": "tok"}
