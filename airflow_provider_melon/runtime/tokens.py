"""Hadoop's token storage file (``HADOOP_TOKEN_FILE_LOCATION``), read in a container: the AM's secret arrives
there (``credentials.secrets`` of the submission, handed on by the AM), never in an environment variable that a
launch script or an NM log would show.

Format (``Credentials.writeTokenStorageToStream``, the WRITABLE form YARN writes): ``HDTS``, a version byte 0, then
a vint count of tokens, each ``alias`` (Text) + Token (vint-length identifier and password, Text kind and
service), then a vint count of secrets, each ``alias`` (Text) + vint length + bytes. Vints are Hadoop's
``WritableUtils`` zero-compressed encoding.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from typing import TypedDict

#: the alias of the AM's shared secret in the application's credentials (MelonApplicationMaster reads the same)
AM_SECRET_ALIAS = "melon.am.secret"
#: the kind of an HDFS delegation token (the one the submission adds, renewed by the RM while the app runs)
HDFS_TOKEN_KIND = "HDFS_DELEGATION_TOKEN"


class TokenFileError(ValueError):
    pass


class Token(TypedDict):
    """One token of the file, as :func:`read_token_file` returns it."""

    identifier: bytes
    password: bytes
    kind: str
    service: str


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise TokenFileError("truncated token file")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def vint(self) -> int:
        first = int.from_bytes(self.take(1), "big", signed=True)
        if first >= -112:
            return first
        negative = first < -120
        size = -(first + 120) if negative else -(first + 112)
        value = int.from_bytes(self.take(size), "big")
        return ~value if negative else value

    def blob(self) -> bytes:
        return self.take(self.vint())


def read_token_file(data: bytes) -> tuple[dict[str, Token], dict[str, bytes]]:
    """``(tokens, secrets)``: alias → ``{kind, service, identifier, password}``, alias → secret bytes."""
    r = _Reader(data)
    if r.take(4) != b"HDTS":
        raise TokenFileError("not a Hadoop token storage file (no HDTS magic)")
    version = r.take(1)[0]
    if version != 0:
        raise TokenFileError(f"token storage format {version} is not supported (only the WRITABLE format 0)")
    tokens: dict[str, Token] = {}
    for _ in range(r.vint()):
        alias = r.blob().decode()
        ident, password = r.blob(), r.blob()
        kind, service = r.blob().decode(), r.blob().decode()
        tokens[alias] = {"identifier": ident, "password": password, "kind": kind, "service": service}
    secrets: dict[str, bytes] = {}
    for _ in range(r.vint()):
        alias = r.blob().decode()
        secrets[alias] = r.blob()
    return tokens, secrets


def _container_credentials(env: Mapping[str, str] | None) -> tuple[dict[str, Token], dict[str, bytes]]:
    """:func:`read_token_file` of this container's ``HADOOP_TOKEN_FILE_LOCATION``; empty without one."""
    path = (env if env is not None else os.environ).get("HADOOP_TOKEN_FILE_LOCATION")
    if not path or not os.path.isfile(path):
        return {}, {}
    with open(path, "rb") as f:
        return read_token_file(f.read())


def container_secret(alias: str = AM_SECRET_ALIAS, env: Mapping[str, str] | None = None) -> str | None:
    """The secret ``alias`` from this container's token file, or None (no file, or no such secret)."""
    value = _container_credentials(env)[1].get(alias)
    return value.decode() if value is not None else None


def _write_vint(n: int) -> bytes:
    """Hadoop's ``WritableUtils.writeVInt`` for a length (``n >= 0``)."""
    if n <= 127:
        return bytes([n])
    size = (n.bit_length() + 7) // 8
    return (-112 - size).to_bytes(1, "big", signed=True) + n.to_bytes(size, "big")


def url_string(token: Token) -> str:
    """A token as ``Token.encodeToUrlString`` writes it (what WebHDFS's ``delegation=`` takes): the token's
    Writable form (vint-length identifier and password, Text kind and service) in unpadded URL-safe base64."""
    raw = b"".join(
        _write_vint(len(part)) + part
        for part in (token["identifier"], token["password"], token["kind"].encode(), token["service"].encode())
    )
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def container_hdfs_token(env: Mapping[str, str] | None = None) -> str | None:
    """This container's HDFS delegation token as a ``delegation=`` string, or None (no token file: a cluster
    without Kerberos, where WebHDFS takes ``user.name``). The token is the submission's (see
    :mod:`airflow_provider_melon.delegation`), handed on by the AM; the RM renews it while the app runs, so it
    stays valid past the NameNode's renew interval without any action here."""
    hdfs = [t for t in _container_credentials(env)[0].values() if t["kind"] == HDFS_TOKEN_KIND]
    return url_string(hdfs[0]) if hdfs else None
