"""A DAG for the UI plugin's browser tests: one deferred train task whose shared-GPU job (3 workers of 6 GiB expected
memory, more tasks than GPUs) reports step/loss for a while."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_provider_melon.operators.train import MelonTrainOperator

with DAG(
    dag_id="melon_ui_probe",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"seconds": 150},
) as dag:
    MelonTrainOperator(
        task_id="train",
        deferrable=True,
        poll_interval=5,
        job={
            "name": "ui-probe",
            "framework": "generic",
            "code": str(Path(__file__).resolve().parent / "ui_probe"),
            "entrypoint": "python progress.py --seconds {{ params.seconds }}",
            "env": {"MELON_HEARTBEAT_S": "2"},
            "roles": {"worker": {"instances": 3, "memory": 256, "vcores": 1, "gpu_memory": "auto:6GiB"}},
        },
    )
