"""gpu_memory: auto — the spec's forms, the learned figure (gpu/learned.py), and the resolution with its sources
(hadoop/memory_history.resolve). The HDFS store round trip per tenant is tested live (tests/integration/
test_oom_live.py)."""

from __future__ import annotations

import pytest

from airflow_provider_melon.gpu import learned
from airflow_provider_melon.hadoop import memory_history
from airflow_provider_melon.spec import JobSpec, JobSpecError, RoleSpec, override_gpu_memory


def _job(**role):
    return {"name": "j", "entrypoint": "python t.py", "roles": {"worker": {"instances": 1, **role}}}


def test_auto_forms_and_errors():
    assert RoleSpec(gpu_memory="auto").gpu_memory_auto
    assert RoleSpec(gpu_memory="auto").gpu_memory_first_mb is None
    assert RoleSpec(gpu_memory=" AUTO:2GiB ").gpu_memory_first_mb == 2048
    assert RoleSpec(gpu_memory="2GiB").gpu_memory_mb == 2048 and not RoleSpec(gpu_memory=2048).gpu_memory_auto
    with pytest.raises(ValueError, match="not resolved yet"):
        RoleSpec(gpu_memory="auto").gpu_memory_mb
    for bad in ("automatic", "auto:", "auto:lots"):
        with pytest.raises(JobSpecError, match=r"roles\.worker\.gpu_memory"):
            JobSpec.from_dict(_job(gpu_memory=bad))
    with pytest.raises(JobSpecError, match=r"roles\.worker\.oom_growth"):
        JobSpec.from_dict(_job(gpu_memory="1g", oom_growth=1.0))
    # no context reserve (GPUs without one: virtual ones) reads the same as an integer or as a text
    assert (
        RoleSpec(gpu_memory="1g", gpu_context=0).gpu_context == RoleSpec(gpu_memory="1g", gpu_context="0").gpu_context
    )
    with pytest.raises(JobSpecError, match=r"roles\.worker\.gpu_context"):
        JobSpec.from_dict(_job(gpu_memory="1g", gpu_context="-1"))
    # round trip keeps the form
    spec = JobSpec.from_dict(_job(gpu_memory="auto:1GiB"))
    assert JobSpec.from_dict(spec.to_dict()).roles["worker"].gpu_memory_first_mb == 1024


def test_oom_growths_off_and_exclusive():
    assert RoleSpec(gpu_memory="1g").oom_growths == 2
    assert RoleSpec(gpu_memory="1g", oom_retry=False).oom_growths == 0
    assert RoleSpec(gpus=1).oom_growths == 0  # exclusive GPUs: an OOM is reported, never retried with more


def test_operator_override_is_an_auto_roles_first_figure():
    data = {"roles": {"a": {"gpu_memory": "auto"}, "b": {"gpu_memory": "1g"}, "c": {}}}
    assert override_gpu_memory(data, "838MiB") == ["a", "b"]
    assert data["roles"] == {"a": {"gpu_memory": "auto:838MiB"}, "b": {"gpu_memory": "838MiB"}, "c": {}}


def run(app, state="SUCCEEDED", expected=1024, peak=None, oom=False):
    return {"app_id": app, "state": state, "expected_mb": expected, "peak_mb": peak, "oom": oom}


def test_learned_figure_rules():
    assert learned.learned_mb([]) is None
    assert learned.learned_mb([run("a", state="KILLED")]) is None  # taught nothing
    mb, why = learned.learned_mb([run("a", expected=1536)])
    assert mb == 1536 and "succeeded at 1536 MiB in run a" in why
    mb, why = learned.learned_mb([run("a", expected=1536, peak=1300)])
    assert mb == 1430 and "peak 1300 MiB × 1.10" in why  # the measured peak beats the figure it ran at
    mb, why = learned.learned_mb([run("a", state="FAILED", expected=2304, oom=True)], growth=1.5)
    assert mb == 3456 and "out of memory at 2304 MiB" in why
    # the largest of the recent runs; runs older than RECENT are forgotten
    runs = [run("old", expected=9000)] + [run(f"r{i}", expected=1000 + i) for i in range(learned.RECENT)]
    assert learned.learned_mb(runs)[0] == 1000 + learned.RECENT - 1
    assert learned.learned_mb([run("a", peak=90000)], largest_gpu_mb=81920)[0] == 81920


def test_a_record_with_no_usable_peak_teaches_the_figure_it_ran_at():
    # the history is JSON read back from HDFS: json.loads gives inf and nan for Infinity and NaN
    for junk in (float("inf"), float("nan"), 0, -5, True, "1300"):
        mb, why = learned.learned_mb([run("a", expected=1536, peak=junk)])
        assert mb == 1536 and "succeeded at 1536 MiB in run a" in why, junk


def test_run_record_from_the_am_final_status():
    tasks = [
        {
            "role": "worker",
            "index": 0,
            "initial_gpu_memory_mb": 1024,
            "expected_gpu_memory_mb": 1536,
            "gpu_memory_peak_mb": None,
            "oom_growths": 1,
            "oom": {"cap_mb": 1024, "peak_mb": 1100},
        },
        {
            "role": "worker",
            "index": 1,
            "initial_gpu_memory_mb": 1024,
            "expected_gpu_memory_mb": 1024,
            "gpu_memory_peak_mb": 900,
            "oom_growths": 0,
            "oom": None,
        },
        {"role": "ps", "index": 0},
    ]
    rec = learned.run_record("worker", tasks, app_id="application_1_0001", state="SUCCEEDED", at=5.5, planned_mb=1024)
    assert rec == {
        "role": "worker",
        "app_id": "application_1_0001",
        "at": 5,
        "state": "SUCCEEDED",
        "initial_mb": 1024,
        "expected_mb": 1536,
        "peak_mb": 1100,
        "peak_source": None,
        "oom": True,
        "oom_kinds": ["cap"],  # a report without its kind (an older executor): the cap's
        "need_mb": None,
        "growths": 1,
        "initial_context_mb": None,
        "context_mb": None,
    }


def failed_oom(expected=4096, **extra):
    return {"app_id": "application_1_0003", "state": "FAILED", "expected_mb": expected, "oom": True, **extra}


def test_a_cap_oom_whose_allocator_stayed_far_below_its_cap_grows_the_context_not_the_figure():
    """An OOM claimed at the cap while the allocator's own counter stayed far below it (under oom.AT_CAP of the cap)
    ran out of other memory: the figure is not grown (its peak teaches as on any run), the context reserve is."""
    far = failed_oom(peak_mb=1000, peak_source="torch", oom_kinds=["cap"], context_mb=1024)
    mb, why = learned.learned_mb([far], growth=1.5)
    assert mb == 1100 and "peak 1000 MiB × 1.10" in why, why  # not 4096 × 1.5
    mb, why = learned.learned_context_mb([far], growth=1.5)
    assert mb == 1536 and "out of memory outside the allocator at a context reserve of 1024 MiB" in why
    near = failed_oom(peak_mb=3900, peak_source="torch", oom_kinds=["cap"], context_mb=1024)
    assert learned.learned_mb([near], growth=1.5)[0] == 6144  # at its cap: grown
    assert learned.learned_context_mb([near], growth=1.5)[0] == 1024
    # an NVML reading holds the context and a preallocated pool: it says nothing of the allocator, the claim stands
    nvml = failed_oom(peak_mb=1000, peak_source="nvml-process", oom_kinds=["cap"])
    assert learned.learned_mb([nvml], growth=1.5)[0] == 6144
    # the need an allocator said (its use then and its request) counts as what it reached: one huge request
    huge = failed_oom(peak_mb=1000, peak_source="torch", oom_kinds=["cap"], need_mb=20000)
    mb, why = learned.learned_mb([huge], growth=1.5)
    assert mb == 22000 and "needing 20000 MiB × 1.10" in why, why


def test_an_oom_outside_the_allocator_grows_the_context_reserve_and_the_history_keeps_it():
    outside = failed_oom(peak_mb=3000, peak_source="torch", oom_kinds=["outside"], context_mb=1792)
    assert learned.learned_mb([outside], growth=1.5)[0] == 3300  # its peak, not 4096 × 1.5
    assert learned.learned_context_mb([outside], growth=1.5)[0] == 2688
    zero = failed_oom(oom_kinds=["outside"], context_mb=0)
    assert learned.learned_context_mb([zero], growth=1.5)[0] == learned.CONTEXT_STEP_MB
    # a later run that succeeded at the grown reserve keeps it; older records (none) teach nothing
    ok = {"app_id": "application_1_0004", "state": "SUCCEEDED", "expected_mb": 3300, "context_mb": 2688}
    mb, why = learned.learned_context_mb([outside, ok, {"app_id": "old", "state": "SUCCEEDED"}], growth=1.5)
    assert mb == 2688 and "application_1_0004" in why or "application_1_0003" in why
    assert learned.learned_context_mb([{"app_id": "old", "state": "SUCCEEDED", "expected_mb": 1}]) is None


def test_run_record_keeps_the_kinds_the_need_and_the_context_the_tasks_ended_with():
    tasks = [
        {
            "role": "worker",
            "initial_gpu_memory_mb": 4096,
            "expected_gpu_memory_mb": 4096,
            "initial_gpu_context_mb": 1024,
            "gpu_context_mb": 1536,
            "oom_growths": 1,
            "oom": {"cap_mb": 4096, "kind": "outside", "signature": "RuntimeError: CUDA error: out of memory"},
        },
        {
            "role": "worker",
            "initial_gpu_memory_mb": 4096,
            "expected_gpu_memory_mb": 6144,
            "initial_gpu_context_mb": 1024,
            "gpu_context_mb": 1024,
            "oom_growths": 1,
            "oom": {"cap_mb": 4096, "kind": "cap", "need_mb": 4500, "signature": "torch.OutOfMemoryError"},
        },
    ]
    rec = learned.run_record(
        "worker", tasks, app_id="a", state="FAILED", at=1, planned_mb=4096, planned_context_mb=1024
    )
    assert {k: rec[k] for k in ("oom_kinds", "need_mb", "initial_context_mb", "context_mb")} == {
        "oom_kinds": ["cap", "outside"],
        "need_mb": 4500,
        "initial_context_mb": 1024,
        "context_mb": 1536,
    }


def test_resolve_contexts_takes_the_larger_of_the_first_run_figure_and_the_learned_one():
    roles = JobSpec.from_dict(
        {
            "name": "j",
            "entrypoint": "x",
            "roles": {
                "chief": {"gpu_memory": "1g"},
                "worker": {"gpu_memory": "auto:1g"},
                "ps": {"gpu_memory": "512m", "gpu_context": "300m"},  # the spec's own: kept
                "evaluator": {},
            },
        }
    ).roles
    history = {"worker": [failed_oom(oom_kinds=["outside"], context_mb=2048)], "chief": [{"context_mb": 512}]}
    figures, lines = memory_history.resolve_contexts(
        lambda r: history.get(r, []), roles, lambda r: (1024, "the first-run figure for tensorflow")
    )
    assert figures == {"chief": 1024, "worker": 3072}
    assert lines[0] == "roles.chief.gpu_context: 1024 MiB (the first-run figure for tensorflow)"
    assert lines[1].startswith("roles.worker.gpu_context: 3072 MiB (learned from the last 1 run(s): out of memory")


def test_the_first_run_reserve_follows_the_framework_and_nccl():
    from airflow_provider_melon.gpu import context
    from airflow_provider_melon.hooks.melon import MelonHook
    from airflow_provider_melon.hooks.yarn import YarnHook

    hook = MelonHook(yarn_hook=YarnHook(rm_urls=["http://rm:8088"], user="alice"), hdfs_client=object())
    assert hook.gpu_context_mb is None  # no admin figure: each framework's own

    def first(framework, roles, **job):
        spec = JobSpec.from_dict({"name": "j", "entrypoint": "x", "framework": framework, "roles": roles, **job})
        return hook.first_context_mb(spec, next(iter(roles)))

    one = {"worker": {"gpu_memory": "4g"}}
    assert first("tensorflow", one) == (context.CONTEXT_MB["tensorflow"], "the first-run figure for tensorflow")
    assert first("pytorch", one) == (context.CONTEXT_MB["pytorch"], "the first-run figure for pytorch")
    ddp = {"worker": {"instances": 2, "gpu_memory": "4g"}}
    assert first("pytorch", ddp) == (context.CONTEXT_MB["pytorch+nccl"], "the first-run figure for pytorch with NCCL")
    master = {"master": {"gpu_memory": "4g"}, "worker": {"gpu_memory": "4g"}}  # rank 0 and a worker: a group of two
    assert first("pytorch", master)[0] == context.CONTEXT_MB["pytorch+nccl"]
    admin = MelonHook(
        yarn_hook=YarnHook(rm_urls=["http://rm:8088"], user="alice"), hdfs_client=object(), gpu_context_mb=0
    )
    spec = JobSpec.from_dict({"name": "j", "entrypoint": "x", "framework": "pytorch", "roles": ddp})
    assert admin.first_context_mb(spec, "worker") == (0, "the cluster's gpu_context_mb")


def test_resolve_names_its_source_and_the_field():
    roles = JobSpec.from_dict(
        {
            "name": "j",
            "entrypoint": "x",
            "roles": {
                "chief": {"gpu_memory": "auto:1g"},
                "worker": {"gpu_memory": "auto"},
                "ps": {"gpu_memory": "512m"},
            },
        }
    ).roles
    history = {"worker": [run("application_1_0001", expected=1536)]}
    figures, lines = memory_history.resolve(lambda r: history.get(r, []), roles)
    assert figures == {"chief": 1024, "worker": 1536}
    assert lines == [
        "roles.chief.gpu_memory auto: 1024 MiB (no history yet: the first run's figure, auto:<size> "
        "or the operator's gpu_memory)",
        "roles.worker.gpu_memory auto: 1536 MiB (learned from the last 1 run(s): succeeded at 1536 MiB "
        "in run application_1_0001)",
    ]
    with pytest.raises(ValueError, match=r"roles\.worker\.gpu_memory: 'auto' has no history"):
        memory_history.resolve(lambda r: [], roles)


@pytest.mark.parametrize("key", ["", "a/../b", "a b", "/"])
def test_history_key_must_be_plain_names(key):
    with pytest.raises(ValueError, match="memory history key"):
        memory_history.folder("/user/u/.melon", key)


def test_history_folder():
    assert memory_history.folder("/user/u/.melon", "dag/task") == "/user/u/.melon/profiles/dag/task/memory"


# ---- a learned figure that converges (the peak's source, a cap-filling peak, the largest GPU) ----------------
def test_a_peak_that_fills_its_cap_does_not_ratchet_the_figure():
    """TensorFlow without allow-growth takes its whole limit at start: a peak read by NVML (less the context) is the
    cap it ran at, whatever the model needs. Twelve nightly runs that each succeed with the cap filled must not
    teach cap × 1.1 each time (4096 → 4506 → 4957 → ...): a successful run says the cap sufficed."""
    runs, figure = [], 4096
    for night in range(12):
        runs.append(
            {
                "app_id": f"application_1_{night:04d}",
                "state": "SUCCEEDED",
                "initial_mb": figure,
                "expected_mb": figure,
                "peak_mb": figure,
                "peak_source": "nvml-process",
                "oom": False,
            }
        )
        figure, why = learned.learned_mb(runs)
    assert figure == 4096, why
    assert "reached its cap" in why


def test_a_device_wide_peak_only_bounds_the_figure():
    """NVML's device-wide reading (the container's pids are not NVML's) counts the neighbours on a shared GPU: it
    is never taken as the task's own peak, only as an upper bound of what the task used."""
    device = {"app_id": "a", "state": "SUCCEEDED", "expected_mb": 8192, "peak_source": "nvml-device", "oom": False}
    mb, why = learned.learned_mb([device | {"peak_mb": 30000}])  # three neighbours on the GPU
    assert mb == 8192 and "succeeded at 8192 MiB" in why
    mb, why = learned.learned_mb([device | {"peak_mb": 5000}])  # alone on the GPU: the task used at most that
    assert mb == 5500 and "device-wide" in why
    oom = device | {"state": "FAILED", "oom": True, "expected_mb": 2048, "peak_mb": 60000}
    assert learned.learned_mb([oom], growth=1.5)[0] == 3072  # the growth rule, not the neighbours' 60000 × 1.1


def test_run_record_carries_the_peaks_source_and_prefers_a_process_peak():
    tasks = [
        {
            "role": "worker",
            "index": 0,
            "initial_gpu_memory_mb": 4096,
            "expected_gpu_memory_mb": 4096,
            "gpu_memory_peak_mb": 3400,
            "gpu_memory_peak_source": "tensorflow",
            "oom_growths": 0,
            "oom": None,
        },
        {
            "role": "worker",
            "index": 1,
            "initial_gpu_memory_mb": 4096,
            "expected_gpu_memory_mb": 4096,
            "gpu_memory_peak_mb": 9000,
            "gpu_memory_peak_source": "nvml-device",
            "oom_growths": 0,
            "oom": None,
        },
    ]
    rec = learned.run_record("worker", tasks, app_id="application_1_0002", state="SUCCEEDED", at=1, planned_mb=4096)
    assert (rec["peak_mb"], rec["peak_source"]) == (3400, "tensorflow")
    only_device = learned.run_record("worker", tasks[1:], app_id="x", state="SUCCEEDED", at=1, planned_mb=4096)
    assert (only_device["peak_mb"], only_device["peak_source"]) == (9000, "nvml-device")
    # an AM that does not say where its peak came from (older MeLoN): the source is unknown, the peak kept
    plain = [{k: v for k, v in tasks[0].items() if k != "gpu_memory_peak_source"}]
    rec = learned.run_record("worker", plain, app_id="y", state="SUCCEEDED", at=1, planned_mb=4096)
    assert (rec["peak_mb"], rec["peak_source"]) == (3400, None)


def test_the_learned_figure_leaves_room_for_the_context_on_the_largest_gpu():
    """An OOM at the top teaches 1.5 × the figure; capped at the largest GPU less the CUDA context, pre-flight (which
    adds the context) still lets the next run through instead of refusing every later one."""
    top = {"app_id": "application_1_0009", "state": "FAILED", "expected_mb": 81000, "oom": True, "peak_mb": None}
    mb, why = learned.learned_mb([top], growth=1.5, largest_gpu_mb=81559, context_mb=400)
    assert mb == 81159
    assert "capped at the largest GPU (81559 MiB less 400 MiB for the CUDA context)" in why


def test_the_hook_caps_the_learned_figure_at_the_clusters_largest_gpu(monkeypatch):
    """``MelonHook.resolve_learned`` knows the cluster (the RM's nodes, as pre-flight reads them): a task whose last
    run ran out of memory at the top learns no more than the largest GPU gives, and pre-flight passes."""
    from unittest import mock

    from airflow_provider_melon.gpu import preflight
    from airflow_provider_melon.hooks.melon import MelonHook
    from airflow_provider_melon.hooks.yarn import YarnHook

    nodes = [
        {
            "id": "gpu1:8041",
            "state": "RUNNING",
            "totalResource": {"resources": {"yarn.io/gpu": 8, "melon.io/gpu-memory": 8 * 81559}},
        },
        {
            "id": "gpu2:8041",
            "state": "RUNNING",
            "totalResource": {"resources": {"yarn.io/gpu": 4, "melon.io/gpu-memory": 4 * 40960}},
        },
    ]
    top = {
        "role": "worker",
        "app_id": "application_1_0009",
        "state": "FAILED",
        "expected_mb": 81000,
        "oom": True,
        "peak_mb": 81000,
        "peak_source": "torch",
    }
    hook = MelonHook(
        yarn_hook=YarnHook(rm_urls=["http://rm:8088"], user="alice"),
        hdfs_client=object(),
        fs_default_fs="hdfs://nn:8020",
        gpu_context_mb=400,
    )
    spec = JobSpec.from_dict(_job(gpu_memory="auto:8GiB"))
    with (
        mock.patch.object(YarnHook, "nodes", autospec=True, return_value=nodes),
        mock.patch.object(
            memory_history,
            "read_history",
            return_value=[{"version": 1, "app_id": top["app_id"], "roles": {"worker": top}}],
        ),
    ):
        resolved, notes = hook.resolve_learned(spec, "dag/task")
    assert resolved.roles["worker"].gpu_memory_mb == 81559 - 400, notes
    assert "capped at the largest GPU (81559 MiB less 400 MiB for the CUDA context)" in notes["gpu_memory"][0]
    assert preflight.check(nodes, resolved.roles, 400).ok
