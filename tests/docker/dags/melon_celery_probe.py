"""The docker tests' probe of the CeleryExecutor (tests/docker/test_celery.py): two train tasks of one generic job
that sleeps ``params.seconds`` and then writes ``done.txt`` into its ``result`` output (HDFS, under the run's
folder). ``train_sync`` follows its application from its Celery worker (not deferred) and has a retry, for the
worker that dies; ``train_deferred`` waits in the triggerer, for the triggerer that restarts."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_melon.hadoop.hdfs_io import run_slug
from airflow_provider_melon.operators.train import MelonTrainOperator

OUT = "hdfs:///user/airflow/melon-celery-probe/{{ run_id | run_slug }}/{{ ti.task_id }}"
SLEEP_THEN_WRITE = ("python -c \"import os, time; time.sleep({{ params.seconds }}); "
                    "open(os.path.join(os.environ['MELON_OUTPUT_RESULT'], 'done.txt'), 'w').write('{{ ti.task_id }}')\"")

with DAG(dag_id="melon_celery_probe", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, params={"seconds": 150}, user_defined_filters={"run_slug": run_slug}) as dag:
    for task_id, deferrable in (("train_sync", False), ("train_deferred", True)):
        MelonTrainOperator(
            task_id=task_id,
            deferrable=deferrable,
            retries=1 if not deferrable else 0,
            retry_delay=timedelta(seconds=5),
            poll_interval=5,
            job={
                "name": f"celery-probe-{task_id.replace('_', '-')}",
                "framework": "generic",
                "entrypoint": SLEEP_THEN_WRITE,
                "outputs": {"result": OUT},
                "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
            },
        )
