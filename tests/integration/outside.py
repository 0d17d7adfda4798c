"""A provider wheel installed outside the checkout, as on an Airflow host, without downloading anything: a fresh venv
holding the wheel (``pip install --no-deps``) and, on its ``sys.path`` through one ``.pth`` line, exactly the
distributions a fresh install of that wheel with no extras pulls in (:func:`closure`: its ``Requires-Dist``
followed through the project venv's installed metadata), their files linked one by one into a folder of their own.
So a module that only an extra brings (the HDFS provider, the Kerberos libraries) is not importable there, as it is
not on a host that installed the wheel alone.

Used by tests/integration/test_wheel_install.py and tests/integration/test_release_sdist.py.
"""

from __future__ import annotations

import contextlib
import email
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def requirements(meta: email.message.Message, extras: frozenset[str]) -> list[Requirement]:
    """The ``Requires-Dist`` of a distribution's metadata that apply here with ``extras`` requested."""
    wanted = []
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            wanted.append(req)
    return wanted


def closure(wheel: Path) -> dict[str, metadata.Distribution]:
    """Canonical name → the project venv's installed distribution, for every distribution that installing
    ``wheel`` with no extras pulls in (the wheel's own not included). A requirement that applies here but is not
    installed in the project venv is an error naming it."""
    with zipfile.ZipFile(wheel) as whl:
        [name] = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        root = email.message_from_bytes(whl.read(name))
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(req, root["Name"]) for req in requirements(root, frozenset())]
    while todo:
        req, by = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise AssertionError(f"{by} requires {req}, which the project venv does not have") from None
        found[key[0]] = dist
        todo.extend((sub, dist.metadata["Name"]) for sub in requirements(dist.metadata, key[1]))
    return found


def built_here(dist: metadata.Distribution) -> list[str]:
    """The wheel tags of ``dist`` that pip gives a wheel it compiled on this machine: a bare ``linux_*`` platform.
    Indexes take Linux binaries only as ``manylinux``/``musllinux`` wheels, so such a tag means that installing the
    distribution needed a compiler (and its C libraries' headers)."""
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    ]
    return [tag for tag in tags if tag.rsplit("-", 1)[-1].startswith("linux_")]


@dataclass
class Outside:
    venv: Path
    python: Path
    deps: Path  # the folder of the closure's files, on the venv's sys.path
    closure: dict[str, metadata.Distribution]


def install(wheel: Path, root: Path) -> Outside:
    """A fresh venv under ``root`` with ``wheel`` installed and the closure of its requirements on its path."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # nothing of the checkout
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean,
    )
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-4000:]
    deps = root / "deps"
    dists = closure(wheel)
    folders: set[str] = set()
    for dist in dists.values():
        for file in dist.files or ():
            if file.parts[0] == "..":  # the scripts in bin/
                continue
            folder = os.path.join(deps, os.path.dirname(file))
            if folder not in folders:
                os.makedirs(folder, exist_ok=True)
                folders.add(folder)
            with contextlib.suppress(FileExistsError):  # a file two distributions both ship: the first one's
                os.symlink(dist.locate_file(file), os.path.join(deps, file))
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "melon-test-deps.pth").write_text(f"{deps}\n")
    return Outside(venv, py, deps, dists)
