"""MelonPlanOperator: the parameter-server planner (Zou et al.) as a task, so a DAG can size its PS job.

It runs :func:`airflow_provider_melon.planner.plan_request` (the same function as ``melon plan``) on its
templated inputs, on the worker, with no I/O, and pushes the recommended ``batch_size``, ``ps`` and ``workers``
and the whole ``plan`` to XCom. ``docs/internals.md``, "The plan operator", describes the result and the failures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from airflow_provider_melon.gpu.memory_model import dtype_bytes, optimizer_slots
from airflow_provider_melon.planner import parse_size_mb, plan_request
from airflow_provider_melon.version_compat import AirflowFailException, BaseOperator

if TYPE_CHECKING:
    from airflow_provider_melon.version_compat import Context


class PlanInputs(BaseModel):
    """The planner's inputs, validated after templating (strings such as ``"25e6"`` are accepted)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())  # model_params is ours, not pydantic's

    model_params: float = Field(gt=0, description="trainable parameters")
    per_sample_ms: float = Field(gt=0, description="compute per sample on one worker's GPU, ms")
    workers: int = Field(ge=1)
    bandwidth_gbps: float = Field(gt=0, description="per-NIC bandwidth, Gbit/s")
    gpu_memory: Union[str, float] = Field(description="per-GPU memory for the job, e.g. 16GiB")
    dtype: str = "float32"
    optimizer: str = "sgd"
    activation_mb: float = Field(0.0, ge=0, description="activation MiB per sample; 0 = unknown")
    max_batch: Optional[int] = Field(None, ge=1)
    max_ps: Optional[int] = Field(None, ge=1)
    batch_multiple: int = Field(8, ge=1)

    @field_validator("gpu_memory")
    @classmethod
    def _size(cls, v: Union[str, float]) -> Union[str, float]:
        if parse_size_mb(v) <= 0:
            raise ValueError("must be > 0")
        return v

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        dtype_bytes(v)
        return v

    @field_validator("optimizer")
    @classmethod
    def _optimizer(cls, v: str) -> str:
        optimizer_slots(v)
        return v


class MelonPlanOperator(BaseOperator):
    """Recommend batch size, parameter servers and workers for a PS job (see the module docstring).

    :param model_params: trainable parameters of the model (e.g. ``25e6``).
    :param per_sample_ms: forward + backward compute per sample on one worker, in ms (measured at a batch
        where the device is busy, e.g. the profiler's step time divided by its batch).
    :param workers: workers the job would run.
    :param bandwidth_gbps: per-NIC network bandwidth, Gbit/s.
    :param gpu_memory: per-GPU memory available to one worker (``"16GiB"``, or MiB as a number).
    :param dtype: the weights' dtype (bytes per parameter on the wire and in memory).
    :param optimizer: optimizer name (its slots count in the memory model).
    :param activation_mb: activation memory per sample in MiB; 0 when unknown (the batch is then capped by
        ``max_batch``, default 1024).
    :param max_batch: a convergence cap on the per-worker batch.
    :param max_ps: most parameter servers allowed (default: ``workers``).
    :param batch_multiple: round the batch down to a multiple of this (8: tensor-core friendly).
    """

    template_fields = (
        "model_params",
        "per_sample_ms",
        "workers",
        "bandwidth_gbps",
        "gpu_memory",
        "dtype",
        "optimizer",
        "activation_mb",
        "max_batch",
        "max_ps",
    )
    ui_color = "#f0e4d0"

    def __init__(
        self,
        *,
        model_params: Any,
        per_sample_ms: Any,
        workers: Any,
        bandwidth_gbps: Any,
        gpu_memory: Any,
        dtype: str = "float32",
        optimizer: str = "sgd",
        activation_mb: Any = 0.0,
        max_batch: Any = None,
        max_ps: Any = None,
        batch_multiple: int = 8,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.model_params = model_params
        self.per_sample_ms = per_sample_ms
        self.workers = workers
        self.bandwidth_gbps = bandwidth_gbps
        self.gpu_memory = gpu_memory
        self.dtype = dtype
        self.optimizer = optimizer
        self.activation_mb = activation_mb
        self.max_batch = max_batch
        self.max_ps = max_ps
        self.batch_multiple = batch_multiple

    def inputs(self) -> PlanInputs:
        """The rendered inputs, validated; AirflowFailException naming each bad field (retrying cannot fix it)."""
        raw = {}
        for name in PlanInputs.model_fields:  # a value rendered empty or "None" is left out: default or required
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value.strip() in ("", "None")):
                raw[name] = value
        try:
            return PlanInputs(**raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {e.get('input')!r})" for e in exc.errors()
            )
            raise AirflowFailException(f"{self.task_id}: invalid planner input: {problems}") from None

    def execute(self, context: "Context") -> dict[str, Any]:
        args = self.inputs()
        result = plan_request(
            args.model_params,
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
        )
        for reason in result.reasons:
            self.log.info("plan: %s", reason)
        if result.batch_size <= 0:
            raise AirflowFailException(f"{self.task_id}: {result.reasons[-1]}")
        if result.communication_bound:
            self.log.warning("The plan is communication-bound: %s", result.reasons[-1])
        self.log.info(
            "Plan: batch %d per worker, %d parameter server(s), %d worker(s); compute %.4g s vs "
            "transfer %.4g s per step",
            result.batch_size,
            result.ps,
            result.workers,
            result.step_compute_s,
            result.step_transfer_s,
        )
        ti = context["ti"]
        ti.xcom_push(key="batch_size", value=result.batch_size)
        ti.xcom_push(key="ps", value=result.ps)
        ti.xcom_push(key="workers", value=result.workers)
        plan = result.to_dict()
        ti.xcom_push(key="plan", value=plan)
        return plan
