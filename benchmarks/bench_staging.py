"""Content-addressed staging on the real mini cluster: bytes uploaded and time, first vs repeated vs changed code.

Target (the issue): a repeated submission of unchanged code uploads 0 bytes.

What runs: ``MelonHook.stage`` -- the staging half of ``MelonHook.submit`` (zip the code folder
deterministically, hash it, upload to ``/user/<user>/.melon/cache/<sha256>/code.zip`` unless an object of that
size is there; the same for the in-container runtime archive and the AM jar). The other half (new application,
plan upload, RM submit) uploads only the per-application plan (~1.2 KB) and is the same for every submission,
so it is left out here; ``bench_launch.py`` times whole submissions.

The code folder is generated fresh for each run (a nonce file makes its digest new, so "first" really is the
first upload on the cluster): ``--files`` Python-like text files of ``--file-kb`` KiB each (random identifiers:
compresses roughly 1.5-2x like real source) plus one ``--blob-mb`` MiB random binary (incompressible, like a
checkpoint or vocabulary shipped with the code). Phases, in order:

1. **first** -- the new folder: the code archive is uploaded (the runtime and AM jar normally are cached
   already by earlier submissions on the cluster; their bytes are shown per column either way).
2. **repeat** x ``--repeats`` -- unchanged folder: target 0 bytes; the time left is zipping + hashing locally
   plus one WebHDFS ``GETFILESTATUS`` per object.
3. **changed** -- one text file edited: the whole code archive is a new object (content-addressed per archive,
   not per file), uploaded once; runtime and jar stay cached.
4. **changed repeat** x ``--repeats`` -- 0 bytes again.

Times are wall-clock seconds of ``hook.stage`` (median for repeated phases); ``zip+hash`` is the local part
alone (``deterministic_zip`` + SHA-256 of the folder), measured separately, so ``stage - zip+hash`` is the HDFS
part.

Usage: ``.venv/bin/python benchmarks/bench_staging.py --work-dir /tmp/bench-mc``
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_provider_melon.cli import melon_hook_for_cluster  # noqa: E402
from airflow_provider_melon.hadoop.bundle import deterministic_zip, folder_files  # noqa: E402
from airflow_provider_melon.spec import JobSpec  # noqa: E402


def generate_code(folder: Path, files: int, file_kb: int, blob_mb: float, seed: int) -> None:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(3, 12))) for _ in range(2000)]
    (folder / "pkg").mkdir(parents=True)
    (folder / "nonce.txt").write_text(f"{time.time_ns()} {seed}\n")
    (folder / "train.py").write_text("import pkg\nprint('train')\n")
    for i in range(files):
        lines, size = [], 0
        while size < file_kb * 1024:
            line = f"    {rng.choice(words)} = {rng.choice(words)}({rng.choice(words)}, {rng.randint(0, 10**6)})\n"
            lines.append(line)
            size += len(line)
        (folder / "pkg" / f"mod_{i:03d}.py").write_text(f"def f_{i}():\n" + "".join(lines))
    (folder / "assets.bin").write_bytes(rng.randbytes(int(blob_mb * 1024 * 1024)))


def local_zip_hash_s(folder: Path, runs: int = 3) -> tuple[float, int]:
    """Median seconds of zipping + hashing the folder locally (the part of a cached stage that is not HDFS)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        data = deterministic_zip(folder_files(folder))
        hashlib.sha256(data).hexdigest()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(data)


def stage_once(hook, spec: JobSpec) -> dict:
    t0 = time.perf_counter()
    report = hook.stage(spec)
    elapsed = time.perf_counter() - t0
    files = report.files
    return {
        "s": elapsed,
        "total": report.uploaded_bytes,
        "code": files["code"].uploaded_bytes,
        "runtime": files["runtime"].uploaded_bytes,
        "am_jar": files["am_jar"].uploaded_bytes,
        "size": files["code"].size,
        "url": files["code"].url,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work-dir", default="/tmp/bench-mc", help="work dir of a running mini cluster")
    p.add_argument("--files", type=int, default=40)
    p.add_argument("--file-kb", type=int, default=64)
    p.add_argument("--blob-mb", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=11)
    args = p.parse_args(argv)
    for name in ("hdfs", "airflow_provider_melon"):
        logging.getLogger(name).setLevel(logging.WARNING)
    hook = melon_hook_for_cluster(Path(args.work_dir))
    tmp = Path(tempfile.mkdtemp(prefix="bench-staging-"))
    code = tmp / "code"
    try:
        generate_code(code, args.files, args.file_kb, args.blob_mb, args.seed)
        raw = sum(f.stat().st_size for f in code.rglob("*") if f.is_file())
        spec = JobSpec.from_dict(
            {
                "name": "bench-staging",
                "code": str(code),
                "entrypoint": "python train.py",
                "roles": {"worker": {"instances": 1}},
            }
        )
        zip_s, zip_len = local_zip_hash_s(code)
        print(
            f"bench_staging: code folder {args.files + 3} files, {raw / 2**20:.2f} MiB raw "
            f"({args.files} x {args.file_kb} KiB text + {args.blob_mb:g} MiB random blob), zip {zip_len / 2**20:.2f}"
            f" MiB; WebHDFS of the mini cluster in {args.work_dir}"
        )
        print(f"local zip+hash of the folder: {zip_s:.3f} s (median of 3)\n")

        phases = [("first", [stage_once(hook, spec)])]
        phases.append(("repeat", [stage_once(hook, spec) for _ in range(args.repeats)]))
        mod = code / "pkg" / "mod_000.py"
        mod.write_text(mod.read_text() + "    changed = True\n")
        phases.append(("changed", [stage_once(hook, spec)]))
        phases.append(("changed repeat", [stage_once(hook, spec) for _ in range(args.repeats)]))

        print(
            f"{'phase':<15} {'n':>2} {'stage s':>8} {'code B':>10} {'runtime B':>10} {'am_jar B':>9} "
            f"{'total B':>10}  code object"
        )
        for name, runs in phases:
            t = statistics.median(r["s"] for r in runs)
            worst = max(runs, key=lambda r: r["total"])  # report the worst run's bytes, not a median
            print(
                f"{name:<15} {len(runs):>2} {t:8.3f} {worst['code']:10d} {worst['runtime']:10d} "
                f"{worst['am_jar']:9d} {worst['total']:10d}  .../{worst['url'].split('/cache/')[1][:12]}…"
            )
        first, repeat, changed, crepeat = (runs for _, runs in phases)
        print()
        print(
            f"first upload {first[0]['total']} B in {first[0]['s']:.3f} s; repeat {max(r['total'] for r in repeat)} B "
            f"in {statistics.median(r['s'] for r in repeat):.3f} s (median, of which ~{zip_s:.3f} s local "
            f"zip+hash); changed {changed[0]['total']} B in {changed[0]['s']:.3f} s"
        )
        ok_repeat = all(r["total"] == 0 for r in repeat + crepeat)
        ok_changed = changed[0]["code"] == changed[0]["size"] > 0 and changed[0]["url"] != first[0]["url"]
        print(
            f"{'PASS' if ok_repeat else 'FAIL'}: repeated submissions of unchanged code upload 0 bytes "
            f"({len(repeat) + len(crepeat)} repeats)"
        )
        print(
            f"{'PASS' if ok_changed else 'FAIL'}: changed code is a new object, uploaded once "
            f"({changed[0]['code']} B = its size)"
        )
        return 0 if ok_repeat and ok_changed else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
