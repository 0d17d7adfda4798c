"""The GPU memory model of one training process, used in both directions (pure, stdlib only).

Forward, :meth:`MemoryModel.total_mb` answers "how much GPU memory does this job need at batch ``B``" (the
profiler's analytic estimate, when no GPU is there to measure). Backward, :meth:`MemoryModel.max_batch`
answers "what is the largest batch that fits in ``budget`` MiB" (the planner's batch-size rule). Both are the
same formula, so the two can never disagree. :func:`from_keras_model` and :func:`from_torch_module` build a model
from a framework's model. ``docs/internals.md``, "The GPU memory model", gives the formula and its assumptions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Mapping, Optional, Sequence

from .context import MEASURED_CONTEXT_MB

__all__ = [
    "MIB",
    "DTYPE_BYTES",
    "OPTIMIZER_SLOTS",
    "BACKWARD_FACTOR",
    "DEFAULT_WORKSPACE_MB",
    "MemoryModel",
    "dtype_bytes",
    "optimizer_slots",
    "from_keras_model",
    "from_torch_module",
]

MIB = 1024 * 1024

#: Bytes per element by dtype name (numpy/TF/torch spellings, lower case, without the ``torch.`` prefix).
DTYPE_BYTES = {
    "float64": 8,
    "double": 8,
    "fp64": 8,
    "float32": 4,
    "float": 4,
    "fp32": 4,
    "tf32": 4,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "mixed_float16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "mixed_bfloat16": 2,
    "int8": 1,
    "uint8": 1,
    "fp8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int32": 4,
    "int64": 8,
}

#: Optimizer state tensors kept per trainable parameter (the ``s`` of the formula).
OPTIMIZER_SLOTS = {
    "sgd": 0,  # plain SGD keeps nothing
    "momentum": 1,  # SGD with momentum: the velocity
    "nesterov": 1,
    "adagrad": 1,  # accumulated squares
    "rmsprop": 1,  # mean square (+1 with momentum, +1 centered; see optimizer_slots)
    "lion": 1,  # one momentum
    "adam": 2,  # first and second moments
    "adamw": 2,
    "nadam": 2,
    "adamax": 2,
    "amsgrad": 3,  # Adam + the max of second moments
    "adadelta": 2,  # accumulated gradients and updates
    "ftrl": 2,  # accumulator and linear
    "lamb": 2,
    "lars": 1,
    "adafactor": 0,  # factored second moments: O(rows + cols), negligible next to P
}

#: Activation bytes kept per layer output: the output itself plus its gradient in the backward pass.
BACKWARD_FACTOR = 2

#: cuDNN/cuBLAS workspace and allocator slack, MiB (cuBLAS alone reserves a few MiB per stream; cuDNN's
#: convolution algorithms ask for up to a few hundred MiB; 128 is a middle figure for a single-GPU job).
DEFAULT_WORKSPACE_MB = 128.0


def dtype_bytes(dtype: Any) -> int:
    """Bytes per element of ``dtype`` (a name such as ``"bfloat16"``, or a TF/torch/numpy dtype object)."""
    if isinstance(dtype, (int, float)) and not isinstance(dtype, bool):
        return int(dtype)
    name = getattr(dtype, "name", None) or str(dtype)
    name = name.lower().replace("torch.", "").replace("tf.", "").strip()
    if name in DTYPE_BYTES:
        return DTYPE_BYTES[name]
    raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(sorted(DTYPE_BYTES))}")


def optimizer_slots(optimizer: Any) -> int:
    """Slots per trainable parameter for an optimizer name (``"adam"``) or a Keras/PyTorch optimizer object.

    Objects are read by class name plus the options that add state: SGD with ``momentum > 0`` -> 1 slot
    (Keras ``momentum``, PyTorch ``param_groups[0]["momentum"]``), RMSprop +1 with momentum and +1 centered,
    Adam/AdamW +1 with ``amsgrad``. ``None`` means plain SGD (0).
    """
    if optimizer is None:
        return 0
    if isinstance(optimizer, str):
        key = optimizer.lower().replace("_", "").replace("-", "")
        if key in OPTIMIZER_SLOTS:
            return OPTIMIZER_SLOTS[key]
        raise ValueError(f"unknown optimizer {optimizer!r}; known: {', '.join(sorted(OPTIMIZER_SLOTS))}")
    name = type(optimizer).__name__.lower()
    opts: dict[str, Any] = {}
    groups = getattr(optimizer, "param_groups", None)
    if groups:  # PyTorch
        opts = dict(groups[0])
    for attr in ("momentum", "centered", "amsgrad", "nesterov"):
        if attr not in opts and hasattr(optimizer, attr):
            opts[attr] = getattr(optimizer, attr)

    def _num(v: Any) -> float:
        try:
            return float(v() if callable(v) else v)
        except Exception:
            try:
                return float(v.numpy())
            except Exception:
                return 0.0

    momentum = _num(opts.get("momentum", 0.0))
    if name == "sgd":
        return 1 if momentum > 0 else 0
    if name == "rmsprop":
        return 1 + (1 if momentum > 0 else 0) + (1 if opts.get("centered") else 0)
    if name in ("adam", "adamw") and opts.get("amsgrad"):
        return OPTIMIZER_SLOTS["amsgrad"]
    if name in OPTIMIZER_SLOTS:
        return OPTIMIZER_SLOTS[name]
    raise ValueError(f"unknown optimizer class {type(optimizer).__name__}; pass a name such as 'adam'")


@dataclass(frozen=True)
class MemoryModel:
    """GPU memory of one training process: ``total = P*b_w + P_t*b_g + P_t*s*b_o + B*A + W + F`` (module doc).

    ``params`` P, ``bytes_per_param`` b_w, ``optimizer_slots`` s, ``activation_bytes_per_sample`` A,
    ``workspace_mb`` W, ``framework_overhead_mb`` F; ``trainable_params`` P_t (None = P),
    ``grad_bytes_per_param`` b_g and ``slot_bytes_per_param`` b_o (None = b_w).
    """

    params: int
    bytes_per_param: float = 4
    optimizer_slots: int = 0
    activation_bytes_per_sample: float = 0.0
    workspace_mb: float = DEFAULT_WORKSPACE_MB
    framework_overhead_mb: float = MEASURED_CONTEXT_MB
    trainable_params: Optional[int] = None
    grad_bytes_per_param: Optional[float] = None
    slot_bytes_per_param: Optional[float] = None

    def __post_init__(self) -> None:
        for name in (
            "params",
            "bytes_per_param",
            "optimizer_slots",
            "activation_bytes_per_sample",
            "workspace_mb",
            "framework_overhead_mb",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.trainable_params is not None and not 0 <= self.trainable_params <= self.params:
            raise ValueError(f"trainable_params must be in [0, params], got {self.trainable_params}")

    @classmethod
    def for_optimizer(cls, params: int, optimizer: Any = "sgd", dtype: Any = "float32", **kw: Any) -> "MemoryModel":
        """Convenience: ``MemoryModel.for_optimizer(25_000_000, "adam", "float32", activation_bytes_per_sample=...)``."""
        return cls(
            params=int(params), bytes_per_param=dtype_bytes(dtype), optimizer_slots=optimizer_slots(optimizer), **kw
        )

    # -- the terms -------------------------------------------------------------------------------------
    @property
    def p_trainable(self) -> int:
        return self.params if self.trainable_params is None else self.trainable_params

    @property
    def weights_mb(self) -> float:
        return self.params * self.bytes_per_param / MIB

    @property
    def gradients_mb(self) -> float:
        b_g = self.bytes_per_param if self.grad_bytes_per_param is None else self.grad_bytes_per_param
        return self.p_trainable * b_g / MIB

    @property
    def optimizer_mb(self) -> float:
        b_o = self.bytes_per_param if self.slot_bytes_per_param is None else self.slot_bytes_per_param
        return self.p_trainable * self.optimizer_slots * b_o / MIB

    @property
    def activation_mb_per_sample(self) -> float:
        return self.activation_bytes_per_sample / MIB

    @property
    def fixed_mb(self) -> float:
        """Everything that does not grow with the batch: weights + gradients + optimizer + W + F."""
        return self.weights_mb + self.gradients_mb + self.optimizer_mb + self.workspace_mb + self.framework_overhead_mb

    def breakdown(self, batch: int) -> dict[str, float]:
        """Each term of the formula at ``batch``, MiB, plus ``total``."""
        return {
            "weights": self.weights_mb,
            "gradients": self.gradients_mb,
            "optimizer": self.optimizer_mb,
            "activations": batch * self.activation_mb_per_sample,
            "workspace": float(self.workspace_mb),
            "framework": float(self.framework_overhead_mb),
            "total": self.total_mb(batch),
        }

    # -- both directions -------------------------------------------------------------------------------
    def total_mb(self, batch: int) -> float:
        """Forward: memory (MiB) at ``batch`` samples per step on this GPU."""
        if batch < 0:
            raise ValueError(f"batch must be >= 0, got {batch}")
        return self.fixed_mb + batch * self.activation_mb_per_sample

    def allocator_mb(self, batch: int) -> float:
        """What the framework's allocator holds at ``batch`` (MiB): :meth:`total_mb` less ``F``, the memory the
        process holds outside it (the CUDA context, reserved beside the cap)."""
        return self.total_mb(batch) - self.framework_overhead_mb

    def max_batch(self, budget_mb: float, *, upper: Optional[int] = None) -> int:
        """Backward: the largest ``B`` with ``total_mb(B) <= budget_mb`` (0 when not even the fixed part fits).

        ``total_mb(max_batch(b)) <= b < total_mb(max_batch(b) + 1)`` holds whenever the result is above 0 and
        below ``upper``. With no activations (``A = 0``) the batch does not bound memory: ``upper`` is then
        required and returned (if the fixed part fits).
        """
        spare = budget_mb - self.fixed_mb
        if spare < 0:
            return 0
        if self.activation_bytes_per_sample <= 0:
            if upper is None:
                raise ValueError("activation_bytes_per_sample is 0: memory does not bound the batch; pass upper=")
            return int(upper)
        b = int(math.floor(spare / self.activation_mb_per_sample))
        # float rounding: step so that the invariant holds exactly as total_mb computes it
        while b > 0 and self.total_mb(b) > budget_mb:
            b -= 1
        while self.total_mb(b + 1) <= budget_mb:
            b += 1
        return b if upper is None else min(b, int(upper))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MemoryModel":
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in fields})


# -- estimating A (and P) from a framework model ------------------------------------------------------
def _numel(shape: Sequence[Optional[int]]) -> int:
    n = 1
    for d in shape:
        if d is None:
            raise ValueError(f"layer output shape {tuple(shape)} has an unknown dimension besides the batch")
        n *= int(d)
    return n


def _keras_layers(model: Any) -> Iterator[Any]:
    for layer in getattr(model, "layers", []):
        if getattr(layer, "layers", None) and layer is not model:  # a nested Model/Sequential
            yield from _keras_layers(layer)
        else:
            yield layer


def _keras_output_shapes(layer: Any) -> list[list[Optional[int]]]:
    out = getattr(layer, "output", None)
    tensors = out if isinstance(out, (list, tuple)) else [out]
    shapes: list[list[Optional[int]]] = []
    for t in tensors:
        if t is None:
            continue
        shape = getattr(t, "shape", None)
        if shape is None:
            continue
        dims = list(shape.as_list() if hasattr(shape, "as_list") else shape)
        shapes.append(dims[1:])  # drop the batch dimension
    return shapes


def from_keras_model(
    model: Any,
    batch: int = 0,
    optimizer: Any = None,
    *,
    workspace_mb: float = DEFAULT_WORKSPACE_MB,
    framework_overhead_mb: float = MEASURED_CONTEXT_MB,
) -> MemoryModel:
    """A :class:`MemoryModel` for a built Keras (tf-keras or Keras 3) model.

    P = ``model.count_params()``, P_t = the trainable weights' sizes, ``b_w`` from the weights' dtype.
    ``A = BACKWARD_FACTOR * sum over layers of (output elements per sample * compute-dtype bytes)``
    (InputLayers are skipped; nested models are walked). ``optimizer`` may be a name or an optimizer object;
    ``None`` uses ``model.optimizer`` when the model is compiled, else plain SGD. ``batch`` is only checked
    (the model itself is batch-independent; pass the batch to :meth:`MemoryModel.total_mb`).

    TensorFlow is imported lazily (this module stays importable where TF is absent). The model must be built
    (defined with an ``Input`` or called once) so that layer output shapes are known.
    """
    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch}")
    if not getattr(model, "built", True):
        raise ValueError("the Keras model is not built: define it with an Input or call it once first")
    params = int(model.count_params())
    trainable = 0
    weight_bytes = 4
    for w in getattr(model, "trainable_weights", []):
        trainable += _numel(w.shape)
        weight_bytes = dtype_bytes(getattr(w.dtype, "name", w.dtype))
    activ = 0
    for layer in _keras_layers(model):
        if type(layer).__name__ == "InputLayer":
            continue
        dtype = getattr(layer, "compute_dtype", None) or getattr(layer, "dtype", None) or "float32"
        nbytes = dtype_bytes(getattr(dtype, "name", dtype))
        try:
            shapes = _keras_output_shapes(layer)
        except (AttributeError, ValueError, RuntimeError):
            shapes = []
        for s in shapes:
            activ += _numel(s) * nbytes
    if optimizer is None:
        optimizer = getattr(model, "optimizer", None)
    return MemoryModel(
        params=params,
        trainable_params=min(trainable, params),
        bytes_per_param=weight_bytes,
        optimizer_slots=optimizer_slots(optimizer),
        activation_bytes_per_sample=float(BACKWARD_FACTOR * activ),
        workspace_mb=workspace_mb,
        framework_overhead_mb=framework_overhead_mb,
    )


def from_torch_module(
    module: Any,
    sample_input: Any,
    optimizer: Any = None,
    *,
    workspace_mb: float = DEFAULT_WORKSPACE_MB,
    framework_overhead_mb: float = MEASURED_CONTEXT_MB,
) -> MemoryModel:
    """A :class:`MemoryModel` for a PyTorch ``nn.Module``, from one forward pass on ``sample_input``.

    ``sample_input`` is a tensor (or tuple of tensors) with a batch dimension of any size ``n``; forward
    hooks on the leaf modules add up their outputs' bytes, divided by ``n`` for a per-sample figure, times
    ``BACKWARD_FACTOR``. The pass runs under ``torch.no_grad()`` on whatever device the module is on (CPU is
    fine). P from ``module.parameters()``, P_t those with ``requires_grad``. torch is imported lazily.
    """
    import torch  # noqa: PLC0415 - optional, lazily imported on purpose

    params = sum(p.numel() for p in module.parameters())
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    first = next(iter(module.parameters()), None)
    weight_bytes = first.element_size() if first is not None else 4
    inputs = sample_input if isinstance(sample_input, (tuple, list)) else (sample_input,)
    n = int(inputs[0].shape[0]) if inputs and hasattr(inputs[0], "shape") and len(inputs[0].shape) else 1
    total = [0]

    def _hook(_mod: Any, _inp: Any, out: Any) -> None:
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for t in outs:
            if isinstance(t, torch.Tensor):
                total[0] += t.numel() * t.element_size()

    handles = [m.register_forward_hook(_hook) for m in module.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in handles:
            h.remove()
    return MemoryModel(
        params=int(params),
        trainable_params=int(trainable),
        bytes_per_param=weight_bytes,
        optimizer_slots=optimizer_slots(optimizer),
        activation_bytes_per_sample=float(BACKWARD_FACTOR * total[0] / max(1, n)),
        workspace_mb=workspace_mb,
        framework_overhead_mb=framework_overhead_mb,
    )
