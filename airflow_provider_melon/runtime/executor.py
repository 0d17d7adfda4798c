"""The MeLoN task executor: ``python -m airflow_provider_melon.runtime.executor`` inside each YARN container.

It chooses a GPU for its task, registers with the ApplicationMaster until the gang is complete, builds the
framework's environment and the memory cap, runs the user's command, sends heartbeats with progress and GPU
memory, publishes declared outputs and exits with the user's exit code or one of its own.

Stdlib only (plus the stdlib-only ``gpu`` package): it runs under the job's own Python, where neither Airflow
nor requests may exist. The contract with the ApplicationMaster is in ``docs/protocol.md``, section 2. The
environment it reads, its steps and its exit codes are described in ``docs/internals.md``, "The task executor".
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from airflow_provider_melon.gpu import devices as _devices
from airflow_provider_melon.gpu import ledger as _ledger
from airflow_provider_melon.gpu import policy
from airflow_provider_melon.gpu.context import MEASURED_CONTEXT_MB
from airflow_provider_melon.gpu.ledger import Ledger, UnsafeLedger
from airflow_provider_melon.runtime import framework as _framework
from airflow_provider_melon.runtime import oom as _oom
from airflow_provider_melon.runtime import outputs as _outputs
from airflow_provider_melon.runtime import peak as _peak
from airflow_provider_melon.runtime import ports as _ports
from airflow_provider_melon.runtime import tensorboard as _tensorboard
from airflow_provider_melon.runtime.amclient import AmClient
from airflow_provider_melon.runtime.config import (
    EXIT_AM_REFUSED,
    EXIT_CONFIG,
    EXIT_GPU_OOM,
    EXIT_NO_GPU_FITS,
    EXIT_OUTPUT,
    EXIT_REGISTER,
    EXIT_TERMINATED,
    Config,
    Fatal,
    Terminated,
    log,
)
from airflow_provider_melon.runtime.progress import read_progress
from airflow_provider_melon.runtime.protocol import HeartbeatBody, OomReport, RegisterBody
from airflow_provider_melon.runtime.workdir import code_files, prepare_workdir

PROGRESS_POLL_S = 0.5  # how often the heartbeat loop looks for a new progress report (a stat of the file)
FINAL_HEARTBEAT_TRIES = 3


def resolve_python(argv: List[str]) -> List[str]:
    """Run a leading ``python``/``python3`` under this interpreter (the job's Python, not PATH's)."""
    if argv and argv[0] in ("python", "python3"):
        return [sys.executable] + argv[1:]
    return argv


class Executor:
    def __init__(self, cfg: Config, env: Optional[Mapping[str, str]] = None):
        self.cfg = cfg
        self.env = dict(os.environ if env is None else env)
        self.workdir = os.path.abspath(".")  # the container's folder: outputs are staged under it
        self.am = AmClient(cfg.am_url, cfg.secret)
        self.ledger = Ledger()
        self.gpu_indices: Optional[List[int]] = None
        self.gpu_total_mb = 0
        self.gpu_held_mb = 0  # what the ledger holds for this task in shared mode: its slot (gpu/ledger.py)
        self.gpu_source = "none"
        self.mps = False  # a CUDA MPS control daemon serves this node (reported to the AM at registration)
        self.child: Optional[subprocess.Popen[bytes]] = None
        self.terminating = threading.Event()
        self.cap_dir: Optional[str] = None
        self.peak_file = os.path.join(self.workdir, "melon-peak.json")  # MELON_PEAK_FILE (runtime/peak.py)
        self.fatal_file = os.path.join(self.workdir, "melon-fatal.json")  # MELON_FATAL_FILE (runtime/oom.py)
        self.peak_mb: Optional[int] = None  # the task's peak GPU memory, context not included (runtime/peak.py)
        self.peak_source: Optional[str] = None  # where peak_mb came from (runtime/peak.py SOURCES)
        self.nvml_peak_mb: Optional[int] = None  # the largest NVML per-process sample (CUDA context included)
        self.device_baseline_mb: Optional[int] = None  # the GPU's used memory when the user's process started
        self.device_peak_mb: Optional[int] = None  # the GPU's largest rise over that (neighbours included)
        self._peak_lock = threading.Lock()
        self.largest_gpu_mb: Optional[int] = None  # the largest GPU of this node's list
        self.stderr_mark: Optional[int] = None  # where fd 2's file ended when the user's process started
        self.oom: Optional[OomReport] = None  # the final heartbeat's "oom", once one is recognised
        self.port_sock: Optional[socket.socket] = None
        self._starting = False  # between "about to Popen" and "self.child is set": never raise from a signal
        self.host = ""  # the address registered with the AM
        self.registered: Optional[str] = None  # host:port as registered (the AM's cluster lists members so)
        self.bind_host = ""
        self.child_cwd: Optional[str] = None
        self.tensorboard: Optional[_tensorboard.TensorBoard] = None
        self.tensorboard_url: Optional[str] = None  # reported in heartbeats; "" once stopped
        self.tensorboard_error: Optional[str] = None
        self._tensorboard_lock = threading.Lock()
        self._tensorboard_closed = False  # stop_tensorboard ran: start none

    # ---- signals -----------------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        first = not self.terminating.is_set()
        self.terminating.set()
        child = self.child
        if child is not None and child.poll() is None:
            if first:
                log(f"received signal {signum}: forwarding it to the user's process {child.pid}")
            try:
                child.send_signal(signum)
            except OSError:
                pass
            return
        if first and child is None and not self._starting:
            raise Terminated()  # interrupts GPU waiting / registration; `finally` in run() cleans up

    def _sleep(self, seconds: float) -> None:
        if self.terminating.wait(max(0.0, seconds)):
            raise Terminated()

    # ---- GPU ---------------------------------------------------------------------------------------------
    @property
    def wants_gpu(self) -> bool:
        return self.cfg.gpus > 0 or self.cfg.gpu_memory_mb > 0

    @property
    def gpu_label(self) -> Optional[str]:
        return None if not self.gpu_indices else ",".join(str(i) for i in self.gpu_indices)

    def _list_gpus(self) -> _devices.GpuList:
        try:
            return _devices.list_gpus(self.env)
        except (OSError, ValueError) as exc:  # unreadable or malformed MELON_GPU_INVENTORY
            raise Fatal(EXIT_CONFIG, f"cannot read the GPU inventory: {exc}") from None

    def choose_gpu(self) -> None:
        cfg = self.cfg
        if not self.wants_gpu:
            log("no GPU requested for this role: CUDA_VISIBLE_DEVICES is set empty")
            return
        gpus = self._list_gpus()
        if not gpus and gpus.mig:  # a MIG node: refused, so the AM asks for a container elsewhere
            raise Fatal(EXIT_NO_GPU_FITS, f"{gpus.reason}; exiting {EXIT_NO_GPU_FITS} so the AM asks elsewhere")
        if not gpus:
            log(f"{gpus.reason}; no GPU inventory: running on CPU (gpu=null reported to the AM)")
            return
        self.gpu_source = gpus.source
        gpus = self.of_accepted_models(gpus)
        self.largest_gpu_mb = max(g.total_mb for g in gpus)
        mps = self.mps = _devices.mps_active(self.env)
        exclusive = cfg.gpus > 0
        want = (
            f"{cfg.gpus} whole GPU(s)"
            if exclusive
            else f"{cfg.reserve_mb} MiB"
            + (f" ({cfg.gpu_memory_mb} + {cfg.gpu_context_mb} for the CUDA context)" if cfg.gpu_context_mb else "")
        )
        if exclusive and cfg.gpus > len(gpus):
            raise Fatal(EXIT_NO_GPU_FITS, f"no GPU fits: {want} wanted, this node has {len(gpus)} GPU(s)")
        if not exclusive and cfg.reserve_mb > max(g.total_mb for g in gpus):
            raise Fatal(
                EXIT_NO_GPU_FITS,
                f"no GPU fits: {want} wanted, the largest GPU here has {max(g.total_mb for g in gpus)} MiB",
            )
        slot = want if exclusive else f"{want} at its slot (at least {policy.slot_share(cfg.large)})"
        deadline = time.monotonic() + cfg.gpu_wait_s
        waited = False
        while True:
            try:
                got = self.ledger.reserve_many(
                    cfg.task_id,
                    os.getpid(),
                    cfg.reserve_mb,
                    gpus,
                    count=max(1, cfg.gpus),
                    exclusive=exclusive,
                    large=cfg.large,
                    mps=mps,
                )
            except UnsafeLedger as exc:
                raise Fatal(EXIT_CONFIG, f"refusing the GPU ledger: {exc}") from None
            except ValueError as exc:  # its lease is held: the same task (container) runs in another live process
                raise Fatal(EXIT_CONFIG, f"cannot reserve a GPU: {exc}") from None
            if got:
                by_index = {g.index: g for g in gpus}
                self.gpu_indices = got
                self.gpu_total_mb = by_index[got[0]].total_mb
                if not exclusive:
                    self.gpu_held_mb = self.ledger.held_mb(cfg.task_id)
                log(
                    f"GPU {self.gpu_label} ({gpus.source}, {by_index[got[0]].name}) reserved for {cfg.task}: "
                    f"{want if exclusive else self._held_text()}{', MPS' if mps else ''}"
                )
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise Fatal(
                    EXIT_NO_GPU_FITS,
                    f"no GPU fits {slot} on this node after waiting {cfg.gpu_wait_s:g}s "
                    f"(ledger {self.ledger.path}); exiting {EXIT_NO_GPU_FITS} so the AM "
                    f"re-requests a container",
                )
            if not waited:
                log(f"no GPU fits {slot} now; waiting up to {cfg.gpu_wait_s:g}s")
                waited = True
            self._sleep(min(1.0, left))
            gpus = self.of_accepted_models(self._list_gpus(), quiet=True) or gpus

    def of_accepted_models(self, gpus: _devices.GpuList, quiet: bool = False) -> _devices.GpuList:
        """The GPUs of the role's accepted models (``MELON_GPU_MODELS``) when NVML names them: YARN placed the task
        by the node's ``gpu-model`` attribute, which an admin sets and may have left stale. A node with none of them
        is refused (exit 75: the AM asks elsewhere, avoiding it); without NVML's names (a GPU inventory) the model
        cannot be checked, which is said, and the attribute trusted."""
        models = self.cfg.gpu_models
        if not models or not gpus:
            return gpus
        if gpus.source != "nvml":
            if not quiet:
                log(
                    f"GPU model not checked: no NVML device names here ({gpus.source} GPUs); trusting the node's "
                    f"gpu-model attribute for the accepted models {', '.join(models)}"
                )
            return gpus
        kept = [g for g in gpus if any(_devices.is_model(g.name, m) for m in models)]
        names = ", ".join(f"{g.index}: {g.name}" for g in gpus)
        if not kept:
            raise Fatal(
                EXIT_NO_GPU_FITS,
                f"this node's GPUs ({names}) are none of the accepted models {', '.join(models)} (NVML): its "
                f"gpu-model node attribute is stale or names the model otherwise; exiting {EXIT_NO_GPU_FITS} so the "
                f"AM asks elsewhere",
            )
        if not quiet:
            log(f"GPU model checked (NVML): {', '.join(g.name for g in kept)} of {', '.join(models)}")
            if len(kept) < len(gpus):
                log(f"left out, not of the accepted models: {names}")
        return _devices.GpuList(kept, source=gpus.source, reason=gpus.reason, mig=gpus.mig)

    def _held_text(self) -> str:
        """``4096 MiB held (1000 + 200 for the CUDA context, its slot a quarter of the GPU)``: what the ledger holds
        and why, for the task log."""
        cfg = self.cfg
        why = [f"{cfg.gpu_memory_mb} + {cfg.gpu_context_mb} for the CUDA context"] if cfg.gpu_context_mb else []
        if self.gpu_held_mb > cfg.reserve_mb:
            why = (why or [f"{cfg.gpu_memory_mb} MiB expected"]) + [f"its slot {policy.slot_share(cfg.large)}"]
        return f"{self.gpu_held_mb} MiB held" + (f" ({', '.join(why)})" if why else "")

    # ---- port & registration -----------------------------------------------------------------------------
    def reserve_port(self) -> Tuple[str, int]:
        host = self.cfg.host or socket.getfqdn()
        bind_host = self.cfg.bind_host
        if not bind_host:
            try:
                bind_host = socket.gethostbyname(host)
            except OSError:
                bind_host = "0.0.0.0"
        port_range, skip, why = _ports.listen_range(self.cfg.port_range)
        try:
            sock = _ports.reserve(bind_host, port_range, skip)
        except OSError as exc:
            raise Fatal(EXIT_REGISTER, f"cannot reserve a port on {bind_host}: {exc}") from None
        self.port_sock = sock
        self.host, self.bind_host = host, bind_host
        port = sock.getsockname()[1]
        log(f"port {port} reserved on {bind_host} ({why})")
        return host, port

    def release_port(self) -> None:
        if self.port_sock is not None:
            self.port_sock.close()
            self.port_sock = None

    def register(self, host: str, port: int) -> dict[str, Any]:
        cfg = self.cfg
        body: RegisterBody = {
            "role": cfg.role,
            "index": cfg.index,
            "host": host,
            "port": port,
            "gpu": self.gpu_label,
            "gpu_memory_mb": self.gpu_held_mb or cfg.reserve_mb,
            "pid": os.getpid(),
            "mps": self.mps,
            "container_id": cfg.container_id,
        }  # the AM refuses (409) a container that is no longer the task's
        deadline = time.monotonic() + cfg.register_timeout_s
        log(f"registering {cfg.task} at {host}:{port} with {cfg.am_url}")
        self.registered = f"{host}:{port}"
        last_note = 0.0
        while True:
            status, data = self.am.post("/register", body)
            if status == 200 and isinstance(data, dict) and isinstance(data.get("cluster"), dict):
                cluster: dict[str, Any] = data["cluster"]
                log(f"gang complete: {json.dumps(cluster, sort_keys=True)}")
                return cluster
            if status == 403:
                raise Fatal(
                    EXIT_AM_REFUSED,
                    "the AM refused registration (403 Forbidden): MELON_SECRET does not "
                    "match this application's secret",
                )
            if status is not None and 400 <= status < 500 and status != 408 and status != 429:
                raise Fatal(EXIT_REGISTER, f"the AM rejected registration: HTTP {status} {data}")
            now = time.monotonic()
            if now >= deadline:
                raise Fatal(
                    EXIT_REGISTER,
                    f"registration did not complete within {cfg.register_timeout_s:g}s "
                    f"(last answer: {status or 'unreachable'} {data})",
                )
            if now - last_note >= 10:
                if status == 202:
                    log(f"waiting for the gang: {data}")
                else:
                    log(f"AM not ready ({status or 'unreachable'}: {data}); retrying")
                last_note = now
            self._sleep(0.5 if status == 202 else 1.0)

    # ---- user process ------------------------------------------------------------------------------------
    def child_env(self, cluster: Mapping[str, Sequence[str]]) -> dict[str, str]:
        cfg = self.cfg
        env = dict(self.env)
        env.pop("MELON_SECRET", None)  # least privilege: the user's code does not talk to the AM
        env["MELON_CLUSTER"] = _framework.cluster_json(cluster)
        env["MELON_PROGRESS_FILE"] = cfg.progress_file
        env["MELON_PEAK_FILE"] = self.peak_file
        env["MELON_FATAL_FILE"] = self.fatal_file
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # same numbering as NVML
        # the node's own restriction "-1" (no device: the embedded cluster hides a host's GPUs it cannot split)
        # stays; else the GPUs reserved here, by NVML index
        hidden = self.env.get("CUDA_VISIBLE_DEVICES", "").strip() == "-1"
        env["CUDA_VISIBLE_DEVICES"] = "-1" if hidden else self.gpu_label or ""
        env["MELON_GPU"] = self.gpu_label or ""
        try:
            env.update(_outputs.child_env(self.env, self.workdir))
        except (_outputs.OutputError, OSError) as exc:
            raise Fatal(EXIT_CONFIG, str(exc)) from None
        if cfg.tensorboard_task and not env.get("MELON_TENSORBOARD_LOG_DIR"):
            env["MELON_TENSORBOARD_LOG_DIR"] = os.path.join(self.workdir, "tensorboard")
        if cfg.framework == "tensorflow":
            env["TF_CONFIG"] = json.dumps(_framework.tf_config(cluster, cfg.role, cfg.index))
        elif cfg.framework == "pytorch":
            env.update(_framework.torch_env(cluster, cfg.role, cfg.index, address=self.registered))
            for key, value in _framework.NCCL_ENV.items():  # the user's own setting wins
                env.setdefault(key, value)
        if cfg.gpu_memory_mb > 0 and cfg.gpus <= 0:
            if self.gpu_indices:
                cap, self.cap_dir = _framework.memory_cap_env(cfg.gpu_memory_mb, self.gpu_total_mb, env)
                env.update(cap)
                log(f"memory cap: {cfg.gpu_memory_mb} MiB of {self.gpu_total_mb} MiB on GPU {self.gpu_label}")
            else:
                log("no GPU: memory cap not applied")
        elif self.gpu_indices:  # whole GPUs: no cap, but the bootstrap writes the peak and records the fatal error
            extra, self.cap_dir = _framework.peak_env(env)
            env.update(extra)
        return env

    def start_child(self, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        try:
            argv = resolve_python(shlex.split(self.cfg.entrypoint))
        except ValueError as exc:  # unbalanced quotes: the spec refuses them, a hand-set variable may not
            raise Fatal(
                EXIT_CONFIG, f"MELON_ENTRYPOINT cannot be split into arguments ({exc}): {self.cfg.entrypoint!r}"
            ) from None
        if not argv:
            raise Fatal(EXIT_CONFIG, "MELON_ENTRYPOINT is empty")
        try:
            links = code_files(self.env)
        except ValueError as exc:
            raise Fatal(EXIT_CONFIG, str(exc)) from None
        if self.cfg.launcher == "torchrun":
            nnodes = self.env.get("MELON_TORCHRUN_NNODES") or None  # elastic: MIN:MAX
            try:
                argv = _framework.torchrun_argv(
                    sys.executable,
                    argv,
                    env,
                    self.cfg.nproc_per_node,
                    self.cfg.app_id or "melon",
                    local_addr=self.host,
                    nnodes=nnodes,
                    max_restarts=int(self.env.get("MELON_TORCHRUN_MAX_RESTARTS") or 0),
                    rdzv_endpoint=self.env.get("MELON_RDZV_ENDPOINT") or None,  # the store beside the AM
                )
            except (KeyError, ValueError) as exc:
                raise Fatal(EXIT_CONFIG, f"cannot run the entrypoint under torchrun: {exc}") from None
            env = {**env, **_framework.torchrun_env(nnodes)}
        cwd = self.child_cwd = prepare_workdir(".", links)
        log(f"starting {argv!r} in {os.path.abspath(cwd or '.')}")
        self.release_port()  # the framework binds it itself (see the module docstring on the race)
        for stale in (self.peak_file, self.fatal_file):  # only this process's peak and fatal error count
            try:
                os.unlink(stale)
            except OSError:
                pass
        self.note_device_baseline()
        sys.stderr.flush()
        self.stderr_mark = _oom.stderr_size(2)  # its out-of-memory error is looked for after this
        lease = self.ledger.lease_fd(self.cfg.task_id)  # the reservation lives while the user's process does too
        try:
            return subprocess.Popen(argv, env=dict(env), cwd=cwd, pass_fds=() if lease is None else (lease,))
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in an argument or the environment
            raise Fatal(EXIT_CONFIG, f"cannot start {argv[0]!r}: {exc}") from None

    def heartbeat(self, message: str = "") -> Optional[int]:
        body: HeartbeatBody = {
            "role": self.cfg.role,
            "index": self.cfg.index,
            "gpu": self.gpu_label,
            "container_id": self.cfg.container_id,
        }
        progress = read_progress(self.cfg.progress_file)
        if "step" in progress:
            body["step"] = progress["step"]
        if "total" in progress:
            body["total"] = progress["total"]
        if "loss" in progress:
            body["loss"] = progress["loss"]
        if "metrics" in progress:
            body["metrics"] = progress["metrics"]
        if self.gpu_indices and self.gpu_source == "nvml" and self.child is not None:
            reading = _devices.process_memory(
                self.gpu_indices[0], _devices.process_tree(self.child.pid), self.device_baseline_mb
            )
            if reading is not None:  # "nvml-device": the GPU's rise, neighbours included (NVML's pids not ours)
                body["gpu_memory_used_mb"], body["gpu_memory_used_source"] = reading
            self.note_peak(reading)
        else:
            self.note_peak()
        if self.peak_mb is not None and self.peak_source is not None:  # chosen together (note_peak)
            body["gpu_memory_peak_mb"] = self.peak_mb
            body["gpu_memory_peak_source"] = self.peak_source
        if self.oom is not None:
            body["oom"] = self.oom
        if message:
            body["message"] = message
        if self.tensorboard_url is not None:
            body["tensorboard_url"] = self.tensorboard_url
        if self.tensorboard_error is not None:
            body["tensorboard_error"] = self.tensorboard_error
        status, _ = self.am.post("/heartbeat", body)
        return status

    def note_device_baseline(self) -> None:
        """The GPU's used memory now, right before the user's process starts: what a device-wide sample (NVML's pids
        not this container's) is a rise over."""
        if self.gpu_indices and self.gpu_source == "nvml":
            self.device_baseline_mb = _devices.device_used_mb(self.gpu_indices[0])

    def note_peak(self, reading: Optional[_devices.GpuReading] = None) -> None:
        """Take in an NVML sample (MiB, CUDA context included: the process's own, or the GPU's rise), if any, and
        choose the peak anew from the samples and the peak file (:func:`runtime.peak.task_peak`, less the measured
        context, ``gpu.context.MEASURED_CONTEXT_MB``). While the user's process runs with a framework counter
        announced in the peak file but not yet written, the samples are no peak: there is none."""
        with self._peak_lock:
            if reading is not None:
                attr = "nvml_peak_mb" if reading.source == _devices.SOURCE_PROCESS else "device_peak_mb"
                setattr(self, attr, max(reading.mb, getattr(self, attr) or 0))
            counter = _peak.read_file(self.peak_file)
            child = self.child
            if counter is not None and counter[0] is None and child is not None and child.poll() is None:
                self.peak_mb = self.peak_source = None
                return
            shared = self.cfg.gpus <= 0 < self.cfg.gpu_memory_mb and bool(self.gpu_indices)
            got = _peak.task_peak(
                counter,
                self.nvml_peak_mb,
                MEASURED_CONTEXT_MB,
                cap_mb=self.cfg.gpu_memory_mb if shared else None,
                device_mb=self.device_peak_mb,
            )
            self.peak_mb, self.peak_source = got if got is not None else (None, None)

    def gpu_oom(self, code: int) -> Optional[OomReport]:
        """The ``oom`` object of the final heartbeat when the user's process died of GPU memory, else None: which
        memory ran out is decided from the error that ended it (``runtime/oom.py``: the exception its bootstrap
        recorded, else its stderr's tail), then weighed against its allocator's own figures (``oom.at_cap``): an
        allocator far below its cap did not run out at the cap, so the memory outside it did (``kind``)."""
        tail = _oom.stderr_tail(2, since=self.stderr_mark)
        main_pid = self.child.pid if self.child is not None else None
        verdict = _oom.decide(code, tail, _oom.read_records(self.fatal_file), main_pid)
        if verdict is None:
            return None
        if verdict.kind == _oom.HOST:
            log(f"the user's process ran out of host memory, not GPU memory ({verdict.why}): {verdict.signature}")
            return None
        cfg = self.cfg
        self.note_peak()
        cap = cfg.gpu_memory_mb if cfg.gpus <= 0 < cfg.gpu_memory_mb and self.gpu_indices else None
        counter = self.peak_mb if self.peak_source in _peak.COUNTERS else None
        at_cap, need = _oom.at_cap(verdict, cap, counter)
        kind, why = verdict.kind, verdict.why
        if verdict.kind == _oom.CAP and not at_cap:
            kind = _oom.OUTSIDE
            why = (
                f"{why} failed, but it needed {need} MiB, far below its cap of {cap} MiB: the GPU itself was full, "
                "taken by memory outside the allocator"
            )
        self.oom = {
            "cap_mb": cap,
            "peak_mb": self.peak_mb,
            "largest_gpu_mb": self.largest_gpu_mb,
            "signature": verdict.signature,
            "kind": kind,
        }
        if need is not None:
            self.oom["need_mb"] = need
        cap_text = "none" if cap is None else f"{cap} MiB"
        peak_text = "unknown" if self.peak_mb is None else f"{self.peak_mb} MiB"
        where = (
            "at its cap"
            if kind == _oom.CAP
            else f"outside its framework's allocator (its context reserve: {cfg.gpu_context_mb} MiB)"
        )
        log(
            f"the user's process ran out of GPU memory {where} (cap {cap_text}; peak seen {peak_text}"
            f"{'' if need is None else f'; the allocator needed {need} MiB'}; {why}): {verdict.signature}"
        )
        victim = self._oversubscription() if cap is not None else None
        if victim is not None:  # a victim, not a culprit: the AM retries it at its figure (docs/protocol.md)
            self.oom["oversubscribed"], self.oom["culprit"] = True, victim["culprit"]
            log(
                f"the GPU was oversubscribed beyond the ledger's reservations ({victim['excess_mb']} MiB): "
                f"{victim['culprit']}; this task is its victim, not short of memory"
            )
        return self.oom

    def _oversubscription(self) -> Optional[dict[str, Any]]:
        """:func:`gpu.ledger.overrun` on this task's GPU now (NVML's processes against the ledger), None when the
        GPU holds nobody beyond their reservation or NVML cannot say."""
        if self.gpu_source != "nvml" or not self.gpu_indices:
            return None
        try:
            device = next((g for g in _devices.list_gpus(self.env) if g.index == self.gpu_indices[0]), None)
            return None if device is None else _ledger.overrun(device, self.ledger.entries(), self.cfg.task_id)
        except Exception as exc:  # noqa: BLE001 - a diagnosis, never a new failure
            log(f"could not tell whether the GPU was oversubscribed: {exc!r}")
            return None

    def _progress_mark(self) -> Optional[Tuple[int, int, int]]:
        """What identifies the progress file's current content (inode, size, mtime), None while there is none."""
        try:
            st = os.stat(self.cfg.progress_file)
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _heartbeat_loop(self, stop: threading.Event) -> None:
        """A heartbeat every ``heartbeat_s``, and one as soon as the job reports new progress (the file is looked
        at every :data:`PROGRESS_POLL_S`): a report reaches the AM within a fraction of a second, so the last one
        is there even when the container is stopped right after it (the AM stops a chief's peers once it ends)."""
        failures = 0
        sent_mark, last_beat = None, time.monotonic()
        while not stop.wait(min(self.cfg.heartbeat_s, PROGRESS_POLL_S)):
            mark = self._progress_mark()
            if mark == sent_mark and time.monotonic() - last_beat < self.cfg.heartbeat_s:
                continue
            last_beat = time.monotonic()
            status: int | str | None
            try:
                status = self.heartbeat()
            except Exception as exc:  # never let heartbeats kill the task
                status = f"error {exc!r}"
            if status == 200:
                sent_mark = mark
            else:
                failures += 1
                if failures == 1 or failures % 10 == 0:
                    log(f"heartbeat failed ({status}); {failures} so far, training continues")

    def final_heartbeat(self, message: str) -> bool:
        """The last heartbeat, after the user's process has ended: its final progress and how it ended. The
        periodic loop has stopped (joined), so nothing older can reach the AM after it. A few tries: it is what the
        AM keeps for the application's final status."""
        for attempt in range(1, FINAL_HEARTBEAT_TRIES + 1):
            status: int | str | None
            try:
                status = self.heartbeat(message=message)
            except Exception as exc:  # noqa: BLE001 - reported below, never fatal
                status = f"error {exc!r}"
            if status == 200:
                return True
            if isinstance(status, int) and 400 <= status < 500:
                log(f"final heartbeat refused by the AM ({status}): its last progress may be older")
                return False
            if attempt < FINAL_HEARTBEAT_TRIES:
                time.sleep(0.5)
        log(f"final heartbeat failed ({status}) after {FINAL_HEARTBEAT_TRIES} tries: the AM keeps older progress")
        return False

    # ---- TensorBoard (runtime/tensorboard.py) -------------------------------------------------------------
    @property
    def runs_tensorboard(self) -> bool:
        return self.cfg.tensorboard_task == self.cfg.task

    def _tensorboard_thread(self, env: Mapping[str, str]) -> None:
        """Start TensorBoard beside the user's process and tell the AM at once (then every heartbeat)."""
        why = _tensorboard.missing()
        port = 0
        if why is None:
            try:
                port = self._tensorboard_port()
            except OSError as exc:
                why = f"no port for it: {exc}"
        if why is None:
            with self._tensorboard_lock:
                if self._tensorboard_closed:
                    return
                tb = self.tensorboard = _tensorboard.TensorBoard(
                    env["MELON_TENSORBOARD_LOG_DIR"],
                    host=self.host,
                    bind_host=self.bind_host,
                    cwd=self.child_cwd,
                    env=env,
                    log=log,
                    port=port,
                )
            try:
                self.tensorboard_url = tb.start()
            except _tensorboard.TensorBoardError as exc:
                why = str(exc)
        if self.child is None or self.child.poll() is not None:
            return  # the user's process has ended meanwhile: run() reports and stops
        if why is not None:
            self.tensorboard_error = f"TensorBoard not started: {why}"
            log(self.tensorboard_error + "; training continues")
        else:
            log(
                f"TensorBoard serving {env['MELON_TENSORBOARD_LOG_DIR']} at {self.tensorboard_url}"
                f"{_tensorboard.PATH_PREFIX}/ (through the AM: <rm>/proxy/<app>{_tensorboard.PATH_PREFIX}/)"
            )
        try:
            self.heartbeat()
        except Exception as exc:  # the next periodic heartbeat carries it too
            log(f"could not report TensorBoard to the AM now: {exc!r}")

    def _tensorboard_port(self) -> int:
        """A free port of ``MELON_PORT_RANGE`` for TensorBoard, which the AM proxies (from its own node, maybe
        another), never the port this task registered (its framework may not have bound it yet); 0 without a
        range: TensorBoard's own choice."""
        if self.cfg.port_range is None or not self.bind_host:
            return 0
        taken = {int(self.registered.rsplit(":", 1)[1])} if self.registered else set()
        sock = _ports.reserve(self.bind_host, self.cfg.port_range, taken)
        port = int(sock.getsockname()[1])
        sock.close()
        return port

    def stop_tensorboard(self) -> None:
        with self._tensorboard_lock:
            self._tensorboard_closed = True
            tb, self.tensorboard = self.tensorboard, None
        if tb is not None:
            tb.stop()
            if self.tensorboard_url:
                self.tensorboard_url = ""  # the next heartbeat unregisters it

    def wait_child(self) -> int:
        child = self.child
        assert child is not None
        deadline = None
        while True:
            try:
                return child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            if self.terminating.is_set():
                if deadline is None:
                    deadline = time.monotonic() + self.cfg.kill_grace_s
                elif time.monotonic() >= deadline:
                    log(f"user process {child.pid} ignored SIGTERM for {self.cfg.kill_grace_s:g}s: SIGKILL")
                    child.kill()

    # ---- main --------------------------------------------------------------------------------------------
    def run(self) -> int:
        cfg = self.cfg
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        stop = threading.Event()
        try:
            self.choose_gpu()
            host, port = self.reserve_port()
            cluster = self.register(host, port)
            env = self.child_env(cluster)
            self._starting = True
            self.child = self.start_child(env)
            self._starting = False
            if self.terminating.is_set():  # a signal raced with the start
                self.child.terminate()
            beat = threading.Thread(target=self._heartbeat_loop, args=(stop,), name="melon-heartbeat", daemon=True)
            beat.start()
            if self.runs_tensorboard:
                threading.Thread(
                    target=self._tensorboard_thread, args=(env,), name="melon-tensorboard", daemon=True
                ).start()
            rc = self.wait_child()
            stop.set()
            self.stop_tensorboard()
            code = rc if rc >= 0 else 128 - rc
            log(f"user process exited {code}" + (" (after SIGTERM)" if self.terminating.is_set() else ""))
            beat.join(timeout=self.am.timeout + 1)  # an in-flight periodic beat lands before the final one
            oom = None if code == 0 or self.terminating.is_set() else self.gpu_oom(code)
            self.final_heartbeat(f"user process exited {code}")
            if self.terminating.is_set():
                return EXIT_TERMINATED
            if oom is not None:
                return EXIT_GPU_OOM
            if code == 0 and _outputs.is_output_task(self.env, cfg.role, cfg.index):
                try:
                    _outputs.publish(self.env, self.workdir, log)
                except (_outputs.OutputError, OSError) as exc:
                    log(f"ERROR: {exc}")
                    self.heartbeat(message=str(exc)[:500])
                    return EXIT_OUTPUT
            return code
        except Terminated:
            log("terminated before the user's process started")
            return EXIT_TERMINATED
        except Fatal as exc:
            log(f"ERROR: {exc}")
            return exc.code
        finally:
            stop.set()
            self.stop_tensorboard()
            self.release_port()
            if self.gpu_indices:
                try:
                    self.ledger.release(cfg.task_id)
                    log(f"GPU {self.gpu_label} released")
                except Exception as exc:
                    log(f"could not release the GPU reservation (its lease ends with this process): {exc!r}")
            if self.cap_dir:
                shutil.rmtree(self.cap_dir, ignore_errors=True)


def main(argv: Optional[List[str]] = None) -> int:
    try:
        cfg = Config.from_env(os.environ)
    except Fatal as exc:
        log(f"ERROR: {exc}")
        return exc.code
    return Executor(cfg).run()


if __name__ == "__main__":
    sys.exit(main())
