"""The MeLoN Airflow UI plugin: GPU and job views inside Airflow's UI.

Registered as an ``airflow.plugins`` entry point of the package, so installing the wheel enables it in every
Airflow component (provider-info ``plugins`` would need ``[core] lazy_discover_providers = False``);
``plugins/melon_plugin.py`` is the same plugin for a deployment that puts the package on ``PYTHONPATH`` instead of
installing it (no entry point). It adds

* a FastAPI app under ``/melon`` in the api-server (pages and JSON; every route needs an Airflow login, and each
  user sees only the jobs of the DAGs the auth manager lets them read: :mod:`airflow_provider_melon.plugin.app`), and
* on Airflow >= 3.1, ``external_views``: "MeLoN GPUs", "MeLoN jobs" and "Would it fit?" in the navigation and a
  "YARN job" tab on every task instance. On 3.0 (no external views) the pages are still served at
  ``/melon/gpus``, ``/melon/jobs``, ``/melon/fit`` and ``/melon/ti``.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_melon.plugin.app import create_app

TI_QUERY = "dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"


class MelonPlugin(AirflowPlugin):
    name = "melon"
    fastapi_apps = [{"app": create_app(), "url_prefix": "/melon", "name": "MeLoN"}]
    external_views = [
        {"name": "MeLoN GPUs", "href": "melon/gpus", "url_route": "melon-gpus", "destination": "nav",
         "category": "browse"},
        {"name": "MeLoN jobs", "href": "melon/jobs", "url_route": "melon-jobs", "destination": "nav",
         "category": "browse"},
        {"name": "Would it fit?", "href": "melon/fit", "url_route": "melon-fit", "destination": "nav",
         "category": "browse"},
        {"name": "YARN job", "href": f"melon/ti?{TI_QUERY}", "url_route": "melon-yarn-job",
         "destination": "task_instance"},
    ]
