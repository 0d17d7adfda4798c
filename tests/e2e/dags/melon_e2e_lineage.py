"""A DAG for the OpenLineage e2e test: one generic job reading an HDFS input and publishing an HDFS output."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_melon.operators.train import MelonTrainOperator

with DAG(
    dag_id="melon_e2e_lineage", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False
) as dag:
    MelonTrainOperator(
        task_id="train",
        deferrable=False,
        poll_interval=5,
        job={
            "name": "e2e-lineage",
            "framework": "generic",
            "entrypoint": "python -c \"import os, shutil; shutil.copy(os.environ['MELON_INPUT_IN_TXT'], "
            "os.path.join(os.environ['MELON_OUTPUT_MODEL'], 'copy.txt'))\"",
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
            "inputs": [{"path": "hdfs:///tmp/melon-e2e-lineage/in.txt"}],
            "outputs": {"model": "hdfs:///tmp/melon-e2e-lineage/model"},
            "overwrite_outputs": True,
        },
    )
