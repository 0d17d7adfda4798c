"""The user's working folder inside a YARN container: the code archive's files, its big files at their paths and
the localized inputs side by side (used by ``runtime/executor.py``; stdlib only)."""

from __future__ import annotations

import base64
import json
import os
from typing import Mapping, Optional

WORKDIR = "melon-work"
_YARN_FILES = ("launch_container.sh", "container_tokens", "default_container_executor", "tmp")


def code_files(env: Mapping[str, str]) -> dict[str, str]:
    """``MELON_CODE_FILES_B64``: the code folder's big files, localized one by one (link name → path in the
    folder); {} without it. A path that could leave the working folder is a ``ValueError`` (the executor
    exits 2 with it)."""
    raw = env.get("MELON_CODE_FILES_B64")
    if not raw:
        return {}
    try:
        links: dict[str, str] = json.loads(base64.b64decode(raw, validate=True).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"MELON_CODE_FILES_B64 is not base64 of a JSON object: {exc}") from None
    for link, rel in links.items():
        parts = str(rel).split("/")
        if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "/" in link:
            raise ValueError(f"MELON_CODE_FILES_B64: {link!r} -> {rel!r} is not a plain relative path")
    return links


def _place_code_file(work: str, rel: str, target: str) -> None:
    """Link ``target`` at ``work/rel``. A folder on the way that is a link into the (read-only, shared) code
    archive becomes a real folder of links to its entries, so the file joins the archive's files there."""
    *folders, name = rel.split("/")
    here = work
    for folder in folders:
        path = os.path.join(here, folder)
        if os.path.islink(path):
            source = os.path.realpath(path)
            os.unlink(path)
            os.mkdir(path)
            for entry in os.listdir(source):
                os.symlink(os.path.join(source, entry), os.path.join(path, entry))
        elif not os.path.isdir(path):
            os.mkdir(path)
        here = path
    dest = os.path.join(here, name)
    if not os.path.lexists(dest):
        os.symlink(target, dest)


def prepare_workdir(container_dir: str, code_links: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The user's working folder: the code archive's files *and* the other localized resources side by side.

    The code is localized as ``./code`` (a link into YARN's cache, shared by the app's containers on the node,
    so it is not written to) and each input as ``./<name>``. A script run inside ``code`` could not see the
    inputs by relative path (``..`` is the cache folder, not the container's), so this builds ``./melon-work``:
    links to every entry of ``code`` and to every other localized resource (code wins a name clash). Writes of
    the user's process land there, private to this container. Without a code archive: the container's folder.
    ``code_links`` (:func:`code_files`): the code folder's big files, localized on their own, go to their paths
    in the folder, as if they had been in the archive.
    """
    code = os.path.join(container_dir, "code")
    code_links = dict(code_links or {})
    if not os.path.isdir(code) and not code_links:
        return None
    work = os.path.join(container_dir, WORKDIR)
    os.makedirs(work, exist_ok=True)
    links = {}
    for name in os.listdir(container_dir):
        path = os.path.join(container_dir, name)
        if name in ("code", WORKDIR) or name in code_links or name.startswith(_YARN_FILES) or name.startswith("."):
            continue
        if os.path.islink(path):  # localized resources are links into the NodeManager's caches
            links[name] = os.path.realpath(path)
    for name in os.listdir(code) if os.path.isdir(code) else ():
        links[name] = os.path.realpath(os.path.join(code, name))
    for name, target in links.items():
        dest = os.path.join(work, name)
        if not os.path.lexists(dest):
            os.symlink(target, dest)
    for link, rel in sorted(code_links.items(), key=lambda item: item[1]):
        _place_code_file(work, rel, os.path.realpath(os.path.join(container_dir, link)))
    return work
