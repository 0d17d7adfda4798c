"""Hadoop-side faults during a job, on the fault suite's mini cluster (tests/faults/conftest.py): the RM restarted
(work-preserving recovery), a NodeManager lost, the AM killed, a task's container SIGKILLed."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
import uuid
from unittest import mock

import pytest

from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.hadoop.app_state import LIVE_STATES
from airflow_provider_melon.hooks.yarn import AsyncYarnHook
from airflow_provider_melon.operators.train import MelonTrainOperator
from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger
from tests.waits import rm_cause, wait_for

from .conftest import app_containers_prefix, container_group, sigkill_group

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def all_registered(status: dict, n: int) -> bool:
    return sum(t["state"] == "REGISTERED" for t in status.get("tasks") or []) == n


def test_rm_restart_keeps_the_app_and_pollers_report_its_true_end(
    fault_jobs, fault_hook, fault_cluster, fault_row, tmp_path, caplog
):
    """The RM is down for 15 s (three polls of each poller), then back with the app recovered."""
    output = output_dir(fault_cluster)
    with fault_row(
        "RM down 15 s, then restarted (work-preserving recovery)", hook=fault_hook, outputs=[f"{output}/last_step"]
    ) as row:
        _rm_restart(fault_jobs, fault_hook, fault_cluster, row, caplog, tmp_path, output)
        assert fault_hook.hdfs.status(f"{output}/last_step", strict=False), "the declared output is missing"


def _rm_restart(fault_jobs, fault_hook, fault_cluster, row, caplog, tmp_path, output):
    caplog.set_level(logging.WARNING)
    name = f"rm-restart-{int(time.time())}"
    app_id = fault_jobs.submit(
        checkpointed_job(tmp_path, name, 40, output=output, roles={"worker": {"instances": 2, "memory": 256}}),
        tags=row.tags,
    )
    fault_jobs.wait_status(app_id, lambda s: all_registered(s, 2), timeout=120)

    # the two pollers a DAG uses, following the app through the outage: the trigger and the operator's loop
    trigger = YarnApplicationTrigger(app_id=app_id, poll_interval=5, max_consecutive_failures=6)
    trigger._hook = AsyncYarnHook(rm_urls=[fault_cluster.rm_web_url], user=fault_cluster.user)
    op = MelonTrainOperator(
        task_id="t", job={"name": name, "entrypoint": "x"}, poll_interval=5, max_consecutive_failures=6
    )
    op.__dict__["hook"] = fault_hook
    results: dict = {}
    ti = mock.Mock(map_index=-1)

    def follow_trigger():
        async def first():
            gen = trigger.run()
            try:
                return await gen.__anext__()
            finally:
                await gen.aclose()

        results["trigger"] = asyncio.run(first()).payload

    def follow_operator():
        try:
            results["operator"] = op.poll_until_complete(app_id, {"ti": ti, "run_id": "r"})
        except Exception as exc:  # noqa: BLE001 - asserted below
            results["operator"] = exc

    followers = [threading.Thread(target=follow_trigger), threading.Thread(target=follow_operator)]
    for f in followers:
        f.start()
    # both have polled once (the trigger logged a state, the operator announced the app) before the outage
    wait_for(
        lambda: trigger.last_state and ti.xcom_push.called,
        60,
        "a first poll of the trigger and the operator",
        cause=rm_cause(fault_hook, app_id, fault_cluster),
    )
    row.injected()
    restart = mc.control(fault_cluster, "resourcemanager/restart?down_ms=15000")
    back = wait_for(
        lambda: fault_hook.yarn.get_application(app_id),
        120,
        "the RM to answer for the app again",
        cause=rm_cause(fault_hook, app_id, fault_cluster),
    )
    recovered_s = row.recovered()
    assert back["state"] in (*LIVE_STATES, "FINISHED"), back
    final = fault_jobs.wait(app_id, timeout=240)
    for f in followers:
        f.join(timeout=120)
    assert (final["state"], final["finalStatus"]) == ("FINISHED", "SUCCEEDED"), final["diagnostics"]
    assert results["trigger"]["status"] == "success" and results["trigger"]["final_status"] == "SUCCEEDED", results
    assert isinstance(results["operator"], dict) and results["operator"]["final_status"] == "SUCCEEDED", results
    attempts = fault_hook.yarn.app_attempts(app_id)
    assert len(attempts) == 1, attempts  # work-preserving: the same AM attempt carried on
    assert len(fault_hook.yarn.find_applications(row.tags)) == 1
    # both pollers did meet the outage (their RM calls failed, were retried), and neither gave up
    failed_calls = [r.getMessage() for r in caplog.records if "failed" in r.getMessage() and app_id in r.getMessage()]
    assert failed_calls, "no poll met the outage"
    print(f"RM restart {restart['seconds']} s; app answered again {recovered_s:.1f} s after the restart began")


# A task that checkpoints: one step a second, its last step in a file (a stand-in for a training checkpoint: the
# mini cluster's containers share this host's disk), resumed from on restart.
CHECKPOINTED = """\
import os, sys, time
ckpt = os.path.join(sys.argv[1], os.environ["MELON_ROLE"] + os.environ["MELON_INDEX"])
start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
print(f"resumed from step {start}" if start else "fresh start", flush=True)
for step in range(start + 1, int(sys.argv[2]) + 1):
    time.sleep(1)
    with open(ckpt + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(ckpt + ".tmp", ckpt)
    print(f"step {step}", flush=True)
if os.environ.get("MELON_OUTPUT_MODEL"):  # the declared output (published by the output task)
    with open(os.path.join(os.environ["MELON_OUTPUT_MODEL"], "last_step"), "w") as f:
        f.write(sys.argv[2])
"""


def checkpointed_job(tmp_path, name: str, steps: int, output: str | None = None, **extra) -> dict:
    """The job; ``output``: the HDFS folder it declares as its ``model`` output."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "steps.py").write_text(CHECKPOINTED)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    return {
        "name": name,
        "framework": "generic",
        "code": str(code),
        "entrypoint": f"python steps.py {ckpt} {steps}",
        **({"outputs": {"model": output}} if output else {}),
        **extra,
    }


def output_dir(cluster) -> str:
    return f"/user/{cluster.user}/fault-outputs/{uuid.uuid4().hex[:12]}/model"


def read_step(tmp_path, task: str) -> int:
    try:
        return int((tmp_path / "ckpt" / task).read_text())
    except (FileNotFoundError, ValueError):
        return 0


def test_worker_sigkilled_restarts_within_budget_and_resumes_then_fails_past_it(
    fault_jobs, fault_hook, tmp_path, fault_row
):
    with fault_row("worker container SIGKILLed, within its role's restart budget", hook=fault_hook, end=None) as row:
        app_id = fault_jobs.submit(
            checkpointed_job(
                tmp_path, "worker-kill", 40, roles={"worker": {"instances": 2, "memory": 256, "restarts": 1}}
            ),
            tags=row.tags,
        )
        fault_jobs.wait_status(app_id, lambda s: all_registered(s, 2), timeout=120)
        wait_for(lambda: read_step(tmp_path, "worker1") >= 5, 60, "worker:1 at step 5", cause=fault_jobs.cause(app_id))
        group = container_group(app_containers_prefix(app_id), MELON_ROLE="worker", MELON_INDEX="1")
        row.injected()
        sigkill_group(group)
        killed_at = read_step(tmp_path, "worker1")
        # the AM restarts worker:1 (its role's budget is 1), which resumes from its checkpoint
        status = fault_jobs.wait_status(
            app_id,
            lambda s: any(t["index"] == 1 and t["attempt"] == 1 and t["state"] == "REGISTERED" for t in s["tasks"]),
            timeout=120,
        )
        wait_for(
            lambda: any(
                f"resumed from step {killed_at}" in text for text in fault_jobs.container_logs(app_id).values()
            ),
            60,
            f"worker:1 resumed from step {killed_at}",
            cause=fault_jobs.cause(app_id),
        )
        row.recovered()

    # a second kill is past the budget: the application fails, naming the task and the signal
    with fault_row(
        "worker container SIGKILLed again, past the budget -> FAILED naming it",
        hook=fault_hook,
        end=("FINISHED", "FAILED"),
    ) as row:
        row.app_id = app_id
        wait_for(
            lambda: read_step(tmp_path, "worker1") >= killed_at + 3,
            60,
            "worker:1 training again",
            cause=fault_jobs.cause(app_id),
        )
        group = container_group(
            app_containers_prefix(app_id), MELON_ROLE="worker", MELON_INDEX="1", MELON_TASK_ATTEMPT="1"
        )
        row.injected()
        sigkill_group(group)
        final = fault_jobs.wait(app_id, timeout=120)
        assert (final["state"], final["finalStatus"]) == ("FINISHED", "FAILED"), final
        assert (
            "task worker:1 on" in final["diagnostics"] and "exited 137 (killed by SIGKILL)" in final["diagnostics"]
        ), final["diagnostics"]
        row.recovered()  # handled as designed: the application failed, naming the task
        assert status["tasks"][0]["attempt"] == 0  # worker:0 was never touched


def test_am_killed_next_attempt_restarts_the_gang_one_app(fault_jobs, fault_hook, fault_cluster, tmp_path, fault_row):
    output = output_dir(fault_cluster)
    with fault_row(
        "AM container SIGKILLed (max_attempts 2): gang restarted by attempt 2",
        hook=fault_hook,
        outputs=[f"{output}/last_step"],
    ) as row:
        name = f"am-kill-{int(time.time())}"
        app_id = fault_jobs.submit(
            checkpointed_job(
                tmp_path, name, 25, output=output, max_attempts=2, roles={"worker": {"instances": 2, "memory": 256}}
            ),
            tags=row.tags,
        )
        fault_jobs.wait_status(app_id, lambda s: all_registered(s, 2), timeout=120)
        op = MelonTrainOperator(task_id="t", job={"name": name, "entrypoint": "x"}, poll_interval=5)
        op.__dict__["hook"] = fault_hook
        result: dict = {}
        follower = threading.Thread(
            target=lambda: result.update(
                op=op.poll_until_complete(app_id, {"ti": mock.Mock(map_index=-1), "run_id": "r"})
            )
        )
        follower.start()
        wait_for(lambda: read_step(tmp_path, "worker0") >= 3, 60, "training under way", cause=fault_jobs.cause(app_id))
        am = container_group(app_containers_prefix(app_id) + "000001")  # the AM's container
        row.injected()
        sigkill_group(am)
        wait_for(
            lambda: len(fault_hook.yarn.app_attempts(app_id)) == 2,
            120,
            "a second AM attempt",
            cause=fault_jobs.cause(app_id),
        )
        second = f"_{app_id[len('application_') :]}_02_"
        # the gang of the second attempt (not the first one's, which was stopped with its AM)
        status = fault_jobs.wait_status(
            app_id, lambda s: all_registered(s, 2) and all(second in t["container_id"] for t in s["tasks"]), timeout=180
        )
        row.recovered()
        final = fault_jobs.wait(app_id, timeout=240)
        follower.join(timeout=120)
        assert (final["state"], final["finalStatus"]) == ("FINISHED", "SUCCEEDED"), final["diagnostics"]
        assert result.get("op", {}).get("final_status") == "SUCCEEDED", result
        assert len(status["tasks"]) == 2, status
        # the restarted gang resumed from the tasks' checkpoints (the first attempt's containers were stopped)
        logs = fault_jobs.container_logs(app_id)
        assert sum("resumed from step" in text for cid, text in logs.items() if "_02_" in cid) == 2, logs
        assert fault_hook.hdfs.status(f"{output}/last_step", strict=False), "the declared output is missing"


# The output task writes a model big enough that publishing it takes a while (the upload is streamed to HDFS).
PUBLISHER = """\
import os, sys
block = bytes(range(256)) * 4096  # 1 MiB, the same bytes every attempt
with open(os.path.join(os.environ["MELON_OUTPUT_MODEL"], "weights.bin"), "wb") as f:
    for _ in range(int(sys.argv[1])):
        f.write(block)
print("attempt", os.environ["MELON_TASK_ATTEMPT"], "wrote", sys.argv[1], "MiB", flush=True)
"""
PUBLISH_MIB = 384


def test_output_task_killed_while_publishing_leaves_it_whole_or_absent_and_the_retry_publishes(
    fault_jobs, fault_hook, fault_cluster, tmp_path, fault_row
):
    """The output task's container SIGKILLed mid-upload (its upload folder beside the output is being written):
    the output is absent then, never half there under its name; the retry (the role's restart) publishes it whole,
    checked by its bytes' digest."""
    import hashlib

    output = output_dir(fault_cluster)
    expected = hashlib.sha256(bytes(range(256)) * 4096 * PUBLISH_MIB).hexdigest()
    parent, base = output.rsplit("/", 1)
    with fault_row(
        "output task SIGKILLed while publishing its output: retried, output whole",
        hook=fault_hook,
        outputs=[(f"{output}/weights.bin", expected)],
    ) as row:
        code = tmp_path / "code"
        code.mkdir()
        (code / "publish.py").write_text(PUBLISHER)
        app_id = fault_jobs.submit(
            {
                "name": "publish-kill",
                "framework": "generic",
                "code": str(code),
                "entrypoint": f"python publish.py {PUBLISH_MIB}",
                "outputs": {"model": output},
                "roles": {"worker": {"instances": 1, "memory": 512, "restarts": 1}},
            },
            tags=row.tags,
        )

        def uploading():
            names = fault_hook.hdfs.list(parent) if fault_hook.hdfs.status(parent, strict=False) else []
            return [n for n in names if n.startswith(f".{base}.melon-") and n.endswith(".tmp")]

        first_upload = wait_for(uploading, 180, f"the output task's upload beside {output}", every=0.2)
        group = container_group(
            app_containers_prefix(app_id), MELON_ROLE="worker", MELON_INDEX="0", MELON_TASK_ATTEMPT="0"
        )
        row.injected()
        sigkill_group(group)
        assert fault_hook.hdfs.status(output, strict=False) is None, "a killed upload must not be under the name"
        retried = fault_jobs.wait_status(app_id, lambda s: s["tasks"][0]["attempt"] == 1, timeout=120)
        final = fault_jobs.wait(app_id, timeout=300)
        assert (final["state"], final["finalStatus"]) == ("FINISHED", "SUCCEEDED"), final["diagnostics"]
        assert "exited 137" in "".join(fault_jobs.container_logs(app_id, "AppMaster.stdout").values()), retried
        digest = hashlib.sha256()
        with fault_hook.hdfs.read(f"{output}/weights.bin", chunk_size=1 << 20) as reader:
            for chunk in reader:
                digest.update(chunk)
        assert digest.hexdigest() == expected, "the published output is not the job's bytes"
        row.recovered()
        print(f"killed attempt 0 while {first_upload} was being written; attempt 1 published {output} whole")


def test_node_lost_its_task_reruns_on_another_node(fault_jobs, fault_hook, fault_cluster, tmp_path, fault_row):
    """Run last in this module: the cluster keeps two NodeManagers after it. Tasks of 4 GB on 8 GB nodes next
    to a 512 MB AM: the two never share a node with each other, so one runs away from the AM's node. The node
    goes silent before its processes die (the launcher's crash control), so the AM hears of the task only as
    lost with its node (-100, re-run for free), never as a task that exited 137 on its own."""
    output = output_dir(fault_cluster)
    with fault_row(
        "NodeManager lost mid-job (12 s expiry): task re-run on another node",
        hook=fault_hook,
        outputs=[f"{output}/last_step"],
    ) as row:
        app_id = fault_jobs.submit(
            checkpointed_job(
                tmp_path, "node-lost", 30, output=output, roles={"worker": {"instances": 2, "memory": 4096}}
            ),
            tags=row.tags,
        )
        status = fault_jobs.wait_status(app_id, lambda s: all_registered(s, 2), timeout=120)
        am_node = fault_hook.yarn.app_attempts(app_id)[-1]["nodeId"]
        victim = next(t for t in status["tasks"] if t["node_id"] != am_node)
        wait_for(
            lambda: read_step(tmp_path, f"worker{victim['index']}") >= 3,
            60,
            "training under way",
            cause=fault_jobs.cause(app_id),
        )
        row.injected()
        crashed = mc.control(fault_cluster, f"nodemanagers/{victim['node_id']}/crash")
        assert victim["container_id"] in crashed["result"], crashed
        moved = fault_jobs.wait_status(
            app_id,
            lambda s: any(
                t["index"] == victim["index"] and t["attempt"] == 1 and t["state"] == "REGISTERED" for t in s["tasks"]
            ),
            timeout=120,
        )
        recovered_s = row.recovered()
        again = next(t for t in moved["tasks"] if t["index"] == victim["index"])
        assert again["node_id"] != victim["node_id"]
        am_log = "".join(fault_jobs.container_logs(app_id, "AppMaster.stdout").values())
        ended = re.findall(rf"\({re.escape(victim['container_id'])}\) exited (-?\d+)", am_log)
        assert ended == ["-100"], f"the lost node's container must end -100 (node lost), the AM saw: {ended}"
        final = fault_jobs.wait(app_id, timeout=240)
        assert (final["state"], final["finalStatus"]) == ("FINISHED", "SUCCEEDED"), final["diagnostics"]
        lost = [n for n in fault_hook.yarn.nodes() if n.get("id") == victim["node_id"]]
        print(
            f"crashed {victim['node_id']} ({lost[0].get('state') if lost else '?'}); worker:{victim['index']} "
            f"re-registered on {again['node_id']} {recovered_s:.1f} s after the crash"
        )
        assert fault_hook.hdfs.status(f"{output}/last_step", strict=False), "the declared output is missing"
