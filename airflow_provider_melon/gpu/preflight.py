"""Pre-flight: does a job's GPU demand fit the cluster at all? Pure, stdlib only, no network.

The train operator calls :func:`check` with the ResourceManager's nodes (``YarnHook.nodes()``) and the job's
roles just before staging and submitting, and fails the task with the report's message when something can
never fit, instead of leaving an application that waits in ACCEPTED or a gang that times out.
``docs/internals.md``, "Pre-flight", gives what a node offers and the four rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Mapping, Optional

__all__ = [
    "GPU_RESOURCE",
    "GPU_MEMORY_RESOURCE",
    "NodeGpus",
    "Report",
    "PreflightError",
    "as_number",
    "node_gpus",
    "check",
    "ensure_gpus_fit",
]

GPU_RESOURCE = "yarn.io/gpu"
GPU_MEMORY_RESOURCE = "melon.io/gpu-memory"


class PreflightError(ValueError):
    """The job cannot run on this cluster; the message lists every reason with its numbers."""


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPUs: ``gpus`` devices and ``gpu_memory_mb`` MiB over all of them."""

    node: str
    gpus: int
    gpu_memory_mb: int

    @property
    def per_gpu_mb(self) -> float:
        """Memory of one GPU: the node's total over its GPU count (the whole total when the count is 0)."""
        if self.gpu_memory_mb <= 0:
            return 0.0
        return self.gpu_memory_mb / self.gpus if self.gpus > 0 else float(self.gpu_memory_mb)

    @property
    def device_count(self) -> int:
        """GPUs for the memory arithmetic: the count, or 1 when only memory is advertised."""
        return self.gpus if self.gpus > 0 else (1 if self.gpu_memory_mb > 0 else 0)


@dataclass
class Report:
    """What :func:`check` found. ``problems`` empty means the job may fit; ``message`` says it all in one line."""

    checked: bool
    nodes: List[NodeGpus] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    demand: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def largest_gpu_mb(self) -> float:
        return max((n.per_gpu_mb for n in self.nodes), default=0.0)

    @property
    def max_node_gpus(self) -> int:
        return max((n.gpus for n in self.nodes), default=0)

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def total_gpu_memory_mb(self) -> int:
        return sum(n.gpu_memory_mb for n in self.nodes)

    def capacity(self) -> str:
        per_node = ", ".join(f"{n.node}: {n.gpus} GPU(s), {n.gpu_memory_mb} MiB" for n in self.nodes)
        return (
            f"{len(self.nodes)} running node(s) [{per_node}]; largest GPU {self.largest_gpu_mb:.0f} MiB, "
            f"at most {self.max_node_gpus} GPU(s) on one node, {self.total_gpus} GPU(s) and "
            f"{self.total_gpu_memory_mb} MiB of GPU memory in all"
        )

    @property
    def message(self) -> str:
        if not self.checked:
            return "pre-flight skipped: the ResourceManager reported no running node"
        if self.ok:
            return "pre-flight passed: " + self.capacity()
        return "the job cannot run on this cluster: " + "; ".join(self.problems) + ". Cluster: " + self.capacity()


def as_number(value: Any) -> float:
    """A number from a JSON value (an RM report, a role dict): 0 for a missing, unreadable or non-finite one."""
    try:
        number = float(value or 0)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def node_gpus(node: Mapping[str, Any]) -> Optional[NodeGpus]:
    """A node's GPUs from a ``YarnHook.nodes()`` entry (or a bare resources dict); None if it is not RUNNING."""
    state = node.get("state")
    if state is not None and str(state).upper() != "RUNNING":
        return None
    total = node.get("totalResource")
    resources = total.get("resources", total) if isinstance(total, Mapping) else node
    if not isinstance(resources, Mapping):
        resources = {}
    name = str(node.get("id") or node.get("nodeHostName") or node.get("name") or "node")
    return NodeGpus(
        name,
        max(0, int(as_number(resources.get(GPU_RESOURCE)))),
        max(0, int(as_number(resources.get(GPU_MEMORY_RESOURCE)))),
    )


def _role_numbers(role: Any) -> tuple[int, int, int]:
    """``(instances, gpus, gpu_memory_mb)`` of a RoleSpec or a plain dict (sizes in dicts are MiB)."""
    if isinstance(role, Mapping):
        instances = int(as_number(role.get("instances", 1))) or 1
        gpus = int(as_number(role.get("gpus")))
        mem = role.get("gpu_memory_mb", role.get("gpu_memory")) or 0
        if isinstance(mem, str) and not mem.strip().replace(".", "", 1).isdigit():
            raise ValueError(f"role gpu_memory {mem!r}: give MiB as a number here (or pass the JobSpec's roles)")
        return instances, gpus, int(as_number(mem))
    return int(role.instances), int(role.gpus or 0), int(role.gpu_memory_mb)


def check(nodes: Iterable[Mapping[str, Any]], roles: Mapping[str, Any], context_mb: int = 0) -> Report:
    """Check the roles' GPU demand against the nodes (module docstring: the four rules). ``context_mb``: what each
    shared task reserves on its GPU besides its expected memory (the CUDA context, ``[melon] gpu_context_mb``)."""
    usable = [g for g in (node_gpus(n) for n in nodes) if g is not None]
    report = Report(checked=bool(usable), nodes=usable)
    numbers = {name: _role_numbers(role) for name, role in roles.items()}
    numbers = {name: (i, g, m + context_mb if m > 0 else 0) for name, (i, g, m) in numbers.items()}
    excl = {name: (i, g) for name, (i, g, _) in numbers.items() if g > 0}
    shared = {name: (i, m) for name, (i, _, m) in numbers.items() if m > 0}
    excl_gpus = sum(i * g for i, g in excl.values())
    shared_mb = sum(i * m for i, m in shared.values())
    report.demand = {
        "exclusive_gpus": excl_gpus,
        "shared_gpu_memory_mb": shared_mb,
        "roles": {name: {"instances": i, "gpus": g, "gpu_memory_mb": m} for name, (i, g, m) in numbers.items()},
    }
    if not usable or not (excl or shared):
        return report

    largest = report.largest_gpu_mb
    for name, (instances, mem) in shared.items():
        if mem > largest:
            where = max(usable, key=lambda n: n.per_gpu_mb)
            detail = (
                f"node {where.node}: {where.gpu_memory_mb} MiB over {where.gpus} GPU(s)"
                if largest > 0
                else "no node advertises melon.io/gpu-memory"
            )
            report.problems.append(
                f"role {name}: expected GPU memory {mem - context_mb} MiB per task"
                + (f" + {context_mb} MiB for the CUDA context" if context_mb else "")
                + " exceeds the largest GPU "
                f"of any node, {largest:.0f} MiB ({detail})"
            )
    most = report.max_node_gpus
    for name, (instances, gpus) in excl.items():
        if gpus > most:
            report.problems.append(f"role {name}: {gpus} GPU(s) per task, but no node has more than {most}")
    total_gpus = report.total_gpus
    if excl_gpus > total_gpus:
        parts = " + ".join(f"{name} {i}x{g}" for name, (i, g) in excl.items())
        report.problems.append(f"the job needs {excl_gpus} whole GPU(s) ({parts}), the cluster has {total_gpus}")
    if shared:
        devices = sorted(mb for n in usable for mb in [n.per_gpu_mb] * n.device_count)
        taken = min(excl_gpus, len(devices))
        left = sum(devices[taken:])
        if shared_mb > left:
            parts = " + ".join(f"{name} {i}x{m} MiB" for name, (i, m) in shared.items())
            after = f" left after the {excl_gpus} exclusive GPU(s) (counted as the smallest)" if excl_gpus else ""
            report.problems.append(
                f"the job's shared tasks expect {shared_mb} MiB of GPU memory in all ({parts}), "
                f"the cluster has {left:.0f} MiB{after}"
            )
    return report


def ensure_gpus_fit(nodes: Iterable[Mapping[str, Any]], roles: Mapping[str, Any], context_mb: int = 0) -> Report:
    """:func:`check`, raising :class:`PreflightError` with ``report.message`` when a rule fails."""
    report = check(nodes, roles, context_mb)
    if not report.ok:
        raise PreflightError(report.message)
    return report
