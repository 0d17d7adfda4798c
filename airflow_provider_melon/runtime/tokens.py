"""Hadoop's token storage file (``HADOOP_TOKEN_FILE_LOCATION``), read in a container: the AM's secret arrives
there (``credentials.secrets`` of the submission, handed on by the AM), never in an environment variable that a
launch script or an NM log would show.

Format (``Credentials.writeTokenStorageToStream``, the WRITABLE form YARN writes): ``HDTS``, a version byte 0, then
a vint count of tokens, each ``alias`` (Text) + Token (vint-length identifier and password, Text kind and
service), then a vint count of secrets, each ``alias`` (Text) + vint length + bytes. Vints are Hadoop's
``WritableUtils`` zero-compressed encoding.
"""

from __future__ import annotations

import os

#: the alias of the AM's shared secret in the application's credentials (MelonApplicationMaster reads the same)
AM_SECRET_ALIAS = "melon.am.secret"


class TokenFileError(ValueError):
    pass


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise TokenFileError("truncated token file")
        out = self.data[self.pos:self.pos + n]
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


def read_token_file(data: bytes) -> tuple[dict[str, dict], dict[str, bytes]]:
    """``(tokens, secrets)``: alias → ``{kind, service, identifier, password}``, alias → secret bytes."""
    r = _Reader(data)
    if r.take(4) != b"HDTS":
        raise TokenFileError("not a Hadoop token storage file (no HDTS magic)")
    version = r.take(1)[0]
    if version != 0:
        raise TokenFileError(f"token storage format {version} is not supported (only the WRITABLE format 0)")
    tokens: dict[str, dict] = {}
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


def container_secret(alias: str = AM_SECRET_ALIAS, env: dict | None = None) -> str | None:
    """The secret ``alias`` from this container's token file, or None (no file, or no such secret)."""
    path = (env if env is not None else os.environ).get("HADOOP_TOKEN_FILE_LOCATION")
    if not path or not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        _, secrets = read_token_file(f.read())
    value = secrets.get(alias)
    return value.decode() if value is not None else None
