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
    "GPU_MODEL_ATTRIBUTE",
    "PLACEMENT_HANDLER",
    "NodeGpus",
    "Report",
    "PreflightError",
    "as_number",
    "node_gpus",
    "check",
    "ensure_gpus_fit",
    "ensure_models_placeable",
    "node_gpu_model",
    "placement_problems",
    "model_largest_gpu_mb",
]

GPU_RESOURCE = "yarn.io/gpu"
GPU_MEMORY_RESOURCE = "melon.io/gpu-memory"
#: the node attribute a node's GPU model is published in, under a NodeManager's prefix (its node-attributes
#: provider) or the RM's (``yarn nodeattributes``); the AM's placement constraint accepts either (GpuModels.java)
GPU_MODEL_ATTRIBUTE = "gpu-model"
GPU_MODEL_PREFIXES = ("nm.yarn.io", "rm.yarn.io")
#: the RM setting that must be ``scheduler`` for the AM's placement constraints (a role's ``gpu_models``)
PLACEMENT_HANDLER = "yarn.resourcemanager.placement-constraints.handler"


class PreflightError(ValueError):
    """The job cannot run on this cluster; the message lists every reason with its numbers."""


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPUs: ``gpus`` devices and ``gpu_memory_mb`` MiB over all of them."""

    node: str
    gpus: int
    gpu_memory_mb: int
    #: the node's ``gpu-model`` node attribute; None: it publishes none
    model: Optional[str] = None

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

    @property
    def models(self) -> List[str]:
        """The GPU models the running nodes publish, sorted."""
        return sorted({n.model for n in self.nodes if n.model})

    def capacity(self) -> str:
        per_node = ", ".join(
            f"{n.node}: {n.gpus} GPU(s), {n.gpu_memory_mb} MiB" + (f", {n.model}" if n.model else "")
            for n in self.nodes
        )
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
        node_gpu_model(node),
    )


def _listed(value: Any, key: str) -> List[Any]:
    """A JSON list the RM may send as a list, one bare object, ``{key: [...]}`` or nothing."""
    if isinstance(value, Mapping):
        value = value.get(key, [value] if value else [])
    if isinstance(value, Mapping):
        value = [value]
    return list(value) if isinstance(value, list) else []


def node_gpu_model(node: Mapping[str, Any]) -> Optional[str]:
    """The node's ``gpu-model`` node attribute from a ``/ws/v1/cluster/nodes`` entry (``nodeAttributesInfo``:
    ``{"nodeAttributeInfo": [{"prefix", "name", "type", "value"}, ...]}``, Hadoop 3.2+), a NodeManager's own
    (``nm.yarn.io``) before the RM's (``rm.yarn.io``); None when it publishes none."""
    found = {}
    for attribute in _listed(node.get("nodeAttributesInfo"), "nodeAttributeInfo"):
        if isinstance(attribute, Mapping) and attribute.get("name") == GPU_MODEL_ATTRIBUTE:
            found[attribute.get("prefix")] = attribute.get("value")
    for prefix in GPU_MODEL_PREFIXES:
        if found.get(prefix):
            return str(found[prefix])
    return None


def role_models(role: Any) -> List[str]:
    """The GPU models a RoleSpec or a plain dict accepts (``gpu_models``); empty: any."""
    models = role.get("gpu_models") if isinstance(role, Mapping) else getattr(role, "gpu_models", None)
    return [str(m) for m in models or ()]


def model_largest_gpu_mb(nodes: Iterable[Mapping[str, Any]], models: Iterable[str]) -> Optional[int]:
    """The largest GPU (MiB) of the running nodes of ``models``; None when none of them advertises GPU memory."""
    wanted = set(models)
    usable = [g for g in (node_gpus(n) for n in nodes) if g is not None and g.model in wanted]
    return int(max((g.per_gpu_mb for g in usable), default=0.0)) or None


def placement_problems(
    roles: Mapping[str, Any],
    handler: Optional[str],
    scheduler_type: Optional[str],
    no_node_attributes: Optional[str] = None,
) -> List[str]:
    """Why this cluster cannot place the roles that name GPU models (``gpu_models``) at all: the AM asks for them
    with placement constraints on node attributes, which Hadoop has from 3.2.0 and the ResourceManager takes only
    from a CapacityScheduler with ``yarn.resourcemanager.placement-constraints.handler`` set to ``scheduler``
    (otherwise it refuses the AM's request at run time). ``handler``: the RM's setting (None: not set, the default
    ``disabled``); ``scheduler_type``: ``/ws/v1/cluster/scheduler``'s ``type`` (None: not known);
    ``no_node_attributes``: why the cluster's Hadoop line has no node attributes (``hadoop.compat.missing_feature``
    of its version; None: it has them, or its version is not known, not refused on it)."""
    named = [name for name, role in roles.items() if role_models(role)]
    if not named:
        return []
    who = f"role{'s' if len(named) > 1 else ''} {', '.join(named)} name{'' if len(named) > 1 else 's'} GPU models"
    if no_node_attributes:  # no setting helps: the only problem worth naming
        return [f"{who}, but this cluster's {no_node_attributes}"]
    problems = []
    if scheduler_type and scheduler_type != "capacityScheduler":
        problems.append(
            f"{who}, which YARN places only with the CapacityScheduler (placement constraints on node attributes); "
            f"this cluster's scheduler is {scheduler_type}"
        )
    value = (handler or "").strip()
    if value != "scheduler":
        problems.append(
            f"{who}: the ResourceManager must take placement constraints, {PLACEMENT_HANDLER}=scheduler, "
            f"but it is {value or 'not set (disabled, the default)'}"
        )
    return problems


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


def role_context(role: Any, default: int = 0) -> int:
    """The context reserve a RoleSpec or a plain dict sets (``gpu_context``, MiB), else ``default``: what a shared
    task holds on its GPU beside its expected memory."""
    value = role.get("gpu_context_mb", role.get("gpu_context")) if isinstance(role, Mapping) else role.gpu_context_mb
    return default if value is None else int(as_number(value))


def role_large(role: Any) -> bool:
    """Whether a RoleSpec or a plain dict says ``large`` (its slot is then half a GPU, not a quarter)."""
    return bool(role.get("large", False) if isinstance(role, Mapping) else getattr(role, "large", False))


def _why_held(need: int, held: int, large: bool, context_mb: int) -> str:
    own = f"{need} MiB" if not context_mb else f"{need} MiB ({need - context_mb} + {context_mb} for the CUDA context)"
    share = policy.slot_share(large)
    if held > need:
        return f"its slot: {share}, above its own {own}"
    return f"its own memory, above its slot: {share}"


def _largest(pool: List[NodeGpus]) -> float:
    return max((n.per_gpu_mb for n in pool), default=0.0)


def _models_problem(name: str, models: List[str], cluster_models: List[str]) -> str:
    if cluster_models:
        return f"role {name} accepts GPU models {models}, but the cluster's nodes have {cluster_models}"
    where = " or ".join(f"{prefix}/{GPU_MODEL_ATTRIBUTE}" for prefix in GPU_MODEL_PREFIXES)
    return (
        f"role {name} accepts GPU models {models}, but no running node publishes its GPU model (the node "
        f"attribute {where})"
    )


def check(nodes: Iterable[Mapping[str, Any]], roles: Mapping[str, Any], context_mb: int = 0) -> Report:
    """Check the roles' GPU demand against the nodes (module docstring: the five rules). ``context_mb``: what each
    shared task reserves on its GPU besides its expected memory (the CUDA context and libraries) when its role does
    not say (:func:`role_context`).
    A role that names GPU models (``gpu_models``) is judged against the nodes of those models alone: none at all
    is a problem that names the models the cluster has, and its per-task rules and its slot take its nodes' GPUs."""
    usable = [g for g in (node_gpus(n) for n in nodes) if g is not None]
    report = Report(checked=bool(usable), nodes=usable)
    numbers = {name: (*role_numbers(role), role_large(role)) for name, role in roles.items()}
    contexts = {name: role_context(role, context_mb) for name, role in roles.items()}
    numbers = {name: (i, g, m + contexts[name] if m > 0 else 0, lg) for name, (i, g, m, lg) in numbers.items()}
    models = {name: role_models(role) for name, role in roles.items()}
    # the nodes each role may run on: those of its GPU models, or all
    pools = {name: [n for n in usable if n.model in wanted] if wanted else usable for name, wanted in models.items()}
    excl = {name: (i, g) for name, (i, g, _, _) in numbers.items() if g > 0}
    shared = {name: (i, m, lg) for name, (i, _, m, lg) in numbers.items() if m > 0}
    excl_gpus = sum(i * g for i, g in excl.values())
    # what YARN is asked for per shared task: its slot against the largest GPU it may get (submission.gpu_slot_mb)
    ask = {name: policy.ask_mb(m, int(_largest(pools[name])), large=lg) for name, (_, m, lg) in shared.items()}
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

    for name, wanted in models.items():
        if wanted and not pools[name] and name in set(excl) | set(shared):
            report.problems.append(_models_problem(name, wanted, report.models))
    for name, (instances, mem, _) in shared.items():
        pool = pools[name]
        role_largest = _largest(pool)
        if pool and mem > role_largest:
            where = max(pool, key=lambda n: n.per_gpu_mb)
            detail = (
                f"node {where.node}: {where.gpu_memory_mb} MiB over {where.gpus} GPU(s)"
                if role_largest > 0
                else "no node advertises melon.io/gpu-memory"
            )
            of = f"of its GPU models {models[name]}" if models[name] else "of any node"
            report.problems.append(
                f"role {name}: expected GPU memory {mem - contexts[name]} MiB per task"
                + (f" + {contexts[name]} MiB for the CUDA context" if contexts[name] else "")
                + " exceeds the largest GPU "
                f"{of}, {role_largest:.0f} MiB ({detail})"
            )
    for name, (instances, gpus) in excl.items():
        pool = pools[name]
        most = max((n.gpus for n in pool), default=0)
        if pool and gpus > most:
            on = f"no node of its GPU models {models[name]}" if models[name] else "no node"
            report.problems.append(f"role {name}: {gpus} GPU(s) per task, but {on} has more than {most}")
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
            pool = pools[name]
            if models[name]:  # its models' GPUs (the exclusive roles' may be on others: not taken away)
                room = sorted(int(mb) for n in pool for mb in [n.per_gpu_mb] * n.device_count if mb >= mem)
            else:
                room = [d for d in left_devices if d >= mem]
            if mem > _largest(pool) or not room:
                continue
            least[name] = min(policy.slot_mb(mem, d, large=large) for d in room)
            # rule 4, the ledgers' count: each GPU holds as many of the role's tasks as its slots there allow ...
            fit = sum(d // policy.slot_mb(mem, d, large=large) for d in room)
            # ... and YARN's: each node takes as many as its melon.io/gpu-memory holds of the role's ask
            yarn_fit = sum(n.gpu_memory_mb // ask[name] for n in pool) if ask[name] > 0 else instances
            if instances > fit:
                top = room[-1]
                held = policy.slot_mb(mem, top, large=large)
                report.problems.append(
                    f"role {name}: {instances} tasks share GPUs, but at most {fit} fit on the cluster at a time: "
                    f"each holds {held} MiB of a {top} MiB GPU ({_why_held(mem, held, large, contexts[name])})"
                )
            elif instances > yarn_fit:
                report.problems.append(
                    f"role {name}: {instances} tasks share GPUs, but YARN can place at most {yarn_fit} at a time: "
                    f"each asks for {ask[name]} MiB of {GPU_MEMORY_RESOURCE} (its slot on the "
                    f"{'largest GPU of its models' if models[name] else 'cluster' + chr(39) + 's largest GPU'}, "
                    f"{_largest(pool):.0f} MiB): "
                    + ", ".join(
                        f"node {n.node} ({n.gpu_memory_mb} MiB) takes {n.gpu_memory_mb // ask[name]}" for n in pool
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


def ensure_models_placeable(
    nodes: Optional[Iterable[Mapping[str, Any]]],
    roles: Mapping[str, Any],
    handler: Optional[str],
    scheduler_type: Optional[str],
    no_node_attributes: Optional[str] = None,
) -> None:
    """Before a job whose roles name GPU models is submitted: the cluster can place them (:func:`placement_problems`)
    and has nodes of each role's models (``nodes``: the RM's; None: not read, that part skipped). Raises
    :class:`PreflightError` naming every problem."""
    problems = placement_problems(roles, handler, scheduler_type, no_node_attributes)
    usable = [g for g in (node_gpus(n) for n in nodes or ()) if g is not None]
    if nodes is not None and not no_node_attributes:  # else no node has a model
        have = sorted({g.model for g in usable if g.model})
        for name, role in roles.items():
            wanted = role_models(role)
            if wanted and not any(g.model in wanted for g in usable):
                problems.append(_models_problem(name, wanted, have))
    if problems:
        raise PreflightError("the job cannot run on this cluster: " + "; ".join(problems))


def ensure_gpus_fit(nodes: Iterable[Mapping[str, Any]], roles: Mapping[str, Any], context_mb: int = 0) -> Report:
    """:func:`check`, raising :class:`PreflightError` with ``report.message`` when a rule fails."""
    report = check(nodes, roles, context_mb)
    if not report.ok:
        raise PreflightError(report.message)
    return report
