"""Evaluate a SavedModel from HDFS on the test split; write {"accuracy", "n"} as JSON to HDFS.

Runs as a one-task `generic` MeLoN job. The model is fetched through WebHDFS, the data is localized by YARN.
"""

import argparse
import json
import os
import tempfile

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tf_keras as keras  # noqa: E402
from hdfs import InsecureClient  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="mnist.npz")
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--metrics", required=True, help="HDFS path of the metrics JSON to write")
    parser.add_argument("--webhdfs", required=True)
    parser.add_argument("--user", default=os.environ.get("USER", "root"))
    args = parser.parse_args()

    client = InsecureClient(args.webhdfs, user=args.user)
    local = tempfile.mkdtemp(prefix="eval-")
    client.download(args.model_dir, local, n_threads=1)
    model_path = os.path.join(local, os.path.basename(args.model_dir.rstrip("/")))
    model = keras.models.load_model(model_path)
    with np.load(args.data) as data:
        x = data["x_test"].reshape(len(data["x_test"]), -1).astype("float32")
        y = data["y_test"]
    predictions = np.argmax(model.predict(x, verbose=0), axis=1)
    metrics = {"accuracy": float((predictions == y).mean()), "n": int(len(y)), "model": args.model_dir}
    client.write(args.metrics, data=json.dumps(metrics), overwrite=True, encoding="utf-8")
    print(f"[evaluate] {json.dumps(metrics)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
