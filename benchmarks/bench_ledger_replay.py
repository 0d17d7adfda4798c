"""Replay of the recorded H200 co-locations through the GPU ledger (``gpu/ledger.py``, the real code): does what it
admits ever oversubscribe the GPU, or leave a task using more than its reservation?

From ``benchmarks/data/h200-colocate.json`` (k = 1, 2, 4, 8 identical processes; torch's ``max_memory_reserved``
per process and NVML's peak used memory of the device):

* the memory outside the allocator is fitted as ``NVML used - k x max_reserved = driver + k x context``
  (ResNet-50's four points; ResNet-18's NVML samples missed its peak, 1654 MiB below its own 3208 MiB allocator
  reserve, so its points are shown but not fitted);
* each scenario's tasks are admitted as a gang (YARN starts its containers together, so none has allocated yet
  when the next is admitted), each asking its allocator's peak (the cap) plus the reserve under test; then each
  runs at ``max_reserved + context`` (the fitted context) on a device that also holds the driver's memory.

Scenarios: k = 1...8 ResNet-18 and ResNet-50 as recorded, the recorded mixes of ``h200-mix.json`` (ResNet-50 with
1 and 3 ResNet-18, two ResNet-50), and the same kinds packed until the ledger refuses. A scenario FAILs when the
tasks' true use exceeds the GPU or any task's use exceeds its reservation (a neighbour's OOM would follow).

    .venv/bin/python benchmarks/bench_ledger_replay.py [--reserve 400,1024]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from airflow_provider_melon.gpu.devices import DeviceInfo  # noqa: E402
from airflow_provider_melon.gpu.ledger import Ledger  # noqa: E402
from benchmarks.provenance import ran_at  # noqa: E402

DATA = os.path.join(REPO, "benchmarks", "data")
H200_TOTAL_MB = 143771  # NVML's total of an H200 (141 GB)
R18, R50 = "resnet18-cifar-b128-fp32", "resnet50-224-b64-bf16"
SHORT = {R18: "R18", R50: "R50"}


def load(name: str):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


def allocator_mb(colocate) -> dict:
    """Each workload's allocator peak, MiB (torch ``max_memory_reserved``, the same in every process and every k)."""
    out = {}
    for rec in colocate:
        out[rec["workload"]] = max(int(p["max_reserved_mib"] + 0.999) for p in rec["per_process"])
    return out


def fit_context(colocate, workload: str = R50):
    """(context per process, driver's memory, largest residual), MiB: least squares of
    ``nvml_peak_used - k x max_reserved = driver + k x context`` over the recorded k."""
    pts = []
    for rec in colocate:
        if rec["workload"] == workload and rec["mode"] == "plain":
            outside = rec["nvml_peak_used_mib"] - sum(p["max_reserved_mib"] for p in rec["per_process"])
            pts.append((rec["k"], outside))
    n = len(pts)
    mk, mo = sum(k for k, _ in pts) / n, sum(o for _, o in pts) / n
    slope = sum((k - mk) * (o - mo) for k, o in pts) / sum((k - mk) ** 2 for k, _ in pts)
    driver = mo - slope * mk
    residual = max(abs(o - driver - slope * k) for k, o in pts)
    return slope, driver, residual


def scenarios(colocate, mix):
    out = [
        (f"{k} x {SHORT[w]}", [w] * k)
        for w in (R18, R50)
        for k in sorted({r["k"] for r in colocate if r["workload"] == w})
    ]
    for rec in mix:
        if rec["scenario"].startswith("mps-") or rec["scenario"].startswith("solo-"):
            continue
        out.append((f"mix {rec['scenario']}", [job[0] for job in rec["jobs"]]))
    out += [
        ("R18 until full", [R18] * 200),
        ("R50 until full", [R50] * 200),
        ("R50+3 R18 until full", [R50, R18, R18, R18] * 50),
    ]
    return out


def replay(reserve_mb: int, context_mb: float, driver_mb: float, kinds, allocator) -> dict:
    """Admit ``kinds`` as a gang on one H200 through a fresh ledger (each task's lease held by this process while
    the scenario lasts), then run them: the figures of the scenario."""
    with tempfile.TemporaryDirectory() as tmp:
        led = Ledger(os.path.join(tmp, "ledger"))
        idle = [DeviceInfo(0, "GPU-h200", "NVIDIA H200", H200_TOTAL_MB, int(driver_mb), processes=())]
        admitted = []
        for i, kind in enumerate(kinds):
            # memory only: with MPS the interference rule (a large job beside at most one small) is off
            if led.reserve(f"t{i}", os.getpid(), allocator[kind] + reserve_mb, idle, mps=True) is None:
                break
            admitted.append(kind)
        for i in range(len(admitted)):
            led.release(f"t{i}")
        use = [allocator[k] + context_mb for k in admitted]
        held = [allocator[k] + reserve_mb for k in admitted]
    over = [u - h for u, h in zip(use, held) if u > h]
    total_use = sum(use) + driver_mb
    return {
        "admitted": len(admitted),
        "asked": len(kinds),
        "use_mb": total_use,
        "held_mb": sum(held),
        "oversubscribed": total_use > H200_TOTAL_MB,
        "over_reservation": len(over),
        "worst_over_mb": max(over, default=0.0),
    }


def run(reserves) -> list:
    colocate, mix = load("h200-colocate.json"), load("h200-mix.json")
    allocator = allocator_mb(colocate)
    context, driver, residual = fit_context(colocate)
    rows = []
    for reserve in reserves:
        for name, kinds in scenarios(colocate, mix):
            r = replay(reserve, context, driver, kinds, allocator)
            r.update(scenario=name, reserve_mb=reserve, ok=not r["oversubscribed"] and not r["over_reservation"])
            rows.append(r)
    return [{"context_mb": context, "driver_mb": driver, "residual_mb": residual, "allocator": allocator}] + rows


def main(argv=None) -> int:
    from airflow_provider_melon.gpu.context import CONTEXT_MB

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--reserve",
        default=f"400,{CONTEXT_MB['pytorch']}",
        help="reserves (MiB) to replay, comma-separated (400: the old default; the other PyTorch's first-run figure)",
    )
    args = ap.parse_args(argv)
    reserves = [int(x) for x in args.reserve.split(",")]
    fit, *rows = run(reserves)
    colocate = load("h200-colocate.json")
    print(f"# {ran_at()}")
    print("recorded H200 runs (benchmarks/data/h200-colocate.json): NVML used - k x torch max_memory_reserved")
    for rec in colocate:
        outside = rec["nvml_peak_used_mib"] - sum(p["max_reserved_mib"] for p in rec["per_process"])
        print(
            f"  {SHORT[rec['workload']]} k={rec['k']}: {rec['nvml_peak_used_mib']:8.0f} - "
            f"{sum(p['max_reserved_mib'] for p in rec['per_process']):6.0f} = {outside:7.0f} MiB"
        )
    print(
        f"fit over R50: {fit['driver_mb']:.0f} MiB the device's + {fit['context_mb']:.0f} MiB per process "
        f"(largest residual {fit['residual_mb']:.1f} MiB); R18's NVML samples missed its peak (not fitted)"
    )
    print("allocator peaks: " + ", ".join(f"{SHORT[k]} {v} MiB" for k, v in fit["allocator"].items()))
    print()
    print(
        f"{'scenario':22} {'reserve':>7} {'admitted':>9} {'true use':>10} {'held':>9} {'GPU':>8} "
        f"{'over resv.':>10}  result"
    )
    for r in rows:
        print(
            f"{r['scenario']:22} {r['reserve_mb']:7d} {r['admitted']:4d}/{r['asked']:<4d} {r['use_mb']:10.0f} "
            f"{r['held_mb']:9.0f} {H200_TOTAL_MB:8d} {r['over_reservation']:4d} "
            f"(+{r['worst_over_mb']:4.0f})  {'PASS' if r['ok'] else 'FAIL'}"
        )
    default = CONTEXT_MB["pytorch"]
    ok = all(r["ok"] for r in rows if r["reserve_mb"] == default)
    print(
        f"\nreserve {default} MiB (PyTorch's first-run figure): {'PASS' if ok else 'FAIL'}: "
        + ("no scenario oversubscribes the GPU or leaves a task beyond its reservation" if ok else "see FAIL rows")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
