"""ingest → profile → distributed TensorFlow train → evaluate → publish, all on YARN through MeLoN.

``profile`` runs one task of the training job for 5 steps under the profiler (NVML on a GPU; without one the
memory model train.py reports) and hands its expected GPU memory to ``train`` through XCom.

Connections: ``yarn_default`` (the RM; its extra carries ``fs_default_fs``) and ``webhdfs_default`` (the
NameNode's HTTP address). Variables (optional): ``melon_hdfs_root`` (default ``<hdfs_home>/melon-demo``:
``/user/<user>`` of the yarn connection's user, ``hooks.melon.hdfs_home``),
``melon_accuracy_threshold`` (default 0.8). ``make demo`` runs it on the embedded mini cluster.

Each run works under ``<root>/runs/<run>/``, named from the run id (``run_slug``): every run has one, whether
triggered from the UI or the REST API (no logical date), from the CLI, by a schedule or by ``dags test``.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Variable, task

from airflow_provider_melon.hadoop.hdfs_io import run_slug
from airflow_provider_melon.hooks.melon import hdfs_home
from airflow_provider_melon.operators.profile import MelonProfileOperator
from airflow_provider_melon.operators.train import MelonTrainOperator

HERE = Path(__file__).resolve().parent
TRAINING = HERE / "training" / "mnist"
# the HDFS home of the user the jobs run as (the yarn connection's), unless the variable says otherwise
ROOT = "{{ var.value.get('melon_hdfs_root', hdfs_home() ~ '/melon-demo') }}"
RUN_DIR = ROOT + "/runs/{{ run_id | run_slug }}"


def _webhdfs():
    """The ``hdfs`` client of the ``webhdfs_default`` connection, as the user the jobs run as (the MelonHook's)."""
    from airflow_provider_melon.hooks.melon import MelonHook

    return MelonHook().hdfs


with DAG(
    dag_id="melon_mnist_pipeline",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["melon", "example"],
    user_defined_filters={"run_slug": run_slug},
    user_defined_macros={"hdfs_home": hdfs_home},
) as dag:
    # [START howto_melon_ingest]
    @task
    def ingest(root: str) -> str:
        """Generate the small dataset and put it into HDFS (a real pipeline would fetch it)."""
        sys.path.insert(0, str(TRAINING))
        from data import ensure_in_hdfs

        return ensure_in_hdfs(_webhdfs(), root)

    # [END howto_melon_ingest]

    dataset = ingest(ROOT)

    # [START howto_melon_train]
    train_job = {
        "name": "mnist-mwms",
        "framework": "tensorflow",
        "code": str(TRAINING),
        # train.py saves into $MELON_OUTPUT_MODEL; MeLoN publishes the chief's copy to outputs.model
        "entrypoint": "python train.py --epochs 4",
        "inputs": [{"path": "{{ ti.xcom_pull(task_ids='ingest') }}", "name": "mnist.npz"}],
        "outputs": {"model": "hdfs://" + RUN_DIR + "/model"},
        "roles": {
            "chief": {"instances": 1, "memory": "2g", "vcores": 1, "gpu_memory": "2GiB"},
            "worker": {"instances": 1, "memory": "2g", "vcores": 1, "gpu_memory": "2GiB"},
        },
    }

    # One chief task for 5 steps; pushes expected_gpu_memory (e.g. "838MiB"), packing_pays and the profile.
    profile = MelonProfileOperator(task_id="profile", job=copy.deepcopy(train_job), steps=5, poll_interval=5)

    train = MelonTrainOperator(
        task_id="train",
        job=train_job,
        gpu_memory="{{ ti.xcom_pull(task_ids='profile', key='expected_gpu_memory') }}",
        poll_interval=5,
    )
    # [END howto_melon_train]

    evaluate = MelonTrainOperator(
        task_id="evaluate",
        job={
            "name": "mnist-evaluate",
            "framework": "generic",
            "code": str(TRAINING),
            "entrypoint": "python evaluate.py",
            "inputs": [
                {"path": "{{ ti.xcom_pull(task_ids='ingest') }}", "name": "mnist.npz"},
                {"path": RUN_DIR + "/model", "name": "model", "visibility": "APPLICATION"},
            ],
            "outputs": {"metrics": "hdfs://" + RUN_DIR + "/metrics.json"},
            "roles": {"worker": {"instances": 1, "memory": "2g", "vcores": 1}},
        },
        poll_interval=5,
    )

    @task
    def publish(run_dir: str, root: str) -> dict:
        """Copy the model to a versioned models/ path only if the accuracy passes the threshold."""
        client = _webhdfs()
        with client.read(f"{run_dir}/metrics.json", encoding="utf-8") as reader:
            metrics = json.load(reader)
        threshold = float(Variable.get("melon_accuracy_threshold", default="0.8"))
        result = {"accuracy": metrics["accuracy"], "threshold": threshold, "published": None}
        if metrics["accuracy"] >= threshold:
            target = f"{root}/models/mnist/{os.path.basename(run_dir)}"
            import tempfile

            local = tempfile.mkdtemp(prefix="publish-")
            client.download(f"{run_dir}/model", local, n_threads=1)
            client.upload(target, os.path.join(local, "model"), n_threads=1, overwrite=True)
            result["published"] = f"hdfs://{target}"
        print(f"MELON_RESULT {json.dumps(result)}")
        return result

    dataset >> profile >> train >> evaluate >> publish(RUN_DIR, ROOT)
