"""plan → parameter-server training: the planner (Zou et al.) sizes the job, the train task runs what it says.

``plan`` takes the model's size, the per-sample compute time, the workers and the network's bandwidth, and
recommends the per-worker batch (the largest within GPU memory and ``max_batch``) and the fewest parameter
servers whose share of the parameter traffic fits inside a step's compute. ``train`` runs a TF
ParameterServerStrategy job (chief + workers + parameter servers, CPU here) with that batch and that many PS.

With the defaults (41k parameters, 0.05 ms per sample as measured on the mini cluster by
benchmarks/bench_planner.py, 2 workers on a 0.1 Gbit/s link, batch capped at 1024): one PS would
carry 2 x 41k x 4 B x 2 workers per step, 52 ms at 12.5 MB/s, more than the 51 ms of compute; two carry half
each, so the plan is batch 1024, 2 PS, 2 workers.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_provider_melon.operators.plan import MelonPlanOperator
from airflow_provider_melon.operators.train import MelonTrainOperator

TRAINING = Path(__file__).resolve().parent / "training" / "mnist"
FEATURES = 4096  # train_ps.py's logistic regression: FEATURES x 10 weights + 10 biases

with DAG(
    dag_id="melon_ps_planned",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"per_sample_ms": 0.05, "bandwidth_gbps": 0.1, "workers": 2, "max_batch": 1024},
    tags=["melon", "example"],
) as dag:
    # [START howto_melon_plan]
    plan = MelonPlanOperator(
        task_id="plan",
        model_params=FEATURES * 10 + 10,
        per_sample_ms="{{ params.per_sample_ms }}",
        workers="{{ params.workers }}",
        bandwidth_gbps="{{ params.bandwidth_gbps }}",
        gpu_memory="1GiB",
        max_batch="{{ params.max_batch }}",
    )

    train = MelonTrainOperator(
        task_id="train",
        poll_interval=5,
        job={
            "name": "ps-planned",
            "framework": "tensorflow",
            "code": str(TRAINING),
            "entrypoint": f"python train_ps.py --steps 20 --features {FEATURES} "
            "--batch-size {{ ti.xcom_pull(task_ids='plan', key='batch_size') }}",
            "roles": {
                "chief": {"instances": 1, "memory": "768m", "vcores": 1},
                "worker": {
                    "instances": "{{ ti.xcom_pull(task_ids='plan', key='workers') }}",
                    "memory": "768m",
                    "vcores": 1,
                },
                "ps": {"instances": "{{ ti.xcom_pull(task_ids='plan', key='ps') }}", "memory": "768m", "vcores": 1},
            },
        },
    )
    # [END howto_melon_plan]

    plan >> train
