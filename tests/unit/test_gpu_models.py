"""GPU models: a role names the models it accepts (``roles.<r>.gpu_models``), the plan carries them to the AM, and
pre-flight refuses a model no node publishes, or a cluster whose scheduler cannot place by node attribute."""

from __future__ import annotations

import pytest

from airflow_provider_melon import submission
from airflow_provider_melon.spec import JobSpec, JobSpecError
from airflow_provider_melon.submission import StagedFile

RUNTIME = StagedFile("hdfs://nn:8020/c/rt.zip", 10, 111)


def _job(**worker):
    return {"name": "j", "framework": "generic", "entrypoint": "python t.py", "roles": {"worker": worker}}


# ---- the spec field ----------------------------------------------------------------------------------------------


def test_a_role_that_asks_for_gpus_names_the_models_it_accepts():
    exclusive = JobSpec.from_dict(_job(gpus=1, gpu_models=["A100", "H100"]))
    shared = JobSpec.from_dict(_job(gpu_memory="4g", gpu_models=["T4"]))
    assert exclusive.roles["worker"].gpu_models == ["A100", "H100"]
    assert shared.roles["worker"].gpu_models == ["T4"]
    assert JobSpec.from_dict(_job(gpus=1)).roles["worker"].gpu_models is None  # any GPU
    # YAML round trip keeps them
    assert JobSpec.from_yaml(exclusive.to_yaml()).roles["worker"].gpu_models == ["A100", "H100"]


@pytest.mark.parametrize(
    "worker,message",
    [
        ({"gpu_models": ["A100"]}, "roles.worker.gpu_models: only a role that asks for GPUs"),
        ({"memory": "2g", "gpu_models": ["A100"]}, "add gpus (whole GPUs) or gpu_memory"),
        ({"gpus": 1, "gpu_models": []}, "roles.worker.gpu_models: name at least one GPU model"),
        ({"gpus": 1, "gpu_models": ["A 100"]}, "roles.worker.gpu_models.0: 'A 100' cannot be a GPU model"),
        ({"gpus": 1, "gpu_models": ["A100", "-x"]}, "roles.worker.gpu_models.1: '-x' cannot be a GPU model"),
        ({"gpus": 1, "gpu_models": ["A100", "A100"]}, "roles.worker.gpu_models.1: 'A100' is named twice"),
        ({"gpus": 1, "gpu_models": ["A" * 256]}, "roles.worker.gpu_models.0"),
        ({"gpus": 1, "gpu_models": "A100"}, "roles.worker.gpu_models: Input should be a valid list"),
        ({"gpus": 1, "gpu_models": [3]}, "roles.worker.gpu_models.0: Input should be a valid string"),
    ],
)
def test_invalid_gpu_models_name_the_field(worker, message):
    with pytest.raises(JobSpecError) as err:
        JobSpec.from_dict(_job(**worker))
    assert message in str(err.value)


# ---- the plan ----------------------------------------------------------------------------------------------------


def _plan(spec: JobSpec) -> dict:
    return submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})


def test_the_plan_carries_each_roles_models_and_none_for_any_gpu():
    spec = JobSpec.from_dict(
        {
            "name": "j",
            "framework": "tensorflow",
            "entrypoint": "python t.py",
            "roles": {"chief": {"gpus": 1, "gpu_models": ["A100", "H100"]}, "worker": {"gpu_memory": "2g"}},
        }
    )
    roles = {r["name"]: r for r in _plan(spec)["roles"]}
    assert roles["chief"]["gpu_models"] == ["A100", "H100"]
    assert roles["worker"]["gpu_models"] == []  # any GPU: the AM asks as before (a ResourceRequest)


def test_the_plan_refuses_a_model_yarn_cannot_carry():
    import pydantic

    plan = _plan(JobSpec.from_dict(_job(gpus=1, gpu_models=["A100"])))
    plan["roles"][0]["gpu_models"] = ["A 100"]
    with pytest.raises(pydantic.ValidationError) as err:
        submission.Plan.model_validate(plan)
    assert "roles.0.gpu_models.0" in str(err.value)


# ---- pre-flight: the nodes' models -------------------------------------------------------------------------------

from airflow_provider_melon import rm  # noqa: E402
from airflow_provider_melon.gpu import preflight  # noqa: E402


def _node(name, model=None, gpus=1, gpu_mem_mb=16384, prefix="nm.yarn.io", *, bare=False):
    """A node as the RM's /ws/v1/cluster/nodes shows it (Hadoop 3.2+): its attributes in nodeAttributesInfo."""
    attributes = [{"prefix": prefix, "name": "gpu-model", "type": "STRING", "value": model}] if model else []
    info = (attributes[0] if attributes else {}) if bare else {"nodeAttributeInfo": attributes}
    return {
        "id": f"{name}:45454",
        "state": "RUNNING",
        "nodeAttributesInfo": info,
        "totalResource": {"resources": {"yarn.io/gpu": gpus, "melon.io/gpu-memory": gpu_mem_mb}},
    }


def _roles(**named):
    return JobSpec.from_dict({"name": "j", "entrypoint": "true", "roles": named}).roles


def test_a_nodes_model_is_its_gpu_model_attribute_as_the_rm_lists_it():
    assert preflight.node_gpu_model(_node("a", "A10")) == "A10"
    assert preflight.node_gpu_model(_node("a", "T4", prefix="rm.yarn.io")) == "T4"  # set centrally
    assert preflight.node_gpu_model(_node("a", "T4", bare=True)) == "T4"  # one attribute, not in a list
    assert preflight.node_gpu_model(_node("a")) is None
    assert preflight.node_gpu_model({"id": "old:1"}) is None  # an RM without attributes in its node list
    other = _node("a", "A10")
    other["nodeAttributesInfo"]["nodeAttributeInfo"][0]["name"] = "os"
    assert preflight.node_gpu_model(other) is None
    both = _node("a", "A10")
    both["nodeAttributesInfo"]["nodeAttributeInfo"].append(
        {"prefix": "rm.yarn.io", "name": "gpu-model", "type": "STRING", "value": "T4"}
    )
    assert preflight.node_gpu_model(both) == "A10"  # the NodeManager's own first


def test_preflight_refuses_a_model_no_node_has_naming_the_models_the_cluster_has():
    nodes = [_node("a", "A10"), _node("b", "T4"), _node("c", "T4")]
    report = preflight.check(nodes, _roles(worker={"gpus": 1, "gpu_models": ["A100"]}))
    assert not report.ok
    assert report.problems == ["role worker accepts GPU models ['A100'], but the cluster's nodes have ['A10', 'T4']"]
    assert preflight.check(nodes, _roles(worker={"gpus": 1, "gpu_models": ["A100", "T4"]})).ok
    assert preflight.check(nodes, _roles(worker={"gpus": 1})).ok  # no models: any node


def test_preflight_says_when_no_node_publishes_a_model():
    report = preflight.check([_node("a"), _node("b")], _roles(worker={"gpu_memory": "2g", "gpu_models": ["T4"]}))
    assert report.problems == [
        "role worker accepts GPU models ['T4'], but no running node publishes its GPU model (the node attribute "
        "nm.yarn.io/gpu-model or rm.yarn.io/gpu-model)"
    ]


def test_a_roles_per_task_rules_take_its_models_nodes():
    nodes = [_node("big", "A100", gpus=8, gpu_mem_mb=8 * 81920), _node("small", "T4", gpus=1, gpu_mem_mb=16384)]
    wide = preflight.check(nodes, _roles(worker={"gpus": 2, "gpu_models": ["T4"]}))
    assert wide.problems == ["role worker: 2 GPU(s) per task, but no node of its GPU models ['T4'] has more than 1"]
    deep = preflight.check(nodes, _roles(worker={"gpu_memory": "20g", "gpu_models": ["T4"]}), context_mb=0)
    assert deep.problems == [
        "role worker: expected GPU memory 20480 MiB per task exceeds the largest GPU of its GPU models ['T4'], "
        "16384 MiB (node small:45454: 16384 MiB over 1 GPU(s))"
    ]
    # a shared task asks for its slot on its models' GPU (a quarter of a T4), not the A100's 20 GiB, which no T4 holds
    fits = preflight.check(nodes, _roles(worker={"instances": 4, "gpu_memory": "2g", "gpu_models": ["T4"]}))
    assert fits.ok, fits.problems
    assert fits.demand["roles"]["worker"]["held_mb"] == 4096
    assert preflight.model_largest_gpu_mb(nodes, ["T4"]) == 16384
    assert preflight.model_largest_gpu_mb(nodes, ["H100"]) is None


@pytest.mark.parametrize(
    "handler,scheduler,problem",
    [
        ("scheduler", "capacityScheduler", None),
        (None, "capacityScheduler", "yarn.resourcemanager.placement-constraints.handler=scheduler, but it is not set"),
        ("disabled", "capacityScheduler", "placement-constraints.handler=scheduler, but it is disabled"),
        ("placement-processor", "capacityScheduler", "but it is placement-processor"),
        ("scheduler", "fairScheduler", "only with the CapacityScheduler (placement constraints on node attributes); "),
    ],
)
def test_preflight_refuses_a_cluster_that_cannot_place_by_model_naming_the_setting(handler, scheduler, problem):
    nodes = [_node("a", "A10")]
    models = _roles(worker={"gpus": 1, "gpu_models": ["A10"]}, ps={"untracked": True})
    if problem is None:
        preflight.ensure_models_placeable(nodes, models, handler, scheduler)
    else:
        with pytest.raises(preflight.PreflightError) as err:
            preflight.ensure_models_placeable(nodes, models, handler, scheduler)
        assert str(err.value).startswith("the job cannot run on this cluster: role worker names GPU models")
        assert problem in str(err.value)
    # a job without models never needs the handler
    preflight.ensure_models_placeable(nodes, _roles(worker={"gpus": 1}), "disabled", "fairScheduler")


def test_refusals_are_listed_together_and_unread_nodes_skip_only_theirs():
    roles = _roles(worker={"gpus": 1, "gpu_models": ["A100"]})
    with pytest.raises(preflight.PreflightError) as err:
        preflight.ensure_models_placeable([_node("a", "T4")], roles, "disabled", "capacityScheduler")
    assert (
        "handler=scheduler, but it is disabled; role worker accepts GPU models ['A100'], but the cluster's nodes "
        "have ['T4']" in str(err.value)
    )
    preflight.ensure_models_placeable(None, roles, "scheduler", "capacityScheduler")  # nodes not read


# ---- the hook: checked before anything is staged ------------------------------------------------------------------


class _Yarn:
    """The RM as MelonHook reads it before a submission; staging is never reached."""

    def __init__(self, handler="scheduler", kind="capacityScheduler", nodes=(), fail=None, version="3.3.6", beans=()):
        self.handler, self.kind, self._nodes, self.fail, self.version = handler, kind, list(nodes), fail, version
        self.beans = beans

    def rm_jmx(self, query):
        assert query == rm.STATS_MBEAN
        if isinstance(self.beans, Exception):
            raise self.beans
        return list(self.beans)

    def cluster_info(self):
        return {"clusterInfo": {"hadoopVersion": self.version, "resourceManagerVersion": self.version}}

    def rm_conf(self, name):
        assert name == preflight.PLACEMENT_HANDLER
        if self.fail:
            raise self.fail
        return self.handler

    def scheduler(self):
        return {"type": self.kind}

    def nodes(self):
        return self._nodes


def _hook(yarn):
    from airflow_provider_melon.hooks.melon import MelonHook

    hook = MelonHook.__new__(MelonHook)
    hook.yarn = yarn
    hook._nodes = None
    return hook


def test_the_hook_refuses_before_staging_when_the_handler_is_off_or_unreadable():
    spec = JobSpec.from_dict(_job(gpus=1, gpu_models=["A10"]))
    nodes = [_node("a", "A10")]
    _hook(_Yarn(nodes=nodes)).check_gpu_models(spec)
    with pytest.raises(preflight.PreflightError, match="handler=scheduler, but it is disabled"):
        _hook(_Yarn("disabled", nodes=nodes)).check_gpu_models(spec)
    with pytest.raises(
        preflight.PreflightError, match=r"handler or Hadoop version could not be read \(HTTP 403\): it must be"
    ):
        _hook(_Yarn(nodes=nodes, fail=RuntimeError("HTTP 403"))).check_gpu_models(spec)
    with pytest.raises(preflight.PreflightError, match=r"accepts GPU models \['A10'\], but the cluster's nodes have"):
        _hook(_Yarn(nodes=[_node("b", "T4")])).check_gpu_models(spec)
    # no models: nothing read
    _hook(_Yarn(fail=AssertionError("not read"))).check_gpu_models(JobSpec.from_dict(_job(gpus=1)))


def test_gpu_models_are_refused_on_hadoop_3_3_when_the_rm_places_by_the_plugins_node_order():
    """Hadoop 3.3's CapacityScheduler never places an ask with placement constraints under multi-node placement (the
    replay: bench_scale on the gpuspec33 trace): such a job would wait for ever, so it is refused before staging."""
    spec = JobSpec.from_dict(_job(gpus=1, gpu_models=["A10"]))
    nodes = [_node("a", "A10")]
    loaded = [{"PolicyLoaded": True, "Version": "0.1.0"}]
    with pytest.raises(preflight.PreflightError, match=r"Hadoop 3\.3\.6.*only on NodeManager heartbeats.*node order"):
        _hook(_Yarn(nodes=nodes, beans=loaded)).check_gpu_models(spec)
    _hook(_Yarn(nodes=nodes, beans=loaded, version="3.5.0")).check_gpu_models(spec)  # 3.5 places them
    _hook(_Yarn(nodes=nodes, beans=[{"PolicyLoaded": False}])).check_gpu_models(spec)  # heartbeat placement
    _hook(_Yarn(nodes=nodes)).check_gpu_models(spec)  # no plug-in on this RM
    _hook(_Yarn(nodes=nodes, beans=RuntimeError("HTTP 403"))).check_gpu_models(spec)  # /jmx unreadable: not refused


def test_a_submission_is_refused_before_anything_is_staged():
    hook = _hook(_Yarn("disabled", nodes=[_node("a", "A10")]))

    def never(*args, **kwargs):
        raise AssertionError("staged or submitted")

    hook.check_queue = hook.stage = never  # type: ignore[method-assign]
    with pytest.raises(preflight.PreflightError, match="placement-constraints.handler=scheduler"):
        hook.submit(JobSpec.from_dict(_job(gpus=1, gpu_models=["A10"])))
