"""One hyper-parameter trial: softmax regression (numpy, full-batch gradient descent) on the localized dataset.
Writes {"lr", "accuracy"} to HDFS through WebHDFS. Small on purpose: many trials share one GPU's memory budget."""

import argparse
import json
import os

import numpy as np
from hdfs import InsecureClient


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
    parser.add_argument("--metrics", required=True)
    parser.add_argument("--webhdfs", required=True)
    parser.add_argument("--user", default=os.environ.get("USER", "root"))
    args = parser.parse_args()
    with np.load(args.data) as d:
        x, y = d["x_train"].reshape(len(d["x_train"]), -1), d["y_train"]
        xt, yt = d["x_test"].reshape(len(d["x_test"]), -1), d["y_test"]
    w = train(x, y, args.lr, args.epochs)
    accuracy = float((np.argmax(xt @ w, axis=1) == yt).mean())
    result = {"lr": args.lr, "accuracy": accuracy}
    InsecureClient(args.webhdfs, user=args.user).write(args.metrics, data=json.dumps(result), overwrite=True,
                                                       encoding="utf-8")
    print(f"[trial] {json.dumps(result)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
