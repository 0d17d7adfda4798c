"""The example DAGs work in the HDFS home of the user their jobs run as (the yarn connection's), not under a
hard-coded /user/root: on a cluster with HDFS permissions any other user could not write there."""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

import pytest

from airflow_provider_melon.hooks.melon import hdfs_home

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture
def carol(monkeypatch):
    """A real Airflow connection (environment variable) whose login is carol."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_DEFAULT",
        json.dumps(
            {
                "conn_type": "yarn",
                "host": "http://127.0.0.1:9",
                "login": "carol",
                "extra": {"fs_default_fs": "hdfs://127.0.0.1:9"},
            }
        ),
    )
    return "carol"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", DAGS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hdfs_home_is_the_connections_user(carol, monkeypatch):
    assert hdfs_home() == "/user/carol"
    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_TENANT",
        json.dumps(
            {"conn_type": "yarn", "host": "http://127.0.0.1:9", "login": "airflow", "extra": {"proxy_user": "alice"}}
        ),
    )
    assert hdfs_home("yarn_tenant") == "/user/alice"  # jobs run as the doAs user, so their files go there


def test_no_example_dag_names_a_fixed_user():
    for dag in DAGS.glob("*.py"):
        assert "/user/root" not in dag.read_text(encoding="utf-8"), dag.name


def test_the_mnist_pipeline_renders_its_paths_under_the_users_home(carol):
    module = load("melon_mnist_pipeline")
    dag = module.dag
    train = dag.get_task("train")
    # the variable is not set: the accessor returns the template's default (Airflow's var.value.get does the same)
    context = {
        "var": {"value": types.SimpleNamespace(get=lambda key, default=None: default)},
        "run_id": "manual__2026-12-01T10:00:00+00:00",
    }
    env = dag.get_template_env()
    model = train.render_template(train.job["outputs"]["model"], context, env)
    assert model.startswith("hdfs:///user/carol/melon-demo/runs/manual__2026-12-01T10_00_00_00_00-"), model
    ingest = dag.get_task("ingest")
    assert ingest.render_template(module.ROOT, context, env) == "/user/carol/melon-demo"


def test_the_dag_processor_parses_the_dags_and_not_their_training_code():
    """dags/training/ holds the jobs' code, shipped to YARN: Airflow's own listing of the DAGs folder (with safe mode
    off, every .py file it would parse) leaves it out by dags/.airflowignore."""
    from airflow.utils.file import list_py_file_paths

    listed = {Path(p).relative_to(DAGS).as_posix() for p in list_py_file_paths(DAGS, safe_mode=False)}
    assert listed and all("/" not in p for p in listed), sorted(listed)
    assert listed == {p.name for p in DAGS.glob("*.py")}
