"""GPU models on the real mini cluster: three NodeManagers, one publishing ``nm.yarn.io/gpu-model=A10`` and two ``T4``
(the launcher's ``--nm-gpu-models``, Hadoop's configured node-attributes provider), the RM taking placement constraints
(``yarn.resourcemanager.placement-constraints.handler=scheduler``). A job whose roles name models has each task on a
node of its role's model, beside a role without models that YARN places anywhere; a model no node has is refused
before submission, naming the ones the cluster has.

The cluster is this module's own: ports from ``$MELON_GANG_PORT_BASE`` + 500 (default 22500), so it does not collide
with the session's or the gang tests' clusters; ``MELON_GPU_MODELS_CLUSTER_DIR`` reuses a running one (start it with
``gpu_models=["A10", "T4", "T4"]``, three NodeManagers)."""

from __future__ import annotations

import pytest

from airflow_provider_melon.gpu import preflight

pytestmark = pytest.mark.integration

MODELS = ["A10", "T4", "T4"]
#: what each task runs: the executor chose its GPU (from the NodeManager's virtual inventory) and the job only prints
PRINT_ROLE = "python -c \"import os; print('role', os.environ['MELON_ROLE'], os.environ.get('MELON_GPU_MODELS'))\""


@pytest.fixture(scope="module")
def models_cluster():
    from tests.conftest import running_cluster

    yield from running_cluster(
        "MELON_GPU_MODELS_CLUSTER_DIR",
        "melon-models-",
        "MELON_GANG_PORT_BASE",
        port_offset=500,
        nodemanagers=len(MODELS),
        gpu_models=MODELS,
        timeout=240,
    )


@pytest.fixture
def models_jobs(models_cluster, tmp_path_factory):
    from airflow_provider_melon.cli import melon_hook_for_cluster
    from tests.conftest import Jobs

    j = Jobs(melon_hook_for_cluster(models_cluster.work_dir), models_cluster, tmp_path_factory)
    yield j
    j.kill_all()


def _node_models(jobs) -> dict[str, str | None]:
    """node id -> the model the RM's node list shows for it (its nodeAttributesInfo)."""
    return {n["id"]: preflight.node_gpu_model(n) for n in jobs.hook.yarn.nodes()}


def test_the_rm_lists_each_nodes_model_and_takes_placement_constraints(models_jobs):
    assert sorted(m or "" for m in _node_models(models_jobs).values()) == sorted(MODELS)
    assert models_jobs.hook.yarn.rm_conf(preflight.PLACEMENT_HANDLER) == "scheduler"


def test_each_task_lands_only_on_a_node_of_its_roles_model(models_jobs):
    models = _node_models(models_jobs)
    app_id = models_jobs.submit(
        {
            "name": "models",
            "framework": "generic",
            "entrypoint": PRINT_ROLE,
            "gang_hold_s": 0,
            "roles": {
                # the A10 node's two GPUs, whole
                "a10": {"instances": 2, "memory": 256, "gpus": 1, "gpu_models": ["A10"]},
                # shares of the T4 nodes' GPUs
                "t4": {"instances": 3, "memory": 256, "gpu_memory": "2g", "gpu_models": ["T4"]},
                # no models, no GPU: asked for as before, anywhere
                "plain": {"instances": 1, "memory": 256},
            },
        }
    )
    app = models_jobs.wait(app_id, timeout=180)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), (
        app["diagnostics"] + "\n" + models_jobs.picture(app_id)
    )
    final = models_jobs.hook.final_status(app_id)
    assert final, "the AM's final status"
    placed = {f"{t['role']}:{t['index']}": t["node_id"] for t in final["tasks"]}
    assert {task: models[node] for task, node in placed.items() if not task.startswith("plain")} == {
        "a10:0": "A10",
        "a10:1": "A10",
        "t4:0": "T4",
        "t4:1": "T4",
        "t4:2": "T4",
    }, placed
    assert placed["plain:0"] in models
    # the AM asked for the models' tasks by constraint, the other by a plain container request
    am_log = "".join(models_jobs.container_logs(app_id, "AppMaster.stdout").values())
    assert "(GPU models [A10])" in am_log and "(GPU models [T4])" in am_log
    # no NVML on this machine: the executor said it could not check the model, and ran
    stderr = "".join(models_jobs.container_logs(app_id, "stderr").values())
    assert "GPU model not checked: no NVML device names here" in stderr


def test_a_model_no_node_has_is_refused_before_submission(models_jobs):
    before = {a["id"] for a in models_jobs.hook.yarn.list_applications()}
    with pytest.raises(preflight.PreflightError) as err:
        models_jobs.submit(
            {
                "name": "no-a100",
                "framework": "generic",
                "entrypoint": PRINT_ROLE,
                "roles": {"worker": {"memory": 256, "gpus": 1, "gpu_models": ["A100"]}},
            }
        )
    assert "role worker accepts GPU models ['A100'], but the cluster's nodes have ['A10', 'T4']" in str(err.value)
    assert {a["id"] for a in models_jobs.hook.yarn.list_applications()} == before  # nothing submitted
