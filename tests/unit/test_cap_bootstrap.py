"""The in-process GPU memory cap (runtime.framework.SITECUSTOMIZE) and the peak it writes, run in real subprocesses
with the bootstrap on PYTHONPATH.

TensorFlow's own ``tf.config`` checks run on its CPU device: the real TensorFlow of the venv is used wherever a CPU
shows the behaviour. Where only a GPU can (TensorFlow's GPU device, CUDA in PyTorch), the fakes below follow the
real APIs' semantics, raising their errors in their order, and name the source they follow."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from airflow_provider_melon.runtime import framework

# TensorFlow's tf.config on one GPU, as tensorflow/python/eager/context.py (TF 2.21: Context.set_memory_growth,
# get_memory_growth, set_logical_device_configuration, get_logical_device_configuration) and
# tensorflow/python/framework/config.py define them: the same checks, errors and order; initialising the runtime
# (any op, or list_logical_devices) freezes them. PhysicalDevice and LogicalDeviceConfiguration are the same
# namedtuples.
FAKE_TF = textwrap.dedent(
    """
    import collections, os, types
    PhysicalDevice = collections.namedtuple("PhysicalDevice", ["name", "device_type"])
    LogicalDeviceConfiguration = collections.namedtuple(
        "LogicalDeviceConfiguration", ["memory_limit", "experimental_priority", "experimental_device_ordinal"])
    LogicalDeviceConfiguration.__new__.__defaults__ = (None, None, None)
    GPU = PhysicalDevice("/physical_device:GPU:0", "GPU")
    CPU = PhysicalDevice("/physical_device:CPU:0", "CPU")
    state = {"initialized": False, "growth": {GPU: False}, "virtual": {}}

    def list_physical_devices(kind=None):
        if os.environ.get("FAKE_NO_GPU"):
            return [CPU] if kind in (None, "CPU") else []
        return [d for d in (CPU, GPU) if kind in (None, d.device_type)]

    def _known(dev):
        if dev not in (CPU, GPU):
            raise ValueError("Unrecognized device: %s" % repr(dev))

    def set_memory_growth(dev, enable):
        _known(dev)
        if dev in state["virtual"]:
            raise ValueError("Cannot set memory growth on device when virtual devices configured")
        if dev.device_type != "GPU":
            raise ValueError("Cannot set memory growth on non-GPU and non-Pluggable devices")
        if state["growth"].get(dev) == enable:
            return
        if state["initialized"]:
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        state["growth"][dev] = enable

    def get_memory_growth(dev):
        _known(dev)
        return state["growth"][dev]

    def set_logical_device_configuration(dev, virtual_devices):
        _known(dev)
        if dev.device_type == "GPU":
            for vdev in virtual_devices:
                if vdev.memory_limit is None:
                    raise ValueError("Setting memory limit is required for GPU virtual devices")
        if state["virtual"].get(dev) == virtual_devices:
            return
        if state["initialized"]:
            raise RuntimeError("Virtual devices cannot be modified after being initialized")
        state["virtual"][dev] = virtual_devices

    def get_logical_device_configuration(dev):
        _known(dev)
        return state["virtual"].get(dev)

    def list_logical_devices(kind=None):
        state["initialized"] = True
        return [GPU]

    def get_memory_info(device):
        state["initialized"] = True
        return {"current": 0, "peak": int(os.environ["FAKE_PEAK_BYTES"])}

    experimental = types.SimpleNamespace(
        set_memory_growth=set_memory_growth, get_memory_growth=get_memory_growth, get_memory_info=get_memory_info,
        set_virtual_device_configuration=set_logical_device_configuration,
        get_virtual_device_configuration=get_logical_device_configuration)
    config = types.SimpleNamespace(
        list_physical_devices=list_physical_devices, list_logical_devices=list_logical_devices,
        LogicalDeviceConfiguration=LogicalDeviceConfiguration, experimental=experimental,
        set_logical_device_configuration=set_logical_device_configuration,
        get_logical_device_configuration=get_logical_device_configuration)
    """
)
# tensorflow.python.eager.context.context()._context_handle: None until the runtime is initialised
FAKE_TF_CONTEXT = textwrap.dedent(
    """
    import tensorflow
    class _Context:
        @property
        def _context_handle(self):
            return object() if tensorflow.state["initialized"] else None
    def context():
        return _Context()
    """
)

# PyTorch's torch.cuda on one GPU, as torch/cuda/memory.py (set_per_process_memory_fraction: _lazy_init() first,
# then the fraction's type and range checks; device None is the current device) and torch/cuda/__init__.py
# (_lazy_call queues a callback until CUDA initialises, runs it at once after) define them (torch 2.15 in the venv).
# PYTORCH_CUDA_ALLOC_CONF's per_process_memory_fraction is a key of torch 2.15's allocator config (libc10_cuda.so:
# "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"), read when CUDA's allocator starts.
FAKE_TORCH = textwrap.dedent(
    """
    import os, types
    cuda = types.SimpleNamespace()
    cuda.calls, cuda.queue, cuda.initialized = [], [], False
    cuda.is_available = lambda: True
    cuda.is_initialized = lambda: cuda.initialized
    def _lazy_call(cb):
        cuda.calls.append("queued") if not cuda.initialized else None
        cb() if cuda.initialized else cuda.queue.append(cb)
    def _lazy_init():
        if cuda.initialized:
            return
        cuda.initialized = True
        for cb in cuda.queue: cb()
    def set_per_process_memory_fraction(fraction, device=None):
        _lazy_init()
        if isinstance(device, str):  # torch.cuda._utils._get_device_index: "cuda:N" is N, "cuda" the current one
            device = int(device.partition(":")[2] or 0)
        device = 0 if device is None else getattr(device, "index", device)
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if fraction < 0 or fraction > 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        cuda.calls.append(["fraction", round(fraction, 4), device])
    cuda._lazy_call, cuda._lazy_init = _lazy_call, _lazy_init
    cuda.set_per_process_memory_fraction = set_per_process_memory_fraction
    cuda.memory = types.SimpleNamespace(set_per_process_memory_fraction=set_per_process_memory_fraction)
    cuda.max_memory_reserved = lambda device=None: int(os.environ["FAKE_PEAK_BYTES"]) if device == 0 else -1
    """
)


def fake(tmp_path, name, source, extra=None):
    root = tmp_path / "fake"
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "__init__.py").write_text(source)
    for rel, text in (extra or {}).items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


def fake_tf(tmp_path, source=FAKE_TF):
    return fake(
        tmp_path,
        "tensorflow",
        source,
        {"python/__init__.py": "", "python/eager/__init__.py": "", "python/eager/context.py": FAKE_TF_CONTEXT},
    )


def run_capped(tmp_path, code, expected_mb=4096, total_mb=16384, extra_path=None, env_extra=None, base_extra=None):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MELON_", "TF_FORCE", "PYTORCH_CUDA")) and k != "PYTHONPATH"
    }
    env.update(base_extra or {})
    if extra_path:
        env["PYTHONPATH"] = extra_path
    cap, d = framework.memory_cap_env(expected_mb, total_mb, env)
    env.update(cap)
    env.update(env_extra or {})
    try:
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return p, cap, d


def cap_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("[melon-cap]")]


def _has(module):
    try:
        __import__(module)
        return True
    except Exception:
        return False


REAL_TF = {"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
needs_tf = pytest.mark.skipif(not _has("tensorflow"), reason="tensorflow not installed")


# ---- the environment -------------------------------------------------------------------------------------------


def test_cap_env_contents(tmp_path):
    cap, d = framework.memory_cap_env(4096, 16384, {"PYTHONPATH": "/a:/b"}, directory=str(tmp_path))
    assert cap["PYTHONPATH"] == f"{tmp_path}{os.pathsep}/a:/b"
    assert os.path.exists(os.path.join(d, "sitecustomize.py"))
    assert cap["MELON_CAP_MB"] == "4096" and float(cap["MELON_CAP_FRACTION"]) == 0.25
    assert cap["TF_FORCE_GPU_ALLOW_GROWTH"] == "false" and cap["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.250"
    with pytest.raises(ValueError):
        framework.memory_cap_env(0, 16384, {})


def test_a_users_allow_growth_is_kept(tmp_path):
    cap, _ = framework.memory_cap_env(4096, 16384, {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}, directory=str(tmp_path))
    assert cap["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    p, _, _ = run_capped(
        tmp_path, "import tensorflow", extra_path=fake_tf(tmp_path), base_extra={"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    )
    assert p.returncode == 0, p.stderr
    assert cap_lines(p.stderr) == [
        "[melon-cap] TensorFlow: /physical_device:GPU:0 capped at 4096 MiB (memory growth within it)"
    ]


# ---- TensorFlow ------------------------------------------------------------------------------------------------


def test_cap_is_applied_when_tensorflow_is_imported(tmp_path):
    code = (
        "import sys; print('tensorflow' in sys.modules); import tensorflow as tf; "
        "print([c.memory_limit for c in tf.config.get_logical_device_configuration(tf.GPU)])"
    )
    p, _, _ = run_capped(tmp_path, code, extra_path=fake_tf(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["False", "[4096]"]  # nothing imported at startup; then one 4096 MiB device
    assert cap_lines(p.stderr) == ["[melon-cap] TensorFlow: /physical_device:GPU:0 capped at 4096 MiB (taken up front)"]


GUIDE = textwrap.dedent(
    """
    import json, os, tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    try:  # TensorFlow's GPU guide, "Limiting GPU memory growth"
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as e:
        print(e)
    print(json.dumps({"env": os.environ["TF_FORCE_GPU_ALLOW_GROWTH"],
                      "growth": tf.config.experimental.get_memory_growth(gpus[0]),
                      "limits": [c.memory_limit for c in tf.config.get_logical_device_configuration(gpus[0])]}))
    tf.config.list_logical_devices("GPU")  # the runtime starts: growth can no longer change
    try:
        tf.config.experimental.set_memory_growth(gpus[0], False)
    except RuntimeError as e:
        print(e)
    tf.config.experimental.set_memory_growth(gpus[0], True)  # unchanged: allowed
    """
)


def test_set_memory_growth_runs_under_the_cap_as_the_allocators_growth(tmp_path):
    p, _, _ = run_capped(tmp_path, GUIDE, extra_path=fake_tf(tmp_path))
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert json.loads(out[0]) == {"env": "true", "growth": True, "limits": [4096]}  # capped, growing within it
    assert out[1] == "Physical devices cannot be modified after being initialized"  # as TensorFlow says it
    assert (
        "[melon-cap] TensorFlow: memory growth on on /physical_device:GPU:0, within the MeLoN cap of 4096 MiB "
        "(TF_FORCE_GPU_ALLOW_GROWTH=true)"
    ) in cap_lines(p.stderr)


@pytest.mark.parametrize(
    "limits, kept, said",
    [
        (
            [2048],
            [2048],
            "your logical device configuration (2048 MiB in 1 device(s)) fits the MeLoN cap of 4096 MiB: yours is kept",
        ),
        (
            [8192],
            [4096],
            "the MeLoN cap won: your logical device configuration asks for 8192 MiB, more than the cap of "
            "4096 MiB; its memory limits become [4096] MiB",
        ),
        (
            [3000, 3000],
            [2048, 2048],
            "the MeLoN cap won: your logical device configuration asks for 6000 MiB, more than "
            "the cap of 4096 MiB; its memory limits become [2048, 2048] MiB",
        ),
    ],
)
def test_a_users_logical_devices_stay_within_the_cap(tmp_path, limits, kept, said):
    code = textwrap.dedent(
        f"""
        import tensorflow as tf
        gpu = tf.config.list_physical_devices("GPU")[0]
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=m) for m in {limits}])
        print([c.memory_limit for c in tf.config.experimental.get_virtual_device_configuration(gpu)])
        """
    )
    p, _, _ = run_capped(tmp_path, code, extra_path=fake_tf(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(kept)
    assert "[melon-cap] TensorFlow: " + said in cap_lines(p.stderr)


def test_tensorflows_own_errors_still_reach_the_user(tmp_path):
    code = textwrap.dedent(
        """
        import tensorflow as tf
        gpu = tf.config.list_physical_devices("GPU")[0]
        for call in (lambda: tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration()]),
                     lambda: tf.config.experimental.set_memory_growth(tf.CPU, True)):
            try:
                call()
            except ValueError as e:
                print(e)
        """
    )
    p, _, _ = run_capped(tmp_path, code, extra_path=fake_tf(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "Setting memory limit is required for GPU virtual devices",
        "Cannot set memory growth on non-GPU and non-Pluggable devices",
    ]


# The real TensorFlow: its context's checks hold for its CPU device too. The bootstrap's cap goes on the CPU
# device (a logical device without a memory limit: TensorFlow allows none on a CPU), then the user's calls run.
REAL_TF_ON_CPU = textwrap.dedent(
    """
    import json, os, sitecustomize, tensorflow as tf
    from tensorflow.python.eager import context
    cpu = tf.config.list_physical_devices("CPU")[0]
    sitecustomize._melon_tf_cap(tf, cpu, None)
    try:  # TensorFlow's own check, as the user's call met it before the cap kept it
        context.context().set_memory_growth(cpu, True)
    except ValueError as e:
        print(e)
    tf.config.experimental.set_memory_growth(cpu, True)  # the user's call, through tf.config
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    print(json.dumps({"env": os.environ["TF_FORCE_GPU_ALLOW_GROWTH"],
                      "growth": tf.config.experimental.get_memory_growth(cpu),
                      "logical": len(tf.config.list_logical_devices("CPU"))}))
    try:
        tf.config.experimental.set_memory_growth(cpu, False)
    except RuntimeError as e:
        print(e)
    """
)


@needs_tf
def test_real_tensorflow_users_memory_calls_run_under_the_cap(tmp_path):
    p, _, _ = run_capped(tmp_path, REAL_TF_ON_CPU, env_extra=REAL_TF)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout.splitlines()
    assert out[0] == "Cannot set memory growth on device when virtual devices configured"
    assert json.loads(out[1]) == {"env": "true", "growth": True, "logical": 2}
    assert out[2] == "Physical devices cannot be modified after being initialized"
    assert (
        "[melon-cap] TensorFlow: memory growth on on /physical_device:CPU:0, within the MeLoN cap of None MiB "
        "(TF_FORCE_GPU_ALLOW_GROWTH=true)"
    ) in cap_lines(p.stderr)


@needs_tf
def test_real_tensorflow_on_cpu_says_no_gpu(tmp_path):
    code = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"
    p, _, _ = run_capped(tmp_path, code, env_extra=REAL_TF)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "0"
    assert "no GPU: memory cap not applied" in p.stderr


# ---- PyTorch ---------------------------------------------------------------------------------------------------


def test_torch_cap_waits_for_cuda_init(tmp_path):
    code = "import torch; print(torch.cuda.calls); torch.cuda._lazy_init(); print(torch.cuda.calls)"
    p, _, _ = run_capped(
        tmp_path, code, expected_mb=4096, total_mb=16384, extra_path=fake(tmp_path, "torch", FAKE_TORCH)
    )
    assert p.returncode == 0, p.stderr
    before, after = p.stdout.splitlines()
    assert before == "['queued']"  # importing torch did not create a CUDA context
    assert after == "['queued', ['fraction', 0.25, 0]]"


@pytest.mark.parametrize(
    "theirs, applied, said",
    [
        (0.5, 0.25, "PyTorch: the MeLoN cap won: you asked for 0.5000 of cuda:0, the cap is 0.2500 (4096 MiB)"),
        (
            0.1,
            0.1,
            "PyTorch: your memory fraction 0.1000 of cuda:0 is within the MeLoN cap of 0.2500 (4096 MiB): "
            "yours is kept",
        ),
    ],
)
def test_a_users_memory_fraction_stays_within_the_cap(tmp_path, theirs, applied, said):
    code = (
        f"import torch; torch.cuda.set_per_process_memory_fraction({theirs}); "
        f"torch.cuda.memory.set_per_process_memory_fraction({theirs}, 'cuda:0'); print(torch.cuda.calls)"
    )
    p, _, _ = run_capped(tmp_path, code, extra_path=fake(tmp_path, "torch", FAKE_TORCH))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(
        ["queued", ["fraction", 0.25, 0], ["fraction", applied, 0], ["fraction", applied, 0]]
    )
    assert cap_lines(p.stderr).count("[melon-cap] " + said) == 2


def test_torchs_own_errors_still_reach_the_user(tmp_path):
    code = textwrap.dedent(
        """
        import torch
        for args in ((1, 0), (1.5,)):
            try:
                torch.cuda.set_per_process_memory_fraction(*args)
            except (TypeError, ValueError) as e:
                print(e)
        """
    )
    p, _, _ = run_capped(tmp_path, code, extra_path=fake(tmp_path, "torch", FAKE_TORCH))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "Invalid type for fraction argument, must be `float`",
        "Invalid fraction value: 1.5. Allowed range: 0~1",
    ]


@pytest.mark.parametrize(
    "conf, applied, said",
    [
        ("expandable_segments:True", 0.25, "; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True kept"),
        (
            "expandable_segments:True,per_process_memory_fraction:0.5",
            0.25,
            "; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,per_process_memory_fraction:0.5 kept; the MeLoN cap won "
            "over its per_process_memory_fraction 0.5",
        ),
        (
            "per_process_memory_fraction:0.125",
            0.125,
            "; PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:0.125 kept, its per_process_memory_fraction 0.125 is kept",
        ),
    ],
)
def test_a_users_alloc_conf_runs_under_the_cap(tmp_path, conf, applied, said):
    p, _, _ = run_capped(
        tmp_path,
        "import torch; torch.cuda._lazy_init(); print(torch.cuda.calls)",
        extra_path=fake(tmp_path, "torch", FAKE_TORCH),
        env_extra={"PYTORCH_CUDA_ALLOC_CONF": conf},
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(["queued", ["fraction", applied, 0]])
    assert cap_lines(p.stderr) == ["[melon-cap] PyTorch: cuda:0 capped at 0.2500 of its memory (4096 MiB)" + said]


# The real PyTorch of the venv, on a CPU: the cap's wrappers are in place, importing torch initialises no CUDA, a
# user's call meets torch's own error unchanged, and the peak's announcement is taken back (CUDA never initialised).
REAL_TORCH = textwrap.dedent(
    """
    import json, os, torch
    from torch.cuda import memory
    peak = open(os.environ["MELON_PEAK_FILE"]).read()
    try:
        torch.cuda.set_per_process_memory_fraction(0.5)
        error = None
    except Exception as e:
        error = "%s: %s" % (type(e).__name__, e)
    print(json.dumps({"wrapped": [torch.cuda.set_per_process_memory_fraction.__module__,
                                  memory.set_per_process_memory_fraction.__module__],
                      "initialized": torch.cuda.is_initialized(), "peak": peak, "error": error,
                      "sum": float(torch.ones(3).sum())}))
    """
)


@pytest.mark.skipif(not _has("torch"), reason="torch not installed")
def test_real_torch_runs_under_the_cap_on_a_cpu(tmp_path):
    peak = tmp_path / "melon-peak.json"
    env = {"MELON_PEAK_FILE": str(peak), "CUDA_VISIBLE_DEVICES": ""}
    p, _, _ = run_capped(tmp_path, REAL_TORCH, env_extra=env)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout)
    assert got["wrapped"] == ["sitecustomize", "sitecustomize"] and got["initialized"] is False
    assert json.loads(got["peak"]) == {"source": "torch"} and got["sum"] == 3.0
    plain = subprocess.run(
        [sys.executable, "-c", REAL_TORCH.replace('open(os.environ["MELON_PEAK_FILE"]).read()', '"{}"')],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got["error"] and got["error"] == json.loads(plain.stdout)["error"]  # torch's own, as without the cap
    assert not peak.exists()  # CUDA never initialised: nothing to say


# ---- without frameworks, and the rest of the bootstrap -----------------------------------------------------------


def test_cap_never_breaks_user_code_without_frameworks(tmp_path):
    p, _, _ = run_capped(tmp_path, "import json; print('user code ran')")
    assert p.returncode == 0 and p.stdout == "user code ran\n"
    assert p.stderr == ""
    # a framework whose API differs: logged, user code still runs
    broken = fake(tmp_path / "broken", "tensorflow", "config = None\n")
    p2, _, _ = run_capped(tmp_path, "import tensorflow; print('still ran')", extra_path=broken)
    assert p2.returncode == 0 and p2.stdout == "still ran\n"
    assert "[melon-cap]" in p2.stderr


def test_existing_sitecustomize_is_chained(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins; builtins.THEIRS = 'chained'\n")
    p, _, _ = run_capped(tmp_path, "import builtins; print(builtins.THEIRS)", extra_path=str(theirs))
    assert p.returncode == 0, p.stderr
    assert p.stdout == "chained\n"


# ---- the error that ended the process (MELON_FATAL_FILE) ----------------------------------------------------------

# the user's code catches an OOM (to halve its batch, say), goes on, and dies of an ordinary bug
CAUGHT_THEN_BUG = textwrap.dedent(
    """
    import logging
    class OutOfMemoryError(RuntimeError): pass
    try:
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    except OutOfMemoryError:
        logging.exception("batch 256 does not fit, halving it")
    raise ValueError("shapes (3,4) and (5,6) not aligned")
    """
)


def test_the_exception_that_ends_the_process_is_recorded_not_one_it_caught(tmp_path):
    fatal = tmp_path / "melon-fatal.json"
    p, _, _ = run_capped(tmp_path, CAUGHT_THEN_BUG, env_extra={"MELON_FATAL_FILE": str(fatal)})
    assert p.returncode == 1
    assert "OutOfMemoryError: CUDA out of memory" in p.stderr and "ValueError" in p.stderr  # both still printed
    records = [json.loads(line) for line in fatal.read_text().splitlines()]
    assert len(records) == 1 and records[0]["pid"] > 0, records
    assert {k: records[0][k] for k in ("type", "types", "message")} == {
        "type": "builtins.ValueError",
        "types": ["builtins.ValueError", "builtins.Exception"],
        "message": "shapes (3,4) and (5,6) not aligned",
    }


def test_each_process_that_dies_of_an_exception_appends_its_record(tmp_path):
    """A task's processes share the file (torchrun's agent and its workers, a wrapper script): each appends one line,
    the first process to die first; a process that exits on its own (sys.exit) records nothing."""
    fatal = tmp_path / "melon-fatal.json"
    child = "import numpy; numpy.empty((2**40, 2**10))"  # numpy's _ArrayMemoryError, a MemoryError
    code = textwrap.dedent(
        f"""
        import subprocess, sys
        if subprocess.run([sys.executable, "-c", {child!r}]).returncode:
            raise RuntimeError("the child failed")
        """
    )
    p, _, _ = run_capped(tmp_path, code, env_extra={"MELON_FATAL_FILE": str(fatal)})
    assert p.returncode == 1, p.stderr
    first, second = [json.loads(line) for line in fatal.read_text().splitlines()]
    assert first["type"] == "numpy._core._exceptions._ArrayMemoryError" and "builtins.MemoryError" in first["types"]
    assert second["type"] == "builtins.RuntimeError" and second["pid"] != first["pid"]
    p, _, _ = run_capped(tmp_path, "import sys; sys.exit(3)", env_extra={"MELON_FATAL_FILE": str(tmp_path / "none")})
    assert p.returncode == 3 and not (tmp_path / "none").exists()


# ---- peak GPU memory (MELON_PEAK_FILE) ---------------------------------------------------------------------------


#: any op, or list_logical_devices, initialises TensorFlow's runtime (its GPU devices, their CUDA context)
TF_RAN = "import tensorflow\ntensorflow.config.list_logical_devices()\n"


@pytest.mark.parametrize(
    "code, rc",
    [
        (TF_RAN, 0),
        (TF_RAN + "raise RuntimeError('OOM when allocating tensor')", 1),  # written after a crash too
    ],
)
def test_the_bootstrap_writes_tensorflows_peak_at_exit(tmp_path, code, rc):
    peak = tmp_path / "work" / "melon-peak.json"
    peak.parent.mkdir()
    p, _, _ = run_capped(
        tmp_path,
        code,
        extra_path=fake_tf(tmp_path),
        env_extra={"MELON_PEAK_FILE": str(peak), "FAKE_PEAK_BYTES": str(1300 * 2**20 + 1)},
    )
    assert p.returncode == rc, p.stderr
    assert json.loads(peak.read_text()) == {"peak_mb": 1301, "source": "tensorflow"}  # MiB, rounded up
    assert sorted(os.listdir(peak.parent)) == ["melon-peak.json", "melon-peak.json.lock"]  # written beside, renamed


def test_a_tensorflow_process_that_never_ran_reads_no_peak_at_exit(tmp_path):
    """get_memory_info initialises TensorFlow's GPU runtime: read at the exit of a process that saw a GPU but never
    ran an op, it would create a CUDA context there and then. So it is not read (the fake's counter would have been
    written), and the announcement is taken back. When the runtime is up is the real TensorFlow's fact, below."""
    peak = tmp_path / "melon-peak.json"
    env = {"MELON_PEAK_FILE": str(peak), "FAKE_PEAK_BYTES": str(2**30)}
    p, _, _ = run_capped(tmp_path, "import tensorflow", extra_path=fake_tf(tmp_path), env_extra=env)
    assert p.returncode == 0, p.stderr
    assert not peak.exists()


@needs_tf
def test_real_tensorflows_runtime_is_uninitialised_until_it_runs_an_op(tmp_path):
    """The fact the bootstrap's exit handler rests on (_melon_tf_initialised), shown on the real TensorFlow."""
    code = textwrap.dedent(
        """
        import tensorflow as tf
        from tensorflow.python.eager import context
        print(context.context()._context_handle is None)
        tf.constant(1.0) + 1
        print(context.context()._context_handle is None)
        """
    )
    p, _, _ = run_capped(tmp_path, code, env_extra=REAL_TF)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["True", "False"]


def test_the_bootstrap_announces_the_counter_while_the_process_runs(tmp_path):
    peak = tmp_path / "melon-peak.json"
    code = TF_RAN + f"print(open({str(peak)!r}).read())"
    p, _, _ = run_capped(
        tmp_path,
        code,
        extra_path=fake_tf(tmp_path),
        env_extra={"MELON_PEAK_FILE": str(peak), "FAKE_PEAK_BYTES": str(2**30)},
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"source": "tensorflow"}
    assert json.loads(peak.read_text()) == {"peak_mb": 1024, "source": "tensorflow"}


def test_the_bootstrap_writes_torchs_peak_once_cuda_was_initialised(tmp_path):
    peak = tmp_path / "melon-peak.json"
    torch = fake(tmp_path, "torch", FAKE_TORCH)
    env = {"MELON_PEAK_FILE": str(peak), "FAKE_PEAK_BYTES": str(2**30)}
    p, _, _ = run_capped(tmp_path, "import torch", extra_path=torch, env_extra=env)
    assert p.returncode == 0, p.stderr
    assert not peak.exists()  # CUDA never initialised: no GPU seen, nothing to say (the announcement taken back)
    p, _, _ = run_capped(tmp_path, "import torch; torch.cuda._lazy_init()", extra_path=torch, env_extra=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(peak.read_text()) == {"peak_mb": 1024, "source": "torch"}


def test_the_bootstrap_keeps_a_larger_peak_the_script_wrote_and_writes_nothing_without_a_gpu(tmp_path):
    peak = tmp_path / "melon-peak.json"
    tf = fake_tf(tmp_path)
    env = {"MELON_PEAK_FILE": str(peak), "FAKE_PEAK_BYTES": str(1300 * 2**20)}
    for written, expected in ((100, {"peak_mb": 1300, "source": "tensorflow"}), (5000, {"peak_mb": 5000})):
        peak.write_text(json.dumps({"peak_mb": written}))  # what the user's script wrote itself: the larger stays
        p, _, _ = run_capped(tmp_path, TF_RAN, extra_path=tf, env_extra=env)
        assert p.returncode == 0, p.stderr
        assert json.loads(peak.read_text()) == expected
    peak.unlink()
    p, _, _ = run_capped(tmp_path, "import tensorflow", extra_path=tf, env_extra={**env, "FAKE_NO_GPU": "1"})
    assert p.returncode == 0 and "TensorFlow sees no GPU" in p.stderr, p.stderr
    assert not peak.exists()
    p, _, _ = run_capped(tmp_path, "print('no framework')", env_extra=env)
    assert p.returncode == 0 and p.stderr == "" and not peak.exists()
    # a counter that fails never breaks the exit, and leaves the file as it was
    peak.write_text('{"peak_mb": 7}')
    broken = fake_tf(tmp_path / "broken", FAKE_TF.replace('int(os.environ["FAKE_PEAK_BYTES"])', "1 // 0"))
    p, _, _ = run_capped(tmp_path, TF_RAN + "print('ran')", extra_path=broken, env_extra=env)
    assert p.returncode == 0 and p.stdout == "ran\n" and "Error" not in p.stderr, p.stderr
    assert json.loads(peak.read_text()) == {"peak_mb": 7}


# tf.compat.v1.config and tf.compat.v2.config are modules of their own holding the same function objects as
# tf.config (TensorFlow 2.21's generated API, tensorflow/_api/v2/compat/v1/config/experimental/__init__.py): a TF1-style
# script calls them there, with the bootstrap's cap already on the device.
REAL_TF_COMPAT_ON_CPU = textwrap.dedent(
    """
    import json, os, sitecustomize, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    sitecustomize._melon_tf_cap(tf, cpu, None)
    for ns in (tf.compat.v1.config, tf.compat.v2.config):
        ns.experimental.set_memory_growth(cpu, True)
        ns.set_logical_device_configuration(cpu, [ns.LogicalDeviceConfiguration()] * 2)
    print(json.dumps({"env": os.environ["TF_FORCE_GPU_ALLOW_GROWTH"],
                      "growth": tf.compat.v1.config.experimental.get_memory_growth(cpu)}))
    """
)


@needs_tf
def test_real_tensorflows_compat_aliases_run_under_the_cap(tmp_path):
    p, _, _ = run_capped(tmp_path, REAL_TF_COMPAT_ON_CPU, env_extra=REAL_TF)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.splitlines()[-1]) == {"env": "true", "growth": True}


def _blocked_flock_pids():
    """The pids waiting for a flock (the kernel's /proc/locks lists a blocked request as ``N: -> FLOCK ...``)."""
    with open("/proc/locks") as f:
        return {int(line.split()[5]) for line in f if "->" in line and "FLOCK" in line}


def test_concurrent_writers_of_the_peak_file_never_lose_the_larger_figure(tmp_path):
    # torchrun's local ranks (and its agent) share MELON_PEAK_FILE and exit together: each one's read-compare-replace
    # runs under an exclusive flock of <file>.lock, so a larger figure a neighbour writes meanwhile is kept.
    import fcntl

    peak = tmp_path / "melon-peak.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MELON_", "TF_FORCE")) and k != "PYTHONPATH"}
    env["PYTHONPATH"] = fake_tf(tmp_path)
    cap, d = framework.memory_cap_env(4096, 16384, env)
    env.update(cap, MELON_PEAK_FILE=str(peak), FAKE_PEAK_BYTES=str(500 * 2**20))
    with open(str(peak) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a neighbour in the middle of its own write
        p = subprocess.Popen(
            [sys.executable, "-c", "import tensorflow"],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while p.pid not in _blocked_flock_pids():
                assert p.poll() is None, f"the writer did not wait for the lock: {peak.read_text()!r}"
                assert time.monotonic() < deadline, "the writer never asked for the lock"
                time.sleep(0.02)
            peak.write_text(json.dumps({"peak_mb": 600, "source": "torch"}))  # the neighbour's larger figure
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            _, err = p.communicate(timeout=60)
            shutil.rmtree(d, ignore_errors=True)
    assert p.returncode == 0, err
    assert json.loads(peak.read_text()) == {"peak_mb": 600, "source": "torch"}
