"""PyTorch on YARN through MeLoN: DDP training under torchrun → evaluate → report, on CPU or GPUs.

``train`` runs ``dags/training/ddp/train_ddp.py`` in two worker containers, one torchrun agent each (``launcher:
torchrun``); the c10d rendezvous is on the first worker's address. The model (``model.pt``) is published to HDFS
as the declared output ``model``. ``evaluate`` localizes it (an input) and writes ``metrics.json``, another
declared output; ``report`` reads it and fails the run below ``melon_accuracy_threshold``. The data is made from a
seed in each container (``training/ddp/data.py``): nothing is downloaded.

Connections: ``yarn_default`` and ``webhdfs_default``, as for ``melon_mnist_pipeline``. Variables (optional):
``melon_hdfs_root`` (default ``<hdfs_home>/melon-demo``), ``melon_accuracy_threshold`` (default 0.8).
"""

from __future__ import annotations

import json
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Variable, task

from airflow_provider_melon.hadoop.hdfs_io import run_slug
from airflow_provider_melon.hooks.melon import hdfs_home
from airflow_provider_melon.operators.train import MelonTrainOperator

TRAINING = Path(__file__).resolve().parent / "training" / "ddp"
ROOT = "{{ var.value.get('melon_hdfs_root', hdfs_home() ~ '/melon-demo') }}"
RUN_DIR = ROOT + "/pytorch-runs/{{ run_id | run_slug }}"

with DAG(
    dag_id="melon_pytorch_pipeline",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["melon", "example", "pytorch"],
    user_defined_filters={"run_slug": run_slug},
    user_defined_macros={"hdfs_home": hdfs_home},
) as dag:
    # [START howto_melon_pytorch_train]
    train = MelonTrainOperator(
        task_id="train",
        job={
            "name": "ddp-torchrun",
            "framework": "pytorch",
            "launcher": "torchrun",  # one torchrun agent per container; "python" uses the env:// rendezvous
            "nproc_per_node": 1,  # processes per container: one per GPU with `gpus: N`
            "code": str(TRAINING),
            # each container's LOCAL_RANK 0 saves model.pt to $MELON_OUTPUT_MODEL; MeLoN publishes one copy
            "entrypoint": "python train_ddp.py --epochs 3",
            "outputs": {"model": "hdfs://" + RUN_DIR + "/model"},
            "roles": {"worker": {"instances": 2, "memory": "2g", "vcores": 1}},
        },
        poll_interval=5,
    )
    # [END howto_melon_pytorch_train]

    # [START howto_melon_pytorch_evaluate]
    evaluate = MelonTrainOperator(
        task_id="evaluate",
        job={
            "name": "ddp-evaluate",
            "framework": "pytorch",
            "code": str(TRAINING),
            "entrypoint": "python evaluate.py",
            "inputs": [{"path": RUN_DIR + "/model", "name": "model", "visibility": "APPLICATION"}],
            "outputs": {"metrics": "hdfs://" + RUN_DIR + "/metrics.json"},
            "roles": {"worker": {"instances": 1, "memory": "2g", "vcores": 1}},
        },
        poll_interval=5,
    )
    # [END howto_melon_pytorch_evaluate]

    @task
    def report(run_dir: str) -> dict:
        """The accuracy and where the model is; fails below the threshold."""
        from airflow_provider_melon.hooks.melon import MelonHook

        client = MelonHook().hdfs  # the webhdfs_default connection, as the user the jobs run as
        with client.read(f"{run_dir}/metrics.json", encoding="utf-8") as reader:
            metrics = json.load(reader)
        threshold = float(Variable.get("melon_accuracy_threshold", default="0.8"))
        result = {"accuracy": metrics["accuracy"], "threshold": threshold, "model": f"hdfs://{run_dir}/model"}
        print(f"MELON_RESULT {json.dumps(result)}")
        if metrics["accuracy"] < threshold:
            raise ValueError(f"accuracy {metrics['accuracy']:.3f} is below the threshold {threshold}")
        return result

    train >> evaluate >> report(RUN_DIR)
