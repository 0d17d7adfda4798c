"""A DAG for the kill-from-the-UI e2e test: two long jobs side by side, one followed by the triggerer (``deferred``),
one by the task's own poll loop (``polling``); the test marks each task failed through the REST API as the UI does
and waits for its YARN application to be KILLED."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_melon.operators.train import MelonTrainOperator

with DAG(
    dag_id="melon_e2e_kill",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"seconds": 600},
    # a try whose start the loaded test machine's api-server times out (before any submission) is retried
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
) as dag:
    for task_id, deferrable in (("deferred", True), ("polling", False)):
        MelonTrainOperator(
            task_id=task_id,
            deferrable=deferrable,
            poll_interval=5,
            job={
                "name": f"e2e-kill-{task_id}",
                "framework": "generic",
                "entrypoint": 'python -c "import time; time.sleep({{ params.seconds }})"',
                "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
            },
        )
