"""``melon doctor``: is this cluster ready for MeLoN jobs? Each check reads the real cluster through the provider's
own hooks and gives a finding (ok / warn / fail) with what it saw and, when not ok, the fix.

Checks, in order: the ResourceManager (reachable, HA state of every configured RM), the resource types
(``yarn.io/gpu`` and ``melon.io/gpu-memory`` declared), the scheduler (CapacityScheduler on the
DominantResourceCalculator, without which GPU resources are ignored), the nodes (advertising GPU memory), the
target queue (exists, running, has capacity), HDFS (reachable, ``fs.defaultFS`` known, the staging folder
writable), the ApplicationMaster jar, the auth mode, and the Hadoop and Java versions (whether the AM jar loads).
"""

from __future__ import annotations

import json
import uuid
import zipfile
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

from airflow_provider_melon.hooks.yarn import YarnApiError
from airflow_provider_melon.rm_json import GPU_MEMORY_RESOURCE, GPU_RESOURCE, as_dict, as_list

DRC = "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
CALCULATOR_KEY = "yarn.scheduler.capacity.resource-calculator"


@dataclass
class Finding:
    check: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def _ok(check: str, detail: str) -> Finding:
    return Finding(check, "ok", detail)


def _warn(check: str, detail: str, fix: str) -> Finding:
    return Finding(check, "warn", detail, fix)


def _fail(check: str, detail: str, fix: str) -> Finding:
    return Finding(check, "fail", detail, fix)


class Doctor:
    """Runs the checks against ``hook`` (a :class:`~airflow_provider_melon.hooks.melon.MelonHook`)."""

    def __init__(self, hook: Any, queue: str = "default"):
        self.hook = hook
        self.yarn = hook.yarn
        self.queue = queue
        self._nodes: Optional[list[dict]] = None

    def run(self) -> list[Finding]:
        findings = [self._guard("resourcemanager", self.check_rm)]
        if findings[0].status == "fail":  # nothing else of YARN can be read
            rest: list[Callable[[], Finding]] = []
        else:
            rest = [self.check_resource_types, self.check_scheduler, self.check_nodes, self.check_queue]
        rest += [self.check_hdfs, self.check_am_jar, self.check_auth]
        if findings[0].status != "fail":
            rest.append(self.check_hadoop_java)
        return findings + [self._guard(fn.__name__.removeprefix("check_").replace("_", "-"), fn) for fn in rest]

    @staticmethod
    def _guard(name: str, fn: Callable[[], Finding]) -> Finding:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a check that breaks is a finding, not a crash
            return _fail(name, f"{type(exc).__name__}: {exc}", "see the detail")

    # ---- YARN ----------------------------------------------------------------------------------------------
    def check_rm(self) -> Finding:
        states = []
        for base, info in self.yarn.ha_states().items():
            if isinstance(info, dict):
                states.append(f"{base} {info.get('haState')} (Hadoop {info.get('resourceManagerVersion', '?')}, "
                              f"{info.get('state', '?')})")
            else:
                states.append(f"{base} {info}")
        if not any(" ACTIVE " in s for s in states):
            return _fail("resourcemanager", "; ".join(states),
                         "start the ResourceManager, or fix the yarn connection's host (RM web address, "
                         "e.g. http://rm:8088; list both RMs of an HA pair)")
        return _ok("resourcemanager", "; ".join(states))

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
            return _fail("resource-types", f"not declared: {', '.join(missing)} (declared: "
                         f"{', '.join(sorted(declared)) or 'memory and vcores only'})",
                         "resource-types.xml on the RM and every NM: yarn.resource-types=yarn.io/gpu,"
                         "melon.io/gpu-memory and yarn.resource-types.melon.io/gpu-memory.units=Mi; restart them")
        return _ok("resource-types", f"{GPU_RESOURCE} and {GPU_MEMORY_RESOURCE} declared")

    def check_scheduler(self) -> Finding:
        info = self.yarn.scheduler()
        kind = info.get("type", "?")
        if kind != "capacityScheduler":
            return _warn("scheduler", f"{kind}: MeLoN is tested on the CapacityScheduler",
                         "yarn.resourcemanager.scheduler.class = ...scheduler.capacity.CapacityScheduler")
        calculator = self.yarn.rm_conf(CALCULATOR_KEY)
        if calculator is None:
            return _warn("scheduler", f"CapacityScheduler; the RM does not publish {CALCULATOR_KEY} at /conf, so "
                         "the resource calculator cannot be checked from here",
                         f"make sure capacity-scheduler.xml sets {CALCULATOR_KEY} = {DRC}")
        if calculator.strip() != DRC:
            return _fail("scheduler", f"CapacityScheduler with {calculator}: GPUs and GPU memory are ignored when "
                         "placing containers", f"capacity-scheduler.xml: {CALCULATOR_KEY} = {DRC}; then "
                         "`yarn rmadmin -refreshQueues`")
        return _ok("scheduler", "CapacityScheduler on the DominantResourceCalculator")

    def check_nodes(self) -> Finding:
        nodes = self.nodes()
        if not nodes:
            return _fail("nodes", "no RUNNING NodeManager", "start the NodeManagers; check their logs for why "
                         "they are UNHEALTHY or LOST (disks over 90 % full are a common cause)")
        parts, without = [], []
        for node in nodes:
            res = node["totalResource"]["resources"]
            gpus, mem = res.get(GPU_RESOURCE, 0), res.get(GPU_MEMORY_RESOURCE, 0)
            parts.append(f"{node.get('id')}: {gpus} GPU(s), {mem} MiB GPU memory")
            if not mem or not gpus:
                without.append(str(node.get("id")))
        detail = "; ".join(parts)
        if len(without) == len(nodes):
            return _fail("nodes", detail, "each GPU node's node-resources.xml: yarn.nodemanager.resource-type."
                         "yarn.io/gpu = <GPUs> and yarn.nodemanager.resource-type.melon.io/gpu-memory = <GPUs x MiB "
                         "per GPU>; restart the NodeManager")
        if without:
            return _warn("nodes", detail, f"{', '.join(without)} advertise no GPU memory: fine for CPU-only "
                         "nodes, else set node-resources.xml there")
        return _ok("nodes", detail)

    def _leaf_queues(self) -> dict[str, dict]:
        found: dict[str, dict] = {}

        def walk(queue: dict) -> None:
            children = as_list(as_dict(queue.get("queues")).get("queue")) if queue.get("queues") else []
            if not children and queue.get("queueName") and queue.get("queueName") != "root":
                found[str(queue["queueName"])] = queue
                found[str(queue.get("queuePath") or queue["queueName"])] = queue
            for child in children:
                if isinstance(child, dict):
                    walk(child)

        walk(self.yarn.scheduler())
        return found

    def check_queue(self) -> Finding:
        leaves = self._leaf_queues()
        queue = leaves.get(self.queue)
        if queue is None:
            names = sorted({str(q.get("queuePath") or q.get("queueName")) for q in leaves.values()})
            return _fail("queue", f"no leaf queue {self.queue!r}; leaf queues: {', '.join(names) or 'none'}",
                         f"use one of those (spec field `queue`), or add {self.queue!r} to capacity-scheduler.xml "
                         "and run `yarn rmadmin -refreshQueues`")
        state = queue.get("state", "RUNNING")
        capacity = float(queue.get("absoluteCapacity", queue.get("capacity", 0)) or 0)
        maximum = float(queue.get("absoluteMaxCapacity", queue.get("maxCapacity", 0)) or 0)
        am_share = queue.get("configuredMaxAMResourceLimit")
        am_share = f"{float(am_share) * 100:g} %" if am_share not in (None, "") else "?"
        detail = (f"{queue.get('queuePath', self.queue)}: {state}, capacity {capacity:g} %, maximum {maximum:g} %, "
                  f"at most {am_share} for ApplicationMasters")
        if state != "RUNNING":
            return _fail("queue", detail, "start the queue (state RUNNING in capacity-scheduler.xml), then "
                         "`yarn rmadmin -refreshQueues`")
        if maximum <= 0:
            return _fail("queue", detail, "give the queue capacity in capacity-scheduler.xml")
        return _ok("queue", detail)

    # ---- HDFS, AM jar, auth --------------------------------------------------------------------------------
    def check_hdfs(self) -> Finding:
        hook = self.hook
        if not hook.fs_default_fs:
            return _fail("hdfs", "fs.defaultFS is unknown, so YARN cannot localize staged files",
                         "set fs_default_fs (e.g. hdfs://namenode:8020) in the yarn connection's extra")
        probe = f"{hook.staging_dir}/.doctor-{uuid.uuid4().hex}"
        try:
            hook.file_status("/")
            hook.hdfs.makedirs(hook.cache_dir)
            hook.hdfs.write(probe, data=b"melon doctor", overwrite=False)
        except Exception as exc:  # noqa: BLE001 - reported with the fix
            return _fail("hdfs", f"staging folder {hook.staging_dir} not writable as {hook.user}: {exc}",
                         f"create /user/{hook.user} owned by {hook.user} (as the HDFS superuser: `hdfs dfs -mkdir -p "
                         f"/user/{hook.user} && hdfs dfs -chown {hook.user} /user/{hook.user}`), or set "
                         "[melon] staging_dir to a writable folder")
        finally:
            try:
                hook.hdfs.delete(probe)
            except Exception:  # noqa: BLE001 - best effort
                pass
        return _ok("hdfs", f"{hook.fs_default_fs} reachable through WebHDFS; {hook.staging_dir} writable as "
                   f"{hook.user}")

    def check_am_jar(self) -> Finding:
        jar = self.hook.am_jar
        if not jar.is_file():
            return _fail("am-jar", f"{jar} missing", "install a provider wheel built with the AM (`pip wheel .` "
                         "from a checkout with JDK 17 and Maven), or set [melon] am_jar")
        with zipfile.ZipFile(jar) as zf:
            if "org/melon/yarn/MelonApplicationMaster.class" not in zf.namelist():
                return _fail("am-jar", f"{jar} holds no MelonApplicationMaster", "point [melon] am_jar at the MeLoN "
                             "AM jar, or remove it to use the packaged one")
        return _ok("am-jar", f"{jar} ({jar.stat().st_size} bytes)")

    def check_auth(self) -> Finding:
        mode = self.yarn.auth_mode
        if mode == "simple":
            return _ok("auth", f"simple: calls carry user.name={self.yarn.user} (an unsecured cluster)")
        if mode == "kerberos":  # the hook's own ticket cache (from its keytab, or the one `airflow kerberos` keeps)
            from airflow_provider_melon.kerberos import KerberosError

            try:
                tickets = self.yarn._kerberos_tickets()
                tickets.ensure(force=True)
            except KerberosError as exc:
                return _fail("auth", "kerberos, but no valid ticket", str(exc))
            return _ok("auth", f"kerberos (SPNEGO on every RM call, ticket cache {tickets.s.ccache or 'default'})")
        return _ok("auth", f"{mode} (a custom requests auth object)")

    def check_hadoop_java(self) -> Finding:
        """The cluster's Hadoop version (RM ``/ws/v1/cluster/info``), each RUNNING NodeManager's Java (no REST
        resource names it: the NM's ``/jmx`` Runtime bean, ``SpecVersion``) and whether the AM jar's class-file
        version loads there (hadoop_compat.py)."""
        from airflow_provider_melon import hadoop_compat as hc

        version = hc.hadoop_version(self.yarn.cluster_info()) or "unknown"
        line = hc.line_of(version)
        javas: dict[str, Optional[int]] = {}
        for node in self.nodes():
            try:
                resp = self.yarn.get_url(self.yarn.node_base_url(node.get("nodeHTTPAddress")) + hc.JMX_PATH,
                                         params=hc.JMX_RUNTIME_QUERY)
                javas[str(node.get("id"))] = hc.java_from_jmx(resp.json()) if resp.status_code == 200 else None
            except Exception:  # noqa: BLE001 - an unreadable /jmx leaves that node's Java unknown
                javas[str(node.get("id"))] = None
        known = sorted({j for j in javas.values() if j})
        seen = (f"NodeManagers on Java {', '.join(map(str, known))} ({sum(1 for j in javas.values() if j)} of "
                f"{len(javas)} read from their /jmx)" if known else "NodeManagers' Java unknown (no /jmx answered)")
        detail = f"Hadoop {version}" + ("" if line else " (not a tested line: 3.3, 3.4, 3.5)") + f"; {seen}"
        jar = self.hook.am_jar
        if not jar.is_file():
            return _warn("hadoop-java", detail, "see the am-jar check")
        major = max(hc.jar_class_majors(jar).values(), default=0)
        needs = hc.java_for_major(major)
        too_old = sorted(n for n, j in javas.items() if j and not hc.am_runs_on(major, j))
        detail += f"; the AM jar is Java {needs} bytecode (class major {major})"
        if too_old:
            return _fail("hadoop-java", detail + f": it does not load on {', '.join(too_old)}",
                         f"use the provider's packaged AM jar (Java {hc.AM_MAX_CLASS_MAJOR - 44} bytecode), or run "
                         f"the NodeManagers on Java {needs}+")
        if not known:
            oldest = min(line.server_java) if line else 8
            fix = f"Hadoop {version} servers run on Java {oldest}+" if line else "check the NodeManagers' Java"
            if needs > oldest:
                return _warn("hadoop-java", detail, fix + f": the AM jar needs Java {needs}")
            return _ok("hadoop-java", detail + f": runs on any Java this line runs on ({fix})")
        return _ok("hadoop-java", detail + ": runs there")


def render(findings: list[Finding]) -> str:
    width = max(len(f.check) for f in findings)
    lines = []
    for f in findings:
        lines.append(f"{f.status.upper():<4}  {f.check:<{width}}  {f.detail}")
        if f.fix:
            lines.append(f"{'':<4}  {'':<{width}}  fix: {f.fix}")
    failed = sum(f.status == "fail" for f in findings)
    warned = sum(f.status == "warn" for f in findings)
    lines.append(f"{len(findings)} checks: {len(findings) - failed - warned} ok, {warned} warning(s), {failed} failed")
    return "\n".join(lines)


def as_json(findings: list[Finding]) -> str:
    return json.dumps([asdict(f) for f in findings], indent=1)


__all__ = ["Doctor", "Finding", "YarnApiError", "as_json", "render"]
