"""A DAG for the triggerer fault test: one deferrable train task whose job prints ``probe <i>`` for i below
``params.lines``, ``params.per_second`` lines a second (the job log the trigger streams into the task log), then
``probe done``. Once the file ``params.hurry_file`` exists (the test makes it when its trials are done; the job runs
on the same host as the mini cluster) the remaining lines come without the pause, so the job does not stream on
for minutes after the last trial."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_melon.operators.train import MelonTrainOperator

with DAG(
    dag_id="melon_fault_probe",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"lines": 60, "per_second": 1, "hurry_file": ""},
) as dag:
    MelonTrainOperator(
        task_id="train",
        deferrable=True,
        poll_interval=5,
        job={
            "name": "fault-probe",
            "framework": "generic",
            "entrypoint": "python -c \"import os, time\nhurry = '{{ params.hurry_file }}'\n"
            "for i in range({{ params.lines }}): print('probe', i, flush=True); "
            "time.sleep(0 if hurry and os.path.exists(hurry) else 1 / {{ params.per_second }})\n"
            "print('probe done')\"",
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
        },
    )
