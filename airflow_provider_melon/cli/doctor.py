"""``melon doctor``: is this cluster ready for MeLoN jobs? Each check reads the real cluster through the provider's
own hooks and gives a finding (ok / warn / fail) with what it saw and, when not ok, the fix.

Checks, in order: the ResourceManager (reachable, HA state of every configured RM), the resource types
(``yarn.io/gpu`` and ``melon.io/gpu-memory`` declared), the scheduler (CapacityScheduler on the
DominantResourceCalculator, without which GPU resources are ignored), the nodes (advertising GPU memory), the
target queue (exists, running, has capacity), every NodeManager's web port reachable from here (job logs are read
there), YARN's own GPU plugin (``yarn.nodemanager.resource-plugins=yarn.io/gpu``, which with cgroups device
isolation denies a shared-mode task every GPU: docs/gpu-plugin.md), HDFS (the NameNode reachable, ``fs.defaultFS``
known, the staging folder writable), every DataNode reachable from here (WebHDFS moves the bytes through them), the
ApplicationMaster jar, the auth mode (on Kerberos: the ticket, the HDFS user it maps to), and the Hadoop and Java
versions (whether the AM jar loads there).

``submit_test=True`` (``melon doctor --submit-test``) then runs a tiny job through the real path, one finding per
step (stage, submit, am, containers, output, logs), and reads from its tasks what cannot be read from outside: the
NodeManagers' Java (the AM's class files need Java 8+), the job Python, its ``pynvml`` (without it tasks run "no GPU")
and its framework (TensorFlow or PyTorch).
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import time
import uuid
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.hooks.yarn import YarnApiError
from airflow_provider_melon.hadoop.rm_json import GPU_MEMORY_RESOURCE, GPU_RESOURCE, as_dict, as_list

DRC = "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
CALCULATOR_KEY = "yarn.scheduler.capacity.resource-calculator"
PLUGINS_KEY = "yarn.nodemanager.resource-plugins"
ALLOWED_GPUS_KEY = "yarn.nodemanager.resource-plugins.gpu.allowed-gpu-devices"
EXECUTOR_KEY = "yarn.nodemanager.container-executor.class"
NN_INFO_BEAN = "Hadoop:service=NameNode,name=NameNodeInfo"


def _am_java() -> int:
    """The oldest Java the AM's class files load on (hadoop_compat: the jar is Java 8 bytecode)."""
    from airflow_provider_melon.hadoop import compat as hc

    return hc.java_for_major(hc.AM_MAX_CLASS_MAJOR)


def _one_line(exc: BaseException, width: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    for key, short in (("Connection refused", "connection refused"), ("timed out", "timed out"),
                       ("Name or service not known", "unknown host")):
        if key in text:
            return f"{type(exc).__name__}: {short}"
    return text[:width]


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

    def __init__(self, hook: Any, queue: str = "default", *, submit_test: bool = False, python: Optional[str] = None,
                 timeout: float = 300.0, fs_from_connection: bool = True):
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
        self._hdfs_reachable = False

    def run(self) -> list[Finding]:
        findings = [self._guard("resourcemanager", self.check_rm)]
        if findings[0].status == "fail":  # nothing else of YARN can be read
            rest: list[Callable[[], Finding]] = []
        else:
            rest = [self.check_resource_types, self.check_scheduler, self.check_nodes, self.check_queue,
                    self.check_nodemanagers, self.check_gpu_plugin]
        rest += [self.check_hdfs, self.check_datanodes, self.check_am_jar, self.check_auth]
        if findings[0].status != "fail":
            rest.append(self.check_hadoop_java)
        findings += [self._guard(fn.__name__.removeprefix("check_").replace("_", "-"), fn) for fn in rest]
        if self.submit_test:
            if any(f.status == "fail" for f in findings):
                findings.append(_fail("submit-test", "not run: fix the failed checks above first",
                                      "run `melon doctor --submit-test` again once they pass"))
            else:
                findings += SubmitTest(self).run()
        return findings

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

    # ---- NodeManagers: reachable from here, YARN's own GPU plugin ------------------------------------------
    def _nm_url(self, node: dict) -> Optional[str]:
        address = node.get("nodeHTTPAddress")
        if not address:
            return None
        scheme = urlsplit(self.yarn.active_rm).scheme or "http"
        return f"{scheme}://{address}"

    def check_nodemanagers(self) -> Finding:
        """Every RUNNING NodeManager's web port answers from here: Airflow's workers and triggerer read the job's
        output there (``/ws/v1/node/containers/.../logs``), the UI links to it."""
        nodes = self.nodes()
        if not nodes:
            return _fail("nodemanagers", "no RUNNING NodeManager to reach", "see the nodes check")
        ok, bad = [], []
        for node in nodes:
            url = self._nm_url(node)
            try:
                resp = self.yarn.get_url(f"{url}/ws/v1/node/info", headers={"Accept": "application/json"})
                if resp.status_code != 200:
                    raise RuntimeError(f"HTTP {resp.status_code}")
                ok.append(str(node.get("nodeHTTPAddress")))
            except Exception as exc:  # noqa: BLE001 - each unreachable node is named
                cause = _one_line(exc)
                self._nm_unreachable[str(node.get("id"))] = cause
                bad.append(f"{node.get('nodeHTTPAddress')} ({node.get('id')}): {cause}")
        if bad:
            return _fail("nodemanagers", f"web port unreachable from here: {'; '.join(bad)}"
                         + (f" (reachable: {', '.join(ok)})" if ok else ""),
                         "open the NodeManagers' web port (yarn.nodemanager.webapp.address, 8042 by default) to "
                         "every host running Airflow's workers, triggerer and api-server: job logs are read there; "
                         "a NodeManager that crashed shows here before the RM marks it LOST")
        return _ok("nodemanagers", f"web port of {len(ok)} NodeManager(s) reachable from here: {', '.join(ok)}")

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
                unread.append(f"{node_id} ({_one_line(exc)})")
                continue
            isolating = "LinuxContainerExecutor" in executor
            gpus = node["totalResource"]["resources"].get(GPU_RESOURCE, 0)
            if allowed.lower() == "auto":
                level = "fail" if isolating else "warn"
                rows.append(f"{node_id}: the plugin manages every GPU ({gpus} discovered, allowed-gpu-devices=auto)"
                            + (", isolated by the LinuxContainerExecutor's device cgroups: shared-mode tasks are "
                               "denied every GPU" if isolating else
                               f" on the {executor.rsplit('.', 1)[-1]} (no device isolation now; with the "
                               "LinuxContainerExecutor shared-mode tasks would be denied every GPU)"))
            elif "CUDA_VISIBLE_DEVICES" not in container_env:
                level = "warn"
                rows.append(f"{node_id}: the plugin manages GPUs {allowed}, but the yarn connection's "
                            "container_env sets no CUDA_VISIBLE_DEVICES: MeLoN tasks may pick one of the plugin's")
            else:
                level = "ok"
                rows.append(f"{node_id}: the plugin manages GPUs {allowed}; MeLoN shares CUDA_VISIBLE_DEVICES="
                            f"{container_env['CUDA_VISIBLE_DEVICES']}")
            worst = max(worst, level, key=("ok", "warn", "fail").index)
        tail = f"; conf not readable on {', '.join(unread)}" if unread else ""
        if not rows:
            return _ok("gpu-plugin", f"YARN's GPU plugin ({PLUGINS_KEY}={GPU_RESOURCE}) is off on every NodeManager"
                       + tail + ": MeLoN's GPU accounting alone")
        fix = ("on each GPU node give the plugin only the GPUs for whole-GPU jobs "
               f"({ALLOWED_GPUS_KEY}=<index:minor,...>, never auto) and leave MeLoN's shared GPUs out of it; set "
               "node-resources.xml's melon.io/gpu-memory to those GPUs' memory and CUDA_VISIBLE_DEVICES=<their "
               "indexes> in the yarn connection's container_env; or turn the plugin off on MeLoN's nodes "
               "(docs/gpu-plugin.md)")
        detail = "; ".join(rows) + tail
        return Finding("gpu-plugin", worst, detail, "" if worst == "ok" else fix)

    # ---- HDFS, DataNodes -----------------------------------------------------------------------------------
    def _webhdfs_where(self) -> str:
        url = getattr(self.hook._hdfs, "url", None) if getattr(self.hook, "_hdfs", None) is not None else None
        return str(url) if url else f"connection {self.hook.webhdfs_conn_id}"

    def check_datanodes(self) -> Finding:
        """Every live DataNode's HTTP port answers from here: WebHDFS redirects each read and write to one."""
        if not self._hdfs_reachable:
            return _warn("datanodes", "not checked: the NameNode is not reachable", "see the hdfs check")
        client = self.hook.hdfs
        base = str(getattr(client, "url", "")).rstrip("/")
        session = getattr(client, "_session", None)
        import requests

        resp = (session or requests).get(f"{base}/jmx", params={"qry": NN_INFO_BEAN}, timeout=30)
        if resp.status_code != 200:
            return _warn("datanodes", f"the NameNode's /jmx answered HTTP {resp.status_code}: DataNodes not listed",
                         "let this user read the NameNode's /jmx (hadoop.security.instrumentation.requires.admin)")
        beans = resp.json().get("beans") or [{}]
        live = json.loads(beans[0].get("LiveNodes") or "{}")
        if not live:
            return _fail("datanodes", "the NameNode reports no live DataNode", "start the DataNodes; check their logs")
        ok, bad = [], []
        for name, info in sorted(live.items()):
            address = str(info.get("infoSecureAddr") if str(base).startswith("https") and info.get("infoSecureAddr")
                          else info.get("infoAddr") or "")
            host, _, port = address.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=10):
                    ok.append(address)
            except (OSError, ValueError) as exc:
                bad.append(f"{address or name} ({type(exc).__name__}: {exc})")
        if bad:
            return _fail("datanodes", f"HTTP port unreachable from here: {'; '.join(bad)}",
                         "open every DataNode's HTTP port (dfs.datanode.http.address, 9864 by default) to the hosts "
                         "running Airflow: WebHDFS redirects staging uploads and reads to the DataNodes; the "
                         "address must resolve here (dfs.datanode.hostname / the NameNode's view of it)")
        return _ok("datanodes", f"{len(ok)} DataNode(s) reachable from here: {', '.join(ok)}")

    # ---- HDFS, AM jar, auth --------------------------------------------------------------------------------
    def check_hdfs(self) -> Finding:
        hook = self.hook
        if not self.fs_from_connection and not hook.fs_default_fs:
            hook.fs_default_fs = self.yarn.rm_conf("fs.defaultFS")
        if not hook.fs_default_fs:
            return _fail("hdfs", "fs.defaultFS is unknown, so YARN cannot localize staged files",
                         "set fs_default_fs (e.g. hdfs://namenode:8020) in the yarn connection's extra")
        try:
            hook.file_status("/")
        except Exception as exc:  # noqa: BLE001 - reported with the fix
            return _fail("hdfs", f"NameNode unreachable through WebHDFS ({self._webhdfs_where()}): "
                         f"{_one_line(exc)}", "check the webhdfs connection (or --webhdfs): host and port of the "
                         "NameNode's HTTP address (dfs.namenode.http-address, 9870 by default), that the NameNode "
                         "runs, and that this host may reach that port")
        self._hdfs_reachable = True
        probe = f"{hook.staging_dir}/.doctor-{uuid.uuid4().hex}"
        try:
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
            from airflow_provider_melon.hooks.kerberos import KerberosError

            try:
                tickets = self.yarn._kerberos_tickets()
            except KerberosError as exc:
                return _fail("auth", "kerberos, but the settings cannot work", str(exc))
            s = tickets.s
            if not s.principal:
                return _fail("auth", "kerberos, but no principal", "set kerberos_principal in the yarn connection's "
                             "extra (or [kerberos] principal)")
            krb5 = s.krb5_conf or os.environ.get("KRB5_CONFIG") or "/etc/krb5.conf"
            if not Path(krb5).is_file():
                return _fail("auth", f"kerberos, but no krb5.conf ({krb5} does not exist): the realm's KDC is unknown",
                             "set krb5_conf in the yarn connection's extra to the realm's krb5.conf (or export "
                             "KRB5_CONFIG)")
            try:
                tickets.ensure(force=True)
            except KerberosError as exc:
                source = f"keytab {s.keytab}" if s.keytab else f"ticket cache {s.ccache or 'default'} (no keytab)"
                return _fail("auth", f"kerberos as {s.principal} from the {source}, but no valid ticket", str(exc))
            left = tickets.remaining() or 0
            return _ok("auth", f"kerberos as {s.principal} ({'keytab ' + s.keytab if s.keytab else 'no keytab'}, "
                       f"ticket cache {s.ccache or 'default'}, valid {left // 60} min; krb5.conf {krb5}): SPNEGO on "
                       f"every RM and WebHDFS call, HDFS user {self.hook.user} (staging {self.hook.staging_dir})")
        return _ok("auth", f"{mode} (a custom requests auth object)")

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


# ---- --submit-test: a tiny job through the real path ------------------------------------------------------------
PROBE_MARK = "MELON_DOCTOR_PROBE "

#: run in each task of the probe job by the job's Python: what only a container on the node can tell (stdlib only)
PROBE_SCRIPT = r'''
import importlib.util, json, os, platform, shutil, subprocess, sys
out = {"node": "%s:%s" % (os.environ.get("NM_HOST", "?"), os.environ.get("NM_PORT", "?")),
       "container": os.environ.get("CONTAINER_ID"), "python": sys.executable,
       "python_version": platform.python_version()}
java_home = os.environ.get("JAVA_HOME")
java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
out["java_home"] = java_home
try:
    run = subprocess.run([java or "java", "-version"], capture_output=True, text=True, timeout=120)
    out["java"] = ((run.stderr or run.stdout).strip().splitlines() or ["?"])[0]
except Exception as exc:
    out["java_error"] = "%s: %s" % (java, exc)
try:
    import pynvml
    out["pynvml"] = getattr(pynvml, "__file__", "?")
    try:
        pynvml.nvmlInit()
        out["nvml_gpus"] = pynvml.nvmlDeviceGetCount()
    except Exception as exc:
        out["nvml_error"] = "%s: %s" % (type(exc).__name__, exc)
except ImportError as exc:
    out["pynvml_error"] = str(exc)
from importlib import metadata
frameworks = {}
for module, dist in (("tensorflow", "tensorflow"), ("torch", "torch")):
    if importlib.util.find_spec(module) is not None:
        try:
            frameworks[module] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            frameworks[module] = "?"
out["frameworks"] = frameworks
print("MELON_DOCTOR_PROBE " + json.dumps(out), flush=True)
folder = os.environ.get("MELON_OUTPUT_PROBE")
if folder:
    with open(os.path.join(folder, "probe.json"), "w") as fh:
        json.dump(out, fh)
'''


def _java_major(line: str) -> Optional[int]:
    """``openjdk version "17.0.9" 2023-10-17`` → 17; ``java version "1.8.0_392"`` → 8."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', line or "")
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


class SubmitTest:
    """One tiny job (a probe task per RUNNING node, no GPU asked) through what a DAG's train task does: stage,
    submit, the AM, its containers, a declared output, the job's logs read from the NodeManagers. One finding
    per step, then what the tasks saw on their nodes (Java, the job Python, pynvml, the framework)."""

    def __init__(self, doctor: Doctor):
        self.d = doctor
        self.hook = doctor.hook
        self.findings: list[Finding] = []

    def _step(self, status: str, check: str, detail: str, fix: str = "") -> bool:
        self.findings.append(Finding(f"submit-test:{check}", status, detail, fix))
        return status != "fail"

    def run(self) -> list[Finding]:
        from airflow_provider_melon.spec import JobSpec

        hook = self.hook
        nodes = max(len(self.d.nodes()), 1)
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        output = f"{hook.staging_dir}/doctor/{run_id}"
        with tempfile.TemporaryDirectory(prefix="melon-doctor-") as code:
            Path(code, "probe.py").write_text(PROBE_SCRIPT)
            job = {"name": "melon-doctor-probe", "framework": "generic", "code": code,
                   "entrypoint": "python probe.py", "queue": self.d.queue, "max_attempts": 1,
                   "roles": {"probe": {"instances": nodes, "memory": "256m", "vcores": 1, "restarts": 0}},
                   "outputs": {"probe": hook.hdfs_uri(output)}}
            if self.d.python:
                job["environment"] = {"python": self.d.python}
            spec = JobSpec.from_dict(job)
            try:
                result = hook.submit(spec, tags=["melon-doctor"])
            except Exception as exc:  # noqa: BLE001 - the step that broke is the finding
                from airflow_provider_melon.hadoop.hdfs_io import MelonHdfsError

                if isinstance(exc, (MelonHdfsError, FileNotFoundError)):
                    self._step("fail", "stage", f"staging to {hook.staging_dir} failed: {_one_line(exc)}",
                               "see the hdfs and am-jar checks; the fix named in the error")
                else:
                    self._step("ok", "stage", "code, runtime and AM jar staged")
                    self._step("fail", "submit", f"the RM refused the application: {_one_line(exc)}",
                               "see the error: the queue's ACLs (acl_submit_applications), its limits, the RM's "
                               "maximum allocation")
                return self.findings
        app_id, report = result["app_id"], result["staging"]
        self._step("ok", "stage", f"{len(report.files)} files staged under {hook.staging_dir} "
                   f"({report.uploaded_bytes} bytes uploaded, the rest cached)")
        self._step("ok", "submit", f"{app_id} accepted by the RM (queue {self.d.queue}, job Python "
                   f"{self.d.python or hook.default_python})")
        try:
            app = self._wait_am(app_id) and self._wait_end(app_id)
            if app:
                self._output(output)
                self._logs(app_id, app)
        finally:
            try:
                if hook.yarn.get_application(app_id).get("state") not in TERMINAL_STATES:
                    hook.yarn.kill_application(app_id)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass
            try:
                hook.hdfs.delete(output, recursive=True)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass
        return self.findings

    def _picture(self, app_id: str) -> str:
        try:
            app = self.hook.yarn.get_application(app_id)
        except Exception as exc:  # noqa: BLE001 - a message must not fail
            return f"(RM unreadable: {_one_line(exc)})"
        diag = " ".join(str(app.get("diagnostics") or "").split())[:400]
        return f"state {app.get('state')}/{app.get('finalStatus')}" + (f", diagnostics: {diag}" if diag else "")

    def _wait_am(self, app_id: str) -> bool:
        """The app RUNNING with its AM serving /status (or already ended), within the timeout."""
        deadline = time.monotonic() + self.d.timeout
        while time.monotonic() < deadline:
            app = self.hook.yarn.get_application(app_id)
            if app.get("state") in TERMINAL_STATES:
                if app.get("finalStatus") == "SUCCEEDED":
                    return self._step("ok", "am", f"{app_id}: the AM ran (the app ended before its status was read)")
                return self._step("fail", "am", f"{app_id} ended before its AM served a status: {self._picture(app_id)}",
                                  "`melon logs " + app_id + " --container am`: the AM's log says why (a Java older "
                                  f"than {_am_java()} on the NodeManagers, a wrong am_classpath, HADOOP_* not in "
                                  "yarn.nodemanager.env-whitelist)")
            if app.get("state") == "RUNNING" and self.hook.am_status(app_id):
                return self._step("ok", "am", f"{app_id}: the AM runs on {app.get('amHostHttpAddress')} and "
                                  "serves its status through the RM proxy")
            time.sleep(1)
        return self._step("fail", "am", f"{app_id}: no AM serving after {self.d.timeout:g} s: {self._picture(app_id)}",
                          "an app ACCEPTED but not RUNNING waits for room for its AM: the queue's "
                          "maximum-am-resource-percent, the nodes' free memory")

    def _wait_end(self, app_id: str) -> Optional[dict]:
        deadline = time.monotonic() + self.d.timeout
        status = None
        while time.monotonic() < deadline:
            status = self.hook.am_status(app_id) or status
            app = self.hook.yarn.get_application(app_id)
            if app.get("state") in TERMINAL_STATES:
                tasks = as_list(as_dict(status).get("tasks")) if status else []
                shown = ", ".join(f"{t.get('role')}:{t.get('index')} on {t.get('node_id') or t.get('host') or '?'}"
                                  for t in tasks if isinstance(t, dict)) or "tasks as in the AM log"
                if app.get("finalStatus") == "SUCCEEDED":
                    self._step("ok", "containers", f"the probe task(s) ran and the app SUCCEEDED ({shown})")
                    return app
                self._step("fail", "containers", f"{app_id} {app.get('finalStatus')}: {self._picture(app_id)}",
                           f"`melon logs {app_id}`: the tasks' stderr says why (the job Python missing on a node, "
                           "the runtime unable to start)")
                return app
            time.sleep(1)
        self._step("fail", "containers", f"{app_id} still running after {self.d.timeout:g} s: {self._picture(app_id)}",
                   "the queue may lack room for the tasks; see `melon status " + app_id + "`")
        return None

    def _output(self, output: str) -> bool:
        try:
            with self.hook.hdfs.read(f"{output}/probe.json") as reader:
                body = json.loads(reader.read())
        except Exception as exc:  # noqa: BLE001 - reported
            return self._step("fail", "output", f"declared output {output}/probe.json not readable: {_one_line(exc)}",
                              "the output task publishes over WebHDFS from the NodeManagers: they must reach the "
                              "NameNode and DataNodes (MELON_WEBHDFS_URL in container_env if they see it elsewhere)")
        return self._step("ok", "output", f"declared output published to {output} (task on {body.get('node')})")

    def _logs(self, app_id: str, app: dict) -> None:
        from airflow_provider_melon.hadoop import nodemanager as nm_logs

        expected = max(len(self.d.nodes()), 1)
        probes: list[dict] = []
        for attempt in range(3):  # an NM that answers slowly once (a read timeout) is asked again, twice at most
            logs = nm_logs.NodeLogs(self.hook.yarn, app_id)
            probes, read = [], 0
            for ref in logs.discover(False):
                if ref.label in ("am", "container") or ref.label.startswith("am#"):
                    continue
                got = logs.fetch(ref, "stdout")
                if got is None:
                    continue
                read += 1
                for line in got[1].decode("utf-8", "replace").splitlines():
                    if line.startswith(PROBE_MARK):
                        probes.append(json.loads(line[len(PROBE_MARK):]))
            if len(probes) >= expected:
                break
            time.sleep(2)
        if not probes:
            causes = []
            for url in sorted(logs.unreachable):
                try:
                    resp = self.hook.yarn.get_url(f"{url}/ws/v1/node/info", headers={"Accept": "application/json"})
                    causes.append(f"{url} (now answers HTTP {resp.status_code})")
                except Exception as exc:  # noqa: BLE001 - the cause is the finding
                    causes.append(f"{url} ({_one_line(exc)})")
            where = f"NodeManager(s) unreachable: {', '.join(causes)}" if causes \
                else f"{read} task log(s) read, none with the probe's line"
            self._step("fail", "logs", f"the tasks' stdout not read from the NodeManagers: {where}",
                       "see the nodemanagers check; with log aggregation off an NM keeps logs "
                       "yarn.nodemanager.log.retain-seconds")
            return
        self._step("ok", "logs", f"stdout of {len(probes)} task(s) read from the NodeManagers' REST API")
        self._node_findings(probes)

    def _node_findings(self, probes: list[dict]) -> None:
        seen = {p.get("node") for p in probes}
        missing = [str(n.get("id")) for n in self.d.nodes() if str(n.get("id")) not in seen]
        note = f" (YARN placed no probe on {', '.join(missing)}: not checked there)" if missing else ""
        java_bad, java_ok = [], []
        for p in probes:
            major = _java_major(p.get("java", ""))
            if major is None or major < _am_java():
                java_bad.append(f"{p.get('node')}: {p.get('java') or p.get('java_error')}")
            else:
                java_ok.append(f"{p.get('node')}: {p.get('java')}")
        if java_bad:
            self._step("fail", "java", f"the containers' Java is older than {_am_java()} or missing: "
                       f"{'; '.join(java_bad)}{note}", f"the AM's class files need Java {_am_java()}: install it on "
                       "the NodeManagers and point their JAVA_HOME at it (yarn.nodemanager.env-whitelist passes it)")
        else:
            self._step("ok", "java", "; ".join(java_ok) + note)
        python = {f"{p.get('node')}: {p.get('python')} {p.get('python_version')}" for p in probes}
        no_nvml = [f"{p.get('node')}: {p.get('python')}: {p.get('pynvml_error')}" for p in probes
                   if "pynvml_error" in p]
        if no_nvml:
            self._step("fail", "pynvml", f"the job Python has no pynvml: {'; '.join(sorted(no_nvml))}{note}",
                       "install nvidia-ml-py into the job Python on every GPU node (or into the job's "
                       "environment.archive): without it tasks run with no GPU")
        else:
            nvml = "; ".join(sorted(f"{p.get('node')}: " + (f"{p['nvml_gpus']} GPU(s)" if "nvml_gpus" in p else
                                                             f"NVML {p.get('nvml_error', '?')}") for p in probes))
            self._step("ok", "pynvml", f"{'; '.join(sorted(python))}; pynvml present ({nvml}){note}")
        none = [f"{p.get('node')}: {p.get('python')}" for p in probes if not p.get("frameworks")]
        if none:
            self._step("fail", "framework", f"neither TensorFlow nor PyTorch in the job Python: {'; '.join(none)}"
                       f"{note}", "install tensorflow or torch into the job Python on every node, or ship one "
                       "with the job (environment.archive from `melon pack-env`)")
        else:
            found = sorted({f"{p.get('node')}: " + ", ".join(f"{k} {v}" for k, v in p["frameworks"].items())
                            for p in probes})
            self._step("ok", "framework", "; ".join(found) + note)




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


__all__ = ["Doctor", "Finding", "SubmitTest", "YarnApiError", "as_json", "render"]
