"""runtime.framework: TF_CONFIG and the torch env (the GPU memory cap's bootstrap: test_cap_bootstrap.py)."""

import os

import pytest

from airflow_provider_melon.runtime import framework

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

CLUSTER = {
    "chief": ["c0:2000"],
    "worker": ["w0:2001", "w1:2002"],
    "ps": ["p0:2003"],
    "evaluator": ["e0:2004"],
}


def test_tf_config_for_a_worker():
    cfg = framework.tf_config(CLUSTER, "worker", 1)
    assert cfg == {
        "cluster": {"chief": ["c0:2000"], "worker": ["w0:2001", "w1:2002"], "ps": ["p0:2003"]},
        "task": {"type": "worker", "index": 1},
    }


def test_tf_config_evaluator_is_not_in_the_cluster():
    cfg = framework.tf_config(CLUSTER, "evaluator", 0)
    assert "evaluator" not in cfg["cluster"]
    assert cfg["task"] == {"type": "evaluator", "index": 0}


def test_tf_config_drops_empty_roles_and_rejects_unknown_tasks():
    cfg = framework.tf_config({"worker": ["a:1", "b:2"], "ps": [], "chief": []}, "worker", 0)
    assert cfg["cluster"] == {"worker": ["a:1", "b:2"]}
    with pytest.raises(ValueError, match="worker:2"):
        framework.tf_config(CLUSTER, "worker", 2)
    with pytest.raises(ValueError):
        framework.tf_config(CLUSTER, "chef", 0)


def test_torch_env_ranks_chief_first():
    chief = framework.torch_env(CLUSTER, "chief", 0)
    w1 = framework.torch_env(CLUSTER, "worker", 1)
    assert chief == {
        "MASTER_ADDR": "c0",
        "MASTER_PORT": "2000",
        "WORLD_SIZE": "3",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "0",
    }
    assert (w1["RANK"], w1["WORLD_SIZE"], w1["MASTER_ADDR"], w1["MASTER_PORT"]) == ("2", "3", "c0", "2000")
    ps = framework.torch_env(CLUSTER, "ps", 0)
    assert "RANK" not in ps and ps["MASTER_ADDR"] == "c0"


def test_torch_env_without_chief_uses_worker0():
    env = framework.torch_env({"worker": ["[::1]:3000", "h1:3001"]}, "worker", 1)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["RANK"], env["WORLD_SIZE"]) == ("::1", "3000", "1", "2")
    with pytest.raises(ValueError, match="chief or a worker"):
        framework.torch_env({"ps": ["p:1"]}, "ps", 0)


def test_torch_env_ranks_the_master_role_first():
    """``master`` and ``worker`` are a pytorch job's roles (spec.TORCH_ROLES): the master is rank 0 and hosts the
    rendezvous, the workers follow."""
    cluster = {"master": ["m0:4000"], "worker": ["w0:4001", "w1:4002"]}
    master = framework.torch_env(cluster, "master", 0)
    w1 = framework.torch_env(cluster, "worker", 1)
    assert (master["RANK"], master["WORLD_SIZE"], master["MASTER_ADDR"], master["MASTER_PORT"]) == (
        "0",
        "3",
        "m0",
        "4000",
    )
    assert (w1["RANK"], w1["WORLD_SIZE"], w1["MASTER_ADDR"]) == ("2", "3", "m0")


def test_split_address():
    assert framework.split_address("host.example:42") == ("host.example", 42)
    with pytest.raises(ValueError):
        framework.split_address("nohost")
