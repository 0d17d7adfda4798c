"""Dynamic task mapping over a small hyper-parameter grid: each trial is a shared-GPU MeLoN job, so more trials than
GPUs run at once; then the best trial is picked. The trials defer to ``YarnApplicationTrigger`` while YARN runs them.
Their expected GPU memory is ``auto:6GiB``: 6 GiB the first time, then what the earlier runs of ``trial`` taught (their
peak × 1.1, or the figure they succeeded at; the trial's log says which), so no profile step is needed.

Its HDFS folder: the ``root`` param, else the variable ``melon_hdfs_root``, else ``<hdfs_home>/melon-demo``
(``/user/<user>`` of the yarn connection's user, ``hooks.melon.hdfs_home``)."""

from __future__ import annotations

import json
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Variable, task

from airflow_provider_melon.hadoop.hdfs_io import run_slug
from airflow_provider_melon.hooks.melon import hdfs_home
from airflow_provider_melon.operators.train import MelonTrainOperator

TRAINING = Path(__file__).resolve().parent / "training" / "mnist"
GRID = [0.01, 0.1, 0.5, 1.0]


def _webhdfs():
    """The ``hdfs`` client of the ``webhdfs_default`` connection, as the user the jobs run as (the MelonHook's)."""
    from airflow_provider_melon.hooks.melon import MelonHook

    return MelonHook().hdfs


with DAG(
    dag_id="melon_hpo_fanout",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["melon", "example"],
    params={"root": ""},  # empty: melon_hdfs_root, else the jobs' user's HDFS home
) as dag:

    @task
    def ingest(params=None, run_id=None) -> dict:
        import sys

        sys.path.insert(0, str(TRAINING))
        from data import ensure_in_hdfs

        root = (params or {}).get("root") or Variable.get("melon_hdfs_root", default="") or f"{hdfs_home()}/melon-demo"
        # One folder per run, named from the run id (a manual run has no logical date, so no ts_nodash).
        return {"data": ensure_in_hdfs(_webhdfs(), root), "out": f"{root}/hpo/{run_slug(run_id)}"}

    @task
    def trials(where: dict) -> list[dict]:
        return [
            {
                "name": f"hpo-trial-{i}",
                "framework": "generic",
                "code": str(TRAINING),
                # writes $MELON_OUTPUT_METRICS/metrics.json; MeLoN publishes it as the declared output
                "entrypoint": f"python hpo_trial.py --lr {lr}",
                "inputs": [{"path": where["data"], "name": "mnist.npz"}],
                "outputs": {"metrics": f"{where['out']}/trial-{i}"},
                "roles": {"worker": {"instances": 1, "memory": "1g", "vcores": 1, "gpu_memory": "auto:6GiB"}},
            }
            for i, lr in enumerate(GRID)
        ]

    where = ingest()
    # [START howto_melon_mapped_train]
    # Deferrable: a waiting trial holds no worker slot, only a trigger (`airflow dags test` runs it inline).
    runs = MelonTrainOperator.partial(task_id="trial", poll_interval=5, deferrable=True).expand(job=trials(where))
    # [END howto_melon_mapped_train]

    @task
    def pick_best(where: dict) -> dict:
        client = _webhdfs()
        results = []
        for i in range(len(GRID)):
            with client.read(f"{where['out']}/trial-{i}/metrics.json", encoding="utf-8") as reader:
                results.append(json.load(reader))
        best = max(results, key=lambda r: r["accuracy"])
        print(f"MELON_HPO_BEST {json.dumps(best)}")
        return best

    runs >> pick_best(where)
