"""A job's code and the in-container runtime as archives: deterministic zips (sorted entries, fixed timestamps and
modes: the same contents always give the same bytes, so staging is content-addressed), the files of a code folder
(symlinked folders not followed, caches skipped) and of the runtime (``runtime/`` + ``gpu/``), and the split of a
code folder's big files, staged on their own. Airflow-free."""

from __future__ import annotations

import io
import logging
import os
import shutil
import stat
import zipfile
from pathlib import Path
from typing import BinaryIO, Iterable

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent.parent
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS = {"__pycache__", ".git", ".ipynb_checkpoints", ".pytest_cache"}


#: block size for reading local files (zipping, hashing): memory stays bounded by it, not by the file size
CHUNK_BYTES = 1 << 20


def deterministic_zip(files: Iterable[tuple[str, Path]]) -> bytes:
    """Zip ``(archive name, path)`` pairs so that the same contents always give the same bytes."""
    buf = io.BytesIO()
    write_deterministic_zip(files, buf)
    return buf.getvalue()


def write_deterministic_zip(files: Iterable[tuple[str, Path]], out: BinaryIO) -> None:
    """:func:`deterministic_zip` into ``out`` (a seekable file), each file streamed in :data:`CHUNK_BYTES` blocks."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, path in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(path, "rb") as src:
                info.file_size = os.fstat(src.fileno()).st_size  # decides ZIP64 up front, as writestr did
                with zf.open(info, "w") as dst:
                    shutil.copyfileobj(src, dst, CHUNK_BYTES)


def folder_files(folder: Path, prefix: str = "") -> list[tuple[str, Path]]:
    """``(archive name, path)`` of every regular file under ``folder``, for :func:`deterministic_zip`.

    Archive names are relative paths inside the folder (never absolute, never ``..``), and the zip holds regular
    files only, so the archive YARN unpacks into a container cannot point outside it. A symlink to a file is
    packed as the file it points to; a symlinked folder is not followed (a warning says so). A broken symlink
    or a file name that is not UTF-8 (a zip entry name must be) is an error naming it; sockets, FIFOs and
    devices are skipped with a warning (reading a FIFO would block the submission).
    """
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in dirs:
            if os.path.islink(os.path.join(root, name)):  # os.walk does not descend into it
                log.warning(
                    "code folder %s: symlinked folder %s is not followed (not packed)",
                    folder,
                    _shown(Path(root, name).relative_to(folder)),
                )
        for name in names:
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(root) / name
            rel = path.relative_to(folder)
            try:
                rel.as_posix().encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"code folder {folder}: file name {_shown(rel)} is not UTF-8; rename it") from None
            if not path.exists():
                raise ValueError(
                    f"code folder {folder}: {_shown(rel)} is a broken symlink (to "
                    f"{os.readlink(path)!r}); remove it or make it point at a file"
                )
            if not path.is_file():
                log.warning(
                    "code folder %s: %s is not a regular file (socket, FIFO or device): skipped", folder, _shown(rel)
                )
                continue
            out.append((prefix + rel.as_posix(), path))
    return out


def _shown(rel: Path) -> str:
    """A path for a message: undecodable bytes shown as bytes, not as surrogates."""
    return repr(os.fsencode(rel)) if any("\udc80" <= c <= "\udcff" for c in str(rel)) else repr(str(rel))


def runtime_files() -> list[tuple[str, Path]]:
    """What containers need of this package: its light ``__init__``, ``runtime/`` and ``gpu/``."""
    files = [("airflow_provider_melon/__init__.py", PACKAGE_DIR / "__init__.py")]
    for sub in ("runtime", "gpu"):
        files += folder_files(PACKAGE_DIR / sub, f"airflow_provider_melon/{sub}/")
    return files


#: a code file of at least this size is not zipped: it is staged as its own content-addressed object and
#: localized beside the archive, so a change elsewhere in the folder does not upload it again (and it is not
#: deflated: big files are mostly data, already compressed or incompressible)
CODE_SPLIT_BYTES = 8 << 20


def split_code_files(
    files: list[tuple[str, Path]], threshold: int
) -> tuple[list[tuple[str, Path]], list[tuple[str, Path]]]:
    """``files`` → (those for the code archive, those of at least ``threshold`` bytes staged on their own)."""
    small: list[tuple[str, Path]] = []
    large: list[tuple[str, Path]] = []
    for name, path in files:
        (large if path.stat().st_size >= threshold else small).append((name, path))
    return small, sorted(large)


__all__ = [
    "CHUNK_BYTES",
    "CODE_SPLIT_BYTES",
    "PACKAGE_DIR",
    "deterministic_zip",
    "folder_files",
    "runtime_files",
    "split_code_files",
    "write_deterministic_zip",
]
