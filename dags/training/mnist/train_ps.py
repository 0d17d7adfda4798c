"""Parameter-server training (TF2 ParameterServerStrategy + ClusterCoordinator, custom loop).

Roles: chief (the coordinator, runs this loop), worker × N and ps × M (in-process gRPC servers that serve until
the AM stops them once the chief succeeds). TF_CONFIG comes from the MeLoN executor. Each step's time and loss
are written to $MELON_PROGRESS_FILE; the chief prints `STEP_TIME_S <mean>` for the planner's checks.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def serve(resolver) -> None:
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id, protocol="grpc", start=True
    )
    print(f"[ps-train] {resolver.task_type}:{resolver.task_id} serving", flush=True)
    server.join()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--features", type=int, default=784)
    args = parser.parse_args()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        serve(resolver)
        return 0

    spec = resolver.cluster_spec().as_dict()
    print(
        f"[ps-train] batch {args.batch_size} per worker; {len(spec.get('worker', []))} worker(s), "
        f"{len(spec.get('ps', []))} ps",
        flush=True,
    )
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        w = tf.Variable(tf.zeros([args.features, 10]), name="w")
        b = tf.Variable(tf.zeros([10]), name="b")
        optimizer = tf.keras.optimizers.SGD(0.1)

    def dataset_fn():
        rng = np.random.default_rng(0)
        proto = rng.uniform(0, 1, (10, args.features)).astype("float32")
        y = rng.integers(0, 10, 4096)
        x = proto[y] + rng.normal(0, 0.3, (4096, args.features)).astype("float32")
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096).repeat().batch(args.batch_size)

    per_worker = coordinator.create_per_worker_dataset(dataset_fn)
    iterator = iter(per_worker)

    @tf.function
    def step(it):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                logits = tf.matmul(x, w) + b
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            grads = tape.gradient(loss, [w, b])
            optimizer.apply_gradients(zip(grads, [w, b]))
            return loss

        x, y = next(it)
        return strategy.run(replica_fn, args=(x, y))

    times, loss = [], None
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss = coordinator.schedule(step, args=(iterator,))
        coordinator.join()
        times.append(time.perf_counter() - t0)
        progress = os.environ.get("MELON_PROGRESS_FILE")
        if progress:
            with open(progress + ".tmp", "w") as fh:
                json.dump({"step": i + 1, "loss": float(loss.fetch())}, fh)
            os.replace(progress + ".tmp", progress)
    mean = float(np.mean(times[len(times) // 4 :]))  # skip warm-up steps
    print(f"[ps-train] final loss {float(loss.fetch()):.4f}", flush=True)
    print(f"STEP_TIME_S {mean:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
