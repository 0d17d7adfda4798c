"""Framework environment for the user's process: TF_CONFIG, PyTorch rendezvous variables, GPU memory cap.

Stdlib only: runs inside YARN containers under the job's own Python.

The memory cap (MeLoN shared mode) is applied *inside* the user's process, before the user's code can touch
the GPU: :func:`memory_cap_env` writes a ``sitecustomize.py`` into a private temp dir and puts that dir first
on ``PYTHONPATH``. Python imports ``sitecustomize`` at startup; ours installs an import hook and returns
immediately (it imports no framework itself, so a ``python -c`` helper pays nothing). When the user's code
imports

* ``tensorflow``: right after TensorFlow finishes importing, the first visible GPU gets one logical device with
  ``memory_limit=<expected MiB>`` (``tf.config.set_logical_device_configuration``), which is the only way to cap
  TF's allocator; ``TF_FORCE_GPU_ALLOW_GROWTH=false`` makes TF take that amount up front, so what NVML shows
  matches the ledger;
* ``torch``: ``torch.cuda.set_per_process_memory_fraction(expected / total, 0)``, queued with torch's own
  lazy-init mechanism so that importing torch does not create a CUDA context by itself;
* JAX reads ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (set from the same fraction).

A process that then runs out of GPU memory is told why (an ``excepthook`` adds a ``[melon-cap]`` line naming the
expected memory) instead of silently dying. Every step is wrapped: if TF/torch are absent, or no GPU is visible
(``no GPU: memory cap not applied``), or the API changed, the user's code runs unchanged. A ``sitecustomize``
the environment already had is chained (executed after ours), not shadowed.

Peak GPU memory: once a framework has imported, an ``atexit`` hook (registered then, so it runs before the exit
handlers the framework registered while importing) writes its peak to ``MELON_PEAK_FILE`` (set by the executor)
as ``{"peak_mb": N}``: TensorFlow's ``tf.config.experimental.get_memory_info("GPU:0")["peak"]`` when it saw a
GPU, PyTorch's ``torch.cuda.max_memory_reserved(0)`` when CUDA was initialised; in MiB rounded up, never below
what the file holds already (the user's script may write it too: :mod:`airflow_provider_melon.runtime.oom`).
Nothing is written when neither framework was imported or no GPU was seen.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "TF_ROLES",
    "tf_config",
    "torch_env",
    "split_address",
    "memory_cap_env",
    "SITECUSTOMIZE",
]

TF_ROLES = ("chief", "worker", "ps", "evaluator")


def _roles(cluster: Mapping[str, Sequence[str]]) -> Dict[str, List[str]]:
    return {r: list(a) for r, a in cluster.items() if a}


def _check_task(cluster: Mapping[str, Sequence[str]], role: str, index: int) -> None:
    addrs = cluster.get(role) or []
    if not 0 <= int(index) < len(addrs):
        raise ValueError(f"task {role}:{index} is not in the cluster spec {dict(cluster)}")


def tf_config(cluster: Mapping[str, Sequence[str]], role: str, index: int) -> dict:
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


def torch_env(cluster: Mapping[str, Sequence[str]], role: str, index: int) -> Dict[str, str]:
    """torch.distributed env (``init_method="env://"``) for task ``role:index``.

    The process group is chief + workers, ranked chief first: rank 0 is ``chief:0`` if there is a chief, else
    ``worker:0``, and its registered address is ``MASTER_ADDR:MASTER_PORT`` (rank 0 binds that port itself:
    the executor released it just before starting the user's process). One process per container:
    ``LOCAL_RANK=0``, ``LOCAL_WORLD_SIZE=1``. Other roles (ps, evaluator) get MASTER_* and WORLD_SIZE but no
    RANK: they are not members of the group.
    """
    _check_task(cluster, role, index)
    chiefs, workers = list(cluster.get("chief") or []), list(cluster.get("worker") or [])
    members = chiefs + workers
    if not members:
        raise ValueError(f"a PyTorch job needs a chief or a worker; cluster is {dict(cluster)}")
    master_host, master_port = split_address(members[0])
    env = {
        "MASTER_ADDR": master_host,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(len(members)),
    }
    if role in ("chief", "worker"):
        rank = int(index) if role == "chief" else len(chiefs) + int(index)
        env.update({"RANK": str(rank), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(rank)})
    return env


# The bootstrap module. It reads only MELON_CAP_* variables and MELON_PEAK_FILE, and never raises.
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
    if mb <= 0:
        return
    try:
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            _melon_log("no GPU: memory cap not applied (TensorFlow sees no GPU)")
            return
        _MELON_GPU_SEEN.add("tensorflow")
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=mb)])
        _melon_log("TensorFlow: %s capped at %d MiB" % (gpus[0].name, mb))
    except Exception as exc:  # e.g. the runtime is already initialised
        _melon_log("TensorFlow memory cap not applied: %r" % (exc,))


def _melon_torch(torch):
    mb, frac = _melon_cap()
    if frac <= 0:
        return

    def apply():
        try:
            if not torch.cuda.is_available():
                _melon_log("no GPU: memory cap not applied (PyTorch sees no GPU)")
                return
            torch.cuda.set_per_process_memory_fraction(min(frac, 1.0), 0)
            _melon_log("PyTorch: cuda:0 capped at %.4f of its memory (%d MiB)" % (frac, mb))
        except Exception as exc:
            _melon_log("PyTorch memory cap not applied: %r" % (exc,))

    try:
        lazy = getattr(torch.cuda, "_lazy_call", None)
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
        if "tensorflow" not in _MELON_GPU_SEEN:
            return None
        return module.config.experimental.get_memory_info("GPU:0")["peak"]
    if name == "torch":
        if not module.cuda.is_initialized():
            return None
        return module.cuda.max_memory_reserved(0)
    return None


def _melon_write_peak(name):
    """atexit: {"peak_mb": N} to MELON_PEAK_FILE (the larger of the counter and what is there already)."""
    try:
        path = _os.environ.get("MELON_PEAK_FILE")
        module = _sys.modules.get(name)
        if not path or module is None:
            return
        peak = _melon_peak_bytes(name, module)
        if peak is None or int(peak) < 0:
            return
        import json
        mb = (int(peak) + 1048575) // 1048576
        try:
            with open(path) as f:
                mb = max(mb, int(json.load(f)["peak_mb"]))
        except Exception:
            pass
        tmp = "%s.%d.tmp" % (path, _os.getpid())
        with open(tmp, "w") as f:
            json.dump({"peak_mb": mb}, f)
        _os.replace(tmp, path)
    except Exception:
        pass


def _melon_peak_register(name):
    """Write the peak at exit: registered once the framework has imported, so it runs before the exit
    handlers the framework registered while importing (atexit runs them last in, first out)."""
    if name in _MELON_PEAK_REGISTERED or not _os.environ.get("MELON_PEAK_FILE"):
        return
    try:
        import atexit
        atexit.register(_melon_write_peak, name)
        _MELON_PEAK_REGISTERED.add(name)
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


def _melon_excepthook_factory(previous):
    def hook(etype, value, tb):
        try:
            text = "%s: %s" % (etype.__name__, value)
            if ("out of memory" in text.lower() or etype.__name__ in ("OutOfMemoryError", "ResourceExhaustedError")):
                _melon_log("this task ran out of GPU memory under its MeLoN cap of %s MiB: it needs more than the "
                           "role's gpu_memory; raise gpu_memory (or profile the job) and resubmit"
                           % _os.environ.get("MELON_CAP_MB", "?"))
        except Exception:
            pass
        previous(etype, value, tb)
    return hook


def _melon_install():
    mb, frac = _melon_cap()
    if mb <= 0 and frac <= 0:
        return
    _sys.meta_path.insert(0, _MelonFinder())
    _sys.excepthook = _melon_excepthook_factory(_sys.excepthook)
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


def memory_cap_env(
    expected_mb: int,
    total_mb: int,
    base_env: Optional[Mapping[str, str]] = None,
    directory: Optional[str] = None,
) -> Tuple[Dict[str, str], str]:
    """Env additions that cap the user's process at ``expected_mb`` of a GPU with ``total_mb``.

    Writes the bootstrap ``sitecustomize.py`` into ``directory`` (a new temp dir by default) and returns
    ``(env, directory)``; ``env`` has ``PYTHONPATH`` with that dir first (then ``base_env``'s PYTHONPATH),
    ``MELON_CAP_MB``/``MELON_CAP_FRACTION`` for the bootstrap, ``TF_FORCE_GPU_ALLOW_GROWTH=false`` and
    ``XLA_PYTHON_CLIENT_MEM_FRACTION``. The caller removes ``directory`` when the process has ended.
    """
    if expected_mb <= 0 or total_mb <= 0:
        raise ValueError(f"expected_mb and total_mb must be > 0 (got {expected_mb}, {total_mb})")
    base_env = os.environ if base_env is None else base_env
    directory = directory or tempfile.mkdtemp(prefix="melon-cap-")
    with open(os.path.join(directory, "sitecustomize.py"), "w", encoding="utf-8") as f:
        f.write(SITECUSTOMIZE)
    fraction = min(1.0, expected_mb / float(total_mb))
    old = base_env.get("PYTHONPATH", "")
    env = {
        "PYTHONPATH": directory + (os.pathsep + old if old else ""),
        "MELON_CAP_MB": str(int(expected_mb)),
        "MELON_CAP_FRACTION": f"{fraction:.6f}",
        "TF_FORCE_GPU_ALLOW_GROWTH": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{fraction:.3f}",
    }
    return env, directory


def cluster_json(cluster: Mapping[str, Sequence[str]]) -> str:
    """The cluster spec as compact JSON (``MELON_CLUSTER`` for generic jobs)."""
    return json.dumps(_roles(cluster), separators=(",", ":"), sort_keys=True)
