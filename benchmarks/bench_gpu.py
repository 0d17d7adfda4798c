"""GPU check (GPU machine only, one run under ~5 minutes): does MeLoN's placement cost throughput?

    python benchmarks/bench_gpu.py benchmarks/results/bench_gpu-<gpu>.json

Measures, on GPU 0, side by side in one run:
1. k = 1, 2, 4 copies of a small training job (ResNet-18, 32x32, batch 128, fp32, synthetic data) launched
   (a) raw and (b) the MeLoN way — a ledger reservation (``gpu.ledger``: each holds its slot, a quarter of the GPU)
   and the in-process memory cap (``runtime.framework.memory_cap_env``, the ``sitecustomize`` the executor
   injects) — without MPS, then with the MPS control daemon. Target: (b) ≥ 95 % of (a)'s aggregate samples/s in
   each mode. k = 8 runs raw only, beside them: the ledger holds no fifth small task on a GPU (``policy.slot_mb``),
   and the raw figure shows what that gives up.
2. ResNet-50 (224, b64, bf16) + 2 × ResNet-18 under MPS through (b), the most the slots hold beside a large task
   (half + two quarters): the big job keeps ≥ 0.9 of its solo speed. Without MPS the same mix, raw (the ledger
   holds one small task beside a large one, ``policy.MAX_SMALL_WITH_LARGE``): each job's speed against its solo run,
   the point between the measured R50 + R18 and R50 + 3 × R18 that decides whether a second small task may join
   (``MEASURED`` line; ``docs/development.md``, "Tried, not kept").
3. The profiler (``gpu.profiler.profile_command``) on one ResNet-18 copy: its measured peak within 10 % of the
   NVML peak seen during the raw k=1 run.
The executor's other work (HTTP registration, heartbeats) is off the GPU and not measured here; the launch path is
``bench_launch.py``'s business. Needs torch + torchvision and an NVIDIA driver; without a GPU it says so and exits 2.
All processes of one measurement start their timed window at the same instant, as the data in benchmarks/data did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from airflow_provider_melon.gpu import devices  # noqa: E402
from airflow_provider_melon.gpu.ledger import Ledger  # noqa: E402
from airflow_provider_melon.runtime import framework  # noqa: E402

WORKLOADS = {"r18": ("resnet18", 32, 128, "fp32", 2048), "r50": ("resnet50", 224, 64, "bf16", 6144)}
WINDOW_S = 6.0


def worker(name: str, start_at: float, out_path: str, steps_limit: int = 0) -> None:
    import torch
    import torchvision

    model_name, size, batch, dtype, _ = WORKLOADS[name]
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    model = getattr(torchvision.models, model_name)(num_classes=10 if size == 32 else 1000).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    if steps_limit:  # profiler mode: MELON_PROFILE_STEPS steps, then exit
        for _ in range(steps_limit):
            step()
        torch.cuda.synchronize()
        return
    while time.time() < start_at:
        step()
    torch.cuda.synchronize()
    steps, t0 = 0, time.time()
    while time.time() - t0 < WINDOW_S:
        step()
        steps += 1
        if steps % 10 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    dt = time.time() - t0
    Path(out_path).write_text(
        json.dumps({"samples_per_s": steps * batch / dt, "max_reserved_mib": torch.cuda.max_memory_reserved() / 2**20})
    )


def launch(names: list[str], melon: bool, tag: str, ledger_dir: str) -> dict:
    """Start one process per name with a common start instant; MeLoN mode reserves and caps each one."""
    start_at = time.time() + 15 + 2 * len(names)
    procs, outs = [], []
    ledger = Ledger(ledger_dir)
    gpus = devices.list_gpus()
    for i, name in enumerate(names):
        out = os.path.join(ledger_dir, f"{tag}-{i}.json")
        env = dict(os.environ)
        task_id = f"{tag}-{i}"
        if melon:
            expected = WORKLOADS[name][4]
            gpu = ledger.reserve(
                task_id, os.getpid(), expected, gpus, exclusive=False, large=name == "r50", mps=devices.mps_active()
            )
            if gpu is None:
                raise RuntimeError(f"{tag}: the ledger found no GPU for task {i} ({expected} MiB)")
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
            cap_env, _ = framework.memory_cap_env(expected, gpus[gpu].total_mb, env)
            env.update(cap_env)
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", name, str(start_at), out], env=env))
        outs.append(out)
    peak = 0.0
    while any(p.poll() is None for p in procs):
        peak = max(peak, sum(d.used_mb for d in devices.list_gpus()[:1]))
        time.sleep(0.5)
    for i in range(len(names)):
        ledger.release(f"{tag}-{i}")
    per = [json.loads(Path(o).read_text()) for o in outs if Path(o).exists()]
    return {
        "tag": tag,
        "names": names,
        "melon": melon,
        "ok": len(per),
        "per_process": per,
        "aggregate": sum(r["samples_per_s"] for r in per),
        "nvml_peak_mib": peak,
    }


def mps(on: bool) -> None:
    if on:
        subprocess.run(["nvidia-cuda-mps-control", "-d"], check=True)
        time.sleep(2)
    else:
        subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n", check=False)
        time.sleep(3)


def main(outfile: str) -> int:
    gpus = devices.list_gpus()
    if getattr(gpus, "source", "none") != "nvml" or not gpus:
        print(f"no GPU: {getattr(gpus, 'reason', 'NVML found no device')} — bench_gpu.py needs an NVIDIA GPU")
        return 2
    results: dict = {"gpu": gpus[0].name, "total_mb": gpus[0].total_mb, "runs": [], "checks": {}}
    ledger_dir = tempfile.mkdtemp(prefix="bench-gpu-")

    def record(r):
        results["runs"].append(r)
        Path(outfile).write_text(json.dumps(results, indent=1))
        print(json.dumps({k: v for k, v in r.items() if k != "per_process"}), flush=True)
        return r

    for mode in ("no-mps", "mps"):
        mps(mode == "mps")
        try:
            for k in (1, 2, 4, 8):
                raw = record(launch(["r18"] * k, False, f"{mode}-raw-k{k}", ledger_dir))
                if k > 4:  # beyond the slots: raw only (see the docstring)
                    continue
                ours = record(launch(["r18"] * k, True, f"{mode}-melon-k{k}", ledger_dir))
                ratio = ours["aggregate"] / raw["aggregate"] if raw["aggregate"] else 0.0
                results["checks"][f"{mode} k={k} melon/raw"] = {"ratio": ratio, "pass": ratio >= 0.95}
            if mode == "no-mps":  # raw: the ledger holds no second small task beside a large one without MPS
                solo = record(launch(["r50"], False, "no-mps-raw-r50-solo", ledger_dir))
                mix = record(launch(["r50", "r18", "r18"], False, "no-mps-raw-r50+2r18", ledger_dir))
                small = next(r for r in results["runs"] if r["tag"] == "no-mps-raw-k1")["per_process"][0]
                results["measured"] = {
                    "r50+2r18 without MPS": {
                        "normalized": [
                            mix["per_process"][0]["samples_per_s"] / solo["per_process"][0]["samples_per_s"],
                            *(r["samples_per_s"] / small["samples_per_s"] for r in mix["per_process"][1:]),
                        ],
                        "decides": "policy.MAX_SMALL_WITH_LARGE: 2 if R50 keeps >= 1 / FAIRNESS_BOUND (0.5)",
                    }
                }
            if mode == "mps":
                solo = record(launch(["r50"], True, "mps-r50-solo", ledger_dir))
                mix = record(launch(["r50", "r18", "r18"], True, "mps-r50+2r18", ledger_dir))
                keep = mix["per_process"][0]["samples_per_s"] / solo["per_process"][0]["samples_per_s"]
                results["checks"]["mps r50 beside 2 r18 keeps"] = {"ratio": keep, "pass": keep >= 0.9}
        finally:
            if mode == "mps":
                mps(False)

    from airflow_provider_melon.gpu.profiler import profile_command

    prof = profile_command([sys.executable, __file__, "--worker", "r18", "0", "/dev/null", "--steps"], steps=30)
    nvml_peak = next(r["nvml_peak_mib"] for r in results["runs"] if r["tag"] == "no-mps-raw-k1")
    err = abs(prof.peak_mb - nvml_peak) / nvml_peak if nvml_peak else 1.0
    results["checks"]["profiler peak vs NVML peak"] = {
        "profiler_peak_mb": prof.peak_mb,
        "nvml_peak_mb": nvml_peak,
        "expected_mb": prof.expected_mb,
        "rel_err": err,
        "pass": err <= 0.10,
    }
    Path(outfile).write_text(json.dumps(results, indent=1))
    for name, check in results["checks"].items():
        print(f"{'PASS' if check['pass'] else 'FAIL'}  {name}: {json.dumps(check)}")
    for name, point in results.get("measured", {}).items():
        print(f"MEASURED  {name}: {json.dumps(point)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        steps = int(os.environ.get("MELON_PROFILE_STEPS", "0")) if "--steps" in sys.argv else 0
        worker(sys.argv[2], float(sys.argv[3]), sys.argv[4], steps)
    else:
        sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench_gpu.json"))
