"""Start, stop and inspect the embedded Hadoop 3.5 cluster (MiniDFSCluster + MiniYARNCluster).

The cluster is the Java launcher ``org.melon.yarn.MiniClusterLauncher`` in ``appmaster/`` (see docs/protocol.md).
This module only runs it as a background process, waits (bounded) until the RM reports every NodeManager
RUNNING with its GPU resources, and stops it. It is used by ``melon minicluster start|stop|status``, by the
pytest session fixture and by ``make demo``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, TypedDict

from airflow_provider_melon import rm
from airflow_provider_melon.gpu.ledger import pid_alive
from airflow_provider_melon.hadoop.rm_json import GPU_RESOURCE, parse_resource

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]  # airflow_provider_melon/dev/minicluster.py
APPMASTER_DIR = REPO_ROOT / "appmaster"
DEFAULT_WORK_DIR = REPO_ROOT / ".melon-minicluster"
#: what the embedded cluster's jobs reserve on a GPU for the CUDA context ([melon] gpu_context_mb): nothing, its GPUs
#: are virtual (or a real one split between NodeManagers, where the figure is the admin's to set)
GPU_CONTEXT_MB = 0
LAUNCHER_CLASS = "org.melon.yarn.MiniClusterLauncher"
# Ports are laid out from one base so that two clusters (say, a developer's and a test run) can coexist.
DEFAULT_PORT_BASE = 18000


class MiniClusterError(RuntimeError):
    """The launcher failed or did not become ready in time; the message carries its log tail."""


@dataclass
class ClusterDetails:
    """What the launcher publishes in its details JSON once the cluster is ready."""

    details: dict
    work_dir: Path
    rm_web_url: str = field(init=False)
    webhdfs_url: str = field(init=False)
    fs_default_fs: str = field(init=False)
    conf_dir: str = field(init=False)
    am_classpath: str = field(init=False)
    user: str = field(init=False)

    def __post_init__(self) -> None:
        d = self.details
        self.rm_web_url = d["rm_web_url"]
        self.webhdfs_url = d["webhdfs_url"]
        self.fs_default_fs = d["fs_default_fs"]
        self.conf_dir = d["conf_dir"]
        self.am_classpath = d["am_classpath"]
        self.user = d.get("user") or os.environ.get("USER", "root")

    # ---- the secure (Kerberos) cluster: `start(secure=True)`
    @property
    def secure(self) -> bool:
        return bool(self.details.get("secure"))

    @property
    def krb5_conf(self) -> str | None:
        """The client krb5.conf (for MIT Kerberos / GSSAPI: KRB5_CONFIG) of a secure cluster."""
        return self.details.get("krb5_conf")

    def principal(self, name: str) -> str:
        """``airflow``, ``alice``, ``bob`` or ``services`` → its full principal (secure cluster)."""
        return self.details["principals"][name]

    def keytab(self, name: str) -> str:
        return self.details["keytabs"][name]

    def ccache(self, name: str) -> str:
        """A private ticket cache per principal, in the work dir."""
        return str(Path(self.work_dir) / "kerberos" / f"{name}.ccache")

    @property
    def nn_http(self) -> tuple[str, int]:
        host, port = self.details["nn_http"].rsplit(":", 1)
        return host, int(port)


class Tenants(TypedDict):
    service_user: str
    queues: dict[str, tuple[str, int, int]]  # tenant user -> (queue, guaranteed %, maximum %)
    admin_user: str
    admin_group: str
    proxy_group: str


#: What ``start(tenants=True)`` sets up (the launcher's tenantsConf): the service user that submits on behalf of
#: others (doAs), tenant user → queue (guaranteed %, maximum %), the admin user and its group.
TENANTS: Tenants = {
    "service_user": "airflow",
    "queues": {"alice": ("tenant_a", 40, 100), "bob": ("tenant_b", 40, 50)},
    "admin_user": "ops",
    "admin_group": "melon-admins",
    "proxy_group": "tenants",
}


def ports_from_base(base: int) -> dict[str, int]:
    return {"rm-port": base + 32, "rm-web-port": base + 88, "nn-port": base + 20, "nn-http-port": base + 70}


def details_path(work_dir: Path) -> Path:
    return Path(work_dir) / "cluster.json"


def pid_path(work_dir: Path) -> Path:
    return Path(work_dir) / "launcher.pid"


def log_path(work_dir: Path) -> Path:
    return Path(work_dir) / "launcher.log"


def launcher_classpath() -> str:
    """The launcher's classes, Hadoop's jars, and the scheduler plug-in's jar, which its ResourceManager loads as a
    cluster's does from its classpath."""
    classes = APPMASTER_DIR / "launcher" / "target" / "classes"
    cp_file = APPMASTER_DIR / "launcher" / "target" / "classpath.txt"
    if not classes.is_dir() or not cp_file.is_file() or not rm.SCHEDULER_JAR.is_file():
        raise MiniClusterError(
            f"the launcher is not built: {classes}, {cp_file} or {rm.SCHEDULER_JAR} is missing; run `make setup` "
            "(or just `bash appmaster/build.sh --dev`)"
        )
    return f"{classes}{os.pathsep}{cp_file.read_text().strip()}{os.pathsep}{rm.SCHEDULER_JAR}"


def _log_tail(work_dir: Path, lines: int = 40) -> str:
    try:
        text = log_path(work_dir).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no launcher log)"
    return "\n".join(text[-lines:])


def node_resources(resource: dict | None) -> dict:
    """An RM resource object flattened to name → value (``memory-mb``, ``vcores``, ``yarn.io/gpu``, …)."""
    return parse_resource(resource)["resources"]


def read_details(work_dir: Path = DEFAULT_WORK_DIR) -> ClusterDetails | None:
    path = details_path(work_dir)
    if not path.is_file():
        return None
    return ClusterDetails(json.loads(path.read_text()), Path(work_dir))


def running_pid(work_dir: Path = DEFAULT_WORK_DIR) -> int | None:
    try:
        pid = int(pid_path(work_dir).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def kerberos_login(details: ClusterDetails, name: str = "airflow"):
    """A ticket of ``name`` on a secure cluster (its keytab → its ccache in the work dir; exports ``KRB5_CONFIG``),
    as the hook gets one for the Airflow principal: the :class:`~airflow_provider_melon.hooks.kerberos.TicketKeeper`,
    whose ``auth()`` makes SPNEGO calls with it."""
    from airflow_provider_melon.hooks.kerberos import KerberosSettings, TicketKeeper

    keeper = TicketKeeper(
        KerberosSettings(details.principal(name), details.keytab(name), details.ccache(name), details.krb5_conf)
    )
    keeper.ensure(force=True)
    return keeper


def _get_json(url: str, timeout: float, auth=None) -> dict:
    if auth is not None:  # SPNEGO (a kerberos_login() ticket)
        import requests

        resp = requests.get(url, timeout=timeout, auth=auth)
        resp.raise_for_status()
        return resp.json()
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


def nodes_ready(
    rm_web_url: str, user: str, expected_nodes: int, timeout: float = 5.0, require_gpu: bool = True, auth=None
) -> list[dict] | None:
    """The RUNNING nodes if ``expected_nodes`` of them report a GPU count (any count when not
    ``require_gpu``), else None (not ready yet). ``auth``: SPNEGO on a secure cluster (else simple auth)."""
    url = f"{rm_web_url}/ws/v1/cluster/nodes?states=RUNNING" + ("" if auth is not None else f"&user.name={user}")
    try:
        body = _get_json(url, timeout, auth)
    except Exception:  # noqa: BLE001 - connection refused, 401 before the KDC is up, a half-written answer
        return None
    nodes = ((body or {}).get("nodes") or {}).get("node") or []
    ready = [n for n in nodes if not require_gpu or node_resources(n.get("totalResource"))[GPU_RESOURCE] > 0]
    return ready if len(ready) >= expected_nodes else None


def inventory_path(work_dir: Path) -> Path:
    return Path(work_dir) / "gpu-inventory.json"


def write_inventory(work_dir: Path, gpus: int, gpu_memory_mb: int) -> Path:
    """The virtual GPUs each NodeManager advertises, for the executor's ledger (read only when NVML finds none)."""
    per_gpu = gpu_memory_mb // max(gpus, 1)
    body = {"gpus": [{"index": i, "total_mb": per_gpu, "name": "melon-virtual-gpu"} for i in range(gpus)]}
    path = inventory_path(work_dir)
    path.write_text(json.dumps(body, indent=1))
    return path


#: what a NodeManager's containers get to hide the host's GPUs (CUDA's "no device"; ``devices.nvml_gpus`` then
#: finds none, and the executor keeps it for the user's process)
HIDDEN_GPUS = "-1"


@dataclass
class GpuLayout:
    """Which GPUs each NodeManager of the embedded cluster advertises and its containers see.

    ``source`` ``nvml``: the host's real GPUs, split between the NodeManagers in disjoint sets (NM ``i`` gets
    ``nodes[i]``, its containers see only those: ``CUDA_VISIBLE_DEVICES`` and their own inventory file); ``virtual``:
    none is real (``gpus`` per NM, declared only, with ``message`` saying why, "no GPU: ..."). ``env``: per NM,
    what its containers' environment is forced to (the NodeManager's ``admin-env``)."""

    source: str
    gpus: int
    gpu_memory_mb: int
    message: str
    nodes: list = field(default_factory=list)
    env: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "gpus_per_node": self.gpus,
            "gpu_memory_mb_per_node": self.gpu_memory_mb,
            "message": self.message,
            "nodes": self.nodes,
        }


def gpu_layout(work_dir: Path, nodemanagers: int, gpus: int, gpu_memory_mb: int, found=None) -> GpuLayout:
    """Split the host's GPUs (``found``: :func:`~airflow_provider_melon.gpu.devices.nvml_gpus`, the product's own
    NVML call, which honours this process's ``CUDA_VISIBLE_DEVICES``) between ``nodemanagers``: NM ``i`` gets
    GPUs ``[i*k, (i+1)*k)`` of the list, ``k = len // nodemanagers`` (the rest unused, and said), so no two
    NodeManagers ever claim one physical GPU. Each NM advertises ``k`` GPUs and ``k`` × the smallest one's memory.
    With no GPU, or fewer than NodeManagers: ``gpus`` virtual GPUs per NM of ``gpu_memory_mb`` in all, the real
    ones (if any) hidden from every container. Writes the per-NM inventory files it names."""
    from airflow_provider_melon.gpu import devices

    found = devices.nvml_gpus() if found is None else found
    if nodemanagers < 1:
        raise MiniClusterError(f"nodemanagers must be at least 1, got {nodemanagers}")
    per = len(found) // nodemanagers
    if per == 0:
        why = (
            found.reason
            if not found
            else (
                f"this host's {len(found)} GPU(s) cannot be split between "
                f"{nodemanagers} NodeManagers (hidden from the containers)"
            )
        )
        message = f"{why}; each NodeManager advertises {gpus} virtual GPU(s), {gpu_memory_mb} MiB in all"
        env: list[dict[str, str]] = (
            [{"CUDA_VISIBLE_DEVICES": HIDDEN_GPUS}] * nodemanagers if found else [{}] * nodemanagers
        )
        return GpuLayout(
            "virtual",
            gpus,
            gpu_memory_mb,
            message if message.startswith("no GPU") else f"no GPU: {message}",
            env=list(env),
        )
    smallest = min(g.total_mb for g in found)
    nodes: list[dict[str, Any]] = []
    env = []
    for i in range(nodemanagers):
        mine = list(found)[i * per : (i + 1) * per]
        inventory = Path(work_dir) / f"gpu-inventory-nm{i}.json"
        inventory.write_text(
            json.dumps(
                {"gpus": [{"index": g.index, "uuid": g.uuid, "total_mb": g.total_mb, "name": g.name} for g in mine]},
                indent=1,
            )
        )
        nodes.append({"nodemanager": i, "gpus": [g.index for g in mine], "uuids": [g.uuid for g in mine]})
        env.append(
            {"CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in mine), "MELON_GPU_INVENTORY": str(inventory)}
        )
    unused = list(found)[per * nodemanagers :]
    message = (
        f"{len(found)} GPU(s) ({found[0].name}) split between {nodemanagers} NodeManagers: "
        + "; ".join(f"NM{n['nodemanager']} GPU {','.join(map(str, n['gpus']))}" for n in nodes)
        + (f"; GPU {','.join(str(g.index) for g in unused)} unused (not an even split)" if unused else "")
    )
    return GpuLayout("nvml", per, per * smallest, message, nodes, env)


def layout_path(work_dir: Path) -> Path:
    return Path(work_dir) / "gpu-layout.json"


def read_layout(work_dir: Path) -> dict | None:
    """The running cluster's :class:`GpuLayout` as JSON (``melon minicluster status`` shows it)."""
    try:
        return json.loads(layout_path(work_dir).read_text())
    except (OSError, ValueError):
        return None


def container_logs(work_dir: Path, app_id: str, name: str = "stdout") -> dict[str, str]:
    """Container id -> that container's log file ``name`` (``stdout``, ``stderr``), read from the NodeManagers'
    log dirs under ``work_dir`` (the mini cluster's NMs are local)."""
    return {
        path.parent.name: path.read_text(errors="replace")
        for path in Path(work_dir).rglob(f"{app_id}/container_*/{name}")
    }


def container_env(details: ClusterDetails) -> dict[str, str]:
    """Environment the mini cluster's task containers need: the virtual GPU inventory, and one ledger per
    NodeManager (``{nm}`` → ``<NM_HOST>_<NM_PORT>``): both NMs run on this one host, each with its own GPUs."""
    env = {
        "MELON_GPU_INVENTORY": str(inventory_path(details.work_dir)),
        "MELON_LEDGER_DIR": str(Path(details.work_dir) / "ledger-{nm}"),
    }
    layout = read_layout(details.work_dir)
    if layout and layout.get("source") == "nvml":  # each NodeManager gives its containers its own inventory (its
        del env["MELON_GPU_INVENTORY"]  # admin-env, which YARN appends to a job's value rather than replacing it)
    return env


def tenant_hook(details: ClusterDetails, user: str, *, hdfs_client=None, admin_acl: str | None = None):
    """A ``MelonHook`` on a ``tenants`` cluster acting for ``user`` as the operator's ``run_as=user`` builds it: the
    service user's connection (:data:`TENANTS`), doAs ``user`` on every RM and WebHDFS call. ``hdfs_client``
    replaces the WebHDFS client (a test's guard, say)."""
    import sys

    from hdfs import InsecureClient

    from airflow_provider_melon.hooks.melon import MelonHook
    from airflow_provider_melon.hooks.yarn import YarnHook

    service = TENANTS["service_user"]
    namenode = details.webhdfs_url.rsplit("/webhdfs/v1", 1)[0]
    return MelonHook(
        yarn_hook=YarnHook(rm_urls=[details.rm_web_url], user=service, retries=0),
        hdfs_client=hdfs_client or InsecureClient(namenode, user=service, proxy=user),
        proxy_user=user,
        admin_acl=admin_acl,
        am_classpath=details.am_classpath,
        default_python=sys.executable,
        container_env=container_env(details),
        fs_default_fs=details.fs_default_fs,
        gpu_context_mb=GPU_CONTEXT_MB,
    )


def _loopback_hosts_file(work_dir: Path) -> Path:
    """A hosts file for the launcher's JVM (``jdk.net.hosts.file``): this machine's ``/etc/hosts`` and its own name,
    nothing else, so the NodeManagers' loopback addresses (127.0.0.2, ...) resolve to no name, without asking DNS."""
    import socket

    try:
        lines = Path("/etc/hosts").read_text().splitlines()
    except OSError:
        lines = []
    named = {name for line in lines for name in line.split("#", 1)[0].split()[1:]}
    # a name listed twice for one address is looked up as two addresses (a server would bind the port twice)
    missing = [name for name in ("localhost", socket.gethostname()) if name not in named]
    path = work_dir / "hosts"
    path.write_text("\n".join(lines + ([f"127.0.0.1 {' '.join(missing)}"] if missing else [])) + "\n")
    return path


def start(
    work_dir: Path = DEFAULT_WORK_DIR,
    *,
    port_base: int = DEFAULT_PORT_BASE,
    nodemanagers: int = 2,
    gpus: int = 2,
    gpu_memory_mb: int = 32768,
    nm_memory_mb: int = 8192,
    nm_vcores: int = 16,
    timeout: float = 180.0,
    java: str = "java",
    melon_config: bool = True,
    nm_expiry_ms: int = 600_000,
    rm_recovery: bool = False,
    secure: bool = False,
    tenants: bool = False,
    token_renew_s: float = 0,
    fair: bool = False,
    yarn_site: dict[str, str] | None = None,
    placement: str = "melon",
    gpu_models: Sequence[str] | None = None,
    set_calculator: bool = True,
) -> ClusterDetails:
    """Start the launcher in the background and wait until it is ready; raise with the log tail otherwise.
    ``melon_config=False`` starts a vanilla YARN (no GPU resource types, memory-only scheduling), the cluster
    an admin has before following docs/cluster-configuration.md (used to test ``melon doctor``).
    ``nm_expiry_ms`` and ``rm_recovery`` are for fault tests (see :func:`control`). ``secure``: Kerberos (a KDC,
    keytabs and krb5.conf under ``<work_dir>/kerberos``, SPNEGO on RM/NM/WebHDFS); this process is then logged in
    as the ``airflow`` principal (:func:`kerberos_login`) to check readiness. ``tenants``: the multi-tenant
    setup (:data:`TENANTS`: queues with preemption, ACLs, HDFS permissions, an ``airflow`` user that may
    impersonate the tenants); with ``secure`` too, the tenants are Kerberos principals. ``token_renew_s`` > 0: the
    NameNode's delegation-token renew interval (a token expires that long after its last renewal). ``fair``: the
    default queue orders its applications by fair share (interleaved grants) instead of FIFO (the gang tests).
    ``placement``: ``"melon"``, multi-node placement in the order of the scheduler plug-in (its jar on the
    launcher's classpath, as on a cluster's RM: docs/scheduler-plugin.md), or ``"heartbeat"``, YARN's stock placement
    on the node that heartbeats. ``yarn_site``: extra properties in a ``yarn-site.xml`` on the launcher's classpath,
    read by every ``YarnConfiguration`` it makes (so by the NodeManagers), for settings the launcher does not set itself: e.g.
    YARN's GPU plugin (``yarn.nodemanager.resource-plugins``, tests/integration/test_gpu_plugin_live.py).
    ``gpu_models``: one GPU model per NodeManager (e.g. ``["A10", "T4", "T4"]``), each published as its node
    attribute ``nm.yarn.io/gpu-model``, and the RM set to take placement constraints: what jobs whose roles name
    ``gpu_models`` need (docs/cluster-configuration.md). ``set_calculator=False``: the launcher sets no resource
    calculator and the configuration files decide, as on a cluster: ``yarn_site``'s, then the classpath's
    capacity-scheduler.xml (Hadoop's stock file), which the CapacityScheduler reads after it. The details'
    ``resource_calculator`` is the one the scheduler runs on."""
    if gpu_models is not None and len(gpu_models) != nodemanagers:
        raise ValueError(f"gpu_models: one model per NodeManager ({nodemanagers}), got {list(gpu_models)}")
    work_dir = Path(work_dir).resolve()
    if running_pid(work_dir):
        existing = read_details(work_dir)
        if existing:
            return existing
        raise MiniClusterError(f"a launcher is already starting in {work_dir} (pid {running_pid(work_dir)})")
    work_dir.mkdir(parents=True, exist_ok=True)
    details_path(work_dir).unlink(missing_ok=True)
    layout = gpu_layout(work_dir, nodemanagers, gpus, gpu_memory_mb) if melon_config else None
    if layout is not None:
        gpus, gpu_memory_mb = layout.gpus, layout.gpu_memory_mb
        layout_path(work_dir).write_text(json.dumps(layout.to_json(), indent=1))
        (work_dir / "nm-env.json").write_text(json.dumps(layout.env))
    write_inventory(work_dir, gpus, gpu_memory_mb)
    classpath = launcher_classpath()
    if secure:  # site files the launcher writes for configurations created inside it (SecureCluster.java)
        (work_dir / "site").mkdir(exist_ok=True)
        classpath = f"{classpath}{os.pathsep}{work_dir / 'site'}"
    if yarn_site:
        extra = work_dir / "yarn-site"
        extra.mkdir(exist_ok=True)
        write_site_xml(extra / "yarn-site.xml", yarn_site)
        classpath = f"{classpath}{os.pathsep}{extra}"
    jvm = [java, "-Xmx1g"]
    if gpu_models is not None:  # each NodeManager on its own loopback address, its host that address (no DNS)
        jvm.append(f"-Djdk.net.hosts.file={_loopback_hosts_file(work_dir)}")
    args = [*jvm, "-cp", classpath, LAUNCHER_CLASS, "--work-dir", str(work_dir)]
    for flag, port in ports_from_base(port_base).items():
        args += [f"--{flag}", str(port)]
    args += [
        "--nodemanagers",
        str(nodemanagers),
        "--gpus",
        str(gpus),
        "--gpu-memory-mb",
        str(gpu_memory_mb),
        "--nm-memory-mb",
        str(nm_memory_mb),
        "--nm-vcores",
        str(nm_vcores),
        "--melon-config",
        "1" if melon_config else "0",
        "--nm-expiry-ms",
        str(nm_expiry_ms),
        "--rm-recovery",
        "1" if rm_recovery else "0",
        "--placement",
        placement,
    ]
    if secure:
        args += ["--secure", "1"]
    if tenants:
        args += ["--tenants", "1"]
    if token_renew_s:
        args += ["--dt-renew-ms", str(int(token_renew_s * 1000))]
    if fair:
        args += ["--fair", "1"]
    if not set_calculator:
        args += ["--set-calculator", "0"]
    if layout is not None:
        args += ["--nm-env", str(work_dir / "nm-env.json")]
    if gpu_models is not None:
        args += ["--nm-gpu-models", ",".join(gpu_models)]
    with open(log_path(work_dir), "wb") as log:
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=work_dir
        )
    pid_path(work_dir).write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pid_path(work_dir).unlink(missing_ok=True)
            raise MiniClusterError(
                f"mini cluster launcher exited with code {proc.returncode}; log tail:\n{_log_tail(work_dir)}"
            )
        details = read_details(work_dir)
        auth = kerberos_login(details).auth() if details and details.secure else None
        if details and nodes_ready(details.rm_web_url, details.user, nodemanagers, require_gpu=melon_config, auth=auth):
            if layout is not None:
                logger.info("mini cluster GPUs: %s", layout.message)
            return details
        time.sleep(0.5)
    stop(work_dir)
    raise MiniClusterError(
        f"mini cluster not ready within {timeout:.0f}s (expected {nodemanagers} RUNNING nodes with GPUs); "
        f"log tail:\n{_log_tail(work_dir)}"
    )


def write_site_xml(path: Path, props: dict[str, str]) -> Path:
    """A Hadoop ``*-site.xml`` holding ``props``."""
    from xml.sax.saxutils import escape

    body = "".join(
        f"  <property><name>{escape(str(k))}</name><value>{escape(str(v))}</value></property>\n"
        for k, v in props.items()
    )
    Path(path).write_text(f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n')
    return Path(path)


def control(details: ClusterDetails, action: str, timeout: float = 180.0) -> dict:
    """A fault, injected by the launcher (tests only): ``nodemanagers/<i>/crash`` (the NM goes silent, its
    containers die; the RM finds it LOST after ``nm_expiry_ms``), ``namenode/restart``, ``resourcemanager/restart``
    (keeps applications with ``rm_recovery``). Returns ``{"result": ..., "seconds": ...}`` once done."""
    url = f"{details.details['control_url']}/{action.lstrip('/')}"
    req = urllib.request.Request(url, method="POST", data=b"")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        raise MiniClusterError(f"control {action} failed ({exc.code}): {exc.read().decode(errors='replace')}") from None


def stop(work_dir: Path = DEFAULT_WORK_DIR, timeout: float = 60.0) -> bool:
    """SIGTERM the launcher (it stops YARN then HDFS), SIGKILL its process group after ``timeout``."""
    work_dir = Path(work_dir).resolve()
    pid = running_pid(work_dir)
    if pid is None:
        pid_path(work_dir).unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):  # a zombie (our exited child) counts as gone
        time.sleep(0.3)
    if pid_alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _reap(pid)
    pid_path(work_dir).unlink(missing_ok=True)
    details_path(work_dir).unlink(missing_ok=True)
    return True


def _reap(pid: int) -> None:
    """Collect the launcher's exit status when it is our own child (else it lingers as a zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def status(work_dir: Path = DEFAULT_WORK_DIR) -> dict:
    """A JSON-able summary: running or not, URLs, and each RUNNING node's resources."""
    work_dir = Path(work_dir).resolve()
    pid = running_pid(work_dir)
    details = read_details(work_dir)
    out: dict = {"running": bool(pid and details), "pid": pid, "work_dir": str(work_dir)}
    if details:
        out.update(
            rm_web_url=details.rm_web_url,
            webhdfs_url=details.webhdfs_url,
            fs_default_fs=details.fs_default_fs,
            conf_dir=details.conf_dir,
        )
        auth = kerberos_login(details).auth() if details.secure else None
        if details.secure:
            out.update(
                secure=True,
                realm=details.details.get("realm"),
                krb5_conf=details.krb5_conf,
                principals=details.details.get("principals"),
                keytabs=details.details.get("keytabs"),
            )
        out["gpu_layout"] = read_layout(work_dir)
        nodes = nodes_ready(details.rm_web_url, details.user, 0, require_gpu=False, auth=auth) or []
        out["nodes"] = [
            {
                "id": n.get("id"),
                "state": n.get("state"),
                "total": node_resources(n.get("totalResource")),
                "used": node_resources(n.get("usedResource")),
            }
            for n in nodes
        ]
    return out


def airflow_connections(details: ClusterDetails, python: str) -> dict:
    """The Airflow connections that point at this cluster (what an admin would enter for a real one)."""
    host, port = details.nn_http
    if details.secure:
        return _secure_connections(details, python)
    return {
        "yarn_default": {
            "conn_type": "yarn",
            "host": details.rm_web_url,
            "login": details.user,
            "extra": {
                "auth": "simple",
                "fs_default_fs": details.fs_default_fs,
                "am_classpath": details.am_classpath,
                "python": python,
                "container_env": container_env(details),
                "gpu_context_mb": GPU_CONTEXT_MB,
            },
        },
        "webhdfs_default": {"conn_type": "webhdfs", "host": host, "port": port, "login": details.user},
    }


def _secure_connections(details: ClusterDetails, python: str) -> dict:
    """The same connections for a secure cluster: Kerberos as the ``airflow`` principal from its keytab."""
    host, port = details.nn_http
    return {
        "yarn_default": {
            "conn_type": "yarn",
            "host": details.rm_web_url,
            "extra": {
                "auth": "kerberos",
                "kerberos_principal": details.principal("airflow"),
                "kerberos_keytab": details.keytab("airflow"),
                "kerberos_ccache": details.ccache("airflow"),
                "krb5_conf": details.krb5_conf,
                "fs_default_fs": details.fs_default_fs,
                "gpu_context_mb": GPU_CONTEXT_MB,
                "am_classpath": details.am_classpath,
                "python": python,
                "container_env": container_env(details),
            },
        },
        "webhdfs_default": {"conn_type": "webhdfs", "host": host, "port": port},
    }


def connection_exports(details: ClusterDetails, python: str) -> list[str]:
    """``export AIRFLOW_CONN_...='...'`` lines that point an Airflow (and ``melon --conn-id``) at this cluster. On a
    secure cluster also the Kerberos environment of the ``airflow`` principal: the provider's hooks need only the
    connections (the yarn connection names keytab, cache and krb5.conf), but the HDFS provider's own
    ``WebHDFSHook`` in your DAGs, ``klist`` and Hadoop's CLI read ``[core] security``, ``KRB5_CONFIG`` and
    ``KRB5CCNAME`` (the cache the hook keeps a ticket in)."""
    import shlex

    lines = [
        f"export AIRFLOW_CONN_{conn_id.upper()}={shlex.quote(json.dumps(conn))}"
        for conn_id, conn in airflow_connections(details, python).items()
    ]
    if details.secure:
        lines += [
            f"export KRB5_CONFIG={shlex.quote(str(details.krb5_conf))}",
            f"export KRB5CCNAME={shlex.quote('FILE:' + details.ccache('airflow'))}",
            "export AIRFLOW__CORE__SECURITY=kerberos",
        ]
    return lines


def airflow_env(details: ClusterDetails, airflow_home: Path, dags_folder: Path, python: str) -> dict:
    """Environment for `airflow dags test` against this cluster: AIRFLOW_HOME, SQLite, connections file."""
    airflow_home = Path(airflow_home)
    airflow_home.mkdir(parents=True, exist_ok=True)
    conns = airflow_home / "connections.json"
    conns.write_text(json.dumps(airflow_connections(details, python), indent=1))
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=str(airflow_home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags_folder),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW__SECRETS__BACKEND="airflow.secrets.local_filesystem.LocalFilesystemBackend",
        AIRFLOW__SECRETS__BACKEND_KWARGS=json.dumps({"connections_file_path": str(conns)}),
        PYTHONUNBUFFERED="1",
    )
    return env
