"""runtime.framework: TF_CONFIG, torch env and the in-process GPU memory cap (run in real subprocesses)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from airflow_provider_melon.runtime import framework

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

CLUSTER = {
    "chief": ["c0:2000"],
    "worker": ["w0:2001", "w1:2002"],
    "ps": ["p0:2003"],
    "evaluator": ["e0:2004"],
}


def test_tf_config_for_a_worker():
    cfg = framework.tf_config(CLUSTER, "worker", 1)
    assert cfg == {
        "cluster": {"chief": ["c0:2000"], "worker": ["w0:2001", "w1:2002"], "ps": ["p0:2003"]},
        "task": {"type": "worker", "index": 1},
    }


def test_tf_config_evaluator_is_not_in_the_cluster():
    cfg = framework.tf_config(CLUSTER, "evaluator", 0)
    assert "evaluator" not in cfg["cluster"]
    assert cfg["task"] == {"type": "evaluator", "index": 0}


def test_tf_config_drops_empty_roles_and_rejects_unknown_tasks():
    cfg = framework.tf_config({"worker": ["a:1", "b:2"], "ps": [], "chief": []}, "worker", 0)
    assert cfg["cluster"] == {"worker": ["a:1", "b:2"]}
    with pytest.raises(ValueError, match="worker:2"):
        framework.tf_config(CLUSTER, "worker", 2)
    with pytest.raises(ValueError):
        framework.tf_config(CLUSTER, "chef", 0)


def test_torch_env_ranks_chief_first():
    chief = framework.torch_env(CLUSTER, "chief", 0)
    w1 = framework.torch_env(CLUSTER, "worker", 1)
    assert chief == {"MASTER_ADDR": "c0", "MASTER_PORT": "2000", "WORLD_SIZE": "3", "RANK": "0",
                     "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0"}
    assert (w1["RANK"], w1["WORLD_SIZE"], w1["MASTER_ADDR"], w1["MASTER_PORT"]) == ("2", "3", "c0", "2000")
    ps = framework.torch_env(CLUSTER, "ps", 0)
    assert "RANK" not in ps and ps["MASTER_ADDR"] == "c0"


def test_torch_env_without_chief_uses_worker0():
    env = framework.torch_env({"worker": ["[::1]:3000", "h1:3001"]}, "worker", 1)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["RANK"], env["WORLD_SIZE"]) == ("::1", "3000", "1", "2")
    with pytest.raises(ValueError, match="chief or a worker"):
        framework.torch_env({"ps": ["p:1"]}, "ps", 0)


def test_split_address():
    assert framework.split_address("host.example:42") == ("host.example", 42)
    with pytest.raises(ValueError):
        framework.split_address("nohost")


# ---- memory cap ------------------------------------------------------------------------------------------

FAKE_TF = textwrap.dedent(
    """
    calls = []
    class _Dev:
        def __init__(self, name): self.name = name
    class LogicalDeviceConfiguration:
        def __init__(self, memory_limit=None): self.memory_limit = memory_limit
    class _Config:
        LogicalDeviceConfiguration = LogicalDeviceConfiguration
        def list_physical_devices(self, kind):
            return [_Dev("/physical_device:GPU:0")] if kind == "GPU" else []
        def set_logical_device_configuration(self, dev, cfgs):
            calls.append([dev.name, [c.memory_limit for c in cfgs]])
    config = _Config()
    """
)

FAKE_TORCH = textwrap.dedent(
    """
    import types
    cuda = types.SimpleNamespace()
    cuda.calls, cuda.queue, cuda.initialized = [], [], False
    cuda.is_available = lambda: True
    def _lazy_call(cb):
        cuda.calls.append("queued") if not cuda.initialized else None
        cb() if cuda.initialized else cuda.queue.append(cb)
    def _lazy_init():
        cuda.initialized = True
        for cb in cuda.queue: cb()
    cuda._lazy_call, cuda._lazy_init = _lazy_call, _lazy_init
    cuda.set_per_process_memory_fraction = lambda f, d=None: cuda.calls.append(["fraction", round(f, 4), d])
    """
)


def run_capped(tmp_path, code, expected_mb=4096, total_mb=16384, extra_path=None, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MELON_") and k != "PYTHONPATH"}
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


def test_cap_env_contents(tmp_path):
    cap, d = framework.memory_cap_env(4096, 16384, {"PYTHONPATH": "/a:/b"}, directory=str(tmp_path))
    assert cap["PYTHONPATH"] == f"{tmp_path}{os.pathsep}/a:/b"
    assert os.path.exists(os.path.join(d, "sitecustomize.py"))
    assert cap["MELON_CAP_MB"] == "4096" and float(cap["MELON_CAP_FRACTION"]) == 0.25
    assert cap["TF_FORCE_GPU_ALLOW_GROWTH"] == "false" and cap["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.250"
    with pytest.raises(ValueError):
        framework.memory_cap_env(0, 16384, {})


def test_cap_is_applied_when_tensorflow_is_imported(tmp_path):
    fake = tmp_path / "fake"
    (fake / "tensorflow").mkdir(parents=True)
    (fake / "tensorflow" / "__init__.py").write_text(FAKE_TF)
    code = "import sys; print('tensorflow' in sys.modules); import tensorflow as tf; print(tf.calls)"
    p, _, _ = run_capped(tmp_path, code, extra_path=str(fake))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "False"  # nothing imported at startup
    assert json.loads(lines[1].replace("'", '"')) == [["/physical_device:GPU:0", [4096]]]
    assert "capped at 4096 MiB" in p.stderr


def test_torch_cap_waits_for_cuda_init(tmp_path):
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(FAKE_TORCH)
    code = "import torch; print(torch.cuda.calls); torch.cuda._lazy_init(); print(torch.cuda.calls)"
    p, _, _ = run_capped(tmp_path, code, expected_mb=4096, total_mb=16384, extra_path=str(fake))
    assert p.returncode == 0, p.stderr
    before, after = p.stdout.splitlines()
    assert before == "['queued']"  # importing torch did not create a CUDA context
    assert after == "['queued', ['fraction', 0.25, 0]]"


def test_cap_never_breaks_user_code_without_frameworks(tmp_path):
    p, _, _ = run_capped(tmp_path, "import json; print('user code ran')")
    assert p.returncode == 0 and p.stdout == "user code ran\n"
    assert p.stderr == ""
    # a framework whose API differs: logged, user code still runs
    fake = tmp_path / "broken"
    (fake / "tensorflow").mkdir(parents=True)
    (fake / "tensorflow" / "__init__.py").write_text("config = None\n")
    p2, _, _ = run_capped(tmp_path, "import tensorflow; print('still ran')", extra_path=str(fake))
    assert p2.returncode == 0 and p2.stdout == "still ran\n"
    assert "[melon-cap]" in p2.stderr


def test_existing_sitecustomize_is_chained(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins; builtins.THEIRS = 'chained'\n")
    p, _, _ = run_capped(tmp_path, "import builtins; print(builtins.THEIRS)", extra_path=str(theirs))
    assert p.returncode == 0, p.stderr
    assert p.stdout == "chained\n"


def test_oom_is_explained(tmp_path):
    code = "class OutOfMemoryError(RuntimeError): pass\nraise OutOfMemoryError('CUDA out of memory. Tried')"
    p, _, _ = run_capped(tmp_path, code, expected_mb=2048)
    assert p.returncode == 1
    assert "out of GPU memory under its MeLoN cap of 2048 MiB" in p.stderr
    assert "OutOfMemoryError: CUDA out of memory" in p.stderr  # the original traceback is kept


def _has(module):
    try:
        __import__(module)
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _has("tensorflow"), reason="tensorflow not installed")
def test_real_tensorflow_on_cpu_says_no_gpu(tmp_path):
    code = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"
    p, _, _ = run_capped(tmp_path, code, env_extra={"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "0"
    assert "no GPU: memory cap not applied" in p.stderr


# ---- peak GPU memory (MELON_PEAK_FILE, issue 26) ----------------------------------------------------------

FAKE_TF_PEAK = FAKE_TF + textwrap.dedent(
    """
    import os, types
    def _get_memory_info(device):
        calls.append(["get_memory_info", device])
        return {"current": 0, "peak": int(os.environ["FAKE_PEAK_BYTES"])}
    config.experimental = types.SimpleNamespace(get_memory_info=_get_memory_info)
    if os.environ.get("FAKE_NO_GPU"):
        _Config.list_physical_devices = lambda self, kind: []
    """
)

FAKE_TORCH_PEAK = FAKE_TORCH + textwrap.dedent(
    """
    import os
    cuda.is_initialized = lambda: cuda.initialized
    cuda.max_memory_reserved = lambda device=None: int(os.environ["FAKE_PEAK_BYTES"]) if device == 0 else -1
    """
)


def fake_framework(tmp_path, name, source):
    fake = tmp_path / "fake"
    (fake / name).mkdir(parents=True)
    (fake / name / "__init__.py").write_text(source)
    return str(fake)


@pytest.mark.parametrize("code, rc", [
    ("import tensorflow", 0),
    ("import tensorflow\nraise RuntimeError('OOM when allocating tensor')", 1),  # written after a crash too
])
def test_the_bootstrap_writes_tensorflows_peak_at_exit(tmp_path, code, rc):
    peak = tmp_path / "work" / "melon-peak.json"
    peak.parent.mkdir()
    p, _, _ = run_capped(tmp_path, code, extra_path=fake_framework(tmp_path, "tensorflow", FAKE_TF_PEAK),
                         env_extra={"MELON_PEAK_FILE": str(peak), "FAKE_PEAK_BYTES": str(1300 * 2**20 + 1)})
    assert p.returncode == rc, p.stderr
    assert json.loads(peak.read_text()) == {"peak_mb": 1301}  # MiB, rounded up
    assert os.listdir(peak.parent) == ["melon-peak.json"]  # written beside and renamed


def test_the_bootstrap_writes_torchs_peak_once_cuda_was_initialised(tmp_path):
    peak = tmp_path / "melon-peak.json"
    fake = fake_framework(tmp_path, "torch", FAKE_TORCH_PEAK)
    env = {"MELON_PEAK_FILE": str(peak), "FAKE_PEAK_BYTES": str(2**30)}
    p, _, _ = run_capped(tmp_path, "import torch", extra_path=fake, env_extra=env)
    assert p.returncode == 0, p.stderr
    assert not peak.exists()  # CUDA never initialised: no GPU seen, nothing to say
    p, _, _ = run_capped(tmp_path, "import torch; torch.cuda._lazy_init()", extra_path=fake, env_extra=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(peak.read_text()) == {"peak_mb": 1024}


def test_the_bootstrap_keeps_a_larger_peak_the_script_wrote_and_writes_nothing_without_a_gpu(tmp_path):
    peak = tmp_path / "melon-peak.json"
    fake = fake_framework(tmp_path, "tensorflow", FAKE_TF_PEAK)
    env = {"MELON_PEAK_FILE": str(peak), "FAKE_PEAK_BYTES": str(1300 * 2**20)}
    for written, expected in ((100, 1300), (5000, 5000)):  # what the user's script wrote itself: the larger stays
        peak.write_text(json.dumps({"peak_mb": written}))
        p, _, _ = run_capped(tmp_path, "import tensorflow", extra_path=fake, env_extra=env)
        assert p.returncode == 0, p.stderr
        assert json.loads(peak.read_text()) == {"peak_mb": expected}
    peak.unlink()
    p, _, _ = run_capped(tmp_path, "import tensorflow", extra_path=fake, env_extra={**env, "FAKE_NO_GPU": "1"})
    assert p.returncode == 0 and "TensorFlow sees no GPU" in p.stderr, p.stderr
    assert not peak.exists()
    p, _, _ = run_capped(tmp_path, "print('no framework')", env_extra=env)
    assert p.returncode == 0 and p.stderr == "" and not peak.exists()
    # a counter that fails never breaks the exit, and leaves the file as it was
    peak.write_text('{"peak_mb": 7}')
    broken = fake_framework(tmp_path / "broken", "tensorflow",
                            FAKE_TF_PEAK.replace('int(os.environ["FAKE_PEAK_BYTES"])', "1 // 0"))
    p, _, _ = run_capped(tmp_path, "import tensorflow; print('ran')", extra_path=broken, env_extra=env)
    assert p.returncode == 0 and p.stdout == "ran\n" and "Error" not in p.stderr, p.stderr
    assert json.loads(peak.read_text()) == {"peak_mb": 7}
