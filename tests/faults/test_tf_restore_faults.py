"""TensorFlow multi-worker training on the fault suite's mini cluster: a worker's container SIGKILLed mid-training.
``MultiWorkerMirroredStrategy`` (CPU collectives) does not survive a lost member: the AM restarts the lost task, the
other task's collectives are aborted and it is restarted too, and ``BackupAndRestore`` resumes training from the epoch of the last backup (docs/elastic.md,
"TensorFlow")."""

from __future__ import annotations

import re

import pytest

from tests.waits import wait_for

from .conftest import app_containers_prefix, container_group, sigkill_group

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# A linear regression under MultiWorkerMirroredStrategy (CPU), in tf-keras (Keras 2: Keras 3's fit does not run
# under this strategy on TF 2.21; dags/training/mnist/train.py says the same). tf-keras's BackupAndRestore is
# multi-worker aware: the chief (worker 0 here) writes the backup, every task restores from it. Each epoch's start
# and loss are printed; an epoch pauses after its backup, so that the test kills a worker between two backups.
TF_RESTORE = """\
import json, os, sys, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
import tf_keras as keras

backup_dir, epochs, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
task = json.loads(os.environ["TF_CONFIG"])["task"]
me = f"{task['type']}:{task['index']}"
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
x = tf.random.stateless_normal((256, 8), seed=(1, 2))
y = tf.matmul(x, tf.random.stateless_normal((8, 1), seed=(3, 4)))
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)


class Epochs(keras.callbacks.Callback):
    began = False

    def on_epoch_begin(self, epoch, logs=None):
        if not self.began:
            self.began = True
            print(f"{me} starts at epoch {epoch}", flush=True)
        print(f"{me} epoch {epoch} begins", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        print(f"{me} epoch {epoch} loss {logs['loss']:.6f}", flush=True)
        time.sleep(pause)


model.fit(data, epochs=epochs, steps_per_epoch=4, verbose=0,
          callbacks=[keras.callbacks.BackupAndRestore(backup_dir), Epochs()])
print(f"{me} trained {epochs} epochs", flush=True)
"""
STARTS = re.compile(r"^worker:(\d) starts at epoch (\d+)$", re.M)
LOSS = re.compile(r"^worker:0 epoch (\d+) loss", re.M)


def backed_up(jobs, app_id: str) -> int:
    """The epoch training resumes at from the chief's backup: worker:0 prints an epoch's loss after backing it up."""
    text = "\n".join(jobs.container_logs(app_id).values())
    return max((int(e) + 1 for e in LOSS.findall(text)), default=0)


def test_tf_multiworker_worker_sigkilled_restarted_and_resumed_from_backup(fault_jobs, fault_hook, tmp_path, fault_row):
    """Two MWMS workers, two restarts: worker:1 is SIGKILLed after the second backup. The AM restarts it in a new
    container; worker:0's collectives fail and it is restarted too, or it starts its process again with the new
    address: each task's training starts again at the backup's epoch (not at 0) and the job SUCCEEDS."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TF_RESTORE)
    epochs = 5
    with fault_row("TF MWMS worker SIGKILLed (2 workers, restarts 2): restarted, resumed from its backup",
                   hook=fault_hook) as row:
        app_id = fault_jobs.submit({
            "name": "tf-restore", "framework": "tensorflow", "code": str(code),
            "entrypoint": f"python train.py {tmp_path / 'backup'} {epochs} 1.5",
            "roles": {"worker": {"instances": 2, "restarts": 2, "memory": 1536}}}, tags=row.tags)
        fault_jobs.wait_status(app_id, lambda s: all(t["state"] == "REGISTERED" for t in s["tasks"]), timeout=120)
        at = wait_for(lambda: backed_up(fault_jobs, app_id) >= 2 and backed_up(fault_jobs, app_id), 120,
                      "the chief's backup of epochs 0 and 1", every=0.1, cause=fault_jobs.cause(app_id))
        row.injected()
        sigkill_group(container_group(app_containers_prefix(app_id), MELON_ROLE="worker", MELON_INDEX="1"))
        status = fault_jobs.wait_status(app_id, lambda s: len(s["tasks"][1]["containers"]) >= 2, timeout=60)
        assert status["tasks"][1]["containers"][0]["exit_code"] == 137, status["tasks"][1]
        final = fault_jobs.wait(app_id, timeout=180)
        text = "\n".join(fault_jobs.container_logs(app_id).values())
        assert (final["state"], final["finalStatus"]) == ("FINISHED", "SUCCEEDED"), (final["diagnostics"], text[-3000:])
        row.recovered()
        for i in (0, 1):  # its first process started at epoch 0; every later one at the backup's epoch
            starts = [int(e) for w, e in STARTS.findall(text) if int(w) == i]
            assert starts.count(0) == 1 and len(starts) >= 2, (i, starts)
            assert all(at <= e <= at + 1 for e in starts if e), (i, at, starts)
            assert f"worker:{i} trained {epochs} epochs" in text, text[-3000:]
        print(f"worker:1 killed with the backup at epoch {at}; starts: {[(w, e) for w, e in STARTS.findall(text)]}")
