"""Plots for the docs, drawn as SVG (no plotting library needed) from the measured data and the benchmark results:

* ``docs/img/gpu-colocation.svg`` — k identical training processes sharing one H200 (``benchmarks/data/
  h200-colocate.json``): aggregate throughput over one process's, ResNet-18 vs ResNet-50, beside ideal sharing.
* ``docs/img/policy-makespan.svg`` — ``benchmarks/results/bench_policy.txt`` (family A traces): makespan per policy.
* ``docs/img/staging-size.svg`` — ``benchmarks/results/bench_staging_size.json``: staging a 1 GiB env archive and a
  200 MiB code folder vs a plain WebHDFS upload of the same bytes.

* ``docs/img/launch-gang-sizes.svg`` — ``benchmarks/results/bench_launch-gang-sizes.txt``: submit → all registered
  per gang size, our AM + executor vs the AM launching ``true``.
* ``docs/img/sim-vs-system.svg`` — ``benchmarks/results/bench_sim_vs_system.txt``: each job's run in the simulator
  and on the real YARN + AM + ledger, same trace and policy.
* ``docs/img/trigger-rm-requests.svg`` — ``benchmarks/results/bench_triggers.txt``: RM requests/s and triggerer CPU
  of N triggers in one process, per-trigger polling vs the shared poller.

Usage: ``python benchmarks/plot_results.py [--data benchmarks/data] [--out docs/img]``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLORS = ["#1976d2", "#f57c00", "#fbc02d", "#388e3c", "#7b1fa2", "#c2185b", "#455a64"]


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>'
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{title}</text>'
        + "".join(body)
        + "</svg>\n"
    )


def _value_axis(W: int, H: int, L: int, B: int, T: int, sy, vmax: float, step: int, label: str) -> list[str]:
    """A bar chart's baseline, its rotated value label, and a grid line with its value every ``step`` up to
    ``vmax`` (``sy``: value -> y)."""
    body = [
        f'<line x1="{L}" y1="{H - B}" x2="{W - 20}" y2="{H - B}" stroke="#333"/>',
        f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" text-anchor="middle">'
        f"{label}</text>",
    ]
    for v in range(0, int(vmax) + 1, step):
        body.append(
            f'<text x="{L - 8}" y="{sy(v) + 4}" text-anchor="end">{v}</text>'
            f'<line x1="{L}" y1="{sy(v)}" x2="{W - 20}" y2="{sy(v)}" stroke="#eee"/>'
        )
    return body


def _legend_row(H: int, texts, spacing: int) -> list[str]:
    """One legend line at the bottom: a colour box and its text per entry, ``spacing`` apart."""
    return [
        f'<rect x="{70 + i * spacing}" y="{H - 26}" width="10" height="10" fill="{COLORS[i]}"/>'
        f'<text x="{84 + i * spacing}" y="{H - 17}">{text}</text>'
        for i, text in enumerate(texts)
    ]


def colocation(data_dir: Path) -> str:
    rows = json.loads((data_dir / "h200-colocate.json").read_text())
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.get("mode", "plain") == "plain" and r.get("speedup_vs_1"):
            series.setdefault(r["workload"], []).append((int(r["k"]), float(r["speedup_vs_1"])))
    W, H, L, B, T, R = 560, 340, 60, 50, 40, 170
    kmax = max(k for pts in series.values() for k, _ in pts)
    ymax = kmax
    sx = lambda k: L + (k - 1) / (kmax - 1) * (W - L - R)  # noqa: E731
    sy = lambda v: H - B - v / ymax * (H - B - T)  # noqa: E731
    body = [
        f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="#333"/>',
        f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="#333"/>',
        f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">processes sharing one GPU (k)</text>',
        f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" text-anchor="middle">'
        "aggregate throughput / one process</text>",
    ]
    for k in sorted({k for pts in series.values() for k, _ in pts}):
        body.append(f'<text x="{sx(k)}" y="{H - B + 16}" text-anchor="middle">{k}</text>')
    for v in range(0, ymax + 1, 2):
        body.append(
            f'<text x="{L - 8}" y="{sy(v) + 4}" text-anchor="end">{v}</text>'
            f'<line x1="{L}" y1="{sy(v)}" x2="{W - R}" y2="{sy(v)}" stroke="#eee"/>'
        )
    body.append(
        f'<polyline fill="none" stroke="#999" stroke-dasharray="4 4" points="{sx(1)},{sy(1)} {sx(kmax)},{sy(kmax)}"/>'
        f'<text x="{W - R + 8}" y="{T + 10}" fill="#777">ideal (k ×)</text>'
    )
    for i, (name, pts) in enumerate(sorted(series.items())):
        pts.sort()
        color = COLORS[i % len(COLORS)]
        body.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2.5" points="'
            + " ".join(f"{sx(k):.1f},{sy(v):.1f}" for k, v in pts)
            + '"/>'
        )
        body += [
            f'<circle cx="{sx(k):.1f}" cy="{sy(v):.1f}" r="3.5" fill="{color}"/>'
            f'<text x="{sx(k) + 6:.1f}" y="{sy(v) - 6:.1f}" fill="{color}">{v:.2f}</text>'
            for k, v in pts
        ]
        body.append(f'<text x="{W - R + 8}" y="{T + 30 + 18 * i}" fill="{color}">{name.split("-")[0]}</text>')
    return _svg(W, H, body, "Co-located training on one H200 (time-sliced, no MPS)")


def policy(results: Path) -> str:
    text = results.read_text()
    section = text.split("##### A.", 1)[1].split("#####", 1)[0]
    traces: dict[str, dict[str, float]] = {}
    for block in section.split("=== ")[1:]:
        name = block.split(":", 1)[0].strip()
        traces[name] = {}
        for line in block.splitlines():
            m = re.match(r"^(\((?:[a-dg](?:'|Q)?\*?|D)\)) .*?\s(\d+\.\d+) h", line)
            if m:
                traces[name][m.group(1)] = float(m.group(2))
    policies = ["(a)", "(b)", "(g)", "(c)", "(D)", "(cQ)", "(d*)", "(d)"]
    labels = {
        "(a)": "exclusive",
        "(b)": "pack by memory",
        "(g)": "Gandiva-style greedy",
        "(c)": "pack where it pays",
        "(D)": "MeLoN default",
        "(cQ)": "(cQ) queue quota",
        "(d*)": "bound under (c)'s rules",
        "(d)": "ideal bound",
    }
    W, H, L, B, T = 720, 360, 60, 70, 40
    vmax = max(v for t in traces.values() for v in t.values())
    group_w = (W - L - 20) / len(traces)
    bar_w = group_w / (len(policies) + 1)
    sy = lambda v: H - B - v / vmax * (H - B - T)  # noqa: E731
    body = _value_axis(W, H, L, B, T, sy, vmax, 4, "makespan (h)")
    for g, (trace, values) in enumerate(traces.items()):
        x0 = L + g * group_w + bar_w / 2
        for i, p in enumerate(policies):
            if p not in values:
                continue
            x = x0 + i * bar_w
            body.append(
                f'<rect x="{x:.1f}" y="{sy(values[p]):.1f}" width="{bar_w - 2:.1f}" height="{H - B - sy(values[p]):.1f}" '
                f'fill="{COLORS[i % len(COLORS)]}"><title>{trace} {p}: {values[p]} h</title></rect>'
                f'<text x="{x + bar_w / 2 - 1:.1f}" y="{sy(values[p]) - 3:.1f}" text-anchor="middle" font-size="9">'
                f"{values[p]:.1f}</text>"
            )
        body.append(
            f'<text x="{x0 + len(policies) * bar_w / 2:.1f}" y="{H - B + 16}" text-anchor="middle">{trace}</text>'
        )
    for i, p in enumerate(policies):
        body.append(
            f'<rect x="{L + (i % 4) * 165}" y="{H - 34 + (i // 4) * 16}" width="10" height="10" '
            f'fill="{COLORS[i % len(COLORS)]}"/><text x="{L + (i % 4) * 165 + 14}" y="{H - 25 + (i // 4) * 16}">'
            f"{p} {labels[p]}</text>"
        )
    return _svg(W, H, body, "Simulated makespan per policy (8 GPUs; benchmarks/bench_policy.py)")


def staging_size(results: Path) -> str:
    """``bench_staging_size.json``: median seconds per measurement (ours, its repeat, plain), env and code."""
    data = json.loads(results.read_text())
    rows = data["rows"]
    groups = [
        (f"env archive ({data['env_mb']} MiB)", ["env ours", "env repeat", "env plain"]),
        (f"code folder ({data['code_mb']} MiB)", ["code ours", "code repeat", "code plain", "code plain-obj"]),
    ]
    labels = {
        "ours": "MeLoN stage (first)",
        "repeat": "MeLoN stage (repeat, 0 B)",
        "plain": "plain WebHDFS upload",
        "plain-obj": "plain upload of the same objects",
    }
    kinds = list(labels)
    W, H, L, B, T = 640, 360, 60, 70, 40
    vmax = max(rows[n]["max_s"] for _, names in groups for n in names)
    group_w = (W - L - 20) / len(groups)
    bar_w = group_w / (len(kinds) + 1)
    sy = lambda v: H - B - v / vmax * (H - B - T)  # noqa: E731
    body = _value_axis(W, H, L, B, T, sy, vmax, max(1, round(vmax / 6)), "seconds (median, bar: min–max)")
    for g, (title, names) in enumerate(groups):
        x0 = L + g * group_w + bar_w / 2
        for name in names:
            i = kinds.index(name.split(" ", 1)[1])
            row, x = rows[name], x0 + i * bar_w
            body.append(
                f'<rect x="{x:.1f}" y="{sy(row["median_s"]):.1f}" width="{bar_w - 4:.1f}" '
                f'height="{H - B - sy(row["median_s"]):.1f}" fill="{COLORS[i]}"><title>{name}: '
                f"{row['median_s']:.2f} s</title></rect>"
                f'<line x1="{x + bar_w / 2 - 2:.1f}" y1="{sy(row["min_s"]):.1f}" x2="{x + bar_w / 2 - 2:.1f}" '
                f'y2="{sy(row["max_s"]):.1f}" stroke="#333"/>'
                f'<text x="{x + bar_w / 2 - 2:.1f}" y="{sy(row["max_s"]) - 4:.1f}" text-anchor="middle" '
                f'font-size="10">{row["median_s"]:.1f}</text>'
            )
        ratio = rows[names[0]]["median_s"] / rows[names[2]]["median_s"]
        body.append(
            f'<text x="{x0 + len(kinds) * bar_w / 2:.1f}" y="{H - B + 16}" text-anchor="middle">{title}: '
            f"ours / plain {ratio:.2f}</text>"
        )
    for i, kind in enumerate(kinds):
        body.append(
            f'<rect x="{L + (i % 2) * 280}" y="{H - 34 + (i // 2) * 16}" width="10" height="10" '
            f'fill="{COLORS[i]}"/><text x="{L + (i % 2) * 280 + 14}" y="{H - 25 + (i // 2) * 16}">'
            f"{labels[kind]}</text>"
        )
    return _svg(W, H, body, f"Staging at size vs plain WebHDFS (mini cluster, {data['runs']} interleaved runs)")


def triggers(results: Path) -> str:
    """Two log-scale bar panels (RM requests/s, CPU % of one core) per N, old vs new."""
    import math

    rows: dict[int, dict[str, tuple[float, float]]] = {}
    for line in results.read_text().splitlines():
        m = re.match(r"^\s*(\d+) (old|new)\s+([\d.]+)(?:\s+[\d.]+){3}\s+([\d.]+)", line)
        if m:
            rows.setdefault(int(m.group(1)), {})[m.group(2)] = (float(m.group(3)), float(m.group(4)))
    W, H, B, T = 760, 340, 60, 40
    panels = [("RM requests/s", 0), ("triggerer CPU, % of one core", 1)]
    body: list[str] = []
    pw = (W - 40) / len(panels)
    for p, (label, idx) in enumerate(panels):
        L = 20 + p * pw + 50
        right = 20 + (p + 1) * pw - 10
        values = [v[idx] for r in rows.values() for v in r.values() if v[idx] > 0]
        lo = 10 ** math.floor(math.log10(min(values)))
        hi = 10 ** math.ceil(math.log10(max(values)))
        sy = lambda v, lo=lo, hi=hi: (
            H - B - (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (H - B - T)
        )  # noqa: E731
        body.append(
            f'<line x1="{L}" y1="{H - B}" x2="{right}" y2="{H - B}" stroke="#333"/>'
            f'<text x="{(L + right) / 2}" y="{T - 4}" text-anchor="middle">{label} (log)</text>'
        )
        d = lo
        while d <= hi * 1.001:
            body.append(
                f'<text x="{L - 6}" y="{sy(d) + 4}" text-anchor="end" font-size="10">{d:g}</text>'
                f'<line x1="{L}" y1="{sy(d)}" x2="{right}" y2="{sy(d)}" stroke="#eee"/>'
            )
            d *= 10
        group_w = (right - L) / max(1, len(rows))
        for g, (n, modes) in enumerate(sorted(rows.items())):
            for i, mode in enumerate(("old", "new")):
                if mode not in modes:
                    continue
                v = modes[mode][idx]
                x = L + g * group_w + group_w * (0.15 + 0.35 * i)
                body.append(
                    f'<rect x="{x:.1f}" y="{sy(v):.1f}" width="{group_w * 0.33:.1f}" height="{H - B - sy(v):.1f}" '
                    f'fill="{COLORS[i]}"><title>N={n} {mode}: {v}</title></rect>'
                    f'<text x="{x + group_w * 0.165:.1f}" y="{sy(v) - 3:.1f}" text-anchor="middle" font-size="9">'
                    f"{v:g}</text>"
                )
            body.append(f'<text x="{L + (g + 0.5) * group_w:.1f}" y="{H - B + 16}" text-anchor="middle">N={n}</text>')
    body += _legend_row(H, ("old: a GET per trigger per interval", "new: shared poller, one list per cycle"), 300)
    return _svg(W, H, body, "N deferred jobs, one triggerer process (benchmarks/bench_triggers.py)")


def launch_gang_sizes(results: Path) -> str:
    """Grouped bars per gang size: median seconds to all registered, ours vs the ``true`` floor, ratio on top."""
    rows = [
        tuple(float(x) for x in m.groups())
        for m in (
            re.match(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+ s\s+(?:PASS|FAIL)", line)
            for line in results.read_text().splitlines()
        )
        if m
    ]
    W, H, L, B, T = 640, 340, 60, 60, 40
    vmax = max(max(r[1], r[2]) for r in rows) * 1.15
    sy = lambda v: H - B - v / vmax * (H - B - T)  # noqa: E731
    group_w = (W - L - 20) / len(rows)
    body = _value_axis(W, H, L, B, T, sy, vmax, max(1, round(vmax / 6)), "submit → all registered, s (median)")
    for g, (n, ours, floor, ratio) in enumerate(rows):
        x0 = L + g * group_w
        for i, v in enumerate((ours, floor)):
            x = x0 + group_w * (0.15 + 0.35 * i)
            body.append(
                f'<rect x="{x:.1f}" y="{sy(v):.1f}" width="{group_w * 0.33:.1f}" height="{H - B - sy(v):.1f}" '
                f'fill="{COLORS[i]}"><title>{int(n)} tasks: {v} s</title></rect>'
            )
        body.append(
            f'<text x="{x0 + group_w / 2:.1f}" y="{sy(max(ours, floor)) - 6:.1f}" text-anchor="middle" '
            f'font-size="11">{ratio:.2f}×</text>'
            f'<text x="{x0 + group_w / 2:.1f}" y="{H - B + 16}" text-anchor="middle">{int(n)} tasks</text>'
        )
    body += _legend_row(H, ("ours: AM + executor per task", "floor: the same AM launching `true`"), 280)
    return _svg(W, H, body, "Gang launch vs gang size (mini cluster on 2 cores; ratio ours / floor)")


def sim_vs_system(results: Path) -> str:
    """One lane per job: its run in the simulator (thin) above its run on the real system (thick), by GPU. A row
    may carry the job's YARN priority after its arrival (``--history``)."""
    jobs = [
        m.groups()
        for m in (
            re.match(
                r"^(\S+)\s+(small|large)\s+[\d.]+\s+\d+\s+\d+(?:\s+\d+)? \|\s+(\d+)\s+([\d.]+)\s+([\d.]+) \|"
                r"\s+(\d+)\s+([\d.]+)\s+([\d.]+)",
                line,
            )
            for line in results.read_text().splitlines()
        )
        if m
    ]
    W, L, R, T, lane = 720, 70, 20, 40, 22
    H = T + lane * len(jobs) + 60
    tmax = max(float(j[7]) for j in jobs) * 1.05
    sx = lambda t: L + t / tmax * (W - L - R)  # noqa: E731
    body = []
    for t in range(0, int(tmax) + 1, 50):
        body.append(
            f'<line x1="{sx(t):.1f}" y1="{T}" x2="{sx(t):.1f}" y2="{T + lane * len(jobs)}" stroke="#eee"/>'
            f'<text x="{sx(t):.1f}" y="{T + lane * len(jobs) + 14}" text-anchor="middle">{t}</text>'
        )
    for k, (name, kind, sg, ss, sf, rg, rs, rf) in enumerate(jobs):
        y = T + k * lane
        body.append(
            f'<text x="{L - 6}" y="{y + 14}" text-anchor="end">{name}</text>'
            f'<rect x="{sx(float(ss)):.1f}" y="{y + 3}" width="{sx(float(sf)) - sx(float(ss)):.1f}" height="5" '
            f'fill="{COLORS[int(sg)]}" opacity="0.5"><title>{name} simulated on GPU {sg}: {ss}–{sf} s</title></rect>'
            f'<rect x="{sx(float(rs)):.1f}" y="{y + 9}" width="{sx(float(rf)) - sx(float(rs)):.1f}" height="9" '
            f'fill="{COLORS[int(rg)]}"><title>{name} ({kind}) real on GPU {rg}: {rs}–{rf} s</title></rect>'
        )
    sim_end, real_end = max(float(j[4]) for j in jobs), max(float(j[7]) for j in jobs)
    body.append(
        f'<text x="{W / 2}" y="{H - 22}" text-anchor="middle">seconds; thin: simulated, thick: real; colour: '
        f"GPU 0 / GPU 1. Makespan {sim_end:.1f} s simulated, {real_end:.1f} s real ({real_end / sim_end:.3f}×)</text>"
    )
    return _svg(W, H, body, "Simulator vs system: 12 jobs through YARN + AM + ledger (bench_sim_vs_system.py)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(HERE / "data"))
    parser.add_argument("--out", default=str(HERE.parent / "docs" / "img"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-colocation.svg").write_text(colocation(Path(args.data)))
    (out / "policy-makespan.svg").write_text(policy(HERE / "results" / "bench_policy.txt"))
    (out / "trigger-rm-requests.svg").write_text(triggers(HERE / "results" / "bench_triggers.txt"))
    print(f"wrote {out / 'gpu-colocation.svg'}, {out / 'policy-makespan.svg'} and {out / 'trigger-rm-requests.svg'}")
    for name, draw, source in (
        ("launch-gang-sizes.svg", launch_gang_sizes, "bench_launch-gang-sizes.txt"),
        ("sim-vs-system.svg", sim_vs_system, "bench_sim_vs_system.txt"),
    ):
        (out / name).write_text(draw(HERE / "results" / source))
        print(f"wrote {out / name}")
    staging = HERE / "results" / "bench_staging_size.json"
    if staging.is_file():
        (out / "staging-size.svg").write_text(staging_size(staging))
        print(f"wrote {out / 'staging-size.svg'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
