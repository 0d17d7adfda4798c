"""gpu.preflight: hand-made clusters and jobs, each rule's failure with its numbers, and what passes."""

from __future__ import annotations

import pytest

from airflow_provider_melon.gpu.preflight import NodeGpus, PreflightError, check, ensure_gpus_fit, node_gpus
from airflow_provider_melon.spec import JobSpec


def node(name, gpus, gpu_mem_mb, state="RUNNING"):
    """A node as YarnHook.nodes() returns it (normalised resources)."""
    return {
        "id": f"{name}:45454",
        "nodeHostName": name,
        "state": state,
        "totalResource": {
            "resources": {"memory-mb": 8192, "vcores": 8, "yarn.io/gpu": gpus, "melon.io/gpu-memory": gpu_mem_mb}
        },
    }


#: The mini cluster: 2 NMs x 2 GPUs x 16 GiB.
MINI = [node("nm1", 2, 32768), node("nm2", 2, 32768)]
#: An H200's 141 GB, MiB.
H200 = 134465


def roles(**named):
    return JobSpec.from_dict({"name": "j", "entrypoint": "true", "roles": named}).roles


def test_node_gpus_per_gpu_memory_is_node_total_over_count():
    n = node_gpus(node("a", 4, 4 * 81920))
    assert n == NodeGpus("a:45454", 4, 327680)
    assert n.per_gpu_mb == 81920


def test_node_with_memory_but_no_gpu_count_is_one_gpu_and_non_running_nodes_are_ignored():
    assert node_gpus({"totalResource": {"resources": {"melon.io/gpu-memory": 24576}}}).per_gpu_mb == 24576
    assert node_gpus(node("gone", 8, 8 * 81920, state="LOST")) is None
    # a bare resources dict works too
    assert node_gpus({"yarn.io/gpu": 2, "melon.io/gpu-memory": 32768}).per_gpu_mb == 16384


def test_unreadable_or_non_finite_resource_numbers_count_as_none():
    # json.loads reads Infinity and NaN as floats: a node reporting them offers no GPU rather than failing
    for junk in (float("inf"), float("nan"), "Infinity", "many", None, ""):
        assert node_gpus(node("odd", junk, junk)) == NodeGpus("odd:45454", 0, 0)
    assert node_gpus(node("str", "2", "32768.0")) == NodeGpus("str:45454", 2, 32768)


def test_shared_role_above_the_largest_gpu_fails_with_the_numbers():
    report = check(MINI, roles(chief={"gpu_memory": "20GiB"}, worker={"instances": 2, "gpu_memory": "4GiB"}))
    assert not report.ok
    assert report.problems == [
        "role chief: expected GPU memory 20480 MiB per task exceeds the largest GPU of any node, 16384 MiB "
        "(node nm1:45454: 32768 MiB over 2 GPU(s))"
    ]
    assert "largest GPU 16384 MiB" in report.message and "4 GPU(s) and 65536 MiB" in report.message


def test_largest_gpu_is_over_all_nodes_not_the_first():
    nodes = [node("small", 4, 4 * 16384), node("big", 1, 81920)]
    assert check(nodes, roles(worker={"gpu_memory": "80GiB"})).ok
    report = check(nodes, roles(worker={"gpu_memory": 81921}))
    assert (
        "exceeds the largest GPU of any node, 81920 MiB (node big:45454: 81920 MiB over 1 GPU(s))" in report.problems[0]
    )


def test_exactly_one_gpu_of_memory_fits():
    assert check(MINI, roles(worker={"gpu_memory": "16GiB"})).ok


def test_exclusive_role_wider_than_any_node_fails():
    report = check(MINI, roles(worker={"gpus": 3}))
    assert report.problems == ["role worker: 3 GPU(s) per task, but no node has more than 2"]


def test_total_exclusive_gpus_above_the_cluster_fails_even_when_each_task_fits_a_node():
    report = check(MINI, roles(chief={"gpus": 2}, worker={"instances": 2, "gpus": 2}))
    assert report.problems == ["the job needs 6 whole GPU(s) (chief 1x2 + worker 2x2), the cluster has 4"]
    assert check(MINI, roles(chief={"gpus": 2}, worker={"gpus": 2})).ok


def test_total_shared_memory_above_the_cluster_fails():
    # each role fits on its own (14 GiB: one per 16 GiB GPU; 8 GiB: two), together 3 x 14336 + 3 x 8192 = 67584 MiB
    # > 65536 MiB
    report = check(
        MINI, roles(worker={"instances": 3, "gpu_memory": "14GiB"}, ps={"instances": 3, "gpu_memory": "8GiB"})
    )
    assert report.problems == [
        "the job's shared tasks hold at least 67584 MiB of GPU memory in all (worker 3x14336 MiB + ps 3x8192 MiB), the "
        "cluster "
        "has 65536 MiB"
    ]
    assert check(MINI, roles(worker={"instances": 4, "gpu_memory": "16GiB"})).ok


def test_a_role_counts_the_tasks_its_slots_let_share_the_gpus():
    """A shared task holds policy.slot_mb of the GPU it runs on (a quarter for a small task, half for a large one, at
    least its own memory), so 12 small tasks on 2 H200s fit 8 at a time, whatever their 2 GiB would allow."""
    h200 = [node("h", 2, 2 * H200)]
    report = check(h200, roles(worker={"instances": 12, "gpu_memory": "2076MiB"}))
    assert report.problems == [
        "role worker: 12 tasks share GPUs, but at most 8 fit on the cluster at a time: each holds 33616 MiB of a "
        "134465 MiB GPU (its slot: a quarter of the GPU, above its own 2076 MiB)"
    ]
    assert check(h200, roles(worker={"instances": 8, "gpu_memory": "2076MiB"})).ok
    large = check(h200, roles(worker={"instances": 5, "gpu_memory": "5653MiB", "large": True}))
    assert large.problems == [
        "role worker: 5 tasks share GPUs, but at most 4 fit on the cluster at a time: each holds 67232 MiB of a "
        "134465 MiB GPU (its slot: half of the GPU, above its own 5653 MiB)"
    ]
    assert large.demand["roles"]["worker"]["held_mb"] == 67232


def test_a_task_above_its_slot_is_counted_whole_per_gpu():
    # 5 tasks x 14 GiB: 71680 MiB < 4 x 16 GiB, but one per 16 GiB GPU, so 4 at a time
    report = check(MINI, roles(worker={"instances": 5, "gpu_memory": "14GiB"}))
    assert report.problems == [
        "role worker: 5 tasks share GPUs, but at most 4 fit on the cluster at a time: each holds 14336 MiB of a "
        "16384 MiB GPU (its own memory, above its slot: a quarter of the GPU)"
    ]


def test_the_slot_is_sized_against_the_largest_gpu_for_yarn_and_per_gpu_on_a_node():
    nodes = [node("small", 1, 16384), node("big", 1, H200)]
    # the ledgers could hold 4 + 4, but YARN is asked for the slot of the cluster's largest GPU (33616 MiB) per task
    report = check(nodes, {"w": {"instances": 5, "gpu_memory_mb": 1024}})
    assert report.problems == [
        "role w: 5 tasks share GPUs, but YARN can place at most 4 at a time: each asks for 33616 MiB of "
        "melon.io/gpu-memory (its slot on the cluster's largest GPU, 134465 MiB): node small:45454 (16384 MiB) takes 0, "
        "node big:45454 (134465 MiB) takes 4"
    ]
    assert check(nodes, {"w": {"instances": 4, "gpu_memory_mb": 1024}}).ok
    # one GPU model: the count is per GPU, 4 x 1 GiB tasks per 16 GiB GPU
    assert check(MINI, {"w": {"instances": 16, "gpu_memory_mb": 1024}}).ok
    assert not check(MINI, {"w": {"instances": 17, "gpu_memory_mb": 1024}}).ok


def test_exclusive_gpus_leave_the_rest_for_shared_tasks_counted_as_the_smallest():
    nodes = [node("small", 2, 2 * 8192), node("big", 2, 2 * 40960)]
    # 1 exclusive GPU: best case it takes an 8 GiB one, leaving 8 + 40 + 40 = 88 GiB = 90112 MiB
    ok = roles(chief={"gpus": 1}, worker={"instances": 2, "gpu_memory": "40GiB"})
    assert check(nodes, ok).ok
    # each role alone fits (one 36 GiB worker per 40 GiB GPU; an 8 GiB ps on any GPU), together they hold at least
    # 2 x 36864 + 3 x 8192 (its slot on the 8 GiB GPU; 10240 on a 40 GiB one) = 98304 MiB
    bad = roles(
        chief={"gpus": 1}, worker={"instances": 2, "gpu_memory": "36GiB"}, ps={"instances": 3, "gpu_memory": "8GiB"}
    )
    report = check(nodes, bad)
    assert report.problems == [
        "the job's shared tasks hold at least 98304 MiB of GPU memory in all (worker 2x36864 MiB + ps 3x8192 MiB), the "
        "cluster has 90112 MiB left after the 1 exclusive GPU(s) (counted as the smallest)"
    ]
    three = check(nodes, roles(chief={"gpus": 1}, worker={"instances": 3, "gpu_memory": "30GiB"}))
    assert three.problems == [
        "role worker: 3 tasks share GPUs, but at most 2 fit on the cluster at a time: each holds 30720 MiB of a "
        "40960 MiB GPU (its own memory, above its slot: a quarter of the GPU)"
    ]


def test_several_problems_are_all_reported_and_ensure_fits_raises_them():
    bad = roles(chief={"gpu_memory": "20GiB"}, worker={"instances": 3, "gpus": 2})
    with pytest.raises(PreflightError) as err:
        ensure_gpus_fit(MINI, bad)
    msg = str(err.value)
    assert msg.startswith("the job cannot run on this cluster: role chief: expected GPU memory 20480 MiB")
    assert "the job needs 6 whole GPU(s) (worker 3x2), the cluster has 4" in msg


def test_cpu_only_job_and_cluster_without_running_nodes_are_not_checked():
    assert check(MINI, roles(worker={"instances": 50, "memory": "2g"})).ok
    report = check([node("x", 2, 32768, state="UNHEALTHY")], roles(worker={"gpu_memory": "99GiB"}))
    assert report.ok and not report.checked
    assert "skipped" in report.message


def test_gpu_job_on_a_cluster_without_gpus_fails():
    report = check([node("cpu", 0, 0)], roles(worker={"gpu_memory": "1GiB"}, ps={"gpus": 1}))
    assert report.problems[0] == (
        "role worker: expected GPU memory 1024 MiB per task exceeds the largest GPU of any "
        "node, 0 MiB (no node advertises melon.io/gpu-memory)"
    )
    assert "role ps: 1 GPU(s) per task, but no node has more than 0" in report.problems


def test_plain_dict_roles_take_mib_and_reject_unit_strings():
    assert not check(MINI, {"w": {"instances": 1, "gpu_memory_mb": 20000}}).ok
    assert check(MINI, {"w": {"instances": 1, "gpu_memory": 16000}}).ok
    with pytest.raises(ValueError, match="give MiB as a number"):
        check(MINI, {"w": {"gpu_memory": "20GiB"}})


# ------------------------------------------------------------------------------------ the train operator's path


@pytest.fixture
def op_env(monkeypatch):
    import json
    from unittest import mock

    from airflow_provider_melon.hooks.melon import MelonHook
    from airflow_provider_melon.hooks.yarn import YarnHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_TEST", json.dumps({"conn_type": "yarn", "host": "http://rm:8088", "login": "alice"})
    )
    with (
        mock.patch.object(
            MelonHook,
            "submit",
            autospec=True,
            return_value={"app_id": "application_1_0001", "staging": None, "plan": {}},
        ) as submit,
        mock.patch.object(YarnHook, "find_applications", autospec=True, return_value=[]),
        mock.patch.object(
            YarnHook, "get_application", autospec=True, return_value={"id": "application_1_0001", "state": "ACCEPTED"}
        ),
        mock.patch.object(YarnHook, "nodes", autospec=True, return_value=MINI) as nodes,
    ):
        yield mock.Mock(submit=submit, nodes=nodes)


def _op_and_ctx(gpu_memory, **kw):
    from unittest import mock

    from airflow_provider_melon.operators.train import MelonTrainOperator

    op = MelonTrainOperator(
        task_id="train",
        yarn_conn_id="yarn_test",
        deferrable=False,
        poll_interval=5,
        job={
            "name": "big",
            "framework": "tensorflow",
            "entrypoint": "python train.py",
            "roles": {"chief": {"gpu_memory": gpu_memory}, "worker": {"instances": 2, "gpu_memory": "4GiB"}},
        },
        **kw,
    )
    ti = mock.Mock(dag_id="d", task_id="train", run_id="r", map_index=-1, stats_tags={})
    return op, {"ti": ti, "run_id": "r"}


def test_operator_fails_before_submission_with_the_numbers(op_env):
    from airflow_provider_melon.gpu.context import first_run_mb
    from airflow_provider_melon.version_compat import AirflowFailException

    op, ctx = _op_and_ctx("20GiB")
    with pytest.raises(AirflowFailException) as err:
        op.submit_job(ctx)
    assert str(err.value).startswith(
        "big: the job cannot run on this cluster: role chief: expected GPU memory "
        f"20480 MiB per task + {first_run_mb('tensorflow')} MiB for the CUDA context exceeds "
        "the largest GPU of any node, 16384 MiB"
    )  # TensorFlow's first-run reserve: [melon] gpu_context_mb is not set
    op_env.nodes.assert_called_once()
    op_env.submit.assert_not_called()


def test_operator_submits_a_job_that_fits(op_env):
    op, ctx = _op_and_ctx("8GiB")
    assert op.submit_job(ctx) == "application_1_0001"
    op_env.nodes.assert_called_once()
    op_env.submit.assert_called_once()


def test_operator_skips_preflight_when_nodes_are_unreadable_or_it_is_off(op_env):
    op, ctx = _op_and_ctx("20GiB")
    op_env.nodes.side_effect = ConnectionError("rm down")
    assert op.submit_job(ctx) == "application_1_0001"  # advisory: the submission meets the RM itself
    op_env.nodes.side_effect = None
    op_env.nodes.reset_mock()
    op, ctx = _op_and_ctx("20GiB", preflight=False)
    op.submit_job(ctx)
    op_env.nodes.assert_not_called()
    assert op_env.submit.call_count == 2


def test_the_cuda_context_counts_against_the_largest_gpu():
    """16 GiB expected on 16 GiB GPUs fits no GPU once the CUDA context is reserved beside it."""
    nodes = [node("n1", 2, 32768)]
    assert check(nodes, {"w": {"gpu_memory_mb": 16384}}).ok
    report = check(nodes, {"w": {"gpu_memory_mb": 16384}}, context_mb=400)
    assert (
        not report.ok and "16384 MiB per task + 400 MiB for the CUDA context exceeds the largest GPU" in report.message
    )
    assert check(nodes, {"w": {"gpu_memory_mb": 15984}}, context_mb=400).ok
