"""Elastic roles (``min_instances``) on the fault suite's mini clusters: a member lost below the minimum fails the job
after the grace with a diagnostic naming the lost members; a member lost above it (its container SIGKILLed, or its
node lost) is replaced while the others go on, and the replacement joins the running group (PyTorch DDP under
torchrun, CPU, gloo)."""

from __future__ import annotations

import re

import pytest

from airflow_provider_melon.dev import minicluster as mc
from tests.conftest import Jobs, running_cluster
from tests.waits import wait_for

from .conftest import app_containers_prefix, container_group, sigkill_group
from .test_yarn_faults import checkpointed_job, read_step

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def registered(status: dict) -> set[int]:
    return {t["index"] for t in status.get("tasks") or [] if t["state"] == "REGISTERED"}


def test_elastic_role_below_its_minimum_past_the_grace_fails_naming_the_lost_members(
    fault_jobs, fault_hook, tmp_path, fault_row
):
    """Three workers, at least two, no restarts: the first SIGKILL leaves two (the job goes on, nothing replaced), the
    second leaves one: after the 5 s grace the job fails, naming both lost workers and how they ended."""
    with fault_row(
        "elastic worker SIGKILLed twice (3 workers, min 2, no restarts): FAILED naming the lost",
        hook=fault_hook,
        end=("FINISHED", "FAILED"),
    ) as row:
        app_id = fault_jobs.submit(
            checkpointed_job(
                tmp_path,
                "elastic-below-min",
                120,
                elastic_grace_s=5,
                roles={"worker": {"instances": 3, "min_instances": 2, "memory": 256}},
            ),
            tags=row.tags,
        )
        fault_jobs.wait_status(app_id, lambda s: registered(s) == {0, 1, 2}, timeout=120)
        wait_for(lambda: read_step(tmp_path, "worker2") >= 2, 60, "worker:2 at step 2", cause=fault_jobs.cause(app_id))
        prefix = app_containers_prefix(app_id)
        row.injected()
        sigkill_group(container_group(prefix, MELON_ROLE="worker", MELON_INDEX="2"))
        # one lost: two left, the minimum: the others go on and the app keeps running past the grace
        wait_for(
            lambda: registered(fault_jobs.status(app_id) or {}) == {0, 1},
            60,
            "worker:2 gone, 0 and 1 left",
            cause=fault_jobs.cause(app_id),
        )
        at = read_step(tmp_path, "worker1")
        wait_for(
            lambda: read_step(tmp_path, "worker1") >= at + 7,
            60,
            "worker:1 training on past the 5 s grace",
            cause=fault_jobs.cause(app_id),
        )
        assert fault_jobs.app(app_id)["state"] == "RUNNING"
        sigkill_group(container_group(prefix, MELON_ROLE="worker", MELON_INDEX="1"))
        final = fault_jobs.wait(app_id, timeout=120)
        row.recovered()  # handled as designed: the job failed, naming the lost members
        assert (final["state"], final["finalStatus"]) == ("FINISHED", "FAILED"), final
        diag = final["diagnostics"]
        assert (
            "elastic role worker below its minimum of 2 for more than 5.0 s (elastic_grace_s): 1 of 3 live" in diag
        ), diag
        lost = diag.split("; lost: ", 1)[1]
        assert "worker:1 (" in lost and "worker:2 (" in lost and lost.count("exited 137 (killed by SIGKILL)") == 2, diag
        am_log = "".join(fault_jobs.container_logs(app_id, "AppMaster.stdout").values())
        assert "not replaced: role worker's restarts (0) are used up" in am_log, am_log[-3000:]


# Elastic DDP (gloo, CPU) under torchrun: a linear regression whose rank 0 checkpoints every step to a folder the
# mini cluster's containers share (this host's disk) and which every (re)started group resumes from. Each step's
# mean loss over the group is printed with the group's size.
ELASTIC_DDP = """\
import os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

ckpt_dir, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.02)
path = os.path.join(ckpt_dir, "ckpt.pt")
start = 0
if os.path.exists(path):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
ddp = DDP(model)
print(f"rank {rank} of {world}: " + (f"resumed from step {start}" if start else "fresh start"), flush=True)
w_true = torch.randn(16, 1, generator=torch.Generator().manual_seed(1234))
for step in range(start + 1, steps + 1):
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(step * 1000 + rank))
    loss = torch.nn.functional.mse_loss(ddp(x), x @ w_true)
    opt.zero_grad()
    loss.backward()
    opt.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    if rank == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path + ".tmp")
        os.replace(path + ".tmp", path)
        with open(os.path.join(ckpt_dir, "step.tmp"), "w") as f:
            f.write(str(step))
        os.replace(os.path.join(ckpt_dir, "step.tmp"), os.path.join(ckpt_dir, "step"))
        print(f"step {step} world {world} loss {mean.item() / world:.6f}", flush=True)
    time.sleep(pause)
dist.destroy_process_group()
"""
STEP_LINE = re.compile(r"^step (\d+) world (\d+) loss ([0-9.]+)$", re.M)


def elastic_ddp_job(tmp_path, name: str, steps: int, **roles) -> dict:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(ELASTIC_DDP)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    return {
        "name": name,
        "framework": "pytorch",
        "launcher": "torchrun",
        "code": str(code),
        "entrypoint": f"python train.py {ckpt} {steps} 0.3",
        "elastic_grace_s": 30,
        "roles": roles,
    }


def ddp_step(tmp_path) -> int:
    try:
        return int((tmp_path / "ckpt" / "step").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def test_elastic_ddp_task_0_sigkilled_costs_one_restart_a_replacement_joins_and_training_resumes(
    fault_jobs, fault_hook, tmp_path, fault_row
):
    """Three torchrun agents, at least two, two restarts; the rendezvous store is served beside the AM. Task 0's
    container is SIGKILLed mid-training (its worker dies with its agent): it is no special member. The AM records the
    loss and asks for a replacement (one restart, 1/2); the two agents left re-form and resume from rank 0's
    checkpoint, their containers untouched; the replacement's agent joins the running group, which re-forms at three;
    the job SUCCEEDS with the loss still falling."""
    with fault_row(
        "elastic DDP task 0 SIGKILLed (torchrun, 3 workers, min 2, store beside the AM): one restart, a replacement "
        "joins, resumes",
        hook=fault_hook,
    ) as row:
        app_id = fault_jobs.submit(
            elastic_ddp_job(
                tmp_path,
                "elastic-ddp-kill",
                120,
                worker={"instances": 3, "min_instances": 2, "restarts": 2, "memory": 1536},
            ),
            tags=row.tags,
        )
        status = fault_jobs.wait_status(app_id, lambda s: registered(s) == {0, 1, 2}, timeout=180)
        assert status["rendezvous"]["host"] == "am" and status["rendezvous"]["alive"], status["rendezvous"]
        wait_for(lambda: ddp_step(tmp_path) >= 10, 120, "training at step 10", cause=fault_jobs.cause(app_id))
        containers = {t["index"]: t["container_id"] for t in status["tasks"]}
        logs = fault_jobs.container_logs(app_id)
        rank0 = {
            i
            for i, c in containers.items()
            if "rank 0 of 3" in next((text for cid, text in logs.items() if cid.endswith(c.split("_", 2)[-1])), "")
        }
        assert len(rank0) == 1, (containers, rank0)
        first_rank0 = rank0.pop()
        victim = 0
        row.injected()
        sigkill_group(container_group(app_containers_prefix(app_id), MELON_ROLE="worker", MELON_INDEX=str(victim)))
        killed_at = ddp_step(tmp_path)
        # the AM's decisions, as the task log shows them ("[melon-am] worker:2 lost from elastic role worker ...")
        status = fault_jobs.wait_status(
            app_id,
            lambda s: any(
                e["task"] == f"worker:{victim}" and e["text"].startswith("joined elastic role worker (attempt 1)")
                for e in s.get("events") or []
            ),
            timeout=120,
        )
        texts = [e["text"] for e in status["events"] if e["task"] == f"worker:{victim}"]
        lost = next(t for t in texts if t.startswith("lost from elastic role worker ("))
        left = ", ".join(f"worker:{i}" for i in sorted({0, 1, 2} - {victim}))
        assert "exited 137 (killed by SIGKILL)" in lost and f"2 of 3 live (min 2): {left}" in lost, lost
        assert "asking for a replacement (restart 1/2" in lost, lost
        joined = next(t for t in texts if t.startswith("joined elastic role worker (attempt 1)"))
        assert "3 of 3 live (min 2): worker:0, worker:1, worker:2" in joined, joined
        replacement = next(t for t in status["tasks"] if t["index"] == victim)
        assert replacement["container_id"] != containers[victim], replacement
        try:
            final = fault_jobs.wait(app_id, timeout=300)
        except AssertionError as exc:  # what each agent and worker was doing: their logs' ends
            tails = {
                f"{c} {name}": text[-1500:]
                for name in ("stdout", "stderr")
                for c, text in fault_jobs.container_logs(app_id, name).items()
            }
            raise AssertionError(f"{exc}\n" + "\n".join(f"--- {k}\n{v}" for k, v in sorted(tails.items()))) from None
        logs = fault_jobs.container_logs(app_id)
        text = "".join(logs.values())
        assert (final["state"], final["finalStatus"]) == ("FINISHED", "SUCCEEDED"), (final["diagnostics"], text[-3000:])
        row.recovered()
        # one loss, one restart: the others' containers ran to the end (their attempt 0), nobody else was restarted
        am_log = "".join(fault_jobs.container_logs(app_id, "AppMaster.stdout").values())
        assert am_log.count("restarting task worker:") == 1, am_log[-4000:]
        assert [t["attempt"] for t in sorted(status["tasks"], key=lambda t: t["index"])] == [1, 0, 0], status["tasks"]
        # the replacement's own worker trained in the group of three, from the checkpoint
        mine = next(t for c, t in logs.items() if c.endswith(replacement["container_id"].split("_", 2)[-1]))
        resumed = [(int(w), int(s)) for w, s in re.findall(r"rank \d+ of (\d+): resumed from step (\d+)", mine)]
        assert resumed and resumed[0][0] == 3 and resumed[0][1] >= killed_at - 2, (killed_at, resumed)
        steps = sorted({int(s): (int(w), float(l)) for s, w, l in STEP_LINE.findall(text)}.items())
        worlds = [w for _, (w, _) in steps]
        assert worlds[0] == 3 and worlds[-1] == 3 and steps[-1][0] == 120, steps  # back at three, to the end
        # the survivors' first re-formed group resumed where the checkpoint was
        again = [int(s) for s in re.findall(r"rank \d+ of [23]: resumed from step (\d+)", text)]
        assert min(again) >= killed_at - 2 and max(again) <= steps[-1][0], (killed_at, again)
        # the loss keeps falling across the loss and the join: the last steps, those before the kill, the first
        before = [l for s, (_, l) in steps if s <= killed_at][-5:]
        after = [l for _, (_, l) in steps][-5:]
        first = [l for _, (_, l) in steps][:5]
        assert sum(after) / 5 < sum(before) / 5 < sum(first) / 5, steps
        shrunk = sorted({s for s, (w, _) in steps if w == 2})
        print(
            f"killed worker:{victim} (node rank 0's agent: {victim == first_rank0}) at step {killed_at}; "
            f"steps at 2 workers: {shrunk[:1] + shrunk[-1:]}; replacement resumed at {resumed[0][1]} with 3; "
            f"loss {first[0]:.3f} -> {before[-1]:.3f} (kill) -> {after[-1]:.3f} (3 workers, step 120)"
        )


@pytest.fixture(scope="module")
def node_loss_cluster():
    """A cluster of its own for losing a node: a crashed NodeManager stays lost, and the package's cluster keeps its
    three for the other node-loss test. Four NodeManagers: three 4.5 GB workers on 8 GB nodes never share one, so one
    node is free for the replacement."""
    yield from running_cluster(
        "MELON_ELASTIC_NODE_CLUSTER_DIR",
        "melon-elastic-node-",
        "MELON_FAULT_PORT_BASE",
        port_offset=100,
        nodemanagers=4,
        nm_expiry_ms=12_000,
        timeout=300,
    )


def test_elastic_ddp_node_lost_the_others_go_on_and_a_replacement_joins_from_another_node(
    node_loss_cluster, tmp_path, tmp_path_factory, fault_row
):
    """A worker's NodeManager crashes mid-training (its containers die; the RM finds the node LOST after 12 s). The
    two agents left re-form at once and train on at two; the AM learns of the loss with the node (-100, not counted
    against ``restarts: 0``) and asks for a replacement on another node, whose agent joins the running group: the
    group re-forms at three, resumes from the checkpoint and finishes; the job SUCCEEDS."""
    from airflow_provider_melon.cli import melon_hook_for_cluster

    hook = melon_hook_for_cluster(node_loss_cluster.work_dir)
    jobs = Jobs(hook, node_loss_cluster, tmp_path_factory)
    with fault_row(
        "elastic DDP worker's node lost (torchrun, 3 workers, min 2): a replacement joins from another node", hook=hook
    ) as row:
        try:
            app_id = jobs.submit(
                elastic_ddp_job(
                    tmp_path,
                    "elastic-ddp-node",
                    200,
                    worker={"instances": 3, "min_instances": 2, "restarts": 0, "memory": 4608},
                ),
                tags=row.tags,
            )
            status = jobs.wait_status(app_id, lambda s: registered(s) == {0, 1, 2}, timeout=180)
            wait_for(lambda: ddp_step(tmp_path) >= 10, 120, "training at step 10", cause=jobs.cause(app_id))
            am_node = hook.yarn.app_attempts(app_id)[-1]["nodeId"]
            victim = next(t for t in status["tasks"] if t["index"] != 0 and t["node_id"] != am_node)
            row.injected()
            crashed = mc.control(node_loss_cluster, f"nodemanagers/{victim['node_id']}/crash")
            killed_at = ddp_step(tmp_path)
            assert victim["container_id"] in crashed["result"], crashed
            name = f"worker:{victim['index']}"
            status = jobs.wait_status(
                app_id,
                lambda s: any(
                    e["task"] == name and e["text"].startswith("joined elastic role worker (attempt 1)")
                    for e in s.get("events") or []
                ),
                timeout=180,
            )
            lost = next(
                e["text"]
                for e in status["events"]
                if e["task"] == name and e["text"].startswith("lost from elastic role worker (")
            )
            assert "asking for a replacement (not its fault: not counted against restarts)" in lost, lost
            replacement = next(t for t in status["tasks"] if t["index"] == victim["index"])
            assert replacement["node_id"] != victim["node_id"], (replacement, victim)
            final = jobs.wait(app_id, timeout=300)
            logs = jobs.container_logs(app_id)
            text = "".join(logs.values())
            assert (final["state"], final["finalStatus"]) == ("FINISHED", "SUCCEEDED"), (
                final["diagnostics"],
                text[-3000:],
            )
            row.recovered()
        finally:
            jobs.kill_all()
        steps = sorted({int(s): (int(w), float(l)) for s, w, l in STEP_LINE.findall(text)}.items())
        worlds = [w for _, (w, _) in steps]
        # three, then two while the replacement is on its way (the RM needs 12 s to find the node lost), then three
        assert worlds[0] == 3 and 2 in worlds and worlds[-1] == 3 and steps[-1][0] == 200, steps
        at_two = [s for s, (w, _) in steps if w == 2]
        mine = next(t for c, t in logs.items() if c.endswith(replacement["container_id"].split("_", 2)[-1]))
        resumed = [(int(w), int(s)) for w, s in re.findall(r"rank \d+ of (\d+): resumed from step (\d+)", mine)]
        assert resumed and resumed[0][0] == 3 and resumed[0][1] >= at_two[-1] - 1, (at_two, resumed)
        before = [l for s, (_, l) in steps if s <= killed_at][-5:]
        first, after = [l for _, (_, l) in steps][:5], [l for _, (_, l) in steps][-5:]
        assert sum(after) / 5 < sum(before) / 5 < sum(first) / 5, steps
        print(
            f"crashed {victim['node_id']} at step {killed_at}; steps {at_two[0]}-{at_two[-1]} at 2 workers; "
            f"{name} replaced on {replacement['node_id']}, resumed at {resumed[0][1]} with 3; loss "
            f"{first[0]:.3f} -> {before[-1]:.3f} (crash) -> {after[-1]:.3f} (3 workers, step 200)"
        )


# TensorFlow MultiWorkerMirroredStrategy (tf-keras, CPU) with BackupAndRestore: a linear regression trained for
# `epochs` epochs of 8 steps, `pause` s after each; the backup every epoch on a folder every container reaches (this
# host's disk). Worker 0 writes the epoch it finished; every process prints the first epoch it trains (0: fresh,
# else resumed from the backup) and how the run ended.
TF_MWMS = """\
import json, os, sys, time
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import tf_keras as keras
from airflow_provider_melon.runtime import keras_callback

work, epochs, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
task = json.loads(os.environ["TF_CONFIG"])["task"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(8,))])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = x @ rng.normal(size=(8, 1)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)


class Mark(keras.callbacks.Callback):
    first = None

    def on_epoch_begin(self, epoch, logs=None):
        if Mark.first is None:
            Mark.first = epoch
            print(f"{task['type']}:{task['index']} first epoch {epoch}", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        if task["index"] == 0:
            with open(os.path.join(work, "epoch.tmp"), "w") as f:
                f.write(str(epoch + 1))
            os.replace(os.path.join(work, "epoch.tmp"), os.path.join(work, "epoch"))
        print(f"epoch {epoch + 1} loss {logs['loss']:.6f}", flush=True)
        time.sleep(pause)


backup = keras.callbacks.BackupAndRestore(os.path.join(work, "backup"))
model.fit(data, epochs=epochs, steps_per_epoch=8, verbose=0, callbacks=[backup, Mark(), keras_callback()])
print(f"{task['type']}:{task['index']} done", flush=True)
"""


def tf_epoch(tmp_path) -> int:
    try:
        return int((tmp_path / "tf" / "epoch").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def test_tf_mwms_worker_sigkilled_the_gang_restarts_whole_and_resumes_from_the_backup(
    fault_jobs, fault_hook, tmp_path, fault_row
):
    """Two MWMS workers (no ps), one restart: worker 1's container is SIGKILLed mid-training. The AM stops worker 0
    at once and asks for both again (one restart of the role, not one per task); both register anew, get a
    TF_CONFIG with the live addresses only, restore the last backup and train to the end: the job SUCCEEDS by itself.
    (Before the gang restart, worker 0's aborted collectives spent a second restart, and a replacement that
    registered before worker 0 failed was given its old address and waited for it for ever.)"""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TF_MWMS)
    (tmp_path / "tf").mkdir()
    epochs = 16
    with fault_row(
        "TF MWMS worker SIGKILLed (2 workers, no ps): the gang restarts whole, resumes", hook=fault_hook
    ) as row:
        app_id = fault_jobs.submit(
            {
                "name": "tf-mwms-kill",
                "framework": "tensorflow",
                "code": str(code),
                "entrypoint": f"python train.py {tmp_path / 'tf'} {epochs} 0.3",
                "roles": {"worker": {"instances": 2, "restarts": 1, "memory": 1536}},
            },
            tags=row.tags,
        )
        fault_jobs.wait_status(app_id, lambda s: registered(s) == {0, 1}, timeout=180)
        wait_for(lambda: tf_epoch(tmp_path) >= 4, 180, "training at epoch 4", cause=fault_jobs.cause(app_id))
        row.injected()
        sigkill_group(container_group(app_containers_prefix(app_id), MELON_ROLE="worker", MELON_INDEX="1"))
        killed_at = tf_epoch(tmp_path)
        final = fault_jobs.wait(app_id, timeout=420)
        status = fault_jobs.status(app_id) or {}
        logs = fault_jobs.container_logs(app_id)
        text = "".join(logs.values())
        assert (final["state"], final["finalStatus"]) == ("FINISHED", "SUCCEEDED"), (final["diagnostics"], text[-3000:])
        row.recovered()
        # one loss, one restart: worker 1's (its role's 1/1), worker 0 stopped and started with it, uncounted
        am_log = "".join(fault_jobs.container_logs(app_id, "AppMaster.stdout").values())
        assert "restarting task worker:1: exited 137 (killed by SIGKILL), restart 1/1 of role worker" in am_log, am_log[
            -4000:
        ]
        assert "restarting task worker:0: restarted with its gang: worker:1 was lost" in am_log, am_log[-4000:]
        assert am_log.count("restarting task worker:") == 2, am_log[-4000:]
        # both new processes resumed from the backup, not from the start, and trained to the last epoch
        firsts = [int(e) for e in re.findall(r"worker:\d first epoch (\d+)", text)]
        assert sorted(firsts)[:2] == [0, 0] and len(firsts) == 4, firsts
        resumed = sorted(firsts)[2:]
        assert all(killed_at - 2 <= e <= killed_at + 1 for e in resumed), (killed_at, firsts)
        assert text.count("worker:0 done") == 1 and text.count("worker:1 done") == 1, text[-3000:]
        assert f"epoch {epochs} loss" in text
        print(
            f"killed worker:1 at epoch {killed_at}; both resumed at epoch {resumed}; status stall {status.get('stall')}"
        )


# Reports a step every 0.2 s; its first attempt then hangs at step 10 (a peer alive but stuck, a loader deadlock).
HANGS_ONCE = """\
import os, time
from airflow_provider_melon.runtime import report
for step in range(1, 21):
    report(step=step, total=20)
    time.sleep(0.2)
    if step == 10 and os.environ["MELON_TASK_ATTEMPT"] == "0":
        print("stuck at step 10", flush=True)
        time.sleep(3600)
print("done", flush=True)
"""


def test_a_job_that_stops_reporting_steps_is_restarted_whole_by_the_stall_watchdog_and_ends(
    fault_jobs, fault_hook, tmp_path, fault_row
):
    """Two workers report steps, then hang (alive, no exit): after stall_timeout_s (4 s) without a new step the AM
    stops both and starts them again (one restart of the role); the second attempt finishes: SUCCEEDED, with the
    stall in the AM's log and its longest stretch without a step in /status."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "hang.py").write_text(HANGS_ONCE)
    with fault_row("job alive but reporting no step (stall watchdog): restarted whole, ends", hook=fault_hook) as row:
        app_id = fault_jobs.submit(
            {
                "name": "stall",
                "framework": "generic",
                "code": str(code),
                "entrypoint": "python hang.py",
                "stall_timeout_s": 4,
                "roles": {"worker": {"instances": 2, "restarts": 1, "memory": 256}},
            },
            tags=row.tags,
        )
        fault_jobs.wait_status(app_id, lambda s: {t["step"] for t in s["tasks"]} == {10}, timeout=120)
        row.injected()
        final = fault_jobs.wait(app_id, timeout=120)
        assert (final["state"], final["finalStatus"]) == ("FINISHED", "SUCCEEDED"), final["diagnostics"]
        row.recovered()
        am_log = "".join(fault_jobs.container_logs(app_id, "AppMaster.stdout").values())
        stalled = re.findall(
            r"restarting task (worker:\d): stalled: no task reported a new step for ([\d.]+) s \(stall_timeout_s 4.0 "
            r"s, or 5 x the longest stretch between steps, ([\d.]+) s\)",
            am_log,
        )
        assert sorted(w for w, _, _ in stalled) == ["worker:0", "worker:1"], am_log[-3000:]
        # past the threshold (the timeout, or 5 x the slowest step: a start), by at most a tick and a heartbeat
        assert all(4 < float(idle) <= max(4, 5 * float(gap)) + 2 for _, idle, gap in stalled), stalled
        assert "restarting the gang (restart 1/1 of role worker)" in am_log, am_log[-3000:]
        logs = "".join(fault_jobs.container_logs(app_id).values())
        assert logs.count("stuck at step 10") == 2 and logs.count("done") == 2, logs[-2000:]
