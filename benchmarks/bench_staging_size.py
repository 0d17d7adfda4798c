"""Staging at size on the real mini cluster: a 1 GiB packed environment and a ~200 MiB code folder, our
``MelonHook.stage`` vs a plain WebHDFS upload of the same bytes, side by side in one run.

Targets (issue 13 §3): time ratio ours / plain <= 1.1; client memory bounded (streamed, never read whole);
a repeat uploads 0 bytes; a changed file re-uploads only what changed where the layout allows.

Inputs, generated fresh in a temporary folder (``--tmp``), so every "first" upload really is new:

* **env** -- ``--env-mb`` MiB (default 1024) of random bytes named ``env.tar.gz``: stands in for a
  ``melon pack-env`` archive (a real one is gzip, i.e. already incompressible; its content does not matter to
  staging, which neither unpacks nor compresses it). Staged as ``environment.archive: file:///…/env.tar.gz``.
* **code** -- a code folder of ``--code-mb`` MiB (default 200): ``--text-files`` Python-like text files of
  64 KiB (random identifiers, compress ~2x like real source), a random ``data/train.bin`` of 3/4 of the
  folder (150 MiB) and a random
  ``weights/init.pt`` filling the rest. With the default split threshold (8 MiB) the two big files are their
  own objects and the text goes into ``code.zip``.

Measured, each in its own child process (``resource.getrusage().ru_maxrss`` is the child's peak RSS; the
RSS after imports, before the transfer, is subtracted to give the transfer's growth):

* ``ours``       -- ``MelonHook.stage`` of a spec with the env archive, or with the code folder: zip the
  small files into a temporary file; each object is streamed from disk; a new object of 8 MiB or more is
  hashed while it uploads (``hdfs_io.put_file_hashing``: sample-key lookup, lock, upload beside, rename to
  its SHA-256 address), a smaller one hashed first and put with put_once. The runtime archive and AM jar are cached beforehand (a warm-up stage),
  as on any cluster that has run a job; their status checks are in the time.
* ``repeat``     -- the same stage again at once: bytes uploaded (target 0) and time (the sample key is
  known, so the file is hashed in full and found in the cache).
* ``plain``      -- the ``hdfs`` library's own ``Client.upload`` (the client the HDFS provider's WebHDFSHook
  returns) of the same local file, or of the whole folder file by file (n_threads=1).
* ``plain-obj``  -- (code only) ``Client.upload`` of exactly the objects ours uploads (the prebuilt code.zip
  and the two big files): isolates staging's own overhead (hashing, zipping, the put_once protocol) from the
  folder-vs-objects difference.

Runs are interleaved (ours/plain, then plain/ours, …) ``--runs`` times and the medians compared; the cache
objects (and the sample-key index) and plain copies are deleted after each run so the next one uploads
again. Then, once each: edit one .py file and stage again (bytes), and the same with the split turned off
(``code_split_bytes`` = ∞, the old layout: one archive holding everything) to show what the layout buys.

Usage: ``.venv/bin/python benchmarks/bench_staging_size.py --work-dir /tmp/bench-mc``
(output: ``results/bench_staging_size.txt`` and ``.json``; ``plot_results.py`` draws
``docs/img/staging-size.svg``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from airflow_provider_melon.cli import melon_hook_for_cluster  # noqa: E402
from airflow_provider_melon.hadoop.bundle import folder_files, split_code_files, write_deterministic_zip  # noqa: E402
from airflow_provider_melon.runtime.outputs import hdfs_path  # noqa: E402
from airflow_provider_melon.spec import JobSpec  # noqa: E402

MiB = 1 << 20


def _random_file(path: Path, mib: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        for _ in range(mib):
            out.write(os.urandom(MiB))


def generate(tmp: Path, env_mb: int, code_mb: int, text_files: int) -> tuple[Path, Path]:
    from bench_staging import generate_code

    env = tmp / "env.tar.gz"
    _random_file(env, env_mb)
    code = tmp / "code"
    generate_code(code, text_files, 64, 0, seed=int(time.time()))
    (code / "assets.bin").unlink()
    _random_file(code / "data" / "train.bin", code_mb * 3 // 4)
    rest = code_mb * MiB - sum(p.stat().st_size for p in code.rglob("*") if p.is_file())
    _random_file(code / "weights" / "init.pt", max(rest // MiB, 1))
    return env, code


def _spec(*, code: Path | None = None, env: Path | None = None) -> JobSpec:
    job = {"name": "bench-staging-size", "entrypoint": "python train.py", "roles": {"worker": {"instances": 1}}}
    if code:
        job["code"] = str(code)
    if env:
        job["environment"] = {"archive": f"file://{env}", "python": "env/bin/python"}
    return JobSpec.from_dict(job)


# ---- one measurement, in a child process ------------------------------------------------------------------------
def worker(args) -> int:
    for name in ("hdfs", "airflow_provider_melon"):
        logging.getLogger(name).setLevel(logging.WARNING)
    hook = melon_hook_for_cluster(Path(args.work_dir))
    path = Path(args.path)
    client = hook.hdfs
    client.status("/")  # connection set up before the clock starts, for both
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    urls: list[str] = []
    if args.worker == "ours":
        if args.no_split:
            hook.code_split_bytes = 1 << 62
        spec = _spec(env=path) if path.is_file() else _spec(code=path)
        report = hook.stage(spec)
        sent = report.uploaded_bytes
        urls = [f.url for k, f in report.files.items() if k == "env_archive" or k.startswith("code")]
        detail = {k: f.uploaded_bytes for k, f in report.files.items()}
    else:  # plain: the hdfs library's own upload of each path given
        sent, detail = 0, {}
        for local in [path] + [Path(p) for p in args.also]:
            client.upload(f"{args.dest}/{local.name}", str(local), overwrite=True)
            size = (
                local.stat().st_size
                if local.is_file()
                else sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
            )
            sent += size
            detail[local.name] = size
    elapsed = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"s": elapsed, "bytes": sent, "rss_before_kb": rss0, "rss_peak_kb": rss1, "urls": urls, "detail": detail}
        )
    )
    return 0


def measure(work_dir: str, mode: str, path: Path, *, dest: str = "", also=(), no_split=False) -> dict:
    cmd = [sys.executable, __file__, "--work-dir", work_dir, "--worker", mode, "--path", str(path)]
    if dest:
        cmd += ["--dest", dest]
    for extra in also:
        cmd += ["--also", str(extra)]
    if no_split:
        cmd.append("--no-split")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---- the run --------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work-dir", default="/tmp/bench-mc", help="work dir of a running mini cluster")
    p.add_argument("--env-mb", type=int, default=1024)
    p.add_argument("--code-mb", type=int, default=200)
    p.add_argument("--text-files", type=int, default=400)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tmp", default=tempfile.gettempdir(), help="where the inputs are generated")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "bench_staging_size.txt"))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--dest", help=argparse.SUPPRESS)
    p.add_argument("--also", action="append", default=[], help=argparse.SUPPRESS)
    p.add_argument("--no-split", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)

    for name in ("hdfs", "airflow_provider_melon"):
        logging.getLogger(name).setLevel(logging.WARNING)
    hook = melon_hook_for_cluster(Path(args.work_dir))
    client = hook.hdfs
    tmp = Path(tempfile.mkdtemp(prefix="bench-staging-size-", dir=args.tmp))
    plain_dir = f"/user/{hook.user}/bench-staging-size-{os.getpid()}"
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    def drop(urls) -> None:  # the cache objects a first stage made, and the index: the next one uploads again
        for url in urls:
            client.delete(hdfs_path(url).rsplit("/", 1)[0], recursive=True)
        client.delete(f"{hook.cache_dir}/by-sample", recursive=True)

    results: dict = {"runs": args.runs, "env_mb": args.env_mb, "code_mb": args.code_mb, "rows": {}}
    try:
        t_gen = time.perf_counter()
        env, code = generate(tmp, args.env_mb, args.code_mb, args.text_files)
        files = folder_files(code)
        small, large = split_code_files(files, hook.code_split_bytes)
        prebuilt = tmp / "objects" / "code.zip"  # for plain-obj: exactly the objects ours uploads
        prebuilt.parent.mkdir()
        with open(prebuilt, "wb") as out:
            write_deterministic_zip(small, out)
        code_bytes = sum(path.stat().st_size for _, path in files)
        env_bytes = env.stat().st_size
        hook.stage(_spec())  # warm-up: runtime archive and AM jar cached, as on any used cluster
        say(
            f"bench_staging_size: env {env_bytes / MiB:.0f} MiB random (stands in for a packed env tar.gz); code "
            f"folder {len(files)} files {code_bytes / MiB:.1f} MiB ({len(small)} small -> code.zip "
            f"{prebuilt.stat().st_size / MiB:.1f} MiB, {len(large)} big as own objects: "
            + ", ".join(f"{n} {path.stat().st_size / MiB:.0f} MiB" for n, path in large)
            + f"); generated in {time.perf_counter() - t_gen:.0f} s"
        )
        say(
            f"WebHDFS of the mini cluster in {args.work_dir}; {args.runs} interleaved runs; "
            f"load average {os.getloadavg()[0]:.1f} at start, {os.cpu_count()} CPUs"
        )
        say()

        rows: dict[str, list[dict]] = {
            k: []
            for k in ("env ours", "env repeat", "env plain", "code ours", "code repeat", "code plain", "code plain-obj")
        }
        client.makedirs(plain_dir)
        for run in range(args.runs):
            for what, path in (("env", env), ("code", code)):

                def ours():
                    first = measure(args.work_dir, "ours", path)
                    rows[f"{what} ours"].append(first)
                    rows[f"{what} repeat"].append(measure(args.work_dir, "ours", path))
                    drop(first["urls"])

                def plain():
                    rows[f"{what} plain"].append(measure(args.work_dir, "plain", path, dest=f"{plain_dir}/p"))
                    client.delete(f"{plain_dir}/p", recursive=True)
                    if what == "code":
                        rows["code plain-obj"].append(
                            measure(args.work_dir, "plain", prebuilt, dest=f"{plain_dir}/o", also=[p for _, p in large])
                        )
                        client.delete(f"{plain_dir}/o", recursive=True)

                for step in (ours, plain) if run % 2 == 0 else (plain, ours):
                    step()
            print(f"  run {run + 1}/{args.runs} done", flush=True)

        say(
            f"{'measurement':<16} {'n':>2} {'median s':>9} {'min s':>7} {'max s':>7} {'uploaded B':>12} "
            f"{'RSS peak MiB':>12} {'RSS growth MiB':>14} {'growth/size':>11}"
        )
        for name, runs in rows.items():
            size = env_bytes if name.startswith("env") else code_bytes
            growth = max(r["rss_peak_kb"] - r["rss_before_kb"] for r in runs) / 1024
            row = {
                "median_s": statistics.median(r["s"] for r in runs),
                "min_s": min(r["s"] for r in runs),
                "max_s": max(r["s"] for r in runs),
                "bytes": max(r["bytes"] for r in runs),
                "rss_peak_mib": max(r["rss_peak_kb"] for r in runs) / 1024,
                "rss_growth_mib": growth,
                "times": [r["s"] for r in runs],
            }
            results["rows"][name] = row
            say(
                f"{name:<16} {len(runs):>2} {row['median_s']:9.2f} {row['min_s']:7.2f} {row['max_s']:7.2f} "
                f"{row['bytes']:12d} {row['rss_peak_mib']:12.1f} {growth:14.1f} {growth * MiB / size:11.4f}"
            )

        r = results["rows"]
        ratios = {
            "env": r["env ours"]["median_s"] / r["env plain"]["median_s"],
            "code": r["code ours"]["median_s"] / r["code plain"]["median_s"],
            "code vs same objects": r["code ours"]["median_s"] / r["code plain-obj"]["median_s"],
        }
        # per-run ratios (the pair measured back to back), as a spread for the medians above
        pairs = {
            "env": [a["s"] / b["s"] for a, b in zip(rows["env ours"], rows["env plain"])],
            "code": [a["s"] / b["s"] for a, b in zip(rows["code ours"], rows["code plain"])],
        }
        results["ratios"], results["pair_ratios"] = ratios, pairs
        say()
        for name, value in ratios.items():
            spread = f" (per run {', '.join(f'{x:.2f}' for x in pairs[name])})" if name in pairs else ""
            say(f"time ratio ours / plain, {name}: {value:.2f}{spread}")

        # a changed file, with the split (default) and without it (one archive holding everything)
        say()
        changed = {}
        for label, no_split in (("split (default)", False), ("one archive (split off)", True)):
            mod = code / "pkg" / "mod_000.py"
            original = mod.read_text()
            first = measure(args.work_dir, "ours", code, no_split=no_split)
            mod.write_text(original + f"    changed = {no_split!r}\n")
            after = measure(args.work_dir, "ours", code, no_split=no_split)
            mod.write_text(original)
            drop(first["urls"] + after["urls"])
            changed[label] = {
                "first_s": first["s"],
                "first_bytes": first["bytes"],
                "changed_s": after["s"],
                "changed_bytes": after["bytes"],
                "detail": after["detail"],
            }
            say(
                f"edit one .py file, {label:<24}: first {first['bytes']:>10d} B in {first['s']:6.2f} s; after the "
                f"edit {after['bytes']:>10d} B in {after['s']:6.2f} s ({after['bytes'] / code_bytes:.1%} of the folder)"
            )
        results["changed"] = changed

        say()
        env_ok = ratios["env"] <= 1.1
        code_ok = ratios["code"] <= 1.1
        mem_ok = all(
            results["rows"][k]["rss_growth_mib"] * MiB < 0.05 * (env_bytes if k.startswith("env") else code_bytes)
            for k in ("env ours", "code ours", "env repeat", "code repeat")
        )
        repeat_ok = all(x["bytes"] == 0 for x in rows["env repeat"] + rows["code repeat"])
        split = changed["split (default)"]
        changed_ok = split["changed_bytes"] == split["detail"].get("code", -1) and split["changed_bytes"] < MiB * 16
        for ok, text in (
            (env_ok, f"env archive: ours / plain upload {ratios['env']:.2f} <= 1.1"),
            (code_ok, f"code folder: ours / plain upload of the folder {ratios['code']:.2f} <= 1.1"),
            (mem_ok, "client memory bounded: RSS growth of every staging < 5 % of the file size"),
            (repeat_ok, f"a repeat uploads 0 bytes ({len(rows['env repeat']) + len(rows['code repeat'])} repeats)"),
            (changed_ok, f"a changed .py re-uploads only code.zip ({split['changed_bytes']} B of {code_bytes} B)"),
        ):
            say(f"{'PASS' if ok else 'FAIL'}: {text}")
        say(f"load average {os.getloadavg()[0]:.1f} at the end")
        out = Path(args.out)
        out.write_text("\n".join(lines) + "\n")
        out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {out} and {out.with_suffix('.json')}")
        return 0 if env_ok and code_ok and mem_ok and repeat_ok and changed_ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            client.delete(plain_dir, recursive=True)
        except Exception:  # noqa: BLE001 - best effort clean-up
            pass


if __name__ == "__main__":
    raise SystemExit(main())
