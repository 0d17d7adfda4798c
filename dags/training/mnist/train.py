"""Distributed Keras training under MultiWorkerMirroredStrategy, run by MeLoN in YARN containers.

The executor sets TF_CONFIG (chief + workers), CUDA_VISIBLE_DEVICES and the GPU memory cap before this runs.
Known on TF 2.21 / Keras 3: `model.fit` under MultiWorkerMirroredStrategy fails ("unsupported type PerReplica
to a Tensor"), so this script uses tf-keras (Keras 2) with TF_USE_LEGACY_KERAS=1, set below before TF loads.

Data: an .npz with x_train/y_train/x_test/y_test, localized by YARN from HDFS (the job's `inputs`).
Output: every task saves the SavedModel into $MELON_OUTPUT_MODEL (a local folder; the job's `outputs.model`);
MeLoN publishes the chief's to HDFS once it succeeds. No HDFS code here.
Progress: `airflow_provider_melon.runtime.keras_callback` reports each epoch (of the total) and its metrics; the AM
turns it into the application's progress in YARN and Airflow.
Profiling: with MELON_PROFILE_STEPS set (MelonProfileOperator / ``python -m airflow_provider_melon.gpu.profiler``)
it trains that many steps, saves nothing to HDFS, and reports its memory model and step time to the profiler
(``profiler.report``), which is what the profile is estimated from where there is no GPU to measure.
"""

import argparse
import json
import os

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


def progress_callbacks() -> list:
    """MeLoN's progress callback (the runtime is on the containers' path); none when run elsewhere."""
    try:
        from airflow_provider_melon.runtime import keras_callback
    except ImportError:
        return []
    return [keras_callback()]


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
        print(
            f"[train] profile: {memory_model.total_mb(batch_size):.1f} MiB at batch {batch_size} (memory model), "
            f"step {timer.step_time_s}",
            flush=True,
        )


def build_model(num_classes: int, input_dim: int) -> keras.Model:
    model = keras.Sequential(
        [
            keras.layers.Input(shape=(input_dim,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(num_classes),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="mnist.npz")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--model-dir",
        default=os.environ.get("MELON_OUTPUT_MODEL"),
        help="local folder for the SavedModel (default $MELON_OUTPUT_MODEL)",
    )
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
    model.fit(
        dataset,
        epochs=1 if steps else args.epochs,
        steps_per_epoch=steps_per_epoch,
        verbose=2,
        callbacks=progress_callbacks() + [timer],
    )
    if steps:
        report_profile(model, args.batch_size, timer)

    # Every worker must take part in saving (collective ops); MeLoN publishes the chief's folder only.
    if not steps and args.model_dir:
        model.save(args.model_dir)
        print(
            f"[train] model saved to {args.model_dir}" + (" (published by MeLoN)" if is_chief(tf_config) else ""),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
