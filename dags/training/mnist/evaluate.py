"""Evaluate the trained SavedModel on the test split; write {"accuracy", "n"} as metrics.json.

Runs as a one-task `generic` MeLoN job. The model and the data are localized by YARN (the job's `inputs`:
$MELON_INPUT_MODEL, mnist.npz); metrics.json goes to $MELON_OUTPUT_METRICS, which MeLoN publishes to HDFS.
No HDFS code here.
"""

import argparse
import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tf_keras as keras  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="mnist.npz")
    parser.add_argument("--model", default=os.environ.get("MELON_INPUT_MODEL", "model"))
    parser.add_argument("--metrics", default=os.path.join(os.environ.get("MELON_OUTPUT_METRICS", "."), "metrics.json"))
    args = parser.parse_args()

    model = keras.models.load_model(args.model)
    with np.load(args.data) as data:
        x = data["x_test"].reshape(len(data["x_test"]), -1).astype("float32")
        y = data["y_test"]
    predictions = np.argmax(model.predict(x, verbose=0), axis=1)
    metrics = {"accuracy": float((predictions == y).mean()), "n": int(len(y))}
    with open(args.metrics, "w", encoding="utf-8") as f:
        json.dump(metrics, f)
    print(f"[evaluate] {json.dumps(metrics)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
