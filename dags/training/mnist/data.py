"""A small, learnable, MNIST-shaped synthetic dataset (no network needed): 10 classes of 28x28 images, each a
fixed random prototype plus noise. Written as an .npz with x_train/y_train/x_test/y_test."""

import io

import numpy as np

# Bump when the generator changes: the DAGs store the data under v<N>, so a stale copy is never reused.
DATASET_VERSION = 2


def make_dataset(n_train: int = 2000, n_test: int = 500, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(0, 1, size=(10, 28, 28)).astype("float32")

    def draw(n):
        y = rng.integers(0, 10, size=n)
        x = prototypes[y] + rng.normal(0, 1.0, size=(n, 28, 28)).astype("float32")
        return np.clip(x, 0, 1).astype("float32"), y.astype("int64")

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def to_npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def ensure_in_hdfs(client, root: str) -> str:
    """Write the dataset under ``<root>/datasets/mnist-synth/v<N>/`` unless it is there; return its HDFS path.
    ``client`` is an ``hdfs`` client (e.g. ``WebHDFSHook(...).get_conn()``). Runs that ingest at the same time
    write it once (``put_once``: create-exclusive lock, write beside, rename into place)."""
    from airflow_provider_melon.hadoop.hdfs_io import put_once  # Airflow side only: containers never call this

    path = f"{root}/datasets/mnist-synth/v{DATASET_VERSION}/mnist.npz"
    if client.status(path, strict=False) is None:
        put_once(client, path, to_npz_bytes(make_dataset()))
    return path
