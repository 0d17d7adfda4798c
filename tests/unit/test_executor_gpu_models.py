"""The executor's check of its GPU's model (``MELON_GPU_MODELS``, a role's ``gpu_models``): where NVML names the
node's GPUs, only those of an accepted model are used and a node with none exits 75 (the AM asks elsewhere); where
it cannot (a GPU inventory), the executor says it could not check."""

from __future__ import annotations

import pytest

from airflow_provider_melon.gpu import devices
from airflow_provider_melon.runtime import executor
from airflow_provider_melon.runtime.config import Config
from tests.fake_nvml import fake_nvml
from tests.unit.test_executor import am_factory, exec_env, finish, inventory, start  # noqa: F401 - fixtures

A10 = {"uuid": "GPU-a10", "name": "NVIDIA A10", "total_mb": 23028, "used_mb": 0, "util": 0}
A100 = {"uuid": "GPU-a100", "name": "NVIDIA A100-SXM4-80GB", "total_mb": 81920, "used_mb": 0, "util": 0}
T4 = {"uuid": "GPU-t4", "name": "Tesla T4", "total_mb": 15360, "used_mb": 0, "util": 0}


@pytest.mark.parametrize(
    "name,model,matches",
    [
        ("NVIDIA A100-SXM4-80GB", "A100", True),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb", True),
        ("NVIDIA A100-SXM4-80GB", "A10", False),
        ("NVIDIA A10", "A10", True),
        ("Tesla T4", "T4", True),
        ("NVIDIA H100 80GB HBM3", "H100", True),
        ("Tesla V100-SXM2-16GB", "V100", True),
        ("Tesla V100-SXM2-16GB", "V100M16", False),  # a name NVML does not use: see docs/cluster-configuration
    ],
)
def test_a_model_is_a_word_or_run_of_words_of_nvmls_name(name, model, matches):
    assert devices.is_model(name, model) is matches


def _executor(models: str) -> executor.Executor:
    ex = executor.Executor.__new__(executor.Executor)
    ex.cfg = Config.from_env(
        {
            "MELON_ROLE": "worker",
            "MELON_INDEX": "0",
            "MELON_AM_URL": "http://am:1",
            "MELON_SECRET": "s",
            "MELON_ENTRYPOINT": "true",
            "MELON_GPUS": "1",
            "MELON_GPU_MODELS": models,
        }
    )
    return ex


def test_only_the_gpus_of_an_accepted_model_are_used(monkeypatch, capsys):
    monkeypatch.setattr(devices, "import_pynvml", lambda: fake_nvml([T4, A100]))
    kept = _executor("A100,H100").of_accepted_models(devices.list_gpus({}))
    assert [g.name for g in kept] == ["NVIDIA A100-SXM4-80GB"] and kept.source == "nvml"
    assert "GPU model checked (NVML): NVIDIA A100-SXM4-80GB of A100, H100" in capsys.readouterr().err


def test_a_node_with_none_of_the_models_is_refused_with_exit_75(monkeypatch):
    monkeypatch.setattr(devices, "import_pynvml", lambda: fake_nvml([A10, A10]))
    with pytest.raises(executor.Fatal) as err:
        _executor("A100").of_accepted_models(devices.list_gpus({}))
    assert err.value.code == executor.EXIT_NO_GPU_FITS == 75
    assert "this node's GPUs (0: NVIDIA A10, 1: NVIDIA A10) are none of the accepted models A100 (NVML)" in str(
        err.value
    )


def test_without_models_nothing_is_checked(monkeypatch):
    monkeypatch.setattr(devices, "import_pynvml", lambda: fake_nvml([A10]))
    gpus = devices.list_gpus({})
    assert _executor("").of_accepted_models(gpus) is gpus


def test_without_nvml_the_task_runs_and_says_it_could_not_check(tmp_path, am_factory, inventory):  # noqa: F811
    am = am_factory(["worker:0"])
    env = exec_env(
        tmp_path, am, "worker", 0, MELON_GPU_INVENTORY=inventory(16384), MELON_GPUS=1, MELON_GPU_MODELS="A100,H100"
    )
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    assert (
        "GPU model not checked: no NVML device names here (inventory GPUs); trusting the node's gpu-model "
        "attribute for the accepted models A100, H100" in err
    )
