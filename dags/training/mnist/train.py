"""Distributed Keras training under MultiWorkerMirroredStrategy, run by MeLoN in YARN containers.

The executor sets TF_CONFIG (chief + workers), CUDA_VISIBLE_DEVICES and the GPU memory cap before this runs.
Known on TF 2.21 / Keras 3: `model.fit` under MultiWorkerMirroredStrategy fails ("unsupported type PerReplica
to a Tensor"), so this script uses tf-keras (Keras 2) with TF_USE_LEGACY_KERAS=1, set below before TF loads.

Data: an .npz with x_train/y_train/x_test/y_test, localized by YARN from HDFS (the job's `inputs`).
Output: the chief saves a SavedModel and uploads it to HDFS through WebHDFS (`--webhdfs`, `--model-dir`).
Progress: each epoch's loss goes to $MELON_PROGRESS_FILE, which the executor heartbeats to the AM.
Profiling: with MELON_PROFILE_STEPS set (MelonProfileOperator / ``python -m airflow_provider_melon.gpu.profiler``)
it trains that many steps, saves nothing to HDFS, and reports its memory model and step time to the profiler
(``profiler.report``), which is what the profile is estimated from where there is no GPU to measure.
"""

import argparse
import json
import os
import tempfile

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import time  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402


def is_chief(tf_config: dict) -> bool:
    task = tf_config.get("task", {})
    has_chief = "chief" in tf_config.get("cluster", {})
    return task.get("type") == "chief" or (not has_chief and task.get("type") == "worker" and task.get("index") == 0)


class Progress(keras.callbacks.Callback):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        if self.path:
            with open(self.path, "w") as fh:
                json.dump({"step": epoch + 1, "loss": float((logs or {}).get("loss", 0.0))}, fh)


class StepTimer(keras.callbacks.Callback):
    """Seconds per training step, the first (tracing, warm-up) left out when there are more."""

    def __init__(self):
        super().__init__()
        self.times, self._t = [], None

    def on_train_batch_begin(self, batch, logs=None):
        self._t = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self._t is not None:
            self.times.append(time.perf_counter() - self._t)

    @property
    def step_time_s(self):
        times = self.times[1:] or self.times
        return sorted(times)[len(times) // 2] if times else None


def report_profile(model, batch_size: int, timer: StepTimer) -> None:
    """Tell MeLoN's profiler the model (its no-GPU estimate) and the step time; a no-op outside a profile run."""
    try:
        from airflow_provider_melon.gpu import profiler
        from airflow_provider_melon.gpu.memory_model import from_keras_model
    except ImportError:  # not run by MeLoN
        return
    memory_model = from_keras_model(model)
    if profiler.report(memory_model=memory_model, batch=batch_size, step_time_s=timer.step_time_s):
        print(f"[train] profile: {memory_model.total_mb(batch_size):.1f} MiB at batch {batch_size} (memory model), "
              f"step {timer.step_time_s}", flush=True)


def build_model(num_classes: int, input_dim: int) -> keras.Model:
    model = keras.Sequential([
        keras.layers.Input(shape=(input_dim,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(num_classes),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def upload(webhdfs: str, user: str, local_dir: str, hdfs_dir: str) -> None:
    from hdfs import InsecureClient

    client = InsecureClient(webhdfs, user=user)
    client.upload(hdfs_dir, local_dir, n_threads=1, overwrite=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="mnist.npz")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--model-dir", required=True, help="HDFS path for the SavedModel, e.g. /models/mnist/run1")
    parser.add_argument("--webhdfs", required=True, help="WebHDFS base URL, e.g. http://namenode:9870")
    parser.add_argument("--user", default=os.environ.get("USER", "root"))
    args = parser.parse_args()

    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print(f"[train] replicas in sync: {strategy.num_replicas_in_sync}; task: {tf_config.get('task')}", flush=True)

    steps = int(os.environ.get("MELON_PROFILE_STEPS", "0"))  # the profiler runs a bounded number of steps
    with np.load(args.data) as data:
        x, y = data["x_train"].reshape(len(data["x_train"]), -1).astype("float32"), data["y_train"]
    num_classes = int(y.max()) + 1
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=1).repeat().batch(global_batch)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.with_options(options)
    steps_per_epoch = steps or max(1, len(x) // global_batch)

    with strategy.scope():
        model = build_model(num_classes, x.shape[1])
    timer = StepTimer()
    model.fit(dataset, epochs=1 if steps else args.epochs, steps_per_epoch=steps_per_epoch, verbose=2,
              callbacks=[Progress(os.environ.get("MELON_PROGRESS_FILE")), timer])
    if steps:
        report_profile(model, args.batch_size, timer)

    # Every worker must take part in saving (collective ops); only the chief's copy is kept.
    chief = is_chief(tf_config)
    local_dir = tempfile.mkdtemp(prefix="model-")
    model.save(os.path.join(local_dir, "saved_model"))
    if chief and not steps:
        upload(args.webhdfs, args.user, os.path.join(local_dir, "saved_model"), args.model_dir)
        print(f"[train] model uploaded to hdfs://{args.model_dir}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
