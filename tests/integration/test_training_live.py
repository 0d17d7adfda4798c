"""Real training across YARN containers: TensorFlow multi-worker (model saved to HDFS), parameter server, and a
packed Python environment localized as a YARN archive."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRAINING = Path(__file__).resolve().parents[2] / "dags" / "training" / "mnist"


@pytest.fixture(scope="module")
def dataset(minicluster):
    from hdfs import InsecureClient

    sys.path.insert(0, str(TRAINING))
    from data import make_dataset, to_npz_bytes

    client = InsecureClient(minicluster.webhdfs_url.rsplit("/webhdfs/v1", 1)[0], user=minicluster.user)
    path = "/user/root/it-datasets/mnist.npz"
    client.write(path, data=to_npz_bytes(make_dataset(n_train=1000, n_test=200)), overwrite=True)
    return path


def test_tensorflow_multiworker_trains_and_writes_model_to_hdfs(jobs, minicluster, dataset, melon_hook):
    model_dir = f"/user/root/it-models/mwms-{uuid.uuid4().hex[:8]}"
    app_id = jobs.submit(
        {
            "name": "mnist-mwms",
            "framework": "tensorflow",
            "code": str(TRAINING),
            "entrypoint": "python train.py --epochs 2",  # no HDFS code: the model is the job's declared output
            "inputs": [{"path": dataset, "name": "mnist.npz"}],
            "outputs": {"model": model_dir},
            "roles": {
                "chief": {"memory": "1g", "gpu_memory": "2GiB"},
                "worker": {"memory": "1g", "gpu_memory": "2GiB"},
            },
        }
    )
    seen = jobs.wait_status(
        app_id, lambda s: len(s["tasks"]) == 2 and all(t["state"] == "REGISTERED" for t in s["tasks"]), timeout=180
    )
    assert sorted((t["role"], t["index"]) for t in seen["tasks"]) == [("chief", 0), ("worker", 0)]
    app = jobs.wait(app_id, timeout=300)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
    listing = melon_hook.hdfs.list(model_dir)
    assert "saved_model.pb" in listing and "variables" in listing
    chief_out = [t for t in jobs.container_logs(app_id).values() if "replicas in sync: 2" in t]
    assert chief_out, "both tasks should have trained as one 2-replica strategy"


def test_tensorflow_parameter_server_job_succeeds(jobs):
    app_id = jobs.submit(
        {
            "name": "mnist-ps",
            "framework": "tensorflow",
            "code": str(TRAINING),
            "entrypoint": "python train_ps.py --steps 30",
            "roles": {"chief": {"memory": "1g"}, "worker": {"instances": 2, "memory": "1g"}, "ps": {"memory": "1g"}},
        }
    )
    app = jobs.wait(app_id, timeout=300)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
    out = "\n".join(jobs.container_logs(app_id).values())
    assert "STEP_TIME_S" in out and out.count("serving") == 3


def test_packed_virtualenv_archive_is_the_interpreter(jobs, melon_hook, tmp_path):
    """A venv packed with venv-pack, localized as a YARN ARCHIVE, runs the executor and the user's code."""
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    archive = tmp_path / "env.tar.gz"
    subprocess.run(
        [sys.executable, "-m", "airflow_provider_melon.cli", "pack-env", str(archive), "--venv", str(env_dir)],
        check=True,
        capture_output=True,
    )
    hdfs_path = "/user/root/it-envs/env.tar.gz"
    melon_hook.hdfs.upload(hdfs_path, str(archive), overwrite=True)
    app_id = jobs.submit(
        {
            "name": "packed-env",
            "framework": "generic",
            "environment": {"archive": hdfs_path, "python": "env/bin/python"},
            "entrypoint": "python -c \"import sys; print('PREFIX', sys.prefix); import airflow\"",
            "roles": {"worker": {"memory": 256}},
        }
    )
    app = jobs.wait(app_id)
    out = "\n".join(jobs.container_logs(app_id).values())
    err = "\n".join(jobs.container_logs(app_id, "stderr").values())
    prefix = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("PREFIX ")]
    # It ran under the packed env (a folder YARN unpacked for this container), where Airflow is absent.
    assert prefix and prefix[0].endswith("/env") and str(env_dir) not in prefix[0], out
    assert "No module named 'airflow'" in err
    assert app["finalStatus"] == "FAILED"


def test_pytorch_ddp_gloo_two_workers(jobs):
    """DDP over gloo between two YARN containers, the env:// rendezvous (MASTER_ADDR/PORT, RANK, WORLD_SIZE)."""
    app_id = jobs.submit(
        {
            "name": "ddp",
            "framework": "pytorch",
            "code": str(TRAINING.parent / "ddp"),
            "entrypoint": "python train_ddp.py",
            "roles": {"worker": {"instances": 2, "memory": "1g"}},
        }
    )
    app = jobs.wait(app_id, timeout=300)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
    out = "\n".join(jobs.container_logs(app_id).values())
    assert out.count("replicas_identical=True") == 2 and "rank 0/2" in out and "rank 1/2" in out


def test_pytorch_torchrun_two_containers(jobs):
    """``launcher: torchrun``: one torchrun agent per container, joined by the c10d rendezvous on the first member's
    registered address and reserved port; torchrun gives each process its RANK and WORLD_SIZE."""
    app_id = jobs.submit(
        {
            "name": "ddp-torchrun",
            "framework": "pytorch",
            "launcher": "torchrun",
            "code": str(TRAINING.parent / "ddp"),
            "entrypoint": "python train_ddp.py --epochs 2",
            "roles": {"worker": {"instances": 2, "memory": "2g"}},
        }
    )
    app = jobs.wait(app_id, timeout=300)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
    logs = jobs.container_logs(app_id)
    out = "\n".join(logs.values())
    ranks = sorted(line.split("[ddp] ", 1)[1] for line in out.splitlines() if "[ddp] RANK=" in line)
    assert ranks == ["RANK=0 WORLD_SIZE=2 LOCAL_RANK=0", "RANK=1 WORLD_SIZE=2 LOCAL_RANK=0"], out
    assert out.count("replicas_identical=True") == 2
    # each worker container ran one agent, in the same rendezvous (this application's id, the same endpoint)
    started = [
        line
        for text in jobs.container_logs(app_id, "stderr").values()
        for line in text.splitlines()
        if "[melon-executor] starting [" in line
    ]
    assert len(started) == 2 and all("'torch.distributed.run'" in line for line in started), started
    assert all(f"'--rdzv-id={app_id}'" in line and "'--nnodes=2'" in line for line in started), started
    endpoints = {arg for line in started for arg in line.split(", ") if arg.startswith("'--rdzv-endpoint=")}
    assert len(endpoints) == 1, started
    assert sorted("'--rdzv-conf=is_host=1'" in line for line in started) == [False, True], started


def test_operator_result_has_every_tasks_last_report(jobs, melon_hook, dataset):
    """A job written as a user would (Keras ``model.fit`` with the runtime's ``keras_callback()``, 4
    epochs, a chief and 2 workers, MWMS) through the operator. Its final result must hold what each task reported
    last, 4 of 4 with the epoch's metrics, read after the application ended, not the operator's last poll (which
    said chief ``step: null``, worker ``step: 2``, ``metrics: {}``)."""
    from unittest import mock

    from airflow_provider_melon.operators.train import MelonTrainOperator

    model_dir = f"/user/root/it-models/progress-{uuid.uuid4().hex[:8]}"
    role = {"memory": "1g", "gpu_memory": "2GiB"}
    # polls 30 s apart: the last one that sees the job running is (almost always) before its last epochs, so only
    # a result read after the end can hold them
    op = MelonTrainOperator(
        task_id="train",
        deferrable=False,
        poll_interval=30,
        job={
            "name": "mnist-progress",
            "framework": "tensorflow",
            "code": str(TRAINING),
            "entrypoint": "python train.py --epochs 4",
            "inputs": [{"path": dataset, "name": "mnist.npz"}],
            "outputs": {"model": model_dir},
            "roles": {"chief": role, "worker": {**role, "instances": 2}},
        },
    )
    op.__dict__["hook"] = melon_hook  # the session's cluster, no Airflow connection
    ti = mock.Mock(dag_id="progress_live", task_id="train", run_id="manual__progress_live", map_index=-1)
    result = op.execute({"ti": ti, "run_id": f"manual__progress_live_{uuid.uuid4().hex[:6]}"})
    jobs.submitted.append(result["app_id"])
    assert result["final_status"] == "SUCCEEDED"
    assert result["task_source"] == "am-final", result
    progress = result["progress"]
    assert sorted(progress) == ["chief:0", "worker:0", "worker:1"], progress
    for task, last in progress.items():
        assert last["state"] == "SUCCEEDED", (task, progress)  # the workers end with the chief, not killed
        assert (last["step"], last["total"]) == (4, 4), (task, progress)
        assert last["loss"] is not None and "accuracy" in last["metrics"], (task, progress)
    for name, instances in (("chief", 1), ("worker", 2)):
        summary = result["tasks"][name]
        assert summary["instances"] == instances and summary["states"] == {"SUCCEEDED": instances}, result["tasks"]
        assert (summary["step"], summary["total"]) == (4, 4) and "accuracy" in summary["metrics"], result["tasks"]
