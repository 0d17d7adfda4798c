"""The user's process's framework environment: TF_CONFIG, PyTorch rendezvous variables, and the bootstrap that caps
its GPU memory and writes its peak (MeLoN shared mode).

Stdlib only: runs inside YARN containers under the job's own Python. How the cap's bootstrap works, and how it keeps
the user's own memory settings: ``docs/internals.md`` ("The GPU memory cap in the user's process").
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "TF_ROLES",
    "tf_config",
    "torch_env",
    "torchrun_argv",
    "rendezvous_store_command",
    "split_address",
    "memory_cap_env",
    "peak_env",
    "SITECUSTOMIZE",
]

TF_ROLES = ("chief", "worker", "ps", "evaluator")


def _roles(cluster: Mapping[str, Sequence[str]]) -> Dict[str, List[str]]:
    return {r: list(a) for r, a in cluster.items() if a}


def _check_task(cluster: Mapping[str, Sequence[str]], role: str, index: int) -> None:
    addrs = cluster.get(role) or []
    if not 0 <= int(index) < len(addrs):
        raise ValueError(f"task {role}:{index} is not in the cluster spec {dict(cluster)}")


def tf_config(cluster: Mapping[str, Sequence[str]], role: str, index: int) -> dict[str, Any]:
    """TF_CONFIG for task ``role:index``.

    Per TensorFlow's rules the ``evaluator`` is a side task: it is left out of ``cluster`` (a strategy that
    saw it there would wait for it to join collectives), but it still gets ``task: {"type": "evaluator"}``.
    Roles with no address are omitted.
    """
    _check_task(cluster, role, index)
    spec = {r: a for r, a in _roles(cluster).items() if r != "evaluator"}
    return {"cluster": spec, "task": {"type": role, "index": int(index)}}


def split_address(addr: str) -> Tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) -> ``(host, port)``."""
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {addr!r}")
    return host.strip("[]"), int(port)


#: the roles of a torch.distributed group, in rank order: ``master`` (a pytorch job's own role name, spec.TORCH_ROLES)
#: or ``chief``, then the workers
TORCH_MEMBER_ROLES = ("master", "chief", "worker")


def torch_env(
    cluster: Mapping[str, Sequence[str]], role: str, index: int, address: Optional[str] = None
) -> Dict[str, str]:
    """torch.distributed env (``init_method="env://"``) for task ``role:index``.

    The process group is master/chief + workers, ranked in that order: rank 0 is ``master:0`` or ``chief:0`` if
    there is one, else ``worker:0``, and its registered address is ``MASTER_ADDR:MASTER_PORT`` (rank 0 binds that
    port itself: the executor released it just before starting the user's process). One process per container:
    ``LOCAL_RANK=0``, ``LOCAL_WORLD_SIZE=1``. Other roles (ps, evaluator) get MASTER_* and WORLD_SIZE but no
    RANK: they are not members of the group.

    ``address``: the task's own registered ``host:port``. An elastic role's gang forms at its minimum, so the AM's
    cluster lists the members registered so far, in order, and a task's place there is not its index (worker:2 of
    a gang of worker:0 and worker:2 is the second member): with ``address``, the task's rank is its place.
    """
    if address is not None and role in TORCH_MEMBER_ROLES and address in (cluster.get(role) or []):
        index = list(cluster[role]).index(address)
    _check_task(cluster, role, index)
    members: List[str] = []
    first = {}  # role -> the rank of its task 0
    for name in TORCH_MEMBER_ROLES:
        first[name] = len(members)
        members += list(cluster.get(name) or [])
    if not members:
        raise ValueError(f"a PyTorch job needs a master, a chief or a worker; cluster is {dict(cluster)}")
    master_host, master_port = split_address(members[0])
    env = {
        "MASTER_ADDR": master_host,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(len(members)),
    }
    if role in TORCH_MEMBER_ROLES:
        rank = first[role] + int(index)
        env.update({"RANK": str(rank), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(rank)})
    return env


#: the worker shim (``runtime/worker.py``) torchrun starts each worker through, by absolute path
WORKER_SHIM = os.path.abspath(os.path.join(os.path.dirname(__file__), "worker.py"))
#: elastic (``nnodes`` MIN:MAX), the c10d rendezvous' settings: once the minimum has joined a round it waits 5 s for
#: more members (torch's default, 30 s, would stall every membership change that long), and a member whose agent sends
#: no keep-alive for 6 s (2 s x 3) is dropped: torch's default, 5 s x 3, held the survivors' next round 15 s after a
#: loss, and 1 s x 3 let keep-alives grow older than 3 s on a loaded node, where any agent's sync would drop a live
#: member (benchmarks/bench_rdzv_keepalive.py, results/bench_rdzv_keepalive.txt)
ELASTIC_RDZV_CONF = "last_call_timeout=5,keep_alive_interval=2,keep_alive_max_attempt=3"
#: elastic: the agents' environment. By default torch's agents share one TCP store for the workers' bootstrap, hosted by
#: the agent of the first round's node rank 0, whose address is published only in that first round: an agent joining a
#: later round (a replacement) waits for it until the store's timeout, and a group that lost that agent keeps its dead
#: address. torch's own switch turns the sharing off: each round's node rank 0 publishes a fresh MASTER_ADDR/PORT and
#: its rank-0 worker hosts the store.
ELASTIC_AGENT_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


#: a PyTorch task's NCCL settings (docs/elastic.md, "NCCL"): on a collective error or past the process group's
#: timeout, NCCL's watchdog aborts the communicators and ends the process (1: TearDown), so a worker whose peer is
#: lost exits, and its agent re-forms the group, instead of waiting on the collective. torchrun's agent sets the same
#: for its workers; launcher: python gets it from here.
NCCL_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
#: what the rendezvous store beside the AM prints once it serves (the AM's ``RendezvousStore.READY``)
RDZV_STORE_READY = "melon-rdzv-store: serving"
#: the rendezvous store beside the AM (docs/elastic.md): run by the AM in its container with the job's Python, on
#: ``MELON_RDZV_HOST``/``MELON_RDZV_PORT``; it serves torch's c10d ``TCPStore`` (every agent a client, ``is_host=0``)
#: until the AM's container ends (its stdin, the AM's pipe, closes). Without torch it says so and exits 3.
RDZV_STORE_SCRIPT = f"""\
import datetime, os, sys
try:
    from torch.distributed import TCPStore
except Exception as exc:
    print("melon-rdzv-store: no torch here (%s): %r" % (sys.executable, exc), flush=True)
    sys.exit(3)
host, port = os.environ["MELON_RDZV_HOST"], int(os.environ["MELON_RDZV_PORT"])
store = TCPStore(host, port, is_master=True, wait_for_workers=False, multi_tenant=True,
                 timeout=datetime.timedelta(seconds=60))
print("{RDZV_STORE_READY} on %s:%d (torch %s)" % (host, port, __import__("torch").__version__), flush=True)
sys.stdin.read()
"""


def rendezvous_store_command(python: str) -> str:
    """The plan's ``rendezvous_store``: the shell line the AM runs to serve the agents' rendezvous store."""
    return f"{shlex.quote(python)} -c {shlex.quote(RDZV_STORE_SCRIPT)}"


def torchrun_env(nnodes: Optional[str]) -> Dict[str, str]:
    """What the agent's environment adds under torchrun: :data:`ELASTIC_AGENT_ENV` for elastic bounds (``MIN:MAX``)."""
    return dict(ELASTIC_AGENT_ENV) if ":" in str(nnodes or "") else {}


def torchrun_argv(
    python: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    nproc_per_node: int,
    rdzv_id: str,
    local_addr: str,
    nnodes: Optional[str] = None,
    max_restarts: int = 0,
    rdzv_endpoint: Optional[str] = None,
) -> List[str]:
    """The user's command under ``torchrun`` (``python -m torch.distributed.run``): one elastic agent per container
    starting ``nproc_per_node`` processes, joined by a c10d rendezvous on ``MASTER_ADDR:MASTER_PORT`` of ``env``
    (:func:`torch_env`: the first member's registered address and reserved port). The first member's agent hosts
    the rendezvous store on that port (``is_host``); the others connect to it. ``local_addr`` (``--local-addr``) is
    this task's registered host, where the others reach its agent (the agent of node rank 0 serves its workers'
    store on a port torch picks; with elastic bounds, :func:`torchrun_env`, its rank-0 worker does). ``nnodes``: ``"N"`` or ``"MIN:MAX"`` (default ``WORLD_SIZE``, every member);
    elastic bounds add :data:`ELASTIC_RDZV_CONF`. ``max_restarts``
    (``--max-restarts``): how many times an agent re-forms its group after a failure, a lost member's among them.
    ``rdzv_endpoint``: the rendezvous store beside the AM (``MELON_RDZV_ENDPOINT``): every agent is its client
    (``is_host=0``), none hosts it, so no member's loss takes it along.
    Each worker starts through :data:`WORKER_SHIM`, so it dies with its agent (see ``runtime/worker.py``).

    ``argv``: the user's command; a leading ``python``/``python3``/python path runs under ``python`` (the job's
    interpreter, as a plain run would), any other program as it is.
    """
    if nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be >= 1, got {nproc_per_node}")
    args = list(argv)
    if not args:
        raise ValueError("the command to run under torchrun is empty")
    head = os.path.basename(args[0])
    if args[0] == python or head in ("python", "python3") or head.startswith("python3."):
        args = args[1:]
        if not args or args == ["-m"]:
            raise ValueError("torchrun needs a script or -m module after python")
        args = [python, *args]
    conf = f"is_host={1 if env.get('RANK', '') == '0' and not rdzv_endpoint else 0}"
    elastic = ":" in str(nnodes or "")
    if elastic:
        conf += "," + ELASTIC_RDZV_CONF
    return [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes or env['WORLD_SIZE']}",
        f"--nproc-per-node={int(nproc_per_node)}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={rdzv_endpoint or _join_address(env['MASTER_ADDR'], env['MASTER_PORT'])}",
        f"--rdzv-id={rdzv_id}",
        f"--rdzv-conf={conf}",
        f"--local-addr={local_addr}",
        *([f"--max-restarts={int(max_restarts)}"] if max_restarts else []),
        "--no-python",
        python,
        WORKER_SHIM,
        *args,
    ]


def _join_address(host: str, port: str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# The bootstrap module (docs/internals.md). It reads only MELON_CAP_* variables, MELON_PEAK_FILE, MELON_FATAL_FILE and
# the frameworks' own settings (TF_FORCE_GPU_ALLOW_GROWTH, PYTORCH_CUDA_ALLOC_CONF), and never raises.
SITECUSTOMIZE = r'''
# Written by airflow_provider_melon.runtime.framework: MeLoN GPU memory cap. Never breaks user code.
import os as _os
import sys as _sys


def _melon_log(msg):
    try:
        _sys.stderr.write("[melon-cap] %s\n" % msg)
        _sys.stderr.flush()
    except Exception:
        pass


def _melon_cap():
    try:
        return int(_os.environ.get("MELON_CAP_MB", "0")), float(_os.environ.get("MELON_CAP_FRACTION", "0"))
    except ValueError:
        return 0, 0.0


def _melon_tf(tf):
    mb, _ = _melon_cap()
    try:
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            if mb > 0:
                _melon_log("no GPU: memory cap not applied (TensorFlow sees no GPU)")
            return
        _MELON_GPU_SEEN.add("tensorflow")
        if mb > 0:
            _melon_tf_cap(tf, gpus[0], mb)
    except Exception as exc:  # e.g. the runtime is already initialised
        _melon_log("TensorFlow memory cap not applied: %r" % (exc,))


def _melon_tf_limits(limits, cap):
    """The user's logical devices' memory limits (MiB) reconciled with the cap: (limits, what the log says).
    Theirs are kept when they fit the cap together; else the cap wins and each is scaled down to fit it."""
    if cap is None or not limits or any(l is None for l in limits):
        return list(limits), None
    total = sum(limits)
    if total <= cap:
        return list(limits), ("your logical device configuration (%d MiB in %d device(s)) fits the MeLoN cap of "
                               "%d MiB: yours is kept" % (total, len(limits), cap))
    scaled = [max(1, int(l * cap // total)) for l in limits]
    return scaled, ("the MeLoN cap won: your logical device configuration asks for %d MiB, more than the cap of "
                    "%d MiB; its memory limits become %s MiB" % (total, cap, scaled))


def _melon_tf_initialised():
    try:
        from tensorflow.python.eager import context
        return context.context()._context_handle is not None
    except Exception:
        return False


def _melon_tf_cap(tf, dev, mb):
    """Cap TensorFlow on physical device ``dev``: one logical device with memory_limit=mb (None: without a limit),
    and the user's own memory calls on ``dev`` kept under it (tf.config wrappers; other devices untouched)."""
    config, experimental = tf.config, tf.config.experimental
    set_config, make = config.set_logical_device_configuration, config.LogicalDeviceConfiguration
    set_growth, get_growth = experimental.set_memory_growth, experimental.get_memory_growth
    set_config(dev, [make(memory_limit=mb)])

    def set_memory_growth(device, enable):
        if device != dev:
            return set_growth(device, enable)
        value = "true" if enable else "false"
        if _os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") != value and _melon_tf_initialised():
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        _os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = value
        _melon_log("TensorFlow: memory growth %s on %s, within the MeLoN cap of %s MiB (TF_FORCE_GPU_ALLOW_GROWTH=%s)"
                   % ("on" if enable else "off", device.name, mb, value))

    def get_memory_growth(device):
        if device != dev:
            return get_growth(device)
        return _os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true"

    def set_logical_device_configuration(device, logical_devices):
        if device != dev or logical_devices is None:
            return set_config(device, logical_devices)
        logical_devices = list(logical_devices)
        if not all(hasattr(v, "_replace") for v in logical_devices):  # not TensorFlow's: TensorFlow answers
            return set_config(device, logical_devices)
        limits, note = _melon_tf_limits([getattr(v, "memory_limit", None) for v in logical_devices], mb)
        set_config(device, [v._replace(memory_limit=l) for v, l in zip(logical_devices, limits)])
        if note:
            _melon_log("TensorFlow: " + note)

    wrappers = {set_growth: set_memory_growth, get_growth: get_memory_growth, set_config: set_logical_device_configuration}
    namespaces = [config, experimental]  # and their aliases: tf.compat.v1/v2.config hold the same functions
    for name, module in list(_sys.modules.items()):
        if name == "tensorflow.python.framework.config" or (
                name.startswith("tensorflow._api.") and name.endswith((".config", ".config.experimental"))):
            namespaces.append(module)
    for ns in namespaces:
        for attr in dir(ns):
            try:
                value = getattr(ns, attr)
                if value in wrappers:
                    setattr(ns, attr, wrappers[value])
            except Exception:
                pass
    growth = _os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "")
    _melon_log("TensorFlow: %s capped at %s MiB (%s)" % (dev.name, mb, "memory growth within it"
               if growth == "true" else "taken up front"))


def _melon_torch_fraction_conf():
    """per_process_memory_fraction of PYTORCH_CUDA_ALLOC_CONF, None when it has none."""
    for item in _os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").split(","):
        key, _, value = item.partition(":")
        if key.strip() == "per_process_memory_fraction":
            try:
                return float(value)
            except ValueError:
                return None
    return None


def _melon_torch_index(device):
    """The CUDA device index torch's ``device`` argument names (None: the current device, cuda:0 here)."""
    if device is None or isinstance(device, int):
        return device or 0
    if isinstance(device, str):
        return int(device.rpartition(":")[2]) if ":" in device else 0
    index = getattr(device, "index", None)  # a torch.device
    return 0 if index is None else int(index)


def _melon_torch(torch):
    mb, frac = _melon_cap()
    if frac <= 0:
        return
    cuda = torch.cuda
    set_fraction = cuda.set_per_process_memory_fraction
    frac = min(frac, 1.0)

    def set_per_process_memory_fraction(fraction, device=None):
        try:
            mine = _melon_torch_index(device) == 0 and isinstance(fraction, float) and 0 <= fraction <= 1
        except Exception:
            mine = False
        if not mine:  # another device, or a value torch refuses: torch answers
            return set_fraction(fraction, device)
        set_fraction(min(fraction, frac), device)
        if fraction <= frac:
            _melon_log("PyTorch: your memory fraction %.4f of cuda:0 is within the MeLoN cap of %.4f (%d MiB): "
                       "yours is kept" % (fraction, frac, mb))
        else:
            _melon_log("PyTorch: the MeLoN cap won: you asked for %.4f of cuda:0, the cap is %.4f (%d MiB)"
                       % (fraction, frac, mb))

    def apply():
        try:
            if not cuda.is_available():
                _melon_log("no GPU: memory cap not applied (PyTorch sees no GPU)")
                return
            conf = _melon_torch_fraction_conf()
            set_fraction(min(frac, conf) if conf is not None and 0 <= conf else frac, 0)
            alloc = _os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
            note = ""
            if alloc:
                note = "; PYTORCH_CUDA_ALLOC_CONF=%s kept" % alloc
            if conf is not None:
                note += (", its per_process_memory_fraction %s is kept" % conf if 0 <= conf <= frac else
                         "; the MeLoN cap won over its per_process_memory_fraction %s" % conf)
            _melon_log("PyTorch: cuda:0 capped at %.4f of its memory (%d MiB)%s" % (frac, mb, note))
        except Exception as exc:
            _melon_log("PyTorch memory cap not applied: %r" % (exc,))

    try:
        for ns in (cuda, getattr(cuda, "memory", None)):
            if ns is not None and getattr(ns, "set_per_process_memory_fraction", None) is set_fraction:
                ns.set_per_process_memory_fraction = set_per_process_memory_fraction
        lazy = getattr(cuda, "_lazy_call", None)
        if lazy is not None:
            lazy(apply)  # runs when CUDA initialises (or now, if it already has)
        else:
            apply()
    except Exception as exc:
        _melon_log("PyTorch memory cap not applied: %r" % (exc,))


_MELON_HOOKS = {"tensorflow": _melon_tf, "torch": _melon_torch}
_MELON_GPU_SEEN = set()  # the frameworks that saw a GPU (torch: asked at exit, CUDA initialised or not)
_MELON_PEAK_REGISTERED = set()


def _melon_peak_bytes(name, module):
    """The framework's own peak GPU memory counter (bytes) for the first visible GPU, None when it saw none."""
    if name == "tensorflow":
        # get_memory_info initialises TensorFlow's GPU runtime: a process that never ran an op would create a CUDA
        # context as it exits, so the counter is read only where the runtime is up (the device exists already)
        if "tensorflow" not in _MELON_GPU_SEEN or not _melon_tf_initialised():
            return None
        return module.config.experimental.get_memory_info("GPU:0")["peak"]
    if name == "torch":
        if not module.cuda.is_initialized():
            return None
        return module.cuda.max_memory_reserved(0)
    return None


def _melon_read_peak(path):
    try:
        import json
        with open(path) as f:
            return json.load(f)
    except Exception:
        return None


def _melon_put_peak(path, data):
    import json
    tmp = "%s.%d.tmp" % (path, _os.getpid())
    with open(tmp, "w") as f:
        json.dump(data, f)
    _os.replace(tmp, path)


def _melon_peak_lock(path):
    """An exclusive flock of <path>.lock, released when the returned file is closed: every process of a task
    (torchrun's agent and its local ranks) reads, compares and replaces the peak file under it."""
    import fcntl
    lock = open(path + ".lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def _melon_write_peak(name):
    """atexit: {"peak_mb": N, "source": name} to MELON_PEAK_FILE, unless it holds a larger figure already; the
    announcement {"source": name} is taken back when the framework saw no GPU."""
    try:
        path = _os.environ.get("MELON_PEAK_FILE")
        module = _sys.modules.get(name)
        if not path or module is None:
            return
        try:
            peak = _melon_peak_bytes(name, module)
        except Exception:
            peak = -1  # the counter failed: leave the file as it is
        with _melon_peak_lock(path):
            there = _melon_read_peak(path)
            if peak is None:
                if there == {"source": name}:
                    _os.unlink(path)
                return
            if int(peak) < 0:
                return
            mb = (int(peak) + 1048575) // 1048576
            try:
                if int(there["peak_mb"]) >= mb:
                    return
            except Exception:
                pass
            _melon_put_peak(path, {"peak_mb": mb, "source": name})
    except Exception:
        pass


def _melon_peak_register(name):
    """Write the peak at exit: registered once the framework has imported, so it runs before the exit
    handlers the framework registered while importing (atexit runs them last in, first out). A framework that may
    have a GPU announces its counter ({"source": name}) in a file nobody has written yet."""
    path = _os.environ.get("MELON_PEAK_FILE")
    if name in _MELON_PEAK_REGISTERED or not path:
        return
    try:
        import atexit
        atexit.register(_melon_write_peak, name)
        _MELON_PEAK_REGISTERED.add(name)
        if name == "torch" or name in _MELON_GPU_SEEN:
            with _melon_peak_lock(path):
                if not _os.path.exists(path):
                    _melon_put_peak(path, {"source": name})
    except Exception:
        pass


class _MelonLoader(object):
    def __init__(self, loader, hook, name):
        self._loader = loader
        self._hook = hook
        self._name = name

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._hook(module)
        except Exception as exc:
            _melon_log("memory cap hook failed: %r" % (exc,))
        _melon_peak_register(self._name)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _MelonFinder(object):
    def __init__(self):
        self._busy = set()

    def find_spec(self, fullname, path=None, target=None):
        hook = _MELON_HOOKS.get(fullname)
        if hook is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            import importlib.util
            spec = importlib.util.find_spec(fullname)
        except Exception:
            spec = None
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _MelonLoader(spec.loader, hook, fullname)
        return spec


def _melon_fatal_hook(previous):
    """sys.excepthook: record the exception that ends this process in MELON_FATAL_FILE (one JSON line: its class and
    bases, its message, the pid), then let the previous hook print it. The executor decides from it which memory
    ran out (runtime/oom.py): the exception itself, not a line of text that mentions memory."""
    def hook(etype, value, tb):
        try:
            path = _os.environ.get("MELON_FATAL_FILE")
            if path:
                import json
                types = ["%s.%s" % (getattr(c, "__module__", "?"), getattr(c, "__qualname__", c.__name__))
                         for c in etype.__mro__ if c not in (BaseException, object)]
                try:
                    message = str(value)
                except Exception:
                    message = ""
                record = {"type": types[0] if types else etype.__name__, "types": types, "message": message[:4000],
                          "pid": _os.getpid()}
                fd = _os.open(path, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o600)
                try:
                    _os.write(fd, (json.dumps(record) + "\n").encode("utf-8", "replace"))
                finally:
                    _os.close(fd)
        except Exception:
            pass
        previous(etype, value, tb)
    return hook


def _melon_install():
    """The cap (MELON_CAP_MB/FRACTION), or without one only the peak (MELON_PEAK_FILE: the profiler's, a whole GPU's);
    the record of the exception that ends the process (MELON_FATAL_FILE)."""
    mb, frac = _melon_cap()
    capped = mb > 0 or frac > 0
    if _os.environ.get("MELON_FATAL_FILE"):
        _sys.excepthook = _melon_fatal_hook(_sys.excepthook)
    if not capped and not _os.environ.get("MELON_PEAK_FILE"):
        return
    _sys.meta_path.insert(0, _MelonFinder())
    for name, hook in _MELON_HOOKS.items():  # already imported (unlikely at startup): apply now
        if name in _sys.modules:
            try:
                hook(_sys.modules[name])
            except Exception:
                pass
            _melon_peak_register(name)


def _melon_chain():
    """Run the sitecustomize we shadow, if the environment had one."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util
        rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception as exc:
        _melon_log("chained sitecustomize failed: %r" % (exc,))


try:
    _melon_install()
except Exception as _exc:
    _melon_log("memory cap not installed: %r" % (_exc,))
_melon_chain()
'''


def _write_bootstrap(base_env: Mapping[str, str], directory: Optional[str]) -> Tuple[str, str]:
    """The bootstrap written into ``directory`` (a new temp dir by default): ``(PYTHONPATH with it first, dir)``."""
    directory = directory or tempfile.mkdtemp(prefix="melon-cap-")
    with open(os.path.join(directory, "sitecustomize.py"), "w", encoding="utf-8") as f:
        f.write(SITECUSTOMIZE)
    old = base_env.get("PYTHONPATH", "")
    return directory + (os.pathsep + old if old else ""), directory


def peak_env(base_env: Mapping[str, str], directory: Optional[str] = None) -> Tuple[Dict[str, str], str]:
    """Env additions that make a process write its framework's peak GPU memory to its ``MELON_PEAK_FILE`` (which
    the caller sets), with no cap: the bootstrap of :func:`memory_cap_env` without ``MELON_CAP_*``. Returns
    ``(env, directory)``; the caller removes ``directory`` when the process has ended."""
    pythonpath, directory = _write_bootstrap(base_env, directory)
    return {"PYTHONPATH": pythonpath}, directory


def memory_cap_env(
    expected_mb: int,
    total_mb: int,
    base_env: Optional[Mapping[str, str]] = None,
    directory: Optional[str] = None,
) -> Tuple[Dict[str, str], str]:
    """Env additions that cap the user's process at ``expected_mb`` of a GPU with ``total_mb``.

    Writes the bootstrap ``sitecustomize.py`` into ``directory`` (a new temp dir by default) and returns
    ``(env, directory)``; ``env`` has ``PYTHONPATH`` with that dir first (then ``base_env``'s PYTHONPATH),
    ``MELON_CAP_MB``/``MELON_CAP_FRACTION`` for the bootstrap, ``TF_FORCE_GPU_ALLOW_GROWTH`` (``false`` unless
    ``base_env`` says ``true``) and ``XLA_PYTHON_CLIENT_MEM_FRACTION``. The caller removes ``directory`` when the process has ended.
    """
    if expected_mb <= 0 or total_mb <= 0:
        raise ValueError(f"expected_mb and total_mb must be > 0 (got {expected_mb}, {total_mb})")
    base_env = os.environ if base_env is None else base_env
    pythonpath, directory = _write_bootstrap(base_env, directory)
    fraction = min(1.0, expected_mb / float(total_mb))
    env = {
        "PYTHONPATH": pythonpath,
        "MELON_CAP_MB": str(int(expected_mb)),
        "MELON_CAP_FRACTION": f"{fraction:.6f}",
        # TensorFlow's GPU allocator reads it when it creates the device; with the cap's logical device it takes the
        # whole cap up front ("false") or grows within it ("true", the user's own choice, kept)
        "TF_FORCE_GPU_ALLOW_GROWTH": "true" if base_env.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true" else "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{fraction:.3f}",
    }
    return env, directory


def cluster_json(cluster: Mapping[str, Sequence[str]]) -> str:
    """The cluster spec as compact JSON (``MELON_CLUSTER`` for generic jobs)."""
    return json.dumps(_roles(cluster), separators=(",", ":"), sort_keys=True)
