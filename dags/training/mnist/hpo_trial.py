"""One hyper-parameter trial: softmax regression (numpy, full-batch gradient descent) on the localized dataset.
Writes {"lr", "accuracy"} to $MELON_OUTPUT_METRICS/metrics.json (MeLoN publishes it). Small on purpose: many trials share one GPU's memory budget."""

import argparse
import json
import os

import numpy as np


def train(x, y, lr: float, epochs: int) -> np.ndarray:
    w = np.zeros((x.shape[1], 10), dtype="float32")
    onehot = np.eye(10, dtype="float32")[y]
    for _ in range(epochs):
        logits = x @ w
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        w -= lr * x.T @ (p - onehot) / len(x)
    return w


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--data", default="mnist.npz")
    parser.add_argument(
        "--metrics",
        default=os.path.join(os.environ.get("MELON_OUTPUT_METRICS", "."), "metrics.json"),
        help="where to write the result (MeLoN publishes $MELON_OUTPUT_METRICS to HDFS)",
    )
    args = parser.parse_args()
    with np.load(args.data) as d:
        x, y = d["x_train"].reshape(len(d["x_train"]), -1), d["y_train"]
        xt, yt = d["x_test"].reshape(len(d["x_test"]), -1), d["y_test"]
    w = train(x, y, args.lr, args.epochs)
    accuracy = float((np.argmax(xt @ w, axis=1) == yt).mean())
    result = {"lr": args.lr, "accuracy": accuracy}
    with open(args.metrics, "w", encoding="utf-8") as f:
        json.dump(result, f)
    print(f"[trial] {json.dumps(result)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
