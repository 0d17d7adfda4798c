"""Code archives: nothing in or out of them reaches outside the folder they belong to.

Who unpacks what: the provider never extracts an archive in Python. It *packs* the job's code folder
(``hadoop/bundle.py``: ``folder_files`` + ``deterministic_zip``); YARN's NodeManager unpacks each ARCHIVE resource
(the code zip, the runtime zip, an ``environment.archive`` tar.gz) with Hadoop's ``FSDownload`` →
``FileUtil.unZip`` / ``FileUtil.unTar`` (GNU tar on Linux), and the executor only links the unpacked entries.

So two things are tested:

1. The packer, on generated code folders (hostile names, symlinks to files and folders in and out of the
   folder, loops, broken links, a FIFO): the zip holds only regular files under relative, normalised names
   inside the folder, with the right contents; what cannot be packed is an error naming it, or skipped with a
   warning — never a hang or a traceback.
2. Hadoop 3.5.0's own unpacking (the version appmaster/pom.xml builds against), on generated hostile zip and
   tar.gz archives (``../`` entries, absolute paths, symlinks and hard links out of the folder): nothing is
   written outside the target folder; ``../`` entries are refused with an error. It runs a small Java class
   against the AM build's classpath (``appmaster/launcher/target/classpath.txt``, made by ``make setup``)
   and is skipped without it.
"""

from __future__ import annotations

import io
import logging
import os
import posixpath
import shutil
import stat
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_melon.hadoop.bundle import _SKIP_DIRS, deterministic_zip, folder_files

REPO = Path(__file__).resolve().parents[2]

HOSTILE_NAMES = [
    "..foo",
    "...",
    "-rf",
    " ",
    "a b",
    "a\\b",
    "~",
    "$(touch pwned)",
    "`id`",
    "é",
    "日本",
    "a\nb",
    "*",
    "?",
    ":",
    "C:",
    ".hidden",
    "__pycache__",
    ".git",
    "x.pyc",
    "code",
    "melon-work",
    "'",
    '"',
]
names = st.one_of(
    st.sampled_from(HOSTILE_NAMES),
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00/"), min_size=1, max_size=12),
).filter(lambda n: n not in (".", "..") and len(n.encode()) < 60)
rel_paths = st.lists(names, min_size=1, max_size=3)


@st.composite
def code_trees(draw):
    """(files, links): files as (path parts, content); links as (path parts, target kind, target index)."""
    files = draw(st.lists(st.tuples(rel_paths, st.binary(max_size=32)), min_size=1, max_size=8))
    links = draw(
        st.lists(
            st.tuples(
                rel_paths,
                st.sampled_from(["file-in", "dir-in", "file-out", "dir-out", "loop", "parent", "broken"]),
                st.integers(0, 7),
            ),
            max_size=4,
        )
    )
    return files, links


def build_tree(root: Path, files, links) -> tuple[Path, Path]:
    """The code folder and, beside it, an 'outside' folder with a secret; returns (code, outside)."""
    code, outside = root / "code", root / "outside"
    code.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"outside secret")
    made_files, made_dirs = [], []
    for parts, content in files:
        path = code.joinpath(*parts)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        except OSError:  # a clash with an earlier file or folder: this one is not made
            continue
        made_files.append(path)
        made_dirs.append(path.parent)
    for parts, kind, index in links:
        path = code.joinpath(*parts)
        target = {
            "file-in": made_files[index % len(made_files)] if made_files else outside / "secret.txt",
            "dir-in": made_dirs[index % len(made_dirs)] if made_dirs else code,
            "file-out": outside / "secret.txt",
            "dir-out": outside,
            "loop": code,
            "parent": Path(".."),
            "broken": root / "nowhere" / "gone",
        }[kind]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(target)
        except OSError:
            continue
    return code, outside


def reachable(code: Path):
    """What the packer must see: walking without following symlinked folders, skipping _SKIP_DIRS."""
    for root, dirs, files in os.walk(code):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        for name in files:
            yield Path(root) / name


def assert_safe_entry(name: str) -> None:
    assert name and not name.startswith("/"), name
    parts = name.split("/")
    assert ".." not in parts and "" not in parts and "." not in parts, name
    assert posixpath.normpath(name) == name, name
    dest = "/unpack/here"
    assert posixpath.normpath(posixpath.join(dest, name)).startswith(dest + "/"), name


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(tree=code_trees())
def test_code_archive_holds_only_regular_files_inside_the_folder(tree):
    with tempfile.TemporaryDirectory() as tmp:
        code, outside = build_tree(Path(tmp), *tree)
        broken = [p for p in reachable(code) if p.is_symlink() and not p.exists()]
        if broken:
            with pytest.raises(ValueError, match="is a broken symlink") as err:
                folder_files(code)
            assert str(code) in str(err.value) and "\n" not in str(err.value).replace(repr("\n")[1:-1], "")
            return
        files = folder_files(code)
        data = deterministic_zip(files)
        assert deterministic_zip(folder_files(code)) == data  # same folder, same bytes
        expected = {
            p.relative_to(code).as_posix(): p.read_bytes()
            for p in reachable(code)
            if p.is_file() and not p.name.endswith((".pyc", ".pyo"))
        }
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            got = {info.filename: zf.read(info) for info in infos}
        assert got == expected
        for info in infos:
            assert_safe_entry(info.filename)
            assert stat.S_ISREG(info.external_attr >> 16), f"{info.filename}: not a regular file entry"
        # and an extraction of it stays put (what YARN's unzip does, checked by Hadoop itself below)
        dest = Path(tmp) / "unpacked"
        dest.mkdir()  # an archive with no entry (a folder of only .pyc files) extracts nothing
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            zf.extractall(dest)
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["code", "outside", "unpacked"]
        assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_broken_symlink_is_an_error_naming_it(tmp_path):
    (tmp_path / "train.py").write_text("print(1)")
    (tmp_path / "data").symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match=r"code folder .*: 'data' is a broken symlink \(to '.*gone'\)"):
        folder_files(tmp_path)


def test_non_utf8_file_name_is_an_error_naming_it(tmp_path):
    (tmp_path / "train.py").write_text("print(1)")
    fd = os.open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.py"), os.O_CREAT | os.O_WRONLY)
    os.close(fd)
    with pytest.raises(ValueError, match=r"file name b'caf\\xe9.py' is not UTF-8"):
        folder_files(tmp_path)


@pytest.mark.timeout(120)  # a guard: the bug this catches is a submission blocked forever on the FIFO
def test_fifo_and_symlinked_folder_are_skipped_with_a_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="airflow_provider_melon.hooks.melon")
    (tmp_path / "train.py").write_text("print(1)")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "shared").symlink_to(tmp_path.parent)
    names = [name for name, _ in folder_files(tmp_path)]
    assert names == ["train.py"]
    text = caplog.text
    assert "'pipe' is not a regular file" in text and "symlinked folder 'shared' is not followed" in text


# ----------------------------------------------------------------------- Hadoop's unpacking (what YARN runs)

HADOOP_CLASSPATH = REPO / "appmaster" / "launcher" / "target" / "classpath.txt"
UNPACK_JAVA = """
import java.io.*;
import java.nio.file.*;
import org.apache.hadoop.fs.FileUtil;

/** FSDownload's unpacking: .zip with FileUtil.unZip, .tar/.tar.gz with FileUtil.unTar. */
public class MelonUnpack {
  public static void main(String[] args) throws Exception {
    for (String line : Files.readAllLines(Paths.get(args[0]))) {
      String[] pair = line.split("\\t");
      File archive = new File(pair[0]), dest = new File(pair[1]);
      try (InputStream in = new FileInputStream(archive)) {
        if (pair[0].endsWith(".zip")) FileUtil.unZip(in, dest);
        else FileUtil.unTar(in, dest, pair[0].endsWith("gz"));
        System.out.println("OK");
      } catch (Exception e) {
        System.out.println("ERROR " + String.valueOf(e.getMessage()).replace('\\n', ' '));
      }
    }
  }
}
"""


@pytest.fixture(scope="module")
def hadoop_unpack(tmp_path_factory):
    java, javac = shutil.which("java"), shutil.which("javac")
    if not (java and javac and HADOOP_CLASSPATH.is_file()):
        pytest.skip(
            "needs a JDK and the AM build's Hadoop classpath (appmaster/launcher/target/classpath.txt: make setup or appmaster/build.sh --dev)"
        )
    classpath = HADOOP_CLASSPATH.read_text().strip()
    classes = tmp_path_factory.mktemp("unpack-classes")
    (classes / "MelonUnpack.java").write_text(UNPACK_JAVA)
    subprocess.run(
        [javac, "-cp", classpath, "-d", str(classes), str(classes / "MelonUnpack.java")],
        check=True,
        capture_output=True,
        timeout=600,
    )

    def run(pairs: list[tuple[Path, Path]]) -> list[str]:
        listing = classes / "pairs.tsv"
        listing.write_text("".join(f"{a}\t{d}\n" for a, d in pairs))
        proc = subprocess.run(
            [java, "-XX:TieredStopAtLevel=1", "-cp", f"{classes}{os.pathsep}{classpath}", "MelonUnpack", str(listing)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith(("OK", "ERROR"))]
        assert proc.returncode == 0 and len(lines) == len(pairs), proc.stderr[-2000:]
        return lines

    return run


def _zip(path: Path, entries: list[str]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("benign.txt", b"ok")
        for name in entries:
            zf.writestr(zipfile.ZipInfo(name), b"payload")


def _tgz(path: Path, members: list[tuple[str, str, str]]) -> None:
    """members: (name, kind 'file'|'symlink'|'hardlink', link target)."""
    with tarfile.open(path, "w:gz") as tf:
        benign = tarfile.TarInfo("benign.txt")
        benign.size = 2
        tf.addfile(benign, io.BytesIO(b"ok"))
        for name, kind, target in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = 7
                tf.addfile(info, io.BytesIO(b"payload"))
            else:
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = target
                tf.addfile(info)


def _snapshot(root: Path) -> dict[str, bytes | str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(path)] = path.read_bytes()
    return out


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    picked=st.lists(
        st.text(
            st.characters(min_codepoint=48, max_codepoint=122, exclude_characters="\\`:;<>?@[]^"),
            min_size=1,
            max_size=8,
        ),
        min_size=1,
        max_size=3,
        unique=True,
    )
)
def test_hadoop_unpacking_writes_nothing_outside_the_target(hadoop_unpack, picked):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        outside = root / "outside"
        outside.mkdir()
        (outside / "secret.txt").write_bytes(b"outside secret")
        archives = root / "archives"
        archives.mkdir()
        cases: list[tuple[Path, str]] = []  # (archive, expectation: "refused" | "inside")
        for i, name in enumerate(picked):
            for j, entry in enumerate(
                [f"../{name}", f"a/../../{name}", f"../outside/{name}", f"../../../../../../../../tmp/{name}-melon"]
            ):
                _zip(archives / f"z{i}-{j}.zip", [entry])
                _tgz(archives / f"t{i}-{j}.tar.gz", [(entry, "file", "")])
                cases += [(archives / f"z{i}-{j}.zip", "refused"), (archives / f"t{i}-{j}.tar.gz", "refused")]
            _zip(archives / f"abs{i}.zip", [f"{outside}/{name}"])
            _tgz(archives / f"abs{i}.tar.gz", [(f"{outside}/{name}", "file", "")])
            # a link out of the folder, then a file written through it
            _tgz(archives / f"sym{i}.tar.gz", [("lnk", "symlink", str(outside)), (f"lnk/{name}", "file", "")])
            _tgz(archives / f"rel{i}.tar.gz", [("lnk", "symlink", "../../outside"), (f"lnk/{name}", "file", "")])
            _tgz(archives / f"hard{i}.tar.gz", [(name, "hardlink", str(outside / "secret.txt"))])
            _tgz(archives / f"hardrel{i}.tar.gz", [(name, "hardlink", "../outside/secret.txt")])
            cases += [
                (archives / f"abs{i}.zip", "inside"),
                (archives / f"abs{i}.tar.gz", "inside"),
                (archives / f"sym{i}.tar.gz", "refused"),
                (archives / f"rel{i}.tar.gz", "refused"),
                (archives / f"hard{i}.tar.gz", "refused"),
                (archives / f"hardrel{i}.tar.gz", "refused"),
            ]
        dests = root / "dests"
        dests.mkdir()
        pairs = [(archive, dests / archive.name) for archive, _ in cases]
        before = _snapshot(outside)
        tmp_before = {p.name for p in Path("/tmp").glob("*-melon")}
        results = hadoop_unpack(pairs)
        assert _snapshot(outside) == before, "an archive wrote outside its folder"
        assert {p.name for p in Path("/tmp").glob("*-melon")} == tmp_before
        assert sorted(p.name for p in root.iterdir()) == ["archives", "dests", "outside"]
        for (archive, expect), (_, dest), result in zip(cases, pairs, results):
            if expect == "refused":
                assert result.startswith("ERROR"), f"{archive.name}: {result}"
            else:
                assert result == "OK", f"{archive.name}: {result}"
            # whatever was unpacked is inside the folder (a lone symlink may point out: nothing went through it)
            for path in dest.rglob("*"):
                if not path.is_symlink():
                    assert path.resolve().is_relative_to(dest.resolve()), f"{archive.name}: {path}"
        zip_refusals = [r for (a, _), r in zip(cases, results) if a.suffix == ".zip" and r.startswith("ERROR")]
        assert all("would create file outside of" in r for r in zip_refusals)
