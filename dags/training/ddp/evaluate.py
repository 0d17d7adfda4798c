"""Evaluate train_ddp.py's model on data.py's test split; write {"accuracy", "n"} as metrics.json.

Runs as a one-task MeLoN job: the model folder is localized by YARN (an input named ``model``:
``$MELON_INPUT_MODEL``), metrics.json goes to ``$MELON_OUTPUT_METRICS``, which MeLoN publishes to HDFS.
"""

import argparse
import json
import os

import torch
from data import TEST_SEED, build_model, make


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=os.environ.get("MELON_INPUT_MODEL", "model"))
    parser.add_argument("--metrics", default=os.path.join(os.environ.get("MELON_OUTPUT_METRICS", "."), "metrics.json"))
    parser.add_argument("--samples", type=int, default=512)
    args = parser.parse_args()

    model = build_model()
    model.load_state_dict(torch.load(os.path.join(args.model, "model.pt"), weights_only=True))
    x, y = make(args.samples, TEST_SEED)
    with torch.no_grad():
        predictions = model(x).argmax(dim=1)
    metrics = {"accuracy": float((predictions == y).float().mean()), "n": int(len(y))}
    with open(args.metrics, "w", encoding="utf-8") as f:
        json.dump(metrics, f)
    print(f"[evaluate] {json.dumps(metrics)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
