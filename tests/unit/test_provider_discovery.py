"""Airflow discovers the provider through its entry point, with the yarn connection type and its form."""


def test_providers_manager_sees_the_provider_and_hook():
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    assert "airflow-provider-melon" in pm.providers
    assert pm.hooks["yarn"].hook_class_name == "airflow_provider_melon.hooks.yarn.YarnHook"
    widgets = pm.connection_form_widgets
    assert "extra__yarn__auth" in widgets and "extra__yarn__fs_default_fs" in widgets
    assert pm.field_behaviours["yarn"]["relabeling"]["host"] == "ResourceManager URL(s)"


def test_the_provider_config_loads_with_its_user_placeholder():
    """Airflow builds its config defaults from the provider's config description at the start of every command;
    Airflow 3.0 str.format()s each default not marked ``is_template``, so '{user}' must be marked (KeyError)."""
    from airflow.configuration import conf

    with conf.make_sure_configuration_loaded(with_providers=True):  # what `airflow <command>` does first
        assert conf.get("melon", "staging_dir") == "/user/{user}/.melon"
