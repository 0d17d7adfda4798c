"""Tenants without a cluster: doAs on every RM call, the proxy-user fix, application ACLs in the submission, and the
queue pre-flight (unknown queue, stopped queue, job above the queue's maximum). The live counterparts are in
tests/integration/test_tenants_live.py."""

from __future__ import annotations

import pytest
import requests_mock as rm_mock

from airflow_provider_melon import submission
from airflow_provider_melon.hadoop import queues
from airflow_provider_melon.hadoop.hdfs_io import describe
from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hooks.melon import MelonHook
from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.spec import JobSpec

RM = "http://rm:8088"
WS = "/ws/v1/cluster"


def _res(gpus: int, mem: int) -> dict:
    return {
        "memory": 8192,
        "vCores": 16,
        "resourceInformations": {
            "resourceInformation": [
                {"name": "memory-mb", "value": 8192, "units": "Mi"},
                {"name": "vcores", "value": 16},
                {"name": "yarn.io/gpu", "value": gpus},
                {"name": "melon.io/gpu-memory", "value": mem, "units": "Mi"},
            ]
        },
    }


def _leaf(name: str, max_gpus: int, max_mem: int, used_gpus: int = 0, state: str = "RUNNING") -> dict:
    return {
        "queueName": name,
        "queuePath": f"root.{name}",
        "state": state,
        "maxEffectiveCapacity": _res(max_gpus, max_mem),
        "minEffectiveCapacity": _res(1, 16384),
        "resourcesUsed": _res(used_gpus, 0),
    }


SCHEDULER = {
    "type": "capacityScheduler",
    "queueName": "root",
    "queues": {
        "queue": [
            _leaf("default", 4, 65536),
            _leaf("tenant_a", 4, 65536, used_gpus=4),
            _leaf("tenant_b", 2, 32768),
            _leaf("closed", 4, 65536, state="STOPPED"),
        ]
    },
}


def _roles(instances: int, gpus: int = 0, gpu_memory: int = 0) -> dict:
    return {"worker": {"instances": instances, "gpus": gpus, "gpu_memory_mb": gpu_memory}}


def test_unknown_queue_names_the_field_and_lists_the_leaf_queues():
    with pytest.raises(queues.QueueError) as err:
        queues.ensure_queue_fits(SCHEDULER, "tenant_zz", _roles(1))
    text = str(err.value)
    assert "'tenant_zz'" in text and "`queue`" in text and "root.default, root.tenant_a" in text
    assert "refreshQueues" in text


def test_queue_by_name_or_path_and_a_stopped_queue():
    assert queues.check(SCHEDULER, "root.tenant_b", _roles(1, gpus=1)).ok
    report = queues.check(SCHEDULER, "closed", _roles(1))
    assert not report.ok and "STOPPED" in report.message


def test_a_gang_above_the_queue_maximum_can_never_run():
    report = queues.check(SCHEDULER, "tenant_b", _roles(3, gpus=1))
    assert "needs 3 GPU(s)" in report.message and "maximum 2 GPU(s)" in report.message
    report = queues.check(SCHEDULER, "tenant_b", _roles(3, gpu_memory=12000))
    assert "36000 MiB of GPU memory" in report.message
    assert queues.check(SCHEDULER, "tenant_b", _roles(2, gpus=1)).ok


def test_the_queue_is_asked_for_each_shared_task_s_slot():
    # 8 tasks x 1 GiB (+ 512 for the CUDA context) on 16 GiB GPUs: YARN is asked for a quarter of a GPU each, 8 x
    # 4096, which tenant_b's 32768 MiB holds; a ninth task would not fit, though 9 x 1536 would
    assert queues.check(SCHEDULER, "tenant_b", _roles(8, gpu_memory=1024), context_mb=512, largest_gpu_mb=16384).ok
    report = queues.check(SCHEDULER, "tenant_b", _roles(9, gpu_memory=1024), context_mb=512, largest_gpu_mb=16384)
    assert "36864 MiB of GPU memory" in report.message, report.message
    # the cluster's GPUs unknown: no slot, the need alone
    assert queues.check(SCHEDULER, "tenant_b", _roles(9, gpu_memory=1024), context_mb=512).ok


def test_a_job_above_the_headroom_but_within_the_maximum_waits():
    report = queues.check(SCHEDULER, "tenant_a", _roles(1, gpus=1))
    assert report.ok and report.waits and report.headroom("yarn.io/gpu") == 0
    assert "waits for capacity" in report.message


def test_a_scheduler_without_queues_is_not_checked():
    report = queues.check({"type": "fifoScheduler"}, "anything", _roles(1, gpus=1))
    assert report.ok and not report.checked


def test_proxy_user_is_sent_as_doas_on_every_call_including_kill():
    hook = YarnHook(rm_urls=[RM], user="airflow", proxy_user="alice", retries=0)
    with rm_mock.Mocker() as m:
        m.get(RM + WS + "/apps/app_1", json={"app": {"state": "RUNNING"}})
        m.put(RM + WS + "/apps/app_1/state", json={"state": "KILLED"}, status_code=202)
        hook.get_application("app_1")
        hook.kill_application("app_1")
        assert [r.qs for r in m.request_history] == [{"user.name": ["airflow"], "doas": ["alice"]}] * 2


def test_no_doas_without_a_proxy_user_or_when_it_is_the_user_itself():
    for hook in (YarnHook(rm_urls=[RM], user="alice"), YarnHook(rm_urls=[RM], user="alice", proxy_user="alice")):
        assert "doAs" not in hook._params(None)


def test_impersonation_refused_names_the_proxyuser_settings():
    err = YarnApiError("User: airflow is not allowed to impersonate mallory", status=403, url=RM)
    assert "hadoop.proxyuser.airflow.users" in str(err) and "act for mallory" in str(err)
    hdfs = describe("status", "/user/mallory", Exception("User: airflow is not allowed to impersonate mallory"))
    assert "hadoop.proxyuser" in str(hdfs)


def test_melon_hook_acts_for_the_proxy_user_and_sets_application_acls():
    yarn = YarnHook(rm_urls=[RM], user="airflow")
    hook = MelonHook(yarn_hook=yarn, hdfs_client=object(), proxy_user="alice", admin_acl=" melon-admins")
    assert yarn.proxy_user == "alice" and hook.user == "alice" and hook.staging_dir == "/user/alice/.melon"
    assert submission.application_acls("alice", " melon-admins") == {
        "VIEW_APP": "alice melon-admins",
        "MODIFY_APP": "alice melon-admins",
    }
    assert submission.application_acls("alice", "ops,alice admins")["MODIFY_APP"] == "alice,ops admins"


def test_submission_carries_application_acls_only_when_asked():
    spec = JobSpec.from_dict({"name": "j", "entrypoint": "true", "roles": {"worker": {}}})
    staged = submission.StagedFile("hdfs://nn/x", 1, 1)
    kw = dict(app_id="application_1_0001", am_jar=staged, plan=staged, secret="s", tags=[])
    plain = submission.build_submission(spec, **kw)
    assert "application-acls" not in plain["am-container-spec"]
    acls = submission.build_submission(spec, acls={"VIEW_APP": "alice g", "MODIFY_APP": "alice g"}, **kw)
    assert acls["am-container-spec"]["application-acls"] == {
        "entry": [{"key": "MODIFY_APP", "value": "alice g"}, {"key": "VIEW_APP", "value": "alice g"}]
    }


def test_operator_runs_as_run_as_or_the_owner_when_the_connection_says_so_and_overrides_the_queue():
    from unittest import mock

    from airflow_provider_melon.operators.train import MelonTrainOperator

    job = {"name": "j", "entrypoint": "true", "queue": "default", "roles": {"worker": {}}}
    op = MelonTrainOperator(task_id="t", job=job, owner="bob", yarn_queue="tenant_b", run_as="alice")
    assert op.tenant() == "alice" and op.load_spec().queue == "tenant_b"
    assert op.queue != "tenant_b"  # BaseOperator's executor queue is untouched
    op = MelonTrainOperator(task_id="t", job=job, owner="bob")
    conn = mock.Mock(extra_dejson={"run_as_owner": True})
    with mock.patch("airflow_provider_melon.hooks.yarn.BaseHook.get_connection", return_value=conn):
        assert op.tenant() == "bob"
    with mock.patch(
        "airflow_provider_melon.hooks.yarn.BaseHook.get_connection", return_value=mock.Mock(extra_dejson={})
    ):
        assert op.tenant() is None
    assert op.load_spec().queue == "default"


# ---- the per-user limit (issue: a gang that can never start for this user is refused before staging) -----------
# The leaf queues as the tenants mini cluster's RM reports them (2 NMs x 2 GPUs, 16 GiB, 32 vcores, 64 GiB of GPU
# memory): default 20 % (max 100 %, user-limit-factor 1, YARN's default), tenant_a 40 % (max 100 %, factor 2.5).
def _res_of(memory: int, vcores: int, gpus: int, gpu_mem: int) -> dict:
    return {
        "memory": memory,
        "vCores": vcores,
        "resourceInformations": {
            "resourceInformation": [
                {"name": "memory-mb", "value": memory, "units": "Mi"},
                {"name": "vcores", "value": vcores},
                {"name": "melon.io/gpu-memory", "value": gpu_mem, "units": "Mi"},
                {"name": "yarn.io/gpu", "value": gpus},
            ]
        },
    }


def _real_leaf(name: str, capacity: float, factor: float, am_memory: int = 8192) -> dict:
    return {
        "queueName": name,
        "queuePath": f"root.{name}",
        "state": "RUNNING",
        "absoluteCapacity": capacity,
        "absoluteMaxCapacity": 100.0,
        "userLimit": 100.0,
        "userLimitFactor": factor,
        "maxEffectiveCapacity": _res_of(16384, 32, 4, 65536),
        "minEffectiveCapacity": _res_of(
            int(16384 * capacity / 100), 6, int(4 * capacity / 100), int(65536 * capacity / 100)
        ),
        "resourcesUsed": _res_of(0, 0, 0, 0),
        "userAMResourceLimit": _res_of(am_memory, 16, 2, 32768),
    }


REAL = {
    "type": "capacityScheduler",
    "queueName": "root",
    "queues": {
        "queue": [
            _real_leaf("default", 20.0, 1.0),
            _real_leaf("tenant_a", 40.0, 2.5),
            _real_leaf("open", 20.0, -1.0),
            _real_leaf("tiny_am", 40.0, 2.5, am_memory=256),
        ]
    },
}


def _gang(workers: int, gpus: int = 0, gpu_memory: int = 0) -> dict:
    role = {"gpus": gpus, "gpu_memory_mb": gpu_memory, "memory_mb": 2048, "vcores": 1}
    return {"chief": {"instances": 1, **role}, "worker": {"instances": workers, **role}}


def test_a_gang_above_the_users_limit_is_refused_naming_user_limit_factor():
    report = queues.check(REAL, "default", _gang(2, gpus=1), user="ops")
    assert not report.ok
    text = report.message
    # 20 % of 4 GPUs, rounded up, x factor 1 = 1 GPU; the gang needs 3 (one past the limit is granted: 2 of 3 at most)
    assert "user ops may hold at most 1 GPU(s)" in text and "user-limit-factor 1" in text
    assert "yarn.scheduler.capacity.root.default.user-limit-factor (to at least 2" in text
    assert report.user_limit["yarn.io/gpu"] == 1
    with pytest.raises(queues.QueueError, match="user-limit-factor"):
        queues.ensure_queue_fits(REAL, "default", _gang(2, gpus=1), user="ops")


def test_the_same_gang_fits_a_queue_with_a_larger_factor_and_one_container_past_the_limit_is_allowed():
    assert queues.check(REAL, "tenant_a", _gang(2, gpus=1), user="alice").ok
    # 2 GPUs in default: the first (1) does not exceed the limit (1), so YARN grants the second
    assert queues.check(REAL, "default", _gang(1, gpus=1), user="ops").ok
    assert queues.check(REAL, "open", _gang(3, gpus=1), user="ops").ok  # factor -1: the queue's maximum (4)


def test_shared_mode_gpu_memory_and_memory_count_against_the_user_limit():
    report = queues.check(REAL, "default", _gang(2, gpu_memory=8192), user="ops")
    assert not report.ok and "MiB of GPU memory" in report.message
    assert report.user_limit["melon.io/gpu-memory"] == 13108  # ceil(0.2 x 65536)
    # memory: 20 % of 16 GiB = 3277 MiB, normalised up to 4096; the AM (512) + 3 x 2048, less the largest, is 4608
    assert "at most 4096 MiB of memory" in report.message


def test_an_am_larger_than_the_users_am_limit_is_refused():
    report = queues.check(REAL, "tiny_am", _gang(0, gpus=1), user="alice")
    assert not report.ok and "maximum-am-resource-percent" in report.message
    assert "yarn.scheduler.capacity.root.tiny_am.maximum-am-resource-percent" in report.message


def test_a_scheduler_answer_without_user_limits_skips_that_check():
    assert queues.user_limit(_leaf("default", 4, 65536)) is None
    assert queues.check(SCHEDULER, "default", _roles(4, gpus=1)).ok
