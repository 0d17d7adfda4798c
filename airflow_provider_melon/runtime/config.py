"""The executor's configuration: its environment (``runtime/executor.py``'s docstring lists it), parsed and checked,
its exit codes and its log. Stdlib only (plus runtime/ports, tokens, oom).
"""

from __future__ import annotations

import base64
import os
import sys
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from airflow_provider_melon.runtime import oom as _oom
from airflow_provider_melon.runtime import ports as _ports
from airflow_provider_melon.runtime import tokens

PREFIX = "[melon-executor]"

EXIT_CONFIG = 2
EXIT_AM_REFUSED = 3
EXIT_REGISTER = 4
EXIT_OUTPUT = 5  # a declared output could not be published (runtime/outputs.py)
EXIT_NO_GPU_FITS = 75
EXIT_GPU_OOM = _oom.EXIT_GPU_OOM  # 76: the user's process ran out of GPU memory (runtime/oom.py)
EXIT_TERMINATED = 143


def log(msg: str) -> None:
    sys.stderr.write(f"{PREFIX} {msg}\n")
    sys.stderr.flush()


class Fatal(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class Terminated(Exception):
    """SIGTERM/SIGINT arrived before the user's process started."""


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "")
    try:
        return int(raw) if raw.strip() else default
    except ValueError:
        raise Fatal(EXIT_CONFIG, f"{name}={raw!r} is not an integer") from None


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    try:
        return float(raw) if raw.strip() else default
    except ValueError:
        raise Fatal(EXIT_CONFIG, f"{name}={raw!r} is not a number") from None


@dataclass
class Config:
    role: str
    index: int
    am_url: str
    secret: str
    entrypoint: str
    framework: str = "generic"
    gpus: int = 0
    gpu_memory_mb: int = 0
    gpu_context_mb: int = 0  # reserved besides gpu_memory_mb in shared mode: the CUDA context (not under the cap)
    #: the GPU models the task's role accepts (MELON_GPU_MODELS, from the plan's gpu_models); empty: any
    gpu_models: tuple[str, ...] = ()
    large: bool = False
    attempt: int = 0
    app_id: str = ""
    container_id: str = ""
    gpu_wait_s: float = 60.0
    register_timeout_s: float = 300.0
    heartbeat_s: float = 5.0
    kill_grace_s: float = 10.0
    host: str = ""
    bind_host: str = ""
    progress_file: str = ""
    tensorboard_task: str = ""
    port_range: Optional[Tuple[int, int]] = None  # None: the default of runtime/ports.py
    launcher: str = "python"  # pytorch: "torchrun" runs the entrypoint under torchrun (runtime/framework.py)
    nproc_per_node: int = 1  # torchrun's --nproc-per-node

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Config":
        if env.get("MELON_ENTRYPOINT_B64") and not env.get("MELON_ENTRYPOINT"):
            try:
                decoded = base64.b64decode(env["MELON_ENTRYPOINT_B64"], validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError) as exc:
                raise Fatal(EXIT_CONFIG, f"MELON_ENTRYPOINT_B64 is not base64 of UTF-8: {exc}") from None
            env = {**env, "MELON_ENTRYPOINT": decoded}
        if not env.get("MELON_SECRET"):  # the AM's secret travels in the container's token file (credentials)
            try:
                secret = tokens.container_secret(env=env)
            except (OSError, tokens.TokenFileError) as exc:
                raise Fatal(EXIT_CONFIG, f"cannot read the AM secret from HADOOP_TOKEN_FILE_LOCATION: {exc}") from None
            if secret:
                env = {**env, "MELON_SECRET": secret}
        missing = [
            n
            for n in ("MELON_ROLE", "MELON_INDEX", "MELON_AM_URL", "MELON_SECRET", "MELON_ENTRYPOINT")
            if not env.get(n)
        ]
        if missing:
            raise Fatal(EXIT_CONFIG, f"missing environment: {', '.join(missing)} (see docs/protocol.md)")
        framework = (env.get("MELON_FRAMEWORK") or "generic").strip().lower()
        if framework not in ("tensorflow", "pytorch", "generic"):
            raise Fatal(EXIT_CONFIG, f"MELON_FRAMEWORK={framework!r}: expected tensorflow, pytorch or generic")
        launcher = (env.get("MELON_LAUNCHER") or "python").strip().lower()
        if launcher not in ("python", "torchrun"):
            raise Fatal(EXIT_CONFIG, f"MELON_LAUNCHER={launcher!r}: expected python or torchrun")
        if launcher == "torchrun" and framework != "pytorch":
            raise Fatal(EXIT_CONFIG, f"MELON_LAUNCHER=torchrun needs MELON_FRAMEWORK=pytorch, got {framework!r}")
        nproc_per_node = _int(env, "MELON_NPROC_PER_NODE", 1)
        if nproc_per_node < 1 or (nproc_per_node > 1 and launcher != "torchrun"):
            raise Fatal(
                EXIT_CONFIG,
                f"MELON_NPROC_PER_NODE={nproc_per_node}: at least 1, and above 1 only with MELON_LAUNCHER=torchrun",
            )
        progress = env.get("MELON_PROGRESS_FILE") or "melon-progress.json"
        try:
            port_range = _ports.parse_range(env["MELON_PORT_RANGE"]) if env.get("MELON_PORT_RANGE") else None
        except ValueError as exc:
            raise Fatal(EXIT_CONFIG, str(exc)) from None
        return cls(
            role=env["MELON_ROLE"],
            index=_int(env, "MELON_INDEX", 0),
            am_url=env["MELON_AM_URL"].rstrip("/"),
            secret=env["MELON_SECRET"],
            entrypoint=env["MELON_ENTRYPOINT"],
            framework=framework,
            gpus=_int(env, "MELON_GPUS", 0),
            gpu_memory_mb=_int(env, "MELON_GPU_MEMORY_MB", 0),
            gpu_context_mb=max(0, _int(env, "MELON_GPU_CONTEXT_MB", 0)),
            gpu_models=tuple(m.strip() for m in env.get("MELON_GPU_MODELS", "").split(",") if m.strip()),
            large=(
                env.get("MELON_LARGE", "0").strip().lower() in ("1", "true", "yes")
                or env["MELON_ROLE"] in [r.strip() for r in env.get("MELON_LARGE_ROLES", "").split(",")]
            ),
            attempt=_int(env, "MELON_TASK_ATTEMPT", 0),
            app_id=env.get("MELON_APP_ID", ""),
            container_id=env.get("MELON_CONTAINER_ID", ""),
            gpu_wait_s=_float(env, "MELON_GPU_WAIT_S", 60.0),
            register_timeout_s=_float(env, "MELON_REGISTER_TIMEOUT_S", 300.0),
            heartbeat_s=_float(env, "MELON_HEARTBEAT_S", 5.0),
            kill_grace_s=_float(env, "MELON_KILL_GRACE_S", 10.0),
            host=env.get("MELON_HOST", ""),
            bind_host=env.get("MELON_BIND_HOST", ""),
            progress_file=os.path.abspath(progress),
            tensorboard_task=env.get("MELON_TENSORBOARD_TASK", "").strip(),
            port_range=port_range,
            launcher=launcher,
            nproc_per_node=nproc_per_node,
        )

    @property
    def reserve_mb(self) -> int:
        """What a shared-mode task holds on its GPU (the ledger, what it registers): its expected memory plus the
        CUDA context's; the in-process cap is the expected memory alone."""
        return self.gpu_memory_mb + self.gpu_context_mb if self.gpus <= 0 < self.gpu_memory_mb else self.gpu_memory_mb

    @property
    def task(self) -> str:
        return f"{self.role}:{self.index}"

    @property
    def task_id(self) -> str:
        return self.container_id or f"{self.app_id or 'local'}/{self.task}#{self.attempt}"
