"""Queue pre-flight: is the job's queue there, and can the job's GPU demand ever fit in it? Pure, no network.

:func:`check` takes the CapacityScheduler's ``schedulerInfo`` (``YarnHook.scheduler()``, the RM's
``/ws/v1/cluster/scheduler``), the queue name from the job (spec field ``queue``; a leaf name such as ``tenant_a``
or its path ``root.tenant_a``) and the job's roles, and fails with a message naming what is wrong and the fix:

* the queue is not a leaf queue of this scheduler (the known leaf queues are listed);
* the queue is not RUNNING (STOPPED/DRAINING queues take no new applications);
* the whole gang cannot fit the queue's **maximum** (``maxEffectiveCapacity``: what the queue may grow to,
  ``maximum-capacity`` of the cluster, absolute or percentage config alike): its GPUs
  (``yarn.io/gpu``: instances x gpus of exclusive roles) or its GPU memory (``melon.io/gpu-memory``: instances x
  gpu_memory of shared roles). The AM starts training only when every task registered, so such a job would
  wait in the queue for ever.

When the job fits the maximum, the report also carries the queue's headroom now (maximum minus what the queue
uses): a job larger than the headroom waits (or, with preemption, gets its guarantee back from queues above
theirs); the caller logs it. A scheduler without queues in its answer (FIFO, Fair) is not checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from airflow_provider_melon.gpu.preflight import GPU_MEMORY_RESOURCE, GPU_RESOURCE, _role_numbers
from airflow_provider_melon.rm_json import as_dict, as_list, parse_resource

__all__ = ["QueueError", "QueueReport", "leaf_queues", "check", "ensure_fits"]


class QueueError(ValueError):
    """The job's queue is unknown, not running, or too small for the job; the message says which and the fix."""


@dataclass
class QueueReport:
    queue: str
    checked: bool = True
    state: str = "RUNNING"
    maximum: dict = field(default_factory=dict)
    used: dict = field(default_factory=dict)
    guaranteed: dict = field(default_factory=dict)
    demand: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)

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
        shares = (f"guaranteed {self.guaranteed.get(gpus, 0):g} GPU(s) / {self.guaranteed.get(mem, 0):g} MiB, "
                  f"maximum {self.maximum.get(gpus, 0):g} GPU(s) / {self.maximum.get(mem, 0):g} MiB, "
                  f"headroom now {self.headroom(gpus):g} GPU(s) / {self.headroom(mem):g} MiB")
        if self.problems:
            return f"queue {self.queue!r}: " + "; ".join(self.problems) + f" (queue {shares})"
        wait = "; the job waits for capacity (or for preemption to return the queue's guarantee)" if self.waits else ""
        return f"queue {self.queue!r}: the job fits ({shares}){wait}"


def leaf_queues(scheduler: Mapping[str, Any]) -> dict[str, dict]:
    """Leaf queues by name and by path (``tenant_a`` and ``root.tenant_a``)."""
    found: dict[str, dict] = {}

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


def _resources(value: Any) -> dict:
    return dict(parse_resource(value)["resources"]) if value else {}


def check(scheduler: Mapping[str, Any], queue: str, roles: Mapping[str, Any]) -> QueueReport:
    """Check ``queue`` and the roles' demand against the scheduler (module docstring)."""
    report = QueueReport(queue=queue)
    numbers = {name: _role_numbers(role) for name, role in roles.items()}
    report.demand = {GPU_RESOURCE: sum(i * g for i, g, _ in numbers.values()),
                     GPU_MEMORY_RESOURCE: sum(i * m for i, _, m in numbers.values())}
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
            "capacity-scheduler.xml and run `yarn rmadmin -refreshQueues`")
        return report
    report.state = str(info.get("state") or "RUNNING")
    report.maximum = _resources(info.get("maxEffectiveCapacity"))
    report.guaranteed = _resources(info.get("minEffectiveCapacity"))
    report.used = _resources(info.get("resourcesUsed"))
    if report.state != "RUNNING":
        report.problems.append(f"the queue is {report.state} and takes no new applications; fix: use a RUNNING "
                               "queue, or ask the admin to start it (state RUNNING, `yarn rmadmin -refreshQueues`)")
    if report.maximum:
        for resource, unit in ((GPU_RESOURCE, "GPU(s)"), (GPU_MEMORY_RESOURCE, "MiB of GPU memory")):
            want, most = report.demand[resource], float(report.maximum.get(resource, 0))
            if want > most:
                report.problems.append(
                    f"the job needs {want:g} {unit} at once (every task of the gang), more than the queue may "
                    f"ever hold ({most:g}, its maximum-capacity); fix: submit to a larger queue, ask for fewer or "
                    "smaller tasks, or ask the admin to raise the queue's maximum-capacity")
    return report


def ensure_fits(scheduler: Mapping[str, Any], queue: str, roles: Mapping[str, Any]) -> QueueReport:
    """:func:`check`, raising :class:`QueueError` with the report's message when it found a problem."""
    report = check(scheduler, queue, roles)
    if not report.ok:
        raise QueueError(report.message)
    return report
