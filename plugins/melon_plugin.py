"""The MeLoN UI plugin for an ``$AIRFLOW_HOME/plugins`` deployment (copy this file there) where the package is on
``PYTHONPATH`` but not pip-installed. With the provider installed from its wheel, its ``airflow.plugins`` entry
point already registers the plugin: do not add this file then (Airflow would skip the second ``melon`` and list it
as a plugin import error)."""

from airflow_provider_melon.plugin import MelonPlugin  # noqa: F401
