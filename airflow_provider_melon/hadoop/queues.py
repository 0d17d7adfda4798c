"""Queue pre-flight: is the job's queue there, and can the job's GPU demand ever fit in it? Pure, no network.

:func:`check` takes the CapacityScheduler's ``schedulerInfo`` (``YarnHook.scheduler()``), the job's queue and its
roles, and fails with a message naming what is wrong and the fix: the queue is unknown or not RUNNING, the gang
exceeds the queue's maximum, or the CapacityScheduler's user limit can never grant this user the whole gang.
``docs/internals.md``, "Queue pre-flight", gives the rules and how the user limit is computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from airflow_provider_melon.gpu import policy
from airflow_provider_melon.gpu.preflight import (
    GPU_MEMORY_RESOURCE,
    GPU_RESOURCE,
    as_number,
    role_context,
    role_large,
    role_numbers,
)
from airflow_provider_melon.hadoop.rm_json import as_dict, as_list, parse_resource

__all__ = ["AM_RESOURCE", "QueueError", "QueueReport", "leaf_queues", "check", "ensure_queue_fits", "user_limit"]


class QueueError(ValueError):
    """The job's queue is unknown, not running, or too small for the job; the message says which and the fix."""


@dataclass
class QueueReport:
    queue: str
    checked: bool = True
    state: str = "RUNNING"
    maximum: dict[str, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    guaranteed: dict[str, float] = field(default_factory=dict)
    demand: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: what one user may hold of the queue, per resource (None: not known)
    user_limit: Optional[dict[str, float]] = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def headroom(self, resource: str) -> float:
        return max(0.0, float(self.maximum.get(resource, 0)) - float(self.used.get(resource, 0)))

    @property
    def waits(self) -> bool:
        """The job fits the queue's maximum but not what is free in it now."""
        return any(self.demand.get(r, 0) > self.headroom(r) for r in (GPU_RESOURCE, GPU_MEMORY_RESOURCE))

    @property
    def message(self) -> str:
        if not self.checked:
            return f"queue {self.queue!r}: not checked (the scheduler reports no queues)"
        gpus, mem = GPU_RESOURCE, GPU_MEMORY_RESOURCE
        shares = (
            f"guaranteed {self.guaranteed.get(gpus, 0):g} GPU(s) / {self.guaranteed.get(mem, 0):g} MiB, "
            f"maximum {self.maximum.get(gpus, 0):g} GPU(s) / {self.maximum.get(mem, 0):g} MiB, "
            f"headroom now {self.headroom(gpus):g} GPU(s) / {self.headroom(mem):g} MiB"
        )
        if self.problems:
            return f"queue {self.queue!r}: " + "; ".join(self.problems) + f" (queue {shares})"
        wait = "; the job waits for capacity (or for preemption to return the queue's guarantee)" if self.waits else ""
        return f"queue {self.queue!r}: the job fits ({shares}){wait}"


def leaf_queues(scheduler: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Leaf queues by name and by path (``tenant_a`` and ``root.tenant_a``)."""
    found: dict[str, dict[str, Any]] = {}

    def walk(queue: Mapping[str, Any]) -> None:
        children = [c for c in as_list(as_dict(queue.get("queues")).get("queue")) if isinstance(c, dict)]
        name = queue.get("queueName")
        if not children and name and name != "root":
            found[str(name)] = dict(queue)
            found[str(queue.get("queuePath") or name)] = dict(queue)
        for child in children:
            walk(child)

    walk(as_dict(scheduler))
    return found


def _resources(value: Any) -> dict[str, float]:
    return dict(parse_resource(value)["resources"]) if value else {}


#: the AM container every job adds to its user's use of the queue (``submission.build_submission``'s default)
AM_RESOURCE = {"memory-mb": 512, "vcores": 1, GPU_RESOURCE: 0, GPU_MEMORY_RESOURCE: 0}
#: rounding of a memory limit: YARN normalises it up to ``yarn.scheduler.minimum-allocation-mb`` (default 1024)
MEMORY_STEP_MB = 1024
_UNITS = {
    "memory-mb": "MiB of memory",
    "vcores": "vcore(s)",
    GPU_RESOURCE: "GPU(s)",
    GPU_MEMORY_RESOURCE: "MiB of GPU memory",
}


def _containers(
    roles: Mapping[str, Any], am: Mapping[str, int], context_mb: int, largest_gpu_mb: Optional[int]
) -> list[dict[str, float]]:
    """One resource dict per container of the gang, the AM first (role dicts: sizes in MiB). A shared task asks
    ``melon.io/gpu-memory`` for its need and the CUDA context, raised to its slot (``policy.ask_mb``)."""
    out: list[dict[str, float]] = [dict(am)]
    for role in roles.values():
        instances, gpus, need = role_numbers(role)
        context = role_context(role, context_mb)
        gpu_mb = policy.ask_mb(need + context, largest_gpu_mb, large=role_large(role)) if need > 0 else 0
        if isinstance(role, Mapping):
            memory, vcores = as_number(role.get("memory_mb", role.get("memory", 0))), as_number(role.get("vcores", 1))
        else:
            memory, vcores = role.memory_mb, role.vcores
        out += [{"memory-mb": memory, "vcores": vcores, GPU_RESOURCE: gpus, GPU_MEMORY_RESOURCE: gpu_mb}] * instances
    return out


def user_limit(info: Mapping[str, Any]) -> Optional[dict[str, float]]:
    """What one user may ever hold of the leaf queue ``info`` (its scheduler JSON), per resource; None where the
    answer does not say (no user-limit-factor, no absolute capacities)."""
    factor = info.get("userLimitFactor")
    abs_cap, abs_max = as_number(info.get("absoluteCapacity")), as_number(info.get("absoluteMaxCapacity"))
    maximum = _resources(info.get("maxEffectiveCapacity"))
    if factor is None or not maximum or abs_max <= 0:
        return None
    factor = as_number(factor)
    limit: dict[str, float] = {}
    for resource, most in maximum.items():
        if factor == -1 or abs_cap <= 0:
            limit[resource] = float(most)
            continue
        cluster = float(most) * 100.0 / abs_max
        capacity = math.ceil(round(cluster * abs_cap / 100.0, 6))
        if resource == "memory-mb":
            capacity = math.ceil(capacity / MEMORY_STEP_MB) * MEMORY_STEP_MB
        limit[resource] = min(float(most), capacity * factor)
    return limit


def check(
    scheduler: Mapping[str, Any],
    queue: str,
    roles: Mapping[str, Any],
    *,
    user: Optional[str] = None,
    am: Mapping[str, int] = AM_RESOURCE,
    context_mb: int = 0,
    largest_gpu_mb: Optional[int] = None,
) -> QueueReport:
    """Check ``queue`` and the roles' demand against the scheduler (module docstring). ``user``: who the job runs as
    (for the messages); ``am``: the AM container's resources; ``context_mb``: what each shared task asks of
    melon.io/gpu-memory besides its expected memory (the CUDA context); ``largest_gpu_mb``: the cluster's largest
    GPU, against which a shared task's slot is asked for (None: unknown, the need alone)."""
    report = QueueReport(queue=queue)
    containers = _containers(roles, am, context_mb, largest_gpu_mb)
    tasks = containers[1:]  # the AM's asks for no GPU
    report.demand = {resource: sum(c[resource] for c in tasks) for resource in (GPU_RESOURCE, GPU_MEMORY_RESOURCE)}
    if not as_dict(scheduler).get("queues"):
        report.checked = False
        return report
    leaves = leaf_queues(scheduler)
    info = leaves.get(queue)
    if info is None:
        known = sorted({str(q.get("queuePath") or q.get("queueName")) for q in leaves.values()})
        report.problems.append(
            f"no such leaf queue on this cluster (leaf queues: {', '.join(known) or 'none'}); fix: set the job's "
            "`queue` (spec field, or the operator's yarn_queue=) to one of those, or ask the cluster admin to add it to "
            "capacity-scheduler.xml and run `yarn rmadmin -refreshQueues`"
        )
        return report
    report.state = str(info.get("state") or "RUNNING")
    report.maximum = _resources(info.get("maxEffectiveCapacity"))
    report.guaranteed = _resources(info.get("minEffectiveCapacity"))
    report.used = _resources(info.get("resourcesUsed"))
    if report.state != "RUNNING":
        report.problems.append(
            f"the queue is {report.state} and takes no new applications; fix: use a RUNNING "
            "queue, or ask the admin to start it (state RUNNING, `yarn rmadmin -refreshQueues`)"
        )
    if report.maximum:
        for resource, unit in ((GPU_RESOURCE, "GPU(s)"), (GPU_MEMORY_RESOURCE, "MiB of GPU memory")):
            want, most = report.demand[resource], float(report.maximum.get(resource, 0))
            if want > most:
                report.problems.append(
                    f"the job needs {want:g} {unit} at once (every task of the gang), more than the queue may "
                    f"ever hold ({most:g}, its maximum-capacity); fix: submit to a larger queue, ask for fewer or "
                    "smaller tasks, or ask the admin to raise the queue's maximum-capacity"
                )
    if not report.problems:
        _check_user_limit(report, info, containers, user, am)
    return report


def _check_user_limit(
    report: QueueReport,
    info: Mapping[str, Any],
    containers: list[dict[str, float]],
    user: Optional[str],
    am: Mapping[str, int],
) -> None:
    who = f"user {user}" if user else "one user"
    path = str(info.get("queuePath") or f"root.{report.queue}")
    am_limit = _resources(info.get("userAMResourceLimit"))
    for resource in ("memory-mb", "vcores"):
        if am_limit.get(resource) and am.get(resource, 0) > am_limit[resource]:
            report.problems.append(
                f"the job's ApplicationMaster needs {am[resource]:g} {_UNITS[resource]}, more than {who} may use for "
                f"AMs in this queue ({am_limit[resource]:g}, from maximum-am-resource-percent); fix: ask the admin to "
                f"raise yarn.scheduler.capacity.{path}.maximum-am-resource-percent"
            )
    limit = user_limit(info)
    if limit is None:
        return
    report.user_limit = limit
    factor = as_number(info.get("userLimitFactor"))
    for resource, unit in _UNITS.items():
        total = sum(c.get(resource, 0) for c in containers)
        largest = max(c.get(resource, 0) for c in containers)
        ceiling = limit.get(resource)
        if ceiling is None or total - largest <= ceiling:
            continue
        capacity = ceiling / factor if factor > 0 else ceiling
        need = (total - largest) / capacity if capacity > 0 else float("inf")
        report.problems.append(
            f"{who} may hold at most {ceiling:g} {unit} of this queue (capacity "
            f"{as_number(info.get('absoluteCapacity')):g} % x user-limit-factor {factor:g}), and YARN grants one "
            f"container past that at most: the gang needs {total:g} {unit} at once (the AM and {len(containers) - 1} "
            f"task(s)), so its last tasks would never be granted while the first ones hold their containers; fix: "
            "submit to a queue where you may hold more, ask for fewer or smaller tasks, or ask the admin to raise "
            f"yarn.scheduler.capacity.{path}.user-limit-factor (to at least {math.ceil(need * 100) / 100:g}, or -1 "
            "for the queue's maximum)"
        )


def ensure_queue_fits(
    scheduler: Mapping[str, Any],
    queue: str,
    roles: Mapping[str, Any],
    *,
    user: Optional[str] = None,
    am: Mapping[str, int] = AM_RESOURCE,
    context_mb: int = 0,
    largest_gpu_mb: Optional[int] = None,
) -> QueueReport:
    """:func:`check`, raising :class:`QueueError` with the report's message when it found a problem."""
    report = check(scheduler, queue, roles, user=user, am=am, context_mb=context_mb, largest_gpu_mb=largest_gpu_mb)
    if not report.ok:
        raise QueueError(report.message)
    return report
