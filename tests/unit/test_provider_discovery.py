"""Airflow discovers the provider through its entry point, with the yarn connection type and its form."""


def test_providers_manager_sees_the_provider_and_hook():
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    assert "airflow-provider-melon" in pm.providers
    assert pm.hooks["yarn"].hook_class_name == "airflow_provider_melon.hooks.yarn.YarnHook"
    widgets = pm.connection_form_widgets
    assert "extra__yarn__auth" in widgets and "extra__yarn__fs_default_fs" in widgets
    assert pm.field_behaviours["yarn"]["relabeling"]["host"] == "ResourceManager URL(s)"
