"""``melon doctor``: is this cluster ready for MeLoN jobs?

Each check reads the real cluster through the provider's own hooks and gives a finding (ok, warn or fail) with
what it saw and, when not ok, the fix. ``submit_test=True`` (``melon doctor --submit-test``) then runs a tiny
job through the real path, one finding per step. ``docs/internals.md``, "melon doctor's checks", lists the checks.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
import zipfile
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from airflow_provider_melon import __version__, rm
from airflow_provider_melon.cli.doctor_submit import SubmitTest
from airflow_provider_melon.cli.findings import Finding, fail, ok, one_line, warn
from airflow_provider_melon.gpu import learned
from airflow_provider_melon.hadoop.nodemanager import nm_base_url
from airflow_provider_melon.hadoop.rm_json import GPU_MEMORY_RESOURCE, GPU_RESOURCE, YarnApiError, as_dict, as_list

DRC = "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
CALCULATOR_KEY = "yarn.scheduler.capacity.resource-calculator"
#: where the calculator goes, and why there: the CapacityScheduler reads capacity-scheduler.xml after yarn-site.xml
CALCULATOR_FIX = (
    f"capacity-scheduler.xml on the RM (each RM of an HA pair): {CALCULATOR_KEY} = {DRC}. The CapacityScheduler "
    "reads that file after yarn-site.xml, so a value there wins, and Hadoop's stock capacity-scheduler.xml sets the "
    "DefaultResourceCalculator. Then restart the RM: `yarn rmadmin -refreshQueues` does not change the calculator"
)
#: what the RM logs when it will not start on the DefaultResourceCalculator with GPU resource types declared
#: (CapacityScheduler.initScheduler, Hadoop 3.3 to 3.5)
CALCULATOR_REFUSAL = "RM uses DefaultResourceCalculator which used only memory as resource-type"
PRIORITY_KEY = "yarn.cluster.max-application-priority"
PLUGINS_KEY = "yarn.nodemanager.resource-plugins"
ALLOWED_GPUS_KEY = "yarn.nodemanager.resource-plugins.gpu.allowed-gpu-devices"
EXECUTOR_KEY = "yarn.nodemanager.container-executor.class"
NN_INFO_BEAN = "Hadoop:service=NameNode,name=NameNodeInfo"
#: a node may advertise this share less GPU memory than its GPUs hold for tasks before the doctor warns
GPU_MEMORY_SLACK = 0.05


#: what a check returns: a finding, or None where it does not apply (gpu-mig on a host without GPUs)
_R = TypeVar("_R", bound=Optional[Finding])


def _vcores(resource: Any) -> int:
    return int(as_dict(resource).get("vCores") or 0)


def calculator_evidence(known_types: set[str], leaf: Optional[dict]) -> tuple[Optional[bool], str]:
    """Whether the CapacityScheduler computes with every resource (True: the DominantResourceCalculator), with
    memory only (False: the DefaultResourceCalculator) or cannot be told (None), and what shows it. Where the
    calculator is set and what the RM's ``/conf`` says are beside the point: the RM reads yarn-site.xml, the
    CapacityScheduler capacity-scheduler.xml after it. Two things the scheduler does tell:

    - ``known_types``, the resource types the RM declares: with any beyond memory and vcores, the CapacityScheduler
      refuses to start on the DefaultResourceCalculator (``initScheduler``, Hadoop 3.3 to 3.5);
    - ``leaf``, a leaf queue of ``/ws/v1/cluster/scheduler``: its ApplicationMaster limit (``AMResourceLimit``) is the
      queue's resources × ``configuredMaxAMResourceLimit``, as the calculator computes it. The
      DefaultResourceCalculator keeps memory and gives 1 vcore; the DominantResourceCalculator scales the vcores too,
      to at least the queue's guaranteed vcores (``minEffectiveCapacity``) × that share, rounded up.
    """
    gpu_types = sorted({GPU_RESOURCE, GPU_MEMORY_RESOURCE} & known_types)
    if gpu_types:
        return True, (
            f"the RM declares {' and '.join(gpu_types)}, and the CapacityScheduler does not start on the "
            "DefaultResourceCalculator with resource types beyond memory and vcores"
        )
    if not leaf:
        return None, "no leaf queue to read"
    name = leaf.get("queuePath") or leaf.get("queueName")
    am = as_dict(leaf.get("AMResourceLimit"))
    got = _vcores(am)
    if got >= 2:
        return True, f"queue {name}'s ApplicationMaster limit counts vcores ({got})"
    share = float(leaf.get("configuredMaxAMResourceLimit") or 0)
    guaranteed = _vcores(leaf.get("minEffectiveCapacity"))
    every_resource = guaranteed * share
    if got == 1 and int(am.get("memory") or 0) > 0 and every_resource >= 2:
        return False, (
            f"queue {name}'s ApplicationMaster limit counts memory only ({am.get('memory')} MiB and 1 vcore, where "
            f"a calculator of every resource gives {guaranteed} guaranteed vcores × {share:g} = {every_resource:g} "
            "or more)"
        )
    return None, f"queue {name}'s ApplicationMaster limit ({am.get('memory', 0)} MiB, {got} vcore(s)) tells neither"


class Doctor:
    """Runs the checks against ``hook`` (a :class:`~airflow_provider_melon.hooks.melon.MelonHook`)."""

    def __init__(
        self,
        hook: Any,
        queue: str = "default",
        *,
        submit_test: bool = False,
        python: Optional[str] = None,
        timeout: float = 300.0,
        fs_from_connection: bool = True,
    ):
        self.hook = hook
        self.yarn = hook.yarn
        self.queue = queue
        self.submit_test = submit_test
        #: the job Python the probe job runs under (default: the connection's ``python``, as jobs naming none)
        self.python = python
        #: bound of each wait of the submit test (the app's start, its end)
        self.timeout = timeout
        #: fs.defaultFS must come from the yarn connection (Airflow's operators read it there); False: the CLI's
        #: --rm mode, where the RM's own fs.defaultFS is what ``melon submit`` uses too
        self.fs_from_connection = fs_from_connection
        self._nodes: Optional[list[dict]] = None
        self._nm_unreachable: dict[str, str] = {}
        #: why the RM's /conf could not be read (its admins only), once a check found so
        self._conf_refused: Optional[str] = None
        self._hdfs_reachable = False

    def run(self) -> list[Finding]:
        findings = [self._guard("resourcemanager", self.check_rm)]
        if findings[0].status == "fail":  # nothing else of YARN can be read
            rest: list[Callable[[], Finding]] = []
        else:
            rest = [
                self.check_resource_types,
                self.check_scheduler,
                self.check_nodes,
                self.check_queue,
                self.check_nodemanagers,
                self.check_gpu_plugin,
                self.check_placement,
            ]
        rest += [self.check_hdfs, self.check_datanodes, self.check_am_jar, self.check_auth]
        if findings[0].status != "fail":
            rest.append(self.check_hadoop_java)
        findings += [self._guard(fn.__name__.removeprefix("check_").replace("_", "-"), fn) for fn in rest]
        mig = self._guard("gpu-mig", self.check_gpu_mig)
        if mig is not None:  # only where this host has GPUs (doctor run on a GPU node)
            findings.append(mig)
        if findings[0].status != "fail":
            advertised = self._guard("gpu-memory", self.check_gpu_memory)
            if advertised is not None:  # only on a GPU node that runs a NodeManager
                findings.append(advertised)
        if self.submit_test:
            if any(f.status == "fail" for f in findings):
                findings.append(
                    fail(
                        "submit-test",
                        "not run: fix the failed checks above first",
                        "run `melon doctor --submit-test` again once they pass",
                    )
                )
            else:
                findings += SubmitTest(
                    self.hook, self.nodes(), queue=self.queue, python=self.python, timeout=self.timeout
                ).run()
        return findings

    @staticmethod
    def _guard(name: str, fn: Callable[[], _R]) -> _R | Finding:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a check that breaks is a finding, not a crash
            return fail(name, f"{type(exc).__name__}: {exc}", "see the detail")

    # ---- YARN ----------------------------------------------------------------------------------------------
    def check_placement(self) -> Finding:
        """Whether the RM places by the scheduler plug-in: its MBean on the RM's ``/jmx`` (there once the RM loaded
        the plug-in's node order, or ran a GPU job's asks through its allocator), its version against this
        provider's, and what it did so far."""
        fix = (
            f"put the provider's {rm.SCHEDULER_JAR.name} on the ResourceManager's classpath and enable multi-node "
            f"placement with {rm.PACKING_POLICY} in capacity-scheduler.xml, then restart the RM "
            "(docs/scheduler-plugin.md)"
        )
        try:
            beans = self.yarn.rm_jmx(rm.STATS_MBEAN)
        except YarnApiError as exc:
            return warn("placement", f"the RM's /jmx could not be read ({one_line(exc)})", fix)
        no_order = self._no_multi_node()
        if no_order:
            return self._placement_without_order(no_order, beans)
        if not beans:
            return warn(
                "placement",
                "the RM has not loaded MeLoN's scheduler plug-in: YARN fills whichever node heartbeats, and grants a "
                "share on a node whose free GPU memory is split between GPUs none of which holds it (the task then "
                "exits 75 and is asked for elsewhere)",
                fix,
            )
        bean = beans[0]
        version = str(bean.get("Version"))
        done = (
            f"{bean.get('FitChecks', 0)} node(s) checked for a GPU that holds an ask, "
            f"{bean.get('FitRefusals', 0)} turned down"
        )
        if not bean.get("PolicyLoaded"):
            return warn(
                "placement",
                f"the scheduler plug-in {version} is on the RM's classpath ({done}), but multi-node placement does "
                f"not order the nodes by {rm.PACKING_POLICY}: YARN fills whichever node heartbeats",
                fix,
            )
        detail = f"the scheduler plug-in {version} is the CapacityScheduler's node order (best fit by GPU memory; " + (
            f"{bean.get('SortedNodes', 0)} node(s) in its last order)"
            if bean.get("SortPasses")
            else "nothing placed yet)"
        )
        detail += f"; {done}"
        if version != __version__:
            return warn(
                "placement",
                detail + f"; this provider is {__version__}",
                f"replace the RM's {rm.SCHEDULER_JAR.name} with this provider's, then restart the RM",
            )
        return ok("placement", detail)

    def _no_multi_node(self) -> Optional[str]:
        """Why the cluster has no multi-node placement (Hadoop 3.1), None where it has or its version is unknown."""
        from airflow_provider_melon.hadoop import compat as hc

        try:
            version = hc.hadoop_version(self.yarn.cluster_info())
        except Exception:  # noqa: BLE001 - an unread version is not a reason to skip the plug-in's own check
            return None
        return hc.missing_feature(version, "multi-node-placement")

    def _placement_without_order(self, missing: str, beans: list[dict[str, Any]]) -> Finding:
        """Hadoop 3.1: the plug-in's node order cannot load (no ``MultiNodeLookupPolicy``), YARN places on each
        NodeManager's heartbeat; the plug-in's allocator (``GpuFitPlacement``) still checks that a GPU holds each ask
        where its jar is on the RM's classpath."""
        heartbeat = f"{missing}: YARN places on NodeManager heartbeats"
        if not beans:
            return warn(
                "placement",
                heartbeat + ", and the RM has not loaded the scheduler plug-in's GPU-fit allocator (no GPU job "
                "placed yet, or its jar is not on the RM's classpath)",
                f"put the provider's {rm.SCHEDULER_JAR.name} on the ResourceManager's classpath: its allocator works "
                "on this line, its node order needs Hadoop 3.2+ (docs/hadoop-compat.md)",
            )
        bean = beans[0]
        return ok(
            "placement",
            heartbeat + f"; the scheduler plug-in {bean.get('Version')}'s allocator checked "
            f"{bean.get('FitChecks', 0)} node(s) for a GPU that holds an ask, {bean.get('FitRefusals', 0)} turned down",
        )

    def check_rm(self) -> Finding:
        states = []
        for base, info in self.yarn.ha_states().items():
            if isinstance(info, dict):
                states.append(
                    f"{base} {info.get('haState')} (Hadoop {info.get('resourceManagerVersion', '?')}, "
                    f"{info.get('state', '?')})"
                )
            else:
                states.append(f"{base} {info}")
        if not any(" ACTIVE " in s for s in states):
            return fail(
                "resourcemanager",
                "; ".join(states),
                "start the ResourceManager, or fix the yarn connection's host (RM web address, "
                "e.g. http://rm:8088; list both RMs of an HA pair). An RM that does not start, its log saying "
                f"'{CALCULATOR_REFUSAL} but invalid resource-types specified', runs on capacity-scheduler.xml's "
                f"calculator, not yarn-site.xml's: {CALCULATOR_FIX}",
            )
        return ok("resourcemanager", "; ".join(states))

    def nodes(self) -> list[dict]:
        if self._nodes is None:
            self._nodes = self.yarn.nodes(["RUNNING"])
        return self._nodes

    def check_resource_types(self) -> Finding:
        declared: set[str] = set()
        for node in self.nodes():
            declared |= set(as_dict(node["totalResource"].get("units")))
        vector = str(as_dict(self.yarn.scheduler().get("queueCapacityVectorInfo")).get("configuredCapacityVector"))
        declared |= {r for r in (GPU_RESOURCE, GPU_MEMORY_RESOURCE) if r in vector}
        missing = [r for r in (GPU_RESOURCE, GPU_MEMORY_RESOURCE) if r not in declared]
        if missing:
            return fail(
                "resource-types",
                f"not declared: {', '.join(missing)} (declared: "
                f"{', '.join(sorted(declared)) or 'memory and vcores only'})",
                "resource-types.xml on the RM and every NM: yarn.resource-types=yarn.io/gpu,"
                "melon.io/gpu-memory and yarn.resource-types.melon.io/gpu-memory.units=Mi; restart them",
            )
        return ok("resource-types", f"{GPU_RESOURCE} and {GPU_MEMORY_RESOURCE} declared")

    def check_scheduler(self) -> Finding:
        info = self.yarn.scheduler()
        kind = info.get("type", "?")
        if kind != "capacityScheduler":
            return warn(
                "scheduler",
                f"{kind}: MeLoN is tested on the CapacityScheduler",
                "yarn.resourcemanager.scheduler.class = ...scheduler.capacity.CapacityScheduler",
            )
        leaves = self._leaf_queues(info)
        leaf = leaves.get(self.queue) or next(iter(leaves.values()), None)  # any leaf shows the calculator
        every, evidence = calculator_evidence(self._known_types(info), leaf)
        named = (self._rm_conf(CALCULATOR_KEY) or "").strip()  # the RM's yarn-site.xml, not the scheduler's
        site = (
            f"; yarn-site.xml names {named.rsplit('.', 1)[-1]} (the RM's /conf), which is not what it runs on"
            if (named == DRC and every is False)
            else ""
        )
        if every is False:
            return fail(
                "scheduler",
                "CapacityScheduler on the DefaultResourceCalculator: it places containers by memory alone, GPUs and "
                f"GPU memory ignored: {evidence}{site}",
                CALCULATOR_FIX,
            )
        if every is None:
            if named and named != DRC:
                return fail(
                    "scheduler",
                    f"CapacityScheduler; the RM's configuration names {named}, not the DominantResourceCalculator, "
                    f"and the scheduler does not tell otherwise ({evidence})",
                    CALCULATOR_FIX,
                )
            return warn(
                "scheduler",
                f"CapacityScheduler; which calculator it runs on cannot be told from here ({evidence}; no GPU "
                "resource type declared)"
                + (
                    "; yarn-site.xml names the DominantResourceCalculator, but a value in capacity-scheduler.xml wins"
                    if named
                    else ""
                ),
                CALCULATOR_FIX,
            )
        top = self._rm_conf(PRIORITY_KEY)
        if top is None or not top.strip().lstrip("-").isdigit() or int(top) < learned.MAX_PRIORITY:
            shown = self._conf_refused or top or "0 (unset)"
            return warn(
                "scheduler",
                f"CapacityScheduler on the DominantResourceCalculator ({evidence}); {PRIORITY_KEY} is "
                f"{shown}: "
                f"priority: auto (longer runs first) needs {learned.MAX_PRIORITY}, so its runs queue below that",
                f"yarn-site.xml on the RM: {PRIORITY_KEY} = {learned.MAX_PRIORITY}; restart the RM",
            )
        return ok(
            "scheduler",
            f"CapacityScheduler on the DominantResourceCalculator ({evidence}); application priorities up to {top}",
        )

    def _rm_conf(self, name: str) -> Optional[str]:
        """The RM's ``/conf`` value of ``name``; None, noted, where the RM keeps ``/conf`` to its admins
        (``hadoop.security.instrumentation.requires.admin``): the scheduler tells the calculator anyway."""
        try:
            return self.yarn.rm_conf(name)
        except YarnApiError as exc:
            if exc.status not in (401, 403):
                raise
            self._conf_refused = f"unknown (the RM's /conf answered HTTP {exc.status} to this user)"
            return None

    def _known_types(self, scheduler: dict) -> set[str]:
        """The resource types the RM declares: those of its scheduler's maximum allocation and of its nodes."""
        infos = as_dict(as_dict(scheduler.get("maximumAllocation")).get("resourceInformations"))
        known = {str(i.get("name")) for i in as_list(infos.get("resourceInformation")) if isinstance(i, dict)}
        for node in self.nodes():
            known |= set(as_dict(node["totalResource"].get("units")))
        return known

    def check_nodes(self) -> Finding:
        nodes = self.nodes()
        if not nodes:
            return fail(
                "nodes",
                "no RUNNING NodeManager",
                "start the NodeManagers; check their logs for why "
                "they are UNHEALTHY or LOST (disks over 90 % full are a common cause)",
            )
        parts, without = [], []
        for node in nodes:
            res = node["totalResource"]["resources"]
            gpus, mem = res.get(GPU_RESOURCE, 0), res.get(GPU_MEMORY_RESOURCE, 0)
            parts.append(f"{node.get('id')}: {gpus} GPU(s), {mem} MiB GPU memory")
            if not mem or not gpus:
                without.append(str(node.get("id")))
        detail = "; ".join(parts)
        if len(without) == len(nodes):
            return fail(
                "nodes",
                detail,
                "each GPU node's node-resources.xml: yarn.nodemanager.resource-type."
                "yarn.io/gpu = <GPUs> and yarn.nodemanager.resource-type.melon.io/gpu-memory = <GPUs x MiB "
                "per GPU>; restart the NodeManager",
            )
        if without:
            return warn(
                "nodes",
                detail,
                f"{', '.join(without)} advertise no GPU memory: fine for CPU-only "
                "nodes, else set node-resources.xml there",
            )
        return ok("nodes", detail)

    def _leaf_queues(self, scheduler: Optional[dict] = None) -> dict[str, dict]:
        """Each leaf queue of ``scheduler`` (default: the RM's ``/ws/v1/cluster/scheduler``) by name and by path."""
        found: dict[str, dict] = {}

        def walk(queue: dict) -> None:
            children = as_list(as_dict(queue.get("queues")).get("queue")) if queue.get("queues") else []
            if not children and queue.get("queueName") and queue.get("queueName") != "root":
                found[str(queue["queueName"])] = queue
                found[str(queue.get("queuePath") or queue["queueName"])] = queue
            for child in children:
                if isinstance(child, dict):
                    walk(child)

        walk(self.yarn.scheduler() if scheduler is None else scheduler)
        return found

    def check_queue(self) -> Finding:
        leaves = self._leaf_queues()
        queue = leaves.get(self.queue)
        if queue is None:
            names = sorted({str(q.get("queuePath") or q.get("queueName")) for q in leaves.values()})
            return fail(
                "queue",
                f"no leaf queue {self.queue!r}; leaf queues: {', '.join(names) or 'none'}",
                f"use one of those (spec field `queue`), or add {self.queue!r} to capacity-scheduler.xml "
                "and run `yarn rmadmin -refreshQueues`",
            )
        state = queue.get("state", "RUNNING")
        capacity = float(queue.get("absoluteCapacity", queue.get("capacity", 0)) or 0)
        maximum = float(queue.get("absoluteMaxCapacity", queue.get("maxCapacity", 0)) or 0)
        am_share = queue.get("configuredMaxAMResourceLimit")
        am_share = f"{float(am_share) * 100:g} %" if am_share not in (None, "") else "?"
        detail = (
            f"{queue.get('queuePath', self.queue)}: {state}, capacity {capacity:g} %, maximum {maximum:g} %, "
            f"at most {am_share} for ApplicationMasters"
        )
        if state != "RUNNING":
            return fail(
                "queue",
                detail,
                "start the queue (state RUNNING in capacity-scheduler.xml), then `yarn rmadmin -refreshQueues`",
            )
        if maximum <= 0:
            return fail("queue", detail, "give the queue capacity in capacity-scheduler.xml")
        return ok("queue", detail)

    def check_gpu_mig(self) -> Optional[Finding]:
        """This host's GPUs (NVML), when it has any: MeLoN refuses a GPU in MIG mode (``gpu/devices.py``: it shares a
        GPU by memory and does not address MIG instances; the executor exits 75 on a node with only MIG GPUs). None
        on a host without NVML (a client machine): nothing to say about GPU nodes from there."""
        from airflow_provider_melon.gpu import devices  # noqa: PLC0415 - NVML only for this check

        gpus = devices.nvml_gpus(env={})
        if not gpus and not gpus.mig:
            return None
        if gpus.mig:
            return fail(
                "gpu-mig",
                gpus.reason,
                "; ".join(
                    f"nvidia-smi -i {i} -mig 0 (as root, the GPU idle), or keep GPU {i} out of MeLoN" for i in gpus.mig
                ),
            )
        return ok("gpu-mig", f"this host's {len(gpus)} GPU(s): none in MIG mode")

    def check_gpu_memory(self) -> Optional[Finding]:
        """This host's NodeManager: the ``melon.io/gpu-memory`` it advertises against what its GPUs hold for tasks,
        NVML's total less the driver's own per GPU (``ledger.driver_mb``: what the node's ledger divides among tasks;
        the idle GPU's used memory). Only the GPUs MeLoN shares count (the yarn connection's ``CUDA_VISIBLE_DEVICES``,
        where YARN's GPU plugin keeps others). None on a host without NVML or that runs no RUNNING NodeManager."""
        from airflow_provider_melon.gpu import devices, ledger  # noqa: PLC0415 - NVML only for this check

        visible = dict(getattr(self.hook, "container_env", {}) or {})
        gpus = devices.nvml_gpus(env={k: v for k, v in visible.items() if k == "CUDA_VISIBLE_DEVICES"})
        if not gpus:
            return None
        here = {socket.gethostname(), socket.getfqdn()}
        mine = [n for n in self.nodes() if str(n.get("nodeHostName")) in here]
        if not mine:
            return None
        advertised = sum(int(n["totalResource"]["resources"].get(GPU_MEMORY_RESOURCE, 0) or 0) for n in mine)
        usable = sum(d.total_mb - ledger.driver_mb(d) for d in gpus)
        parts = ", ".join(f"GPU {d.index}: {d.total_mb} - {ledger.driver_mb(d)}" for d in gpus)
        detail = (
            f"{', '.join(str(n.get('id')) for n in mine)} advertises {advertised} MiB of {GPU_MEMORY_RESOURCE}; its "
            f"{len(gpus)} GPU(s) hold {usable} MiB for tasks (NVML's total less the driver's own: {parts})"
        )
        fix = (
            f"this node's node-resources.xml: yarn.nodemanager.resource-type.{GPU_MEMORY_RESOURCE} = {usable}Mi (NVML's "
            "total less the idle GPU's used memory, summed over the GPUs MeLoN shares); restart the NodeManager"
        )
        if advertised > usable:
            return fail(
                "gpu-memory",
                detail + f": YARN grants {advertised - usable} MiB the GPUs do not have, and the tasks sent there "
                "exit 75 and are asked for again",
                fix,
            )
        if advertised < usable * (1 - GPU_MEMORY_SLACK):
            return warn("gpu-memory", detail + f": YARN leaves {usable - advertised} MiB of them unused", fix)
        return ok("gpu-memory", detail)

    # ---- NodeManagers: reachable from here, YARN's own GPU plugin ------------------------------------------
    def _nm_url(self, node: dict) -> Optional[str]:
        return nm_base_url(node.get("nodeHTTPAddress"), self.yarn.active_rm)

    def check_nodemanagers(self) -> Finding:
        """Every RUNNING NodeManager's web port answers from here: Airflow's workers and triggerer read the job's
        output there (``/ws/v1/node/containers/.../logs``), the UI links to it."""
        nodes = self.nodes()
        if not nodes:
            return fail("nodemanagers", "no RUNNING NodeManager to reach", "see the nodes check")
        reached, bad = [], []
        for node in nodes:
            url = self._nm_url(node)
            try:
                resp = self.yarn.get_url(f"{url}/ws/v1/node/info", headers={"Accept": "application/json"})
                if resp.status_code != 200:
                    raise RuntimeError(f"HTTP {resp.status_code}")
                reached.append(str(node.get("nodeHTTPAddress")))
            except Exception as exc:  # noqa: BLE001 - each unreachable node is named
                cause = one_line(exc)
                self._nm_unreachable[str(node.get("id"))] = cause
                bad.append(f"{node.get('nodeHTTPAddress')} ({node.get('id')}): {cause}")
        if bad:
            return fail(
                "nodemanagers",
                f"web port unreachable from here: {'; '.join(bad)}"
                + (f" (reachable: {', '.join(reached)})" if reached else ""),
                "open the NodeManagers' web port (yarn.nodemanager.webapp.address, 8042 by default) to "
                "every host running Airflow's workers, triggerer and api-server: job logs are read there; "
                "a NodeManager that crashed shows here before the RM marks it LOST",
            )
        return ok(
            "nodemanagers", f"web port of {len(reached)} NodeManager(s) reachable from here: {', '.join(reached)}"
        )

    def _nm_conf(self, node: dict, name: str) -> Optional[str]:
        resp = self.yarn.get_url(f"{self._nm_url(node)}/conf", {"name": name}, headers={"Accept": "application/json"})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise RuntimeError(f"{self._nm_url(node)}/conf answered HTTP {resp.status_code}")
        value = as_dict(resp.json().get("property")).get("value")
        return None if value in (None, "") else str(value).strip()

    def check_gpu_plugin(self) -> Finding:
        """YARN's GPU plugin on a NodeManager assigns whole GPUs to the containers asking ``yarn.io/gpu`` and, with
        the LinuxContainerExecutor's cgroups, denies every other GPU it manages: a shared-mode task (0
        ``yarn.io/gpu``, some ``melon.io/gpu-memory``) then sees none. MeLoN coexists with it by sharing only the
        GPUs left out of ``allowed-gpu-devices`` (docs/gpu-plugin.md)."""
        container_env = dict(getattr(self.hook, "container_env", {}) or {})
        rows, worst, unread = [], "ok", []
        for node in self.nodes():
            node_id = str(node.get("id"))
            if node_id in self._nm_unreachable:
                unread.append(node_id)
                continue
            try:
                plugins = self._nm_conf(node, PLUGINS_KEY) or ""
                if GPU_RESOURCE not in [p.strip() for p in plugins.split(",")]:
                    continue
                allowed = self._nm_conf(node, ALLOWED_GPUS_KEY) or "auto"
                executor = self._nm_conf(node, EXECUTOR_KEY) or "DefaultContainerExecutor"
            except Exception as exc:  # noqa: BLE001 - an NM whose conf cannot be read is named
                unread.append(f"{node_id} ({one_line(exc)})")
                continue
            isolating = "LinuxContainerExecutor" in executor
            gpus = node["totalResource"]["resources"].get(GPU_RESOURCE, 0)
            if allowed.lower() == "auto":
                level = "fail" if isolating else "warn"
                rows.append(
                    f"{node_id}: the plugin manages every GPU ({gpus} discovered, allowed-gpu-devices=auto)"
                    + (
                        ", isolated by the LinuxContainerExecutor's device cgroups: shared-mode tasks are "
                        "denied every GPU"
                        if isolating
                        else f" on the {executor.rsplit('.', 1)[-1]} (no device isolation now; with the "
                        "LinuxContainerExecutor shared-mode tasks would be denied every GPU)"
                    )
                )
            elif "CUDA_VISIBLE_DEVICES" not in container_env:
                level = "warn"
                rows.append(
                    f"{node_id}: the plugin manages GPUs {allowed}, but the yarn connection's "
                    "container_env sets no CUDA_VISIBLE_DEVICES: MeLoN tasks may pick one of the plugin's"
                )
            else:
                level = "ok"
                rows.append(
                    f"{node_id}: the plugin manages GPUs {allowed}; MeLoN shares CUDA_VISIBLE_DEVICES="
                    f"{container_env['CUDA_VISIBLE_DEVICES']}"
                )
            worst = max(worst, level, key=("ok", "warn", "fail").index)
        tail = f"; conf not readable on {', '.join(unread)}" if unread else ""
        if not rows:
            return ok(
                "gpu-plugin",
                f"YARN's GPU plugin ({PLUGINS_KEY}={GPU_RESOURCE}) is off on every NodeManager"
                + tail
                + ": MeLoN's GPU accounting alone",
            )
        fix = (
            "on each GPU node give the plugin only the GPUs for whole-GPU jobs "
            f"({ALLOWED_GPUS_KEY}=<index:minor,...>, never auto) and leave MeLoN's shared GPUs out of it; set "
            "node-resources.xml's melon.io/gpu-memory to those GPUs' memory and CUDA_VISIBLE_DEVICES=<their "
            "indexes> in the yarn connection's container_env; or turn the plugin off on MeLoN's nodes "
            "(docs/gpu-plugin.md)"
        )
        detail = "; ".join(rows) + tail
        return Finding("gpu-plugin", worst, detail, "" if worst == "ok" else fix)

    # ---- HDFS, DataNodes -----------------------------------------------------------------------------------
    def _webhdfs_where(self) -> str:
        url = getattr(self.hook._hdfs, "url", None) if getattr(self.hook, "_hdfs", None) is not None else None
        return str(url) if url else f"connection {self.hook.webhdfs_conn_id}"

    def check_datanodes(self) -> Finding:
        """Every live DataNode's HTTP port answers from here: WebHDFS redirects each read and write to one."""
        if not self._hdfs_reachable:
            return warn("datanodes", "not checked: the NameNode is not reachable", "see the hdfs check")
        client = self.hook.hdfs
        base = str(getattr(client, "url", "")).rstrip("/")
        session = getattr(client, "_session", None)
        import requests

        resp = (session or requests).get(f"{base}/jmx", params={"qry": NN_INFO_BEAN}, timeout=30)
        if resp.status_code != 200:
            return warn(
                "datanodes",
                f"the NameNode's /jmx answered HTTP {resp.status_code}: DataNodes not listed",
                "let this user read the NameNode's /jmx (hadoop.security.instrumentation.requires.admin)",
            )
        beans = resp.json().get("beans") or [{}]
        live = json.loads(beans[0].get("LiveNodes") or "{}")
        if not live:
            return fail("datanodes", "the NameNode reports no live DataNode", "start the DataNodes; check their logs")
        reached, bad = [], []
        for name, info in sorted(live.items()):
            address = str(
                info.get("infoSecureAddr")
                if str(base).startswith("https") and info.get("infoSecureAddr")
                else info.get("infoAddr") or ""
            )
            host, _, port = address.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=10):
                    reached.append(address)
            except (OSError, ValueError) as exc:
                bad.append(f"{address or name} ({type(exc).__name__}: {exc})")
        if bad:
            return fail(
                "datanodes",
                f"HTTP port unreachable from here: {'; '.join(bad)}",
                "open every DataNode's HTTP port (dfs.datanode.http.address, 9864 by default) to the hosts "
                "running Airflow: WebHDFS redirects staging uploads and reads to the DataNodes; the "
                "address must resolve here (dfs.datanode.hostname / the NameNode's view of it)",
            )
        return ok("datanodes", f"{len(reached)} DataNode(s) reachable from here: {', '.join(reached)}")

    # ---- HDFS, AM jar, auth --------------------------------------------------------------------------------
    def check_hdfs(self) -> Finding:
        hook = self.hook
        if not self.fs_from_connection and not hook.fs_default_fs:
            hook.fs_default_fs = self._rm_conf("fs.defaultFS")
        if not hook.fs_default_fs:
            return fail(
                "hdfs",
                "fs.defaultFS is unknown, so YARN cannot localize staged files",
                "set fs_default_fs (e.g. hdfs://namenode:8020) in the yarn connection's extra",
            )
        try:
            hook.file_status("/")
        except Exception as exc:  # noqa: BLE001 - reported with the fix
            return fail(
                "hdfs",
                f"NameNode unreachable through WebHDFS ({self._webhdfs_where()}): {one_line(exc)}",
                "check the webhdfs connection (or --webhdfs): host and port of the "
                "NameNode's HTTP address (dfs.namenode.http-address, 9870 by default), that the NameNode "
                "runs, and that this host may reach that port",
            )
        self._hdfs_reachable = True
        probe = f"{hook.staging_dir}/.doctor-{uuid.uuid4().hex}"
        try:
            hook.hdfs.makedirs(hook.cache_dir)
            hook.hdfs.write(probe, data=b"melon doctor", overwrite=False)
        except Exception as exc:  # noqa: BLE001 - reported with the fix
            return fail(
                "hdfs",
                f"staging folder {hook.staging_dir} not writable as {hook.user}: {exc}",
                f"create /user/{hook.user} owned by {hook.user} (as the HDFS superuser: `hdfs dfs -mkdir -p "
                f"/user/{hook.user} && hdfs dfs -chown {hook.user} /user/{hook.user}`), or set "
                "[melon] staging_dir to a writable folder",
            )
        finally:
            try:
                hook.hdfs.delete(probe)
            except Exception:  # noqa: BLE001 - best effort
                pass
        return ok("hdfs", f"{hook.fs_default_fs} reachable through WebHDFS; {hook.staging_dir} writable as {hook.user}")

    def check_am_jar(self) -> Finding:
        jar = self.hook.am_jar
        if not jar.is_file():
            return fail(
                "am-jar",
                f"{jar} missing",
                "install a provider wheel built with the AM (`pip wheel .` "
                "from a checkout with JDK 17 and Maven), or set [melon] am_jar",
            )
        with zipfile.ZipFile(jar) as zf:
            if "org/melon/yarn/MelonApplicationMaster.class" not in zf.namelist():
                return fail(
                    "am-jar",
                    f"{jar} holds no MelonApplicationMaster",
                    "point [melon] am_jar at the MeLoN AM jar, or remove it to use the packaged one",
                )
        return ok("am-jar", f"{jar} ({jar.stat().st_size} bytes)")

    def check_auth(self) -> Finding:
        mode = self.yarn.auth_mode
        if mode == "simple":
            return ok("auth", f"simple: calls carry user.name={self.yarn.user} (an unsecured cluster)")
        if mode == "kerberos":  # the hook's own ticket cache (from its keytab, or the one `airflow kerberos` keeps)
            from airflow_provider_melon.hooks.kerberos import KerberosError

            try:
                tickets = self.yarn._kerberos_tickets()
            except KerberosError as exc:
                return fail("auth", "kerberos, but the settings cannot work", str(exc))
            s = tickets.s
            if not s.principal:
                return fail(
                    "auth",
                    "kerberos, but no principal",
                    "set kerberos_principal in the yarn connection's extra (or [kerberos] principal)",
                )
            krb5 = s.krb5_conf or os.environ.get("KRB5_CONFIG") or "/etc/krb5.conf"
            if not Path(krb5).is_file():
                return fail(
                    "auth",
                    f"kerberos, but no krb5.conf ({krb5} does not exist): the realm's KDC is unknown",
                    "set krb5_conf in the yarn connection's extra to the realm's krb5.conf (or export KRB5_CONFIG)",
                )
            try:
                tickets.ensure(force=True)
            except KerberosError as exc:
                source = f"keytab {s.keytab}" if s.keytab else f"ticket cache {s.ccache or 'default'} (no keytab)"
                return fail("auth", f"kerberos as {s.principal} from the {source}, but no valid ticket", str(exc))
            left = tickets.remaining() or 0
            return ok(
                "auth",
                f"kerberos as {s.principal} ({'keytab ' + s.keytab if s.keytab else 'no keytab'}, "
                f"ticket cache {s.ccache or 'default'}, valid {left // 60} min; krb5.conf {krb5}): SPNEGO on "
                f"every RM and WebHDFS call, HDFS user {self.hook.user} (staging {self.hook.staging_dir})",
            )
        return ok("auth", f"{mode} (a custom requests auth object)")

    def check_hadoop_java(self) -> Finding:
        """The cluster's Hadoop version (RM ``/ws/v1/cluster/info``), each RUNNING NodeManager's Java (no REST
        resource names it: the NM's ``/jmx`` Runtime bean, ``SpecVersion``) and whether the AM jar's class-file
        version loads there (hadoop_compat.py)."""
        from airflow_provider_melon.hadoop import compat as hc

        version = hc.hadoop_version(self.yarn.cluster_info()) or "unknown"
        line = hc.line_of(version)
        javas: dict[str, Optional[int]] = {}
        for node in self.nodes():
            try:
                resp = self.yarn.get_url(
                    self.yarn.node_base_url(node.get("nodeHTTPAddress")) + hc.JMX_PATH, params=hc.JMX_RUNTIME_QUERY
                )
                javas[str(node.get("id"))] = hc.java_from_jmx(resp.json()) if resp.status_code == 200 else None
            except Exception:  # noqa: BLE001 - an unreadable /jmx leaves that node's Java unknown
                javas[str(node.get("id"))] = None
        known = sorted({j for j in javas.values() if j})
        seen = (
            f"NodeManagers on Java {', '.join(map(str, known))} ({sum(1 for j in javas.values() if j)} of "
            f"{len(javas)} read from their /jmx)"
            if known
            else "NodeManagers' Java unknown (no /jmx answered)"
        )
        detail = f"Hadoop {version}" + ("" if line else " (not a tested line: 3.1 to 3.5)") + f"; {seen}"
        jar = self.hook.am_jar
        if not jar.is_file():
            return warn("hadoop-java", detail, "see the am-jar check")
        major = max(hc.jar_class_majors(jar).values(), default=0)
        needs = hc.java_for_major(major)
        too_old = sorted(n for n, j in javas.items() if j and not hc.am_runs_on(major, j))
        detail += f"; the AM jar is Java {needs} bytecode (class major {major})"
        if too_old:
            return fail(
                "hadoop-java",
                detail + f": it does not load on {', '.join(too_old)}",
                f"use the provider's packaged AM jar (Java {hc.AM_MAX_CLASS_MAJOR - 44} bytecode), or run "
                f"the NodeManagers on Java {needs}+",
            )
        if not known:
            oldest = min(line.server_java) if line else 8
            fix = f"Hadoop {version} servers run on Java {oldest}+" if line else "check the NodeManagers' Java"
            if needs > oldest:
                return warn("hadoop-java", detail, fix + f": the AM jar needs Java {needs}")
            return ok("hadoop-java", detail + f": runs on any Java this line runs on ({fix})")
        return ok("hadoop-java", detail + ": runs there")


__all__ = ["Doctor"]
