"""runtime.oom: which memory ran out, decided from the error that ended the process, on the corpus of real messages
(tests/oom_texts.py), TensorFlow's and numpy's live texts, and the stderr tail."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from airflow_provider_melon.runtime import oom
from tests import oom_texts

REPO = Path(__file__).resolve().parents[2]

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


def test_real_tensorflow_oom_on_a_cpu_is_the_hosts(tf_oom):
    rc, err = tf_oom
    assert rc == 1, err[-3000:]
    assert "ResourceExhaustedError" in err, err[-3000:]
    verdict = oom.decide(rc, err)
    assert verdict is not None and verdict.kind == oom.HOST, verdict
    assert verdict.signature.startswith(
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when "
        "allocating tensor with shape[70368744177664] and type float"
    ), verdict  # the exception's line, without TF's {{function_node ...}} noise
    assert len(verdict.signature) <= oom.SIGNATURE_CHARS
    assert oom.decide(0, err) is None  # only a failure can be an out-of-memory failure


#: what runtime/oom.py must say of the corpus (tests/oom_texts.py): frameworks and libraries it must cover
COVERED = {
    "TensorFlow": ("tensorflow/", "TF "),
    "PyTorch": ("pytorch/", "torch", "c10/", "aten/"),
    "JAX/XLA": ("jax", "xla", "alphafold", "graphcast", "LLNeRF", "AFProfile"),
    "NCCL": ("nccl",),
    "cuDNN": ("cudnn",),
    "cuBLAS": ("cublas", "Qwen3"),
}


def test_the_corpus_is_large_sourced_and_covers_the_frameworks():
    cases = oom_texts.CORPUS
    assert len(cases) >= 40
    assert all(c.source.strip() and c.shows.strip() for c in cases)
    assert {c.verdict for c in cases} == {oom.CAP, oom.OUTSIDE, oom.HOST, None}
    blob = [(c.source + " " + c.text).lower() for c in cases]
    for name, needles in COVERED.items():
        assert any(any(n.lower() in b for n in needles) for b in blob), f"no corpus case of {name}"
    assert len({c.text for c in cases}) == len(cases)  # no case twice


@pytest.mark.parametrize("case", oom_texts.CORPUS, ids=[f"{i}-{c.verdict}" for i, c in enumerate(oom_texts.CORPUS)])
def test_each_corpus_message_gets_its_verdict(case):
    verdict = oom.decide(1, case.text)
    got = None if verdict is None else verdict.kind
    assert got == case.verdict, f"{case.shows} ({case.source}): {verdict}"
    if verdict is not None:
        assert verdict.signature and len(verdict.signature) <= oom.SIGNATURE_CHARS
    assert oom.decide(0, case.text) is None


def test_a_traceback_printed_before_a_signal_did_not_end_the_process():
    """A Python exception ends a process with exit 1, never a signal: a process killed after it printed a
    traceback (an OOM its code caught, then SIGKILL from YARN's memory check) died of the signal. A runtime's fatal
    line aborts (SIGABRT), so it still counts."""
    text = oom_texts.CAUGHT_TORCH_OOM + "Killed\n"
    assert oom.decide(1, text).kind == oom.CAP  # exit 1: that traceback is the last error it printed
    assert oom.decide(137, text) is None
    watchdog = next(c for c in oom_texts.CORPUS if "watchdog" in c.text)
    assert oom.decide(134, watchdog.text).kind == oom.OUTSIDE


def test_the_recorded_exception_wins_over_the_text():
    """The bootstrap's record is the exception itself: a ValueError recorded wins over an OOM traceback the text
    ends with (a child's output, say), and a record names a MemoryError by its class whatever its message."""
    text = oom_texts.traceback_of(oom_texts.TORCH_OOM_LINE)
    assert oom.decide(1, text).kind == oom.CAP
    value_error = {"type": "builtins.ValueError", "types": ["builtins.ValueError"], "message": "bad shape"}
    assert oom.decide(1, text, [value_error]) is None
    host = {"type": "numpy._core._exceptions._ArrayMemoryError", "types": ["numpy._core._exceptions."
            "_ArrayMemoryError", "builtins.MemoryError"], "message": "Unable to allocate 8.00 PiB"}  # fmt: skip
    assert oom.decide(1, "", [host]).kind == oom.HOST
    torch_oom = {"type": "torch.OutOfMemoryError", "types": ["torch.OutOfMemoryError", "builtins.RuntimeError"],
                 "message": oom_texts.TORCH_OOM_LINE.split(": ", 1)[1]}  # fmt: skip
    verdict = oom.decide(1, "", [torch_oom])
    assert verdict.kind == oom.CAP and verdict.signature.startswith("torch.OutOfMemoryError: CUDA out of memory")
    # torchrun's agent dies of its child's failure: the child's record (written first) decides
    agent = {"type": oom.WRAPPERS[0], "types": [oom.WRAPPERS[0]], "message": "train.py FAILED"}
    assert oom.decide(1, "", [agent, torch_oom]).kind == oom.CAP
    assert oom.decide(1, text, [agent]).kind == oom.CAP  # only the wrapper: the text decides
    # a helper process that failed earlier (and was handled): the user's process's own record decides
    helper, own = value_error | {"pid": 7}, torch_oom | {"pid": 9}
    assert oom.decide(1, "", [helper, own], main_pid=9).kind == oom.CAP
    assert oom.decide(1, "", [helper, own]) is None  # without the main pid, the first to die


def test_a_consequence_takes_its_cause_from_the_lines_before_it_only():
    """TensorFlow's 'cuDNN failed to initialize' points at the log above it; a cuDNN allocation line printed after
    the fatal error (another process's) is not its cause."""
    case = next(c for c in oom_texts.CORPUS if "keras-retinanet" in c.source)
    cause, fatal = case.text.split("\n", 1)
    assert oom.decide(1, case.text).kind == oom.OUTSIDE
    assert oom.decide(1, fatal + cause + "\n") is None


def test_an_allocator_far_below_its_cap_did_not_run_out_at_the_cap():
    """PyTorch's message says what its allocator held and the request it failed: 18.4 GiB + 22.8 GiB is beyond any
    cap below 41 GiB, so at such a cap it ran out at the cap. TensorFlow's says only the request: its own peak
    counter (the bootstrap's) is what it held. A need under 90 % of the cap: the GPU was full of other memory."""
    torch = oom.decide(1, oom_texts.traceback_of(oom_texts.TORCH_OOM_LINE))
    assert round(torch.held_mb) == 18872 and round(torch.request_mb) == 23327
    assert oom.at_cap(torch, 32768, None) == (True, 42199)
    assert oom.at_cap(torch, 65536, None) == (False, 42199)  # it held 18 GiB of a 64 GiB cap: the GPU was full
    tf = oom.decide(1, oom_texts.TF_GPU_OOM_STDERR)  # 11772117 x 100 floats: 4491 MiB requested
    assert tf.held_mb is None and round(tf.request_mb) == 4491
    assert oom.at_cap(tf, 8192, 3500) == (True, 7991)
    assert oom.at_cap(tf, 8192, 500) == (False, 4991)
    assert oom.at_cap(tf, 8192, None) == (True, None)  # no counter: the allocator's own error stands
    assert oom.at_cap(tf, None, 500) == (True, 4991)  # no cap (whole GPUs): nothing to weigh it against
    outside = oom.decide(1, oom_texts.traceback_of("RuntimeError: CUDA error: out of memory"))
    assert oom.at_cap(outside, 8192, 8000) == (False, 8000)


def test_a_torch_1_message_says_what_its_allocator_held():
    verdict = oom.decide(1, oom_texts.traceback_of(oom_texts.TORCH_1_OOM_LINE))
    assert verdict.kind == oom.CAP and round(verdict.held_mb, 2) == round(8.57 + 4.68, 2)
    assert round(verdict.request_mb, 2) == 12.5


def test_exit_0_is_never_out_of_memory_and_no_tail_is_nothing():
    text = oom_texts.traceback_of(oom_texts.TORCH_OOM_LINE)
    assert oom.decide(0, text) is None and oom.decide(None, text) is None
    assert oom.decide(1, None) is None and oom.decide(1, "") is None


def test_the_executors_own_lines_are_never_the_fatal_error():
    text = (
        oom_texts.traceback_of("ValueError: bad")
        + "[melon-executor] the user's process ran out of GPU memory at its cap (cap 1024 MiB): "
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert oom.decide(1, text) is None


def test_a_long_line_keeps_its_match():
    long = "RuntimeError: " + "x" * 300 + " CUDA error: out of memory" + " y" * 100
    verdict = oom.decide(1, oom_texts.traceback_of(long))
    assert verdict.kind == oom.OUTSIDE and len(verdict.signature) == oom.SIGNATURE_CHARS
    assert verdict.signature.startswith("…CUDA error: out of memory") and verdict.signature.endswith("…")


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
    # runtime/peak.read_file reads MELON_PEAK_FILE (tests/unit/test_peak.py); oom.py only decides which memory ran out
    assert not hasattr(oom, "read_peak") and "read_peak" not in oom.__all__


def test_numpys_real_array_memory_error_is_the_hosts():
    """numpy's _ArrayMemoryError captured live (the venv's numpy): the host's memory, never a GPU OOM."""
    p = subprocess.run(
        [sys.executable, "-c", "import numpy as np; np.empty((2**40, 2**10))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1 and "_ArrayMemoryError" in p.stderr, p.stderr[-2000:]
    assert oom.decide(p.returncode, p.stderr).kind == oom.HOST


def test_the_ams_kinds_are_runtime_ooms():
    """The AM grows the context reserve on GpuMemory.OUTSIDE and the expected memory otherwise; the heartbeat's
    schema (generated from runtime/protocol.py) lets through exactly oom.py's two GPU kinds."""
    java = (REPO / "appmaster/am/src/main/java/org/melon/yarn/GpuMemory.java").read_text()
    declared = re.search(r'static final String OUTSIDE = "([^"]+)";', java)
    assert declared and declared.group(1) == oom.OUTSIDE
    schema = json.loads((REPO / "airflow_provider_melon/am/messages.schema.json").read_text())
    assert schema["$defs"]["OomReport"]["properties"]["kind"]["enum"] == [oom.CAP, oom.OUTSIDE]
