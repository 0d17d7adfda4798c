"""A DAG for the reattach-identity e2e test: chained tasks whose ids YARN's readable tags cannot tell apart.

``stage.train_a`` and ``stage.train_b`` share their first 87+ characters (a task group with a long id), so their
``airflow-task:`` tags, cut at 100 characters, are the same; ``Train_case`` and ``train_case`` differ only in
case, which YARN's lower-cased tags drop. Each must still train its own application.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, TaskGroup

from airflow_provider_melon.operators.train import MelonTrainOperator

GROUP = "feature_engineering_and_model_training_for_the_quarterly_demand_forecast_of_every_region"  # 88 chars


def train(task_id: str) -> MelonTrainOperator:
    return MelonTrainOperator(
        task_id=task_id,
        deferrable=False,
        poll_interval=5,
        job={
            "name": "e2e-long-ids",
            "framework": "generic",
            "entrypoint": "python -c \"print('trained')\"",
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
        },
    )


with DAG(
    dag_id="melon_e2e_long_ids", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False
) as dag:
    with TaskGroup(GROUP):
        train("train_a") >> train("train_b")
    train("Train_case") >> train("train_case")
