"""Where a job's wall time goes on the mini cluster: submit → AM registered → containers running → gang
registered → finished, from polling the RM and the AM's /status every 0.2 s; training time from the job's log.

    python benchmarks/job_timeline.py --work-dir .melon-minicluster [--job mwms|ps|generic]

Needs a running cluster (`melon minicluster start`). Prints one line per phase (seconds since submit).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from airflow_provider_melon.cli import melon_hook_for_cluster  # noqa: E402
from airflow_provider_melon.dev import minicluster as mc  # noqa: E402
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES  # noqa: E402
from airflow_provider_melon.spec import JobSpec  # noqa: E402

TRAINING = REPO / "dags" / "training" / "mnist"


def job(kind: str, webhdfs: str, data: str) -> dict:
    if kind == "mwms":
        return {
            "name": "timeline-mwms",
            "framework": "tensorflow",
            "code": str(TRAINING),
            "entrypoint": f"python train.py --epochs 2 --model-dir /user/root/timeline/model --webhdfs {webhdfs}",
            "inputs": [{"path": data, "name": "mnist.npz"}],
            "roles": {
                "chief": {"memory": "1g", "gpu_memory": "2GiB"},
                "worker": {"memory": "1g", "gpu_memory": "2GiB"},
            },
        }
    if kind == "ps":
        return {
            "name": "timeline-ps",
            "framework": "tensorflow",
            "code": str(TRAINING),
            "entrypoint": "python train_ps.py --steps 30",
            "roles": {"chief": {"memory": "1g"}, "worker": {"instances": 2, "memory": "1g"}, "ps": {"memory": "1g"}},
        }
    return {
        "name": "timeline-generic",
        "framework": "generic",
        "code": str(TRAINING),
        "entrypoint": "python -c \"print('hello')\"",
        "roles": {"worker": {"instances": 2, "memory": 256}},
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work-dir", default=str(REPO / ".melon-minicluster"))
    parser.add_argument("--job", default="mwms", choices=["mwms", "ps", "generic"])
    args = parser.parse_args()
    details = mc.read_details(Path(args.work_dir))
    hook = melon_hook_for_cluster(Path(args.work_dir))
    webhdfs = details.webhdfs_url.rsplit("/webhdfs/v1", 1)[0]
    data = "/user/root/timeline/mnist.npz"
    if hook.hdfs.status(data, strict=False) is None:
        sys.path.insert(0, str(TRAINING))
        from data import make_dataset, to_npz_bytes

        hook.hdfs.write(data, data=to_npz_bytes(make_dataset()), overwrite=True)
    spec = JobSpec.from_dict(job(args.job, webhdfs, data))
    t0 = time.monotonic()
    app_id = hook.submit(spec)["app_id"]
    marks: dict[str, float] = {"submitted (staged + RM accepted)": time.monotonic() - t0}
    n_tasks = spec.task_count
    while True:
        app = hook.yarn.get_application(app_id)
        now = time.monotonic() - t0
        if app["state"] == "RUNNING":
            marks.setdefault("AM registered with the RM", now)
            status = hook.yarn.am_status(app_id)
            tasks = (status or {}).get("tasks") or []
            if len(tasks) == n_tasks and all(t.get("container_id") for t in tasks):
                marks.setdefault("all task containers allocated", now)
            if len(tasks) == n_tasks and all(t["state"] in ("REGISTERED", "SUCCEEDED") for t in tasks):
                marks.setdefault("gang registered (executors up, cluster spec out)", now)
        if app["state"] in TERMINAL_STATES:
            marks["finished: " + app["finalStatus"]] = now
            break
        time.sleep(0.2)
    for name, at in marks.items():
        print(f"{at:7.1f} s  {name}")
    logs = "\n".join(mc.container_logs(args.work_dir, app_id).values())
    epochs = re.findall(r"- (\d+)s - loss.*?- (\d+)ms/epoch|- (\d+)s/epoch", logs)
    if epochs:
        print(f"         keras epoch lines: {len(epochs)} (see the chief's stdout for per-epoch times)")
    step = re.findall(r"STEP_TIME_S ([0-9.]+)", logs)
    if step:
        print(f"         PS mean step time: {float(step[0]) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
