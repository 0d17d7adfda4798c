"""The job specification: what a DAG author writes, validated before anything touches the network.

A ``JobSpec`` names the code, the entrypoint, the framework and one ``RoleSpec`` per task role. Each role
asks for whole GPUs (``gpus: N``, YARN's ``yarn.io/gpu``, exclusive) *or* an expected GPU memory
(``gpu_memory: 6GiB``, MeLoN's shared mode, YARN resource ``melon.io/gpu-memory`` in MiB) — never both.

Every invalid input raises :class:`JobSpecError`, whose message names the offending field
(``roles.chief.instances: ...``). Specs round-trip through dict, JSON and YAML.

Sizes: an int is MiB; a string is a number with an optional binary unit ``k|m|g|t`` (``Ki/Mi/Gi/Ti``,
``KiB/MiB/GiB/TiB``, ``KB/MB/GB/TB`` are read the same way, as powers of 1024, which is what YARN does).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

FRAMEWORKS = ("tensorflow", "pytorch", "generic")
TF_ROLES = ("chief", "worker", "ps", "evaluator")
TORCH_ROLES = ("master", "worker")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNIT_MB = {"": 1.0, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024}
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_OUTPUT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class JobSpecError(ValueError):
    """An invalid job spec; the message names each offending field."""


def parse_size_mb(value: Union[int, float, str]) -> int:
    """A size in MiB from an int (already MiB) or a string such as ``2g``, ``512Mi``, ``6GiB``."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, (int, float)):
        mb = float(value)
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ValueError(f"unparsable size {value!r} (use e.g. 2048, '512m', '2g', '6GiB')")
        mb = float(match.group(1)) * _UNIT_MB[match.group(2).lower()]
    if mb <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return max(1, int(round(mb)))


class RoleSpec(BaseModel):
    """One task role: how many tasks, their container size and their GPU demand."""

    model_config = ConfigDict(extra="forbid")

    instances: int = Field(1, gt=0)
    memory: Union[int, str] = 2048  # MiB
    vcores: int = Field(1, gt=0)
    gpus: Optional[int] = Field(None, gt=0)
    gpu_memory: Optional[Union[int, str]] = None
    restarts: int = Field(0, ge=0)
    untracked: Optional[bool] = None
    large: bool = False  # the task saturates a GPU on its own (see gpu.policy.packing_pays)

    @field_validator("memory", "gpu_memory")
    @classmethod
    def _size(cls, value):
        return None if value is None else parse_size_mb(value)

    @model_validator(mode="after")
    def _one_gpu_mode(self):
        if self.gpus is not None and self.gpu_memory is not None:
            raise ValueError("give either gpus (exclusive) or gpu_memory (shared), not both")
        return self

    @property
    def memory_mb(self) -> int:
        return int(self.memory)

    @property
    def gpu_memory_mb(self) -> int:
        return int(self.gpu_memory or 0)


class InputSpec(BaseModel):
    """A dataset in HDFS that YARN localizes into every container (PUBLIC: cached per node across jobs)."""

    model_config = ConfigDict(extra="forbid")

    path: str
    name: Optional[str] = None
    type: Literal["FILE", "ARCHIVE"] = "FILE"
    visibility: Literal["PUBLIC", "PRIVATE", "APPLICATION"] = "PUBLIC"

    @field_validator("path")
    @classmethod
    def _hdfs(cls, value: str) -> str:
        if not value.startswith(("hdfs://", "/")):
            raise ValueError(f"must be an hdfs:// URI or an absolute HDFS path, got {value!r}")
        return value

    @property
    def link_name(self) -> str:
        return self.name or self.path.rstrip("/").rsplit("/", 1)[-1]


class EnvironmentSpec(BaseModel):
    """Where the containers' Python comes from: the node's own, a packed env archive, or a Docker image."""

    model_config = ConfigDict(extra="forbid")

    python: Optional[str] = None
    archive: Optional[str] = None
    docker_image: Optional[str] = None

    @model_validator(mode="after")
    def _consistent(self):
        if self.archive and self.docker_image:
            raise ValueError("give either archive or docker_image, not both")
        if self.archive:
            if not self.archive.startswith(("hdfs://", "/")):
                raise ValueError(f"archive must be an hdfs:// URI or absolute HDFS path, got {self.archive!r}")
            if not self.python:
                raise ValueError("archive needs python: the interpreter's path inside it, e.g. 'env/bin/python'")
        return self


class JobSpec(BaseModel):
    """A distributed training job. See the module docstring; ``roles`` maps role name → :class:`RoleSpec`."""

    model_config = ConfigDict(extra="forbid")

    name: str
    framework: Literal["tensorflow", "pytorch", "generic"] = "generic"
    code: Optional[str] = None
    entrypoint: str
    env: dict[str, str] = Field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    max_attempts: int = Field(1, gt=0)
    tags: list[str] = Field(default_factory=list)
    roles: dict[str, RoleSpec]
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    inputs: list[InputSpec] = Field(default_factory=list)
    outputs: dict[str, str] = Field(default_factory=dict)
    #: the role whose task 0 publishes the outputs (default: the role that decides success, else the first
    #: tracked role); an existing output is replaced only with overwrite_outputs
    output_role: Optional[str] = None
    overwrite_outputs: bool = False
    tensorboard_log_dir: Optional[str] = None
    register_timeout_s: int = Field(300, gt=0)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"must start with a letter and hold only letters, digits, '_', '.', '-': {value!r}")
        return value

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, value: str) -> str:
        if not value or not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    @field_validator("code")
    @classmethod
    def _code(cls, value: Optional[str], info: ValidationInfo) -> Optional[str]:
        if value is None or value.startswith("hdfs://"):
            return value
        base = Path((info.context or {}).get("base_dir") or ".")
        path = Path(value) if Path(value).is_absolute() else base / value
        if not path.is_dir():
            raise ValueError(f"code folder {str(path)!r} does not exist (give a folder or an hdfs:// path)")
        return str(path.resolve())

    @field_validator("outputs")
    @classmethod
    def _outputs(cls, outputs: dict[str, str]) -> dict[str, str]:
        for name, target in outputs.items():
            if not _OUTPUT_NAME.match(name):
                raise ValueError(f"output name {name!r} must start with a letter and hold only letters, digits "
                                 "and '_' (it becomes $MELON_OUTPUT_<NAME>)")
            if not str(target).strip():
                raise ValueError(f"output {name!r} has an empty path")
        return outputs

    @field_validator("roles")
    @classmethod
    def _roles(cls, roles: dict[str, RoleSpec]) -> dict[str, RoleSpec]:
        if not roles:
            raise ValueError("at least one role is needed")
        for role in roles:
            if not _NAME.match(role):
                raise ValueError(f"role name {role!r} must start with a letter (letters, digits, '_', '.', '-')")
        return roles

    @model_validator(mode="after")
    def _framework_rules(self):
        roles = self.roles
        if self.framework == "tensorflow":
            unknown = sorted(set(roles) - set(TF_ROLES))
            if unknown:
                raise ValueError(f"roles: tensorflow roles are {', '.join(TF_ROLES)}; unknown: {', '.join(unknown)}")
            if "chief" in roles and roles["chief"].instances > 1:
                raise ValueError(f"roles.chief.instances: tensorflow allows one chief, got {roles['chief'].instances}")
            if "chief" not in roles and "worker" not in roles:
                raise ValueError("roles: a tensorflow job needs a chief or a worker")
        elif self.framework == "pytorch":
            unknown = sorted(set(roles) - set(TORCH_ROLES))
            if unknown:
                raise ValueError(f"roles: pytorch roles are {', '.join(TORCH_ROLES)}; unknown: {', '.join(unknown)}")
            if "master" in roles and roles["master"].instances > 1:
                raise ValueError(f"roles.master.instances: pytorch allows one master, got {roles['master'].instances}")
        for name, role in roles.items():
            if role.untracked is None:
                role.untracked = name == "ps"
        if all(role.untracked for role in roles.values()):
            raise ValueError("roles: at least one role must be tracked (untracked: false)")
        if self.output_role is not None and self.output_role not in roles:
            raise ValueError(f"output_role: {self.output_role!r} is not a role of the job ({', '.join(roles)})")
        return self

    # ---- derived -------------------------------------------------------------------------------------------
    @property
    def publishing_role(self) -> str:
        """The role whose task 0 publishes the outputs: ``output_role``, else the success role, else the first
        tracked role."""
        return (self.output_role or self.success_role
                or next(name for name, role in self.roles.items() if not role.untracked))

    @property
    def success_role(self) -> Optional[str]:
        """The role whose task 0 ends the job on success: chief (TF), master (PyTorch); else all tracked tasks."""
        for role in ("chief", "master"):
            if role in self.roles:
                return role
        return None

    @property
    def task_count(self) -> int:
        return sum(r.instances for r in self.roles.values())

    # ---- round trips ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict, *, base_dir: Union[str, Path, None] = None) -> "JobSpec":
        if not isinstance(data, dict):
            raise JobSpecError(f"job: expected a mapping, got {type(data).__name__}")
        try:
            return cls.model_validate(data, context={"base_dir": str(base_dir) if base_dir else None})
        except ValidationError as exc:
            raise JobSpecError(_format_errors(exc)) from None

    @classmethod
    def from_json(cls, text: str, *, base_dir=None) -> "JobSpec":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JobSpecError(f"job: not valid JSON: {exc}") from None
        return cls.from_dict(data, base_dir=base_dir)

    @classmethod
    def from_yaml(cls, text: str, *, base_dir=None) -> "JobSpec":
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise JobSpecError(f"job: not valid YAML: {exc}") from None
        return cls.from_dict(data, base_dir=base_dir)

    @classmethod
    def load(cls, job: Union["JobSpec", dict, str, Path], *, base_dir=None) -> "JobSpec":
        """A spec from a JobSpec, a dict, a path to a .yaml/.yml/.json file, or YAML/JSON text."""
        if isinstance(job, JobSpec):
            return job
        if isinstance(job, dict):
            return cls.from_dict(job, base_dir=base_dir)
        if isinstance(job, (str, Path)):
            text = str(job)
            candidate = Path(text) if Path(text).is_absolute() or base_dir is None else Path(base_dir) / text
            if text.endswith((".yaml", ".yml", ".json")):
                if not candidate.is_file():
                    raise JobSpecError(f"job: file {str(candidate)!r} not found")
                body = candidate.read_text()
                base = base_dir or candidate.parent
                if text.endswith(".json"):
                    return cls.from_json(body, base_dir=base)
                return cls.from_yaml(body, base_dir=base)
            return cls.from_yaml(text, base_dir=base_dir)
        raise JobSpecError(f"job: expected a JobSpec, dict or YAML/JSON path, got {type(job).__name__}")


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "job"
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        given = err.get("input")
        if err["type"] not in ("value_error",) and not isinstance(given, (dict, list)):
            msg = f"{msg} (got {given!r})"
        lines.append(f"{loc}: {msg}")
    return "invalid job spec: " + "; ".join(lines)
