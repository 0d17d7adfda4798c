"""runtime.oom: the frameworks' out-of-memory failures recognised on their real texts, the stderr tail, the peak
file."""

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from airflow_provider_melon.runtime import framework, oom
from tests import oom_texts

# 256 TiB: more than a 47-bit address space, so no allocator can give it, whatever the host's overcommit policy;
# TensorFlow raises ResourceExhaustedError at once (oneDNN off: its allocator would retry for 10 s first).
TF_OOM_SCRIPT = textwrap.dedent(
    """
    import tensorflow as tf
    x = tf.zeros([2**46], tf.float32)
    """
)


@pytest.fixture(scope="module")
def tf_oom():
    """(exit code, stderr) of a real TensorFlow process that runs out of memory (on CPU: the same error class and
    message as on a GPU, 'OOM when allocating tensor ... by allocator cpu' there being 'GPU_0_bfc')."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow not installed: tests/oom_texts.py's recorded text is tested instead")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MELON_", "PYTHONPATH"))}
    env.update({"TF_ENABLE_ONEDNN_OPTS": "0", "CUDA_VISIBLE_DEVICES": ""})
    p = subprocess.run([sys.executable, "-c", TF_OOM_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stderr


def test_real_tensorflow_oom_is_recognised(tf_oom):
    rc, err = tf_oom
    assert rc == 1, err[-3000:]
    assert "ResourceExhaustedError" in err, err[-3000:]
    signature = oom.recognise(rc, err)
    assert signature is not None and len(signature) <= oom.SIGNATURE_CHARS
    # the exception's line (the last one that names it), without TF's {{function_node ...}} noise
    assert signature.startswith(
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when "
        "allocating tensor with shape[70368744177664] and type float"
    ), signature
    assert oom.recognise(0, err) is None  # only a failure can be an out-of-memory failure


def test_recorded_tensorflow_oom_is_recognised():
    signature = oom.recognise(1, oom_texts.TF_OOM_STDERR)
    assert signature.startswith(
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when "
        "allocating tensor with shape[70368744177664]"
    ), signature
    assert signature.endswith("…") and len(signature) == oom.SIGNATURE_CHARS
    # without the exception's line (a tail cut short), TF's own log lines still name it
    head = oom_texts.TF_OOM_STDERR.split("Traceback")[0]
    assert "OOM when allocating tensor with shape[70368744177664]" in oom.recognise(1, head)
    allocator = [l for l in head.splitlines() if "exceeds 10% of free system memory" in l]
    assert allocator and oom.recognise(1, allocator[0]) is None  # a warning, not an out-of-memory failure


@pytest.mark.parametrize(
    "line, start",
    [
        (oom_texts.TORCH_OOM_LINE, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0"),
        (oom_texts.TORCH_CUDA_OOM_LINE, "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB"),
        (oom_texts.TORCH_1_OOM_LINE, "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB"),
    ],
)
def test_pytorch_oom_is_recognised(line, start):
    text = "epoch 1 loss 0.93\n" + oom_texts.traceback_of(line)
    signature = oom.recognise(1, text)
    assert signature.startswith(start) and len(signature) <= oom.SIGNATURE_CHARS, signature
    assert oom.recognise(137, text) == signature  # also when it then died of a signal
    assert oom.recognise(0, text) is None


def test_the_cap_bootstraps_own_hint_is_recognised(tmp_path):
    """The hint the real bootstrap prints (framework.SITECUSTOMIZE's excepthook) names it on its own, e.g. when the
    framework's message was cut off or is one we do not know."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MELON_") and k != "PYTHONPATH"}
    cap, d = framework.memory_cap_env(2048, 16384, env)
    env.update(cap)
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-c",
                "class OutOfMemoryError(Exception): pass\n"
                "raise OutOfMemoryError('an allocator we do not know gave up')",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(d, ignore_errors=True)
    hint = [l for l in p.stderr.splitlines() if l.startswith("[melon-cap]")]
    assert p.returncode == 1 and len(hint) == 1, p.stderr
    assert oom.recognise(1, hint[0]) == hint[0]
    assert hint[0].startswith("[melon-cap] this task ran out of GPU memory under its MeLoN cap of 2048 MiB")


@pytest.mark.parametrize(
    "text",
    [
        oom_texts.traceback_of("ValueError: shapes (3,4) and (5,6) not aligned"),
        oom_texts.traceback_of("RuntimeError: CUDA error: device-side assert triggered"),
        oom_texts.traceback_of("MemoryError"),  # the host's memory, not the GPU's
        oom_texts.traceback_of("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 8.00 TiB for an array"),
        'Exception in thread "main" java.lang.OutOfMemoryError: Java heap space',
        "checking the layout of memory-mapped shards\nWithoutOfMemoryErrors=1\nKilled",
        "Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom",
        # the executor's own lines (they may quote a signature) are never taken for the user's
        "[melon-executor] the user's process ran out of GPU memory (cap 1024 MiB; peak seen 1300 MiB): "
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "",
    ],
)
def test_other_failures_are_not_out_of_memory(text):
    assert oom.recognise(1, text) is None


def test_exit_0_is_never_out_of_memory_and_no_tail_is_nothing():
    text = oom_texts.traceback_of(oom_texts.TORCH_OOM_LINE)
    assert oom.recognise(0, text) is None and oom.recognise(None, text) is None
    assert oom.recognise(1, None) is None


def test_the_last_oom_line_wins_and_a_long_line_keeps_its_match():
    text = (
        "[melon-cap] this task ran out of GPU memory under its MeLoN cap of 1024 MiB: ...\n"
        + oom_texts.traceback_of(oom_texts.TORCH_OOM_LINE)
    )
    assert oom.recognise(1, text).startswith("torch.OutOfMemoryError: CUDA out of memory.")
    long = "x" * 300 + " CUDA out of memory. Tried to allocate 2.00 GiB" + " y" * 100
    signature = oom.recognise(1, long)
    assert len(signature) == oom.SIGNATURE_CHARS
    assert signature.startswith("…CUDA out of memory. Tried to allocate 2.00 GiB") and signature.endswith("…")


def test_stderr_tail_reads_a_write_only_file_and_nothing_of_a_pipe(tmp_path):
    path = tmp_path / "stderr"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # as a shell's 2> opens it
    try:
        os.write(fd, b"before the user's process\n")
        mark = oom.stderr_size(fd)
        assert mark == len(b"before the user's process\n")
        os.write(fd, b"a" * (2 * oom.TAIL_BYTES) + b"\nthe end \xff\n")
        tail = oom.stderr_tail(fd, since=mark)
        assert len(tail.encode("utf-8")) >= oom.TAIL_BYTES and tail.endswith("\nthe end \ufffd\n")
        assert "before" not in tail
        later = oom.stderr_size(fd)
        os.write(fd, b"short\n")
        assert oom.stderr_tail(fd, since=later) == "short\n"
        assert oom.stderr_tail(fd, since=10**9) == ""
    finally:
        os.close(fd)
    r, w = os.pipe()
    try:
        os.write(w, b"CUDA out of memory\n")
        assert oom.stderr_size(w) is None and oom.stderr_tail(w) is None
    finally:
        os.close(r)
        os.close(w)


def test_the_peak_file_has_one_reader():
    # runtime/peak.read_file reads MELON_PEAK_FILE (tests/unit/test_peak.py); oom.py only names OOM failures
    assert not hasattr(oom, "read_peak") and "read_peak" not in oom.__all__


def test_host_memory_is_told_from_gpu_memory(tf_oom):
    rc, err = tf_oom  # the real text of this CPU-only machine: TF's CPU device and allocator
    assert oom.recognise(rc, err) and oom.host_memory(rc, err)
    assert oom.recognise(1, oom_texts.TF_GPU_OOM_STDERR) and not oom.host_memory(1, oom_texts.TF_GPU_OOM_STDERR)
    torch = oom_texts.traceback_of(oom_texts.TORCH_OOM_LINE)
    assert not oom.host_memory(1, torch) and not oom.host_memory(0, oom_texts.TF_OOM_STDERR)


@pytest.mark.parametrize(
    "line, source",
    oom_texts.GPU_OOM_CORPUS,
    ids=[s.split(" (")[0] + f"#{i}" for i, (_, s) in enumerate(oom_texts.GPU_OOM_CORPUS)],
)
def test_the_frameworks_gpu_oom_corpus_is_recognised(line, source):
    """Every GPU out-of-memory line of the corpus (each with the file that emits it) names an OOM, of the GPU."""
    text = "epoch 3 loss 0.41\n" + oom_texts.traceback_of(line)
    signature = oom.recognise(1, text)
    assert signature is not None, f"not recognised ({source}): {line}"
    assert not oom.host_memory(1, text), source


@pytest.mark.parametrize("line, source", oom_texts.HOST_OOM_CORPUS)
def test_host_memory_failures_are_not_gpu_out_of_memory(line, source):
    text = oom_texts.traceback_of(line)
    assert oom.recognise(1, text) is None or oom.host_memory(1, text), source
    assert oom.recognise(137, "Killed") is None  # the kernel's OOM killer: SIGKILL, no framework text


def test_numpys_real_array_memory_error_is_the_hosts():
    """numpy's _ArrayMemoryError captured live (the venv's numpy): the host's memory, never a GPU OOM."""
    p = subprocess.run(
        [sys.executable, "-c", "import numpy as np; np.empty((2**40, 2**10))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1 and "_ArrayMemoryError" in p.stderr, p.stderr[-2000:]
    assert oom.recognise(p.returncode, p.stderr) is None


def test_recorded_tensorflow_gpu_oom_names_the_exception_of_the_gpu():
    signature = oom.recognise(1, oom_texts.TF_GPU_OOM_STDERR)
    assert signature.startswith(
        "ResourceExhaustedError: OOM when allocating tensor with shape[11772117,100] and "
        "type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
    )
    assert not oom.host_memory(1, oom_texts.TF_GPU_OOM_STDERR)
