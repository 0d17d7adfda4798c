"""Plan a parameter-server job: mini-batch size, number of parameter servers, workers (stdlib + gpu.memory_model).

The rules follow Zou et al., "Distributed training large-scale deep architectures": choose the mini-batch size
and the number of parameter servers so that a synchronous step is bound by compute, not by parameter traffic.
The batch is the largest that fits the GPU's memory, the parameter servers the fewest whose traffic fits inside
the compute, and a communication-bound job gets a recommendation instead. ``docs/internals.md``, "The
parameter-server planner", gives the model, the rules and their assumptions.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from typing import List, Optional, Sequence, Union

from .gpu.context import MEASURED_CONTEXT_MB
from .gpu.memory_model import (
    DEFAULT_WORKSPACE_MB,
    MIB,
    MemoryModel,
    dtype_bytes,
    optimizer_slots,
)
from .spec import parse_size_mb  # one meaning of a size everywhere: "16GB" is 16 GiB, as in the job spec

__all__ = ["PsPlan", "plan", "plan_request", "transfer_time_s", "parse_size_mb", "plan_main"]


@dataclass
class PsPlan:
    """The planner's answer for a parameter-server job (the AM's plan contract is ``submission.Plan``)."""

    batch_size: int
    ps: int
    workers: int
    step_compute_s: float
    step_transfer_s: float
    communication_bound: bool = False
    memory_mb_at_batch: Optional[float] = None
    reasons: List[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def transfer_time_s(params: float, bytes_per_param: float, workers: int, ps: int, bandwidth_bps: float) -> float:
    """``max(2*P*b*n / (k*W), 2*P*b / W)`` seconds per step (module docstring)."""
    if ps < 1 or workers < 1:
        raise ValueError("ps and workers must be >= 1")
    per_worker = 2.0 * params * bytes_per_param
    return max(per_worker * workers / (ps * bandwidth_bps), per_worker / bandwidth_bps)


def plan(
    model_params: float,
    bytes_per_param: float,
    per_sample_compute_s: float,
    workers: int,
    bandwidth_gbps: float,
    gpu_memory_mb: float,
    memory_model: Optional[MemoryModel] = None,
    max_ps: Optional[int] = None,
    *,
    optimizer: str = "sgd",
    activation_bytes_per_sample: float = 0.0,
    max_batch: Optional[int] = None,
    batch_multiple: int = 8,
) -> PsPlan:
    """Recommend batch size, PS count and workers (rules in the module docstring).

    ``memory_model`` defaults to ``MemoryModel(P, b, optimizer_slots(optimizer), activation_bytes_per_sample)``
    with the default workspace and framework overhead. When activations are 0 the memory does not bound the
    batch and ``max_batch`` is required.
    """
    if model_params <= 0 or bytes_per_param <= 0:
        raise ValueError("model_params and bytes_per_param must be > 0")
    if per_sample_compute_s <= 0 or bandwidth_gbps <= 0 or gpu_memory_mb <= 0:
        raise ValueError("per_sample_compute_s, bandwidth_gbps and gpu_memory_mb must be > 0")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    max_ps = workers if max_ps is None else int(max_ps)
    if max_ps < 1:
        raise ValueError(f"max_ps must be >= 1, got {max_ps}")
    mm = memory_model or MemoryModel(
        params=int(model_params),
        bytes_per_param=bytes_per_param,
        optimizer_slots=optimizer_slots(optimizer),
        activation_bytes_per_sample=activation_bytes_per_sample,
    )
    reasons: List[str] = []
    W = bandwidth_gbps * 1e9 / 8.0
    P, b, t, n = float(model_params), float(bytes_per_param), float(per_sample_compute_s), int(workers)

    # 1. batch
    if mm.activation_bytes_per_sample <= 0 and max_batch is None:
        raise ValueError("no activation size: memory does not bound the batch; give max_batch")
    fit = mm.max_batch(gpu_memory_mb, upper=max_batch)
    if fit == 0:
        reasons.append(
            f"the model does not fit: {mm.total_mb(1):.0f} MiB at batch 1 > {gpu_memory_mb:.0f} MiB "
            f"(fixed part {mm.fixed_mb:.0f} MiB)"
        )
        return PsPlan(0, 0, n, 0.0, transfer_time_s(P, b, n, max_ps, W), True, mm.total_mb(1), reasons)
    batch = fit
    if batch_multiple > 1 and fit >= batch_multiple:
        batch = fit - fit % batch_multiple
    limit = (
        "max_batch"
        if max_batch is not None and fit == max_batch and mm.total_mb(max_batch + 1) <= gpu_memory_mb
        else "GPU memory"
    )
    reasons.append(
        f"batch {batch}: largest within {limit} ({mm.total_mb(batch):.0f} of {gpu_memory_mb:.0f} MiB by "
        f"the memory model: fixed {mm.fixed_mb:.0f} + {batch} x "
        f"{mm.activation_mb_per_sample:.2f} MiB/sample)"
        + (f", rounded down to a multiple of {batch_multiple} from {fit}" if batch != fit else "")
    )
    compute = batch * t
    reasons.append(f"compute per step {compute:.4g} s = {batch} x {t * 1000:.4g} ms")

    # 2. smallest k with transfer <= compute
    floor_s = 2.0 * P * b / W
    for k in range(1, max_ps + 1):
        tr = transfer_time_s(P, b, n, k, W)
        if tr <= compute:
            reasons.append(
                f"{k} PS: transfer {tr:.4g} s = max(2*P*b*n/(k*W), 2*P*b/W) <= compute {compute:.4g} s"
                + ("" if k == 1 else f" ({k - 1} PS would take {transfer_time_s(P, b, n, k - 1, W):.4g} s)")
            )
            return PsPlan(batch, k, n, compute, tr, False, mm.total_mb(batch), reasons)

    # 3. communication-bound
    tr = transfer_time_s(P, b, n, max_ps, W)
    reasons.append(f"communication-bound: even {max_ps} PS take {tr:.4g} s per step > compute {compute:.4g} s")
    if floor_s > compute:
        need = math.ceil(floor_s / t)
        reasons.append(
            f"a single worker's NIC alone needs {floor_s:.4g} s per step (2*P*b/W): batch {need} would "
            f"be compute-bound but only {fit} fits in GPU memory; use a faster network, gradient "
            f"compression or all-reduce"
        )
        return PsPlan(batch, max_ps, 1, compute, transfer_time_s(P, b, 1, max_ps, W), True, mm.total_mb(batch), reasons)
    n_ok = max(1, int(math.floor(max_ps * W * compute / (2.0 * P * b) + 1e-9)))
    reasons.append(
        f"recommend {n_ok} workers (from {n}): with {max_ps} PS the transfer is "
        f"{transfer_time_s(P, b, n_ok, max_ps, W):.4g} s <= compute; or allow more PS or a larger batch"
    )
    return PsPlan(
        batch, max_ps, n_ok, compute, transfer_time_s(P, b, n_ok, max_ps, W), True, mm.total_mb(batch), reasons
    )


def _gpu_memory_mb(value: Union[str, float]) -> float:
    try:
        return parse_size_mb(value)
    except ValueError as e:
        raise ValueError(f"gpu_memory (--gpu-memory): {e}") from None


def plan_request(
    model_params: float,
    per_sample_ms: float,
    workers: int,
    bandwidth_gbps: float,
    gpu_memory: Union[str, float],
    *,
    dtype: str = "float32",
    optimizer: str = "sgd",
    activation_mb: float = 0.0,
    max_batch: Optional[int] = None,
    max_ps: Optional[int] = None,
    batch_multiple: int = 8,
    workspace_mb: float = DEFAULT_WORKSPACE_MB,
    overhead_mb: float = MEASURED_CONTEXT_MB,
) -> PsPlan:
    """:func:`plan` from the units people write (``melon plan`` and ``MelonPlanOperator``): milliseconds per
    sample, a GPU memory size such as ``"16GiB"``, activation MiB per sample, a dtype and an optimizer name.
    Without ``activation_mb`` the memory bounds only the parameters' part, so the batch is capped at 1024 unless
    ``max_batch`` says otherwise (the plan's first reason says so). Raises ValueError on bad input."""
    b = dtype_bytes(dtype)
    mm = MemoryModel(
        params=int(model_params),
        bytes_per_param=b,
        optimizer_slots=optimizer_slots(optimizer),
        activation_bytes_per_sample=activation_mb * MIB,
        workspace_mb=workspace_mb,
        framework_overhead_mb=overhead_mb,
    )
    notes = []
    if activation_mb <= 0 and max_batch is None:
        max_batch = 1024
        notes.append(
            "no activation_mb (--activation-mb): memory bounds only the parameters' part; batch capped at 1024"
        )
    result = plan(
        model_params,
        b,
        per_sample_ms / 1000.0,
        workers,
        bandwidth_gbps,
        _gpu_memory_mb(gpu_memory),
        mm,
        max_ps,
        max_batch=max_batch,
        batch_multiple=batch_multiple,
    )
    result.reasons[:0] = notes
    return result


def plan_main(argv: Optional[Sequence[str]] = None) -> int:
    """``melon plan --params 25e6 --per-sample-ms 2 --workers 4 --bandwidth-gbps 10 --gpu-memory 16GiB``.

    Prints the plan as JSON (one object, indented) on stdout. Exit 0 with a plan, 1 when the model does not
    fit, 2 on bad arguments.
    """
    p = argparse.ArgumentParser(
        prog="melon plan",
        description="Recommend batch size, parameter servers and "
        "workers for a PS job (Zou et al.). See airflow_provider_melon/planner.py.",
    )
    p.add_argument("--params", type=float, required=True, help="model parameters, e.g. 25e6")
    p.add_argument("--dtype", default="float32", help="weights' dtype (bytes per parameter)")
    p.add_argument("--per-sample-ms", type=float, required=True, help="compute per sample on one GPU, ms")
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--bandwidth-gbps", type=float, required=True, help="per-NIC bandwidth, Gbit/s")
    p.add_argument("--gpu-memory", required=True, help="per-GPU memory for the job, e.g. 16GiB")
    p.add_argument("--optimizer", default="sgd", help="sgd, momentum, adam, ... (optimizer slots)")
    p.add_argument(
        "--activation-mb",
        type=float,
        default=0.0,
        help="activation MiB per sample (from the profiler's memory model); 0 = unknown",
    )
    p.add_argument(
        "--max-batch",
        type=int,
        default=None,
        help="convergence cap on the batch (required when --activation-mb is 0; default then 1024)",
    )
    p.add_argument("--max-ps", type=int, default=None)
    p.add_argument("--batch-multiple", type=int, default=8)
    p.add_argument("--workspace-mb", type=float, default=DEFAULT_WORKSPACE_MB)
    p.add_argument("--overhead-mb", type=float, default=MEASURED_CONTEXT_MB)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        result = plan_request(
            args.params,
            args.per_sample_ms,
            args.workers,
            args.bandwidth_gbps,
            args.gpu_memory,
            dtype=args.dtype,
            optimizer=args.optimizer,
            activation_mb=args.activation_mb,
            max_batch=args.max_batch,
            max_ps=args.max_ps,
            batch_multiple=args.batch_multiple,
            workspace_mb=args.workspace_mb,
            overhead_mb=args.overhead_mb,
        )
    except ValueError as exc:
        print(f"melon plan: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=2))
    return 0 if result.batch_size > 0 else 1


if __name__ == "__main__":
    raise SystemExit(plan_main())
