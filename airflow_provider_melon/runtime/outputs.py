"""Outputs and inputs without HDFS code in the job (stdlib only).

Every task gets a local folder in ``$MELON_OUTPUT_<NAME>`` for each declared HDFS output, and the output task
publishes it to its target after the job's process exits 0 (:func:`publish`: upload beside, then rename into
place); each localized input's path is in ``$MELON_INPUT_<NAME>``. ``docs/internals.md``, "The task executor" →
"Outputs and inputs", gives the rules and the environment the submission passes.
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import TYPE_CHECKING, Callable, Mapping, Optional

if TYPE_CHECKING:  # imported where used: only the output task publishes, and urllib is costly at every start
    from airflow_provider_melon.runtime.webhdfs import WebHdfs

LOCAL_ROOT = "melon-outputs"


class OutputError(RuntimeError):
    pass


def env_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def hdfs_path(target: str) -> Optional[str]:
    """``hdfs://nn:8020/a/b`` or ``/a/b`` → ``/a/b``; anything else (``file://``, ``s3a://``) → None."""
    if target.startswith("hdfs://"):
        rest = target[len("hdfs://") :]
        return "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    return target if target.startswith("/") else None


def declared(env: Mapping[str, str]) -> dict[str, str]:
    raw = env.get("MELON_OUTPUTS_B64")
    if not raw:
        return {}
    try:
        outputs = json.loads(base64.b64decode(raw).decode("utf-8"))
    except ValueError as exc:
        raise OutputError(f"MELON_OUTPUTS_B64 is not base64 JSON: {exc}") from None
    return {str(k): str(v) for k, v in outputs.items()}


def child_env(env: Mapping[str, str], workdir: str) -> dict[str, str]:
    """``MELON_OUTPUT_<NAME>`` (a fresh local folder for HDFS outputs) and ``MELON_INPUT_<NAME>`` for the job."""
    out: dict[str, str] = {}
    for name, target in declared(env).items():
        if hdfs_path(target) is None:
            out[f"MELON_OUTPUT_{env_name(name)}"] = target
            continue
        local = os.path.abspath(os.path.join(workdir, LOCAL_ROOT, name))
        os.makedirs(local, exist_ok=True)
        out[f"MELON_OUTPUT_{env_name(name)}"] = local
    for link in filter(None, (env.get("MELON_INPUTS") or "").split(",")):
        out[f"MELON_INPUT_{env_name(link)}"] = os.path.abspath(link)
    return out


def is_output_task(env: Mapping[str, str], role: str, index: int) -> bool:
    return bool(declared(env)) and env.get("MELON_OUTPUT_ROLE") == role and index == 0


def publish(
    env: Mapping[str, str], workdir: str, log: Callable[[str], None], client: Optional[WebHdfs] = None
) -> dict[str, str]:
    """Publish each HDFS output folder of this task to its declared path (see the module docstring). Returns
    name → HDFS path. Raises :class:`OutputError` naming the output."""
    from airflow_provider_melon.runtime.tokens import container_hdfs_token
    from airflow_provider_melon.runtime.webhdfs import WebHdfs, WebHdfsError

    outputs = {n: (t, p) for n, t in declared(env).items() if (p := hdfs_path(t)) is not None}
    if not outputs:
        return {}
    if client is None:
        url, user = env.get("MELON_WEBHDFS_URL"), env.get("MELON_HDFS_USER") or env.get("USER") or "root"
        if not url:
            raise OutputError("MELON_WEBHDFS_URL is not set: cannot publish outputs " + ", ".join(outputs))
        client = WebHdfs(url, user, delegation=container_hdfs_token(dict(env)))
    overwrite = env.get("MELON_OUTPUT_OVERWRITE", "0") in ("1", "true", "True")
    published = {}
    for name, (target, hdfs) in outputs.items():
        path = hdfs.rstrip("/") or "/"
        local = os.path.join(workdir, LOCAL_ROOT, name)
        items = os.listdir(local) if os.path.isdir(local) else []
        if not items:
            raise OutputError(
                f"output {name!r}: the job wrote nothing to $MELON_OUTPUT_{env_name(name)} ({local}); "
                f"nothing to publish to {target}"
            )
        # a file named as the target (metrics.json for .../metrics.json), written alone, is the output itself;
        # else the folder is
        base = path.rsplit("/", 1)[-1]
        source = os.path.join(local, base) if items == [base] and os.path.isfile(os.path.join(local, base)) else local
        try:
            published[name] = _publish_one(client, source, path, overwrite, log, name)
        except WebHdfsError as exc:
            raise OutputError(f"output {name!r}: {exc}") from None
    return published


def _publish_one(
    client: WebHdfs, source: str, path: str, overwrite: bool, log: Callable[[str], None], name: str
) -> str:
    import uuid

    from airflow_provider_melon.runtime.webhdfs import WebHdfsError

    parent, base = path.rsplit("/", 1) if path.count("/") > 1 else ("", path.lstrip("/"))
    tmp = f"{parent}/.{base}.melon-{uuid.uuid4().hex[:12]}.tmp"
    client.mkdirs(parent or "/")
    try:
        files = client.upload_tree(source, tmp)
        if client.status(path) is not None:
            if not overwrite:
                raise OutputError(
                    f"output {name!r}: {path} exists; set overwrite_outputs: true in the job to replace it"
                )
            old = f"{parent}/.{base}.melon-old-{uuid.uuid4().hex[:12]}"
            client.rename(path, old)
            try:
                client.rename(tmp, path)
            except WebHdfsError:
                client.rename(old, path)
                raise
            client.delete(old)
        else:
            # the rename refuses a path written meanwhile (never moves the upload into it)
            client.rename(tmp, path)
    except (OutputError, WebHdfsError):
        _delete_quietly(client, tmp, log)
        raise
    log(f"output {name!r}: {files} file(s) published to {path}")
    return path


def _delete_quietly(client: WebHdfs, path: str, log: Callable[[str], None]) -> None:
    from airflow_provider_melon.runtime.webhdfs import WebHdfsError

    try:
        client.delete(path)
    except WebHdfsError as exc:
        log(f"could not delete the upload {path}: {exc}")
