"""gpu.memory_model: the one GPU memory formula, forward (total_mb) and backward (max_batch)."""

import os
import subprocess
import sys
import textwrap

import pytest

from airflow_provider_melon.gpu import memory_model as mm
from airflow_provider_melon.gpu.context import MEASURED_CONTEXT_MB
from airflow_provider_melon.gpu.memory_model import MemoryModel

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MI = 2**20  # parameters chosen so that fp32 weights are exactly 4 MiB


def test_hand_worked_adam_fp32():
    # 2**20 fp32 params with Adam: weights 4 MiB, gradients 4 MiB, 2 slots x 4 MiB = 8 MiB -> 16 MiB fixed
    # by parameters; activations 1 MiB/sample; W = 64, F = 300.
    m = MemoryModel(
        params=MI,
        bytes_per_param=4,
        optimizer_slots=2,
        activation_bytes_per_sample=MI,
        workspace_mb=64,
        framework_overhead_mb=300,
    )
    assert m.weights_mb == 4
    assert m.gradients_mb == 4
    assert m.optimizer_mb == 8
    assert m.fixed_mb == 16 + 64 + 300  # 380
    assert m.total_mb(0) == 380
    assert m.total_mb(32) == 412  # 380 + 32 x 1
    assert m.breakdown(32) == {
        "weights": 4,
        "gradients": 4,
        "optimizer": 8,
        "activations": 32,
        "workspace": 64,
        "framework": 300,
        "total": 412,
    }
    # inverse: (1024 - 380) / 1 = 644 samples
    assert m.max_batch(1024) == 644
    assert m.max_batch(379) == 0  # the fixed part alone does not fit


def test_the_framework_overhead_is_the_measured_context_and_not_the_allocators():
    # F is what a process holds outside its allocator: gpu/context.py's figure, measured on the H200 runs
    m = MemoryModel(params=MI, bytes_per_param=4, optimizer_slots=2, activation_bytes_per_sample=MI, workspace_mb=64)
    assert m.framework_overhead_mb == MEASURED_CONTEXT_MB
    assert m.allocator_mb(32) == m.total_mb(32) - MEASURED_CONTEXT_MB == 16 + 32 + 64  # what the cap must hold


def test_hand_worked_sgd_bf16_with_frozen_params():
    # 10 Mi params in bf16 (2 B), of which 4 Mi trainable, momentum SGD (1 slot):
    # weights 10Mi x 2 = 20 MiB; grads 4Mi x 2 = 8 MiB; slots 4Mi x 1 x 2 = 8 MiB -> 36 MiB.
    # activations 0.5 MiB/sample at B = 100 -> 50 MiB; W = 0, F = 0 -> 86 MiB.
    m = MemoryModel.for_optimizer(
        10 * MI,
        "momentum",
        "bfloat16",
        trainable_params=4 * MI,
        activation_bytes_per_sample=MI / 2,
        workspace_mb=0,
        framework_overhead_mb=0,
    )
    assert (m.weights_mb, m.gradients_mb, m.optimizer_mb) == (20, 8, 8)
    assert m.total_mb(100) == 86
    assert m.max_batch(86) == 100
    assert m.max_batch(85.9) == 99


def test_resnet50_like_figures():
    # 25.6M fp32 params, Adam: 25.6e6 x 4 x (1 + 1 + 2) B = 409.6e6 B = 390.6 MiB
    m = MemoryModel.for_optimizer(25_600_000, "adam", activation_bytes_per_sample=0)
    assert m.weights_mb + m.gradients_mb + m.optimizer_mb == pytest.approx(409.6e6 / MI)
    with pytest.raises(ValueError, match="does not bound"):
        m.max_batch(16000)
    assert m.max_batch(16000, upper=512) == 512


@pytest.mark.parametrize("a_bytes", [1, 3.3e5, 7 * MI + 13, 123456789])
@pytest.mark.parametrize("budget", [500, 1024.5, 16384, 143771])
def test_inverse_consistency(a_bytes, budget):
    m = MemoryModel(params=3_000_017, bytes_per_param=4, optimizer_slots=2, activation_bytes_per_sample=a_bytes)
    b = m.max_batch(budget)
    if b == 0:
        assert m.total_mb(1) > budget
    else:
        assert m.total_mb(b) <= budget < m.total_mb(b + 1)


def test_optimizer_slots_and_dtypes():
    assert [mm.optimizer_slots(n) for n in ("sgd", "momentum", "adam", "AdamW", "rmsprop", "adagrad")] == [
        0,
        1,
        2,
        2,
        1,
        1,
    ]
    assert mm.optimizer_slots(None) == 0
    with pytest.raises(ValueError):
        mm.optimizer_slots("nosuchopt")
    assert [mm.dtype_bytes(d) for d in ("float32", "bfloat16", "torch.float16", "float64", "int8")] == [4, 2, 2, 8, 1]
    with pytest.raises(ValueError):
        mm.dtype_bytes("complex7")

    class SGD:  # an optimizer object read by class name and options (Keras/PyTorch style)
        momentum = 0.9

    class RMSprop:
        momentum = 0.0
        centered = True

    assert mm.optimizer_slots(SGD()) == 1
    assert mm.optimizer_slots(RMSprop()) == 2


def test_roundtrip_dict_and_validation():
    m = MemoryModel(params=10, activation_bytes_per_sample=5)
    assert MemoryModel.from_dict({**m.to_dict(), "unknown": 1}) == m
    with pytest.raises(ValueError):
        MemoryModel(params=-1)
    with pytest.raises(ValueError):
        MemoryModel(params=10, trainable_params=11)
    with pytest.raises(ValueError):
        m.total_mb(-1)


def test_module_imports_no_framework():
    # gpu/ runs in YARN containers: importing the model must not pull TF/torch/Airflow in.
    code = (
        "import sys; import airflow_provider_melon.gpu.memory_model as m; "
        "bad = [x for x in ('tensorflow', 'torch', 'airflow', 'keras', 'tf_keras') if x in sys.modules]; "
        "print(bad); assert not bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_keras_model_known_parameter_count():
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf_keras")
    # Run in a subprocess so TF_USE_LEGACY_KERAS applies before TF is imported and TF stays out of this process.
    code = textwrap.dedent("""
        import json, os
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tf_keras as keras
        from airflow_provider_melon.gpu.memory_model import from_keras_model
        model = keras.Sequential([
            keras.layers.Input(shape=(784,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        m = from_keras_model(model, batch=32)
        frozen = keras.Sequential([keras.layers.Input(shape=(784,)), keras.layers.Dense(64), keras.layers.Dense(10)])
        frozen.layers[0].trainable = False
        f = from_keras_model(frozen, optimizer="sgd")
        print(json.dumps({"m": m.to_dict(), "f": f.to_dict(), "total": m.total_mb(32)}))
    """)
    out = (
        subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
        .stdout.strip()
        .splitlines()[-1]
    )
    import json

    got = json.loads(out)
    m, f = got["m"], got["f"]
    # 784*64 + 64 = 50240; 64*10 + 10 = 650 -> 50890 params, all trainable, fp32, Adam (2 slots, from compile)
    assert m["params"] == 50890 and m["trainable_params"] == 50890
    assert m["bytes_per_param"] == 4 and m["optimizer_slots"] == 2
    # activations: (64 + 10) outputs x 4 B x backward factor 2 = 592 B per sample
    assert m["activation_bytes_per_sample"] == 592
    model = MemoryModel.from_dict(m)
    assert got["total"] == pytest.approx(
        50890 * 4 * 4 / MI + 32 * 592 / MI + mm.DEFAULT_WORKSPACE_MB + MEASURED_CONTEXT_MB
    )
    assert model.total_mb(32) == pytest.approx(got["total"])
    # first Dense frozen: only 650 trainable params; SGD no slots
    assert f["params"] == 50890 and f["trainable_params"] == 650 and f["optimizer_slots"] == 0


def test_torch_module_if_available():
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    m = mm.from_torch_module(net, torch.zeros(8, 784), optimizer="adam")
    assert m.params == 50890 and m.optimizer_slots == 2
    # leaf outputs per sample: 64 (Linear) + 64 (ReLU) + 10 = 138 floats x 4 B x 2
    assert m.activation_bytes_per_sample == 138 * 4 * 2
