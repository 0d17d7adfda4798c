"""A training-shaped probe: reports a decreasing loss each step through $MELON_PROGRESS_FILE for --seconds."""

import argparse
import json
import math
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=120)
args = parser.parse_args()
path = os.environ.get("MELON_PROGRESS_FILE")
step, start = 0, time.monotonic()
while time.monotonic() - start < args.seconds:
    step += 1
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump({"step": step, "loss": round(2.0 * math.exp(-step / 40) + 0.05, 4)}, f)
        os.replace(path + ".tmp", path)
    time.sleep(0.5)
print(f"ui probe done after {step} steps", flush=True)
