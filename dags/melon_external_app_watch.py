"""Wait for a YARN application that another system submitted, found by its tag (deferrable sensor)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_melon.sensors.yarn import YarnApplicationSensor

with DAG(
    dag_id="melon_external_app_watch",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["melon", "example"],
    params={"tag": "external-nightly-etl"},
) as dag:
    # [START howto_melon_sensor]
    YarnApplicationSensor(
        task_id="wait_for_external_app",
        tags=["{{ params.tag }}"],
        target_states=["FINISHED"],
        deferrable=True,
        poll_interval=5,
        timeout=600,
    )
    # [END howto_melon_sensor]
