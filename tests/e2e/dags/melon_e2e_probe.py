"""A DAG for the e2e tests of reattach and kill: one long-ish generic job, run with `airflow tasks test`."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_melon.operators.train import MelonTrainOperator

with DAG(
    dag_id="melon_e2e_probe",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"seconds": 25, "release_file": ""},
) as dag:
    for task_id, durable in (("train", True), ("train_by_tags", False)):
        # train: Airflow 3.3's ResumableJobMixin (app id in the task state store); train_by_tags: tags only
        MelonTrainOperator(
            task_id=task_id,
            deferrable=False,
            durable=durable,
            poll_interval=5,
            job={
                "name": "e2e-probe",
                "framework": "generic",
                # runs `seconds`, or less once `release_file` (a path on this host) exists: a test holds the app
                # until it has seen what it waits for, however slow the machine
                "entrypoint": 'python -c "import os, time; end = time.time() + {{ params.seconds }}; '
                "f = '{{ params.release_file }}'; "
                "[time.sleep(0.5) for _ in iter(lambda: time.time() < end and not (f and os.path.exists(f)), "
                "False)]; print('probe done')\"",
                "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1, "gpu_memory": "1GiB"}},
            },
        )
