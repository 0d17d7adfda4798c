"""The MeLoN Airflow UI plugin: GPU and job views inside Airflow's UI.

It adds a FastAPI app under ``/melon`` in the api-server (:mod:`airflow_provider_melon.plugin.app`) and, on
Airflow 3.1 and later, ``external_views`` in the navigation and on every task instance. It is registered as an
``airflow.plugins`` entry point of the package. ``docs/internals.md``, "The UI plugin", says how it is
registered and what each Airflow line shows.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_melon.plugin.app import create_app

TI_QUERY = "dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"


class MelonPlugin(AirflowPlugin):
    name = "melon"
    fastapi_apps = [{"app": create_app(), "url_prefix": "/melon", "name": "MeLoN"}]
    external_views = [
        {
            "name": "MeLoN GPUs",
            "href": "melon/gpus",
            "url_route": "melon-gpus",
            "destination": "nav",
            "category": "browse",
        },
        {
            "name": "MeLoN jobs",
            "href": "melon/jobs",
            "url_route": "melon-jobs",
            "destination": "nav",
            "category": "browse",
        },
        {
            "name": "Would it fit?",
            "href": "melon/fit",
            "url_route": "melon-fit",
            "destination": "nav",
            "category": "browse",
        },
        {
            "name": "YARN job",
            "href": f"melon/ti?{TI_QUERY}",
            "url_route": "melon-yarn-job",
            "destination": "task_instance",
        },
    ]
