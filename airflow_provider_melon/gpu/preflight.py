"""Pre-flight: does a job's GPU demand fit the cluster at all? Pure, stdlib only, no network.

The train operator calls :func:`check` with the ResourceManager's nodes (``YarnHook.nodes()``) and the job's
roles just before staging and submitting, and fails the task with the report's message when something can
never fit, instead of leaving an application that waits in ACCEPTED or a gang that times out.
``docs/internals.md``, "Pre-flight", gives what a node offers and the five rules. A shared task counts as what it
holds on its GPU, its slot (``policy.slot_mb``), as the node's ledger and the AM's ask to YARN count it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Mapping, Optional

from airflow_provider_melon.gpu import policy

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


def role_numbers(role: Any) -> tuple[int, int, int]:
    """``(instances, gpus, gpu_memory_mb)`` of a RoleSpec or a plain dict (sizes in dicts are MiB)."""
    if isinstance(role, Mapping):
        instances = int(as_number(role.get("instances", 1))) or 1
        gpus = int(as_number(role.get("gpus")))
        mem = role.get("gpu_memory_mb", role.get("gpu_memory")) or 0
        if isinstance(mem, str) and not mem.strip().replace(".", "", 1).isdigit():
            raise ValueError(f"role gpu_memory {mem!r}: give MiB as a number here (or pass the JobSpec's roles)")
        return instances, gpus, int(as_number(mem))
    return int(role.instances), int(role.gpus or 0), int(role.gpu_memory_mb)


def role_large(role: Any) -> bool:
    """Whether a RoleSpec or a plain dict says ``large`` (its slot is then half a GPU, not a quarter)."""
    return bool(role.get("large", False) if isinstance(role, Mapping) else getattr(role, "large", False))


def _why_held(need: int, held: int, large: bool, context_mb: int) -> str:
    own = f"{need} MiB" if not context_mb else f"{need} MiB ({need - context_mb} + {context_mb} for the CUDA context)"
    share = policy.slot_share(large)
    if held > need:
        return f"its slot: {share}, above its own {own}"
    return f"its own memory, above its slot: {share}"


def check(nodes: Iterable[Mapping[str, Any]], roles: Mapping[str, Any], context_mb: int = 0) -> Report:
    """Check the roles' GPU demand against the nodes (module docstring: the five rules). ``context_mb``: what each
    shared task reserves on its GPU besides its expected memory (the CUDA context, ``[melon] gpu_context_mb``)."""
    usable = [g for g in (node_gpus(n) for n in nodes) if g is not None]
    report = Report(checked=bool(usable), nodes=usable)
    numbers = {name: (*role_numbers(role), role_large(role)) for name, role in roles.items()}
    numbers = {name: (i, g, m + context_mb if m > 0 else 0, lg) for name, (i, g, m, lg) in numbers.items()}
    excl = {name: (i, g) for name, (i, g, _, _) in numbers.items() if g > 0}
    shared = {name: (i, m, lg) for name, (i, _, m, lg) in numbers.items() if m > 0}
    excl_gpus = sum(i * g for i, g in excl.values())
    largest = report.largest_gpu_mb
    # what YARN is asked for per shared task: its slot against the cluster's largest GPU (submission.gpu_slot_mb)
    ask = {name: policy.ask_mb(m, int(largest), large=lg) for name, (_, m, lg) in shared.items()}
    shared_mb = sum(i * ask[name] for name, (i, _, _) in shared.items())
    report.demand = {
        "exclusive_gpus": excl_gpus,
        "shared_gpu_memory_mb": shared_mb,
        "roles": {
            name: {"instances": i, "gpus": g, "gpu_memory_mb": m, "held_mb": ask.get(name, 0)}
            for name, (i, g, m, _) in numbers.items()
        },
    }
    if not usable or not (excl or shared):
        return report

    for name, (instances, mem, _) in shared.items():
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
        devices = sorted(int(mb) for n in usable for mb in [n.per_gpu_mb] * n.device_count)
        taken = min(excl_gpus, len(devices))
        left_devices = [d for d in devices[taken:] if d > 0]
        left = sum(devices[taken:])
        before = len(report.problems)
        least = {}  # per role: the least a task of it can hold on a GPU left (its slot on the smallest that fits it)
        for name, (instances, mem, large) in shared.items():
            room = [d for d in left_devices if d >= mem]
            if mem > largest or not room:
                continue
            least[name] = min(policy.slot_mb(mem, d, large=large) for d in room)
            # rule 4, the ledgers' count: each GPU holds as many of the role's tasks as its slots there allow ...
            fit = sum(d // policy.slot_mb(mem, d, large=large) for d in room)
            # ... and YARN's: each node takes as many as its melon.io/gpu-memory holds of the role's ask
            yarn_fit = sum(n.gpu_memory_mb // ask[name] for n in usable) if ask[name] > 0 else instances
            if instances > fit:
                top = room[-1]
                held = policy.slot_mb(mem, top, large=large)
                report.problems.append(
                    f"role {name}: {instances} tasks share GPUs, but at most {fit} fit on the cluster at a time: "
                    f"each holds {held} MiB of a {top} MiB GPU ({_why_held(mem, held, large, context_mb)})"
                )
            elif instances > yarn_fit:
                report.problems.append(
                    f"role {name}: {instances} tasks share GPUs, but YARN can place at most {yarn_fit} at a time: "
                    f"each asks for {ask[name]} MiB of {GPU_MEMORY_RESOURCE} (its slot on the cluster's largest "
                    f"GPU, {largest:.0f} MiB): "
                    + ", ".join(
                        f"node {n.node} ({n.gpu_memory_mb} MiB) takes {n.gpu_memory_mb // ask[name]}" for n in usable
                    )
                )
        if len(report.problems) == before and least:
            # rule 5: together, every shared task holds at least its least slot on the GPUs left
            need = sum(shared[name][0] * mb for name, mb in least.items())
            if need > left:
                parts = " + ".join(f"{name} {shared[name][0]}x{mb} MiB" for name, mb in least.items())
                after = f" left after the {excl_gpus} exclusive GPU(s) (counted as the smallest)" if excl_gpus else ""
                report.problems.append(
                    f"the job's shared tasks hold at least {need} MiB of GPU memory in all ({parts}), "
                    f"the cluster has {left:.0f} MiB{after}"
                )
            elif shared_mb > report.total_gpu_memory_mb:
                parts = " + ".join(f"{name} {i}x{ask[name]} MiB" for name, (i, _, _) in shared.items())
                report.problems.append(
                    f"the job's shared tasks ask YARN for {shared_mb} MiB of {GPU_MEMORY_RESOURCE} in all ({parts}), "
                    f"the cluster advertises {report.total_gpu_memory_mb} MiB"
                )
    return report


def ensure_gpus_fit(nodes: Iterable[Mapping[str, Any]], roles: Mapping[str, Any], context_mb: int = 0) -> Report:
    """:func:`check`, raising :class:`PreflightError` with ``report.message`` when a rule fails."""
    report = check(nodes, roles, context_mb)
    if not report.ok:
        raise PreflightError(report.message)
    return report
