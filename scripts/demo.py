"""`make demo`: the example DAG end to end on the embedded mini cluster and a real Airflow (api-server, scheduler,
dag-processor, triggerer), triggered through the REST API as the UI's Trigger button does; prints where the
results are. Everything it starts is stopped at the end, so the results are also copied out of HDFS to
``demo-results/<run>/`` (the model and the published result), which stays after the cluster is gone."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from airflow_provider_melon.dev import minicluster as mc  # noqa: E402
from airflow_provider_melon.dev.local_airflow import LocalAirflow  # noqa: E402

DAG_ID = "melon_mnist_pipeline"


def main() -> int:
    work_dir = REPO / ".melon-minicluster"
    t0 = time.monotonic()
    details = mc.start(work_dir)
    print(
        f"[demo] mini cluster up in {time.monotonic() - t0:.1f}s: RM {details.rm_web_url}, "
        f"WebHDFS {details.webhdfs_url}"
    )
    for node in mc.status(work_dir)["nodes"]:
        print(f"[demo]   node {node['id']}: {node['total']}")
    airflow_home = REPO / ".airflow"
    shutil.rmtree(airflow_home, ignore_errors=True)  # a fresh metadata DB and logs for each demo
    stack = LocalAirflow(mc.airflow_env(details, airflow_home, REPO / "dags", sys.executable))
    try:
        t1 = time.monotonic()
        stack.start()
        print(
            f"[demo] Airflow up in {time.monotonic() - t1:.1f}s (api-server {stack.url}, scheduler, "
            "dag-processor, triggerer; LocalExecutor)"
        )
        run_id = stack.trigger(DAG_ID)
        print(f"[demo] triggered {DAG_ID} through the REST API (no logical date): run {run_id}")
        t2 = time.monotonic()
        run = stack.wait_run(DAG_ID, run_id, timeout=1800)
        states = stack.task_states(DAG_ID, run_id)
        print(
            f"[demo] DAG run {run['state']} in {time.monotonic() - t2:.0f}s: "
            + ", ".join(f"{t} {s}" for t, s in states.items())
        )
        if run["state"] != "success":
            for task, state in states.items():
                if state == "failed":
                    print(f"[demo] --- log of {task} ---")
                    print("\n".join(stack.task_log(DAG_ID, run_id, task).splitlines()[-40:]))
            return 1
        result = stack.xcom(DAG_ID, run_id, "publish")
        print(f"[demo] accuracy {result['accuracy']:.3f} (threshold {result['threshold']})")
        print(f"[demo] model published at: {result['published']}")
        local = copy_out(details, result, run_id)
        print(f"[demo] copied to {local} (the model and result.json; HDFS goes away with the cluster)")
        print(f"[demo] task logs: {airflow_home}/logs/dag_id={DAG_ID}/ (kept)")
        return 0
    finally:
        stack.stop()
        mc.stop(work_dir)
        print(
            "[demo] Airflow and the mini cluster are stopped; the files above stay. "
            "`make up` runs them again and stays up, with the UI."
        )


def copy_out(details, result: dict, run_id: str) -> Path:
    """Download the published model (and the run's metrics) from the mini cluster's HDFS."""
    from hdfs import InsecureClient

    from airflow_provider_melon.hadoop.hdfs_io import quiet_client_logs, run_slug
    from airflow_provider_melon.runtime.outputs import hdfs_path

    quiet_client_logs()
    client = InsecureClient(details.webhdfs_url.rsplit("/webhdfs/v1", 1)[0], user=details.user)
    target = REPO / "demo-results" / run_slug(run_id)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    model = hdfs_path(result["published"])
    client.download(model, str(target / "model"), n_threads=1)
    (target / "result.json").write_text(json.dumps(result, indent=1))
    return target


if __name__ == "__main__":
    raise SystemExit(main())
