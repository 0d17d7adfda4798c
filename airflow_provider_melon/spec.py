"""The job specification: what a DAG author writes, validated before anything touches the network.

A ``JobSpec`` names the code, the entrypoint, the framework and one ``RoleSpec`` per task role. Each role
asks for whole GPUs (``gpus: N``, YARN's ``yarn.io/gpu``, exclusive) *or* an expected GPU memory
(``gpu_memory: 6GiB``, MeLoN's shared mode, YARN resource ``melon.io/gpu-memory`` in MiB), never both.
Every invalid input raises :class:`JobSpecError`, whose one-line message names the offending field
(``roles.chief.instances: ...``). Specs round-trip through dict, JSON and YAML. ``docs/internals.md``, "The job
specification", lists what is refused and how sizes are read.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from airflow_provider_melon.runtime import ports

FRAMEWORKS = ("tensorflow", "pytorch", "generic")
TF_ROLES = ("chief", "worker", "ps", "evaluator")
TORCH_ROLES = ("master", "worker")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNIT_MB = {"": 1.0, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024}
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")  # fullmatch: `$` would let a final newline in
#: an environment variable name: YARN writes ``export NAME="value"`` into the container's launch script
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a file name YARN links into the container (``ln -sf -- "<cache>" "<name>"``): no '/', no quoting characters
_LINK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+@=,~-]*")
#: what a Docker image reference may hold (YARN's docker runtime reads it unquoted)
_DOCKER_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
#: names already taken in a task container's folder: the code and runtime archives, the executor's work folder,
#: and YARN's own files
RESERVED_LINKS = ("code", "melon_runtime", "melon-work", "tmp", "launch_container.sh", "container_tokens")
#: the prefix of the links staging gives a code folder's big files (``melon-code-file-<n>``, submission.py)
RESERVED_LINK_PREFIX = "melon-code-file-"
#: YARN takes ASCII application tags of at most 100 characters (ApplicationSubmissionContext.checkTags)
MAX_TAG_LENGTH = 100
#: prefix of the one tag that identifies a task instance's application (``submission.identity_tag``)
IDENTITY_TAG_PREFIX = "melon-id:"
#: ``gpu_memory: auto``: learned from earlier runs
AUTO = "auto"
#: Java int: YARN (and the AM's JSON reader) take counts, sizes in MiB, priorities and timeouts as int32
INT32_MAX = 2**31 - 1
#: a GPU model as a node publishes it (``roles.<r>.gpu_models``): YARN's node-attribute value rule (Hadoop's
#: NodeLabelUtil: a letter or digit, then letters, digits, '-', '_', '.'; at most 255 characters)
GPU_MODEL_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z._-]*$"
GPU_MODEL_MAX_LENGTH = 255


class JobSpecError(ValueError):
    """An invalid job spec; the message names each offending field."""


class _FieldError(ValueError):
    """Raised by a model-level check about one field: ``field`` is appended to the error's location."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _text(value: str) -> str:
    """Every string of a spec: no NUL byte (no environment, argv or path can carry one) and valid Unicode
    (the entrypoint travels as UTF-8; a lone surrogate cannot be encoded)."""
    if "\x00" in value:
        raise ValueError(f"must not contain a NUL byte: {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"must be valid Unicode text (it holds a lone surrogate): {value!r}") from None
    return value


Text = Annotated[str, AfterValidator(_text)]


def _env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an environment variable name (letters, digits, '_'; not starting with a digit)"
        )
    return value


EnvName = Annotated[Text, AfterValidator(_env_name)]


def check_link_name(link: str) -> Optional[str]:
    """Why ``link`` cannot name a file YARN localizes into a task container, or None when it can."""
    if not _LINK_NAME.fullmatch(link):
        return (
            f"{link!r} cannot be a file name in the container (letters, digits and '_.+@=,~-', not "
            "starting with '.' or '-')"
        )
    if link in RESERVED_LINKS:
        return f"{link!r} is taken in the container (reserved: {', '.join(RESERVED_LINKS)})"
    if link.startswith(RESERVED_LINK_PREFIX):
        return f"{link!r} is taken in the container (names starting {RESERVED_LINK_PREFIX!r} hold the code's big files)"
    return None


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
    if not mb > 0:  # also NaN
        raise ValueError(f"size must be positive, got {value!r}")
    if mb > INT32_MAX:
        raise ValueError(f"size must be at most {INT32_MAX} MiB, got {value!r}")
    return max(1, int(round(mb)))


def override_gpu_memory(data: Any, override: Union[int, str]) -> list[str]:
    """Set ``gpu_memory`` of every role of the job ``data`` (a dict) that declares one to ``override`` (the
    operator's, e.g. a profile step's figure); an ``auto`` role keeps learning and takes it as its first run's
    figure (``auto:<override>``). Returns those roles' names."""
    roles: dict[str, Any] = (data.get("roles") if isinstance(data, dict) else None) or {}
    shared = [name for name, role in roles.items() if isinstance(role, dict) and role.get("gpu_memory") is not None]
    for name in shared:
        auto = str(roles[name]["gpu_memory"]).strip().lower().startswith(AUTO)
        roles[name]["gpu_memory"] = f"{AUTO}:{override}" if auto else override
    return shared


class RoleSpec(BaseModel):
    """One task role: how many tasks, their container size and their GPU demand."""

    model_config = ConfigDict(extra="forbid")

    instances: int = Field(1, gt=0, le=INT32_MAX)
    memory: Union[int, Text] = 2048  # MiB
    vcores: int = Field(1, gt=0, le=INT32_MAX)
    gpus: Optional[int] = Field(None, gt=0, le=INT32_MAX)
    #: MiB, a size, or ``"auto"`` / ``"auto:<size>"``: the figure learned from this task's earlier runs
    #: (``gpu.learned``), else the operator's ``gpu_memory`` (a profile step's), else ``<size>``
    gpu_memory: Optional[Union[int, Text]] = None
    #: MiB or a size a shared-mode task reserves on its GPU beside ``gpu_memory``, outside its cap: the CUDA context,
    #: the kernels and the libraries' handles and buffers (cuBLAS, cuDNN, NCCL). None: learned from the task's runs,
    #: else the framework's first-run figure (``gpu/context.py``), unless the cluster's admin sets one
    gpu_context: Optional[Union[int, Text]] = None
    #: after an out-of-memory exit under its cap, a task asks again with ``oom_growth`` × its expected memory, at
    #: most ``oom_max_growths`` times (shared mode only; not counted against ``restarts``); false: never
    oom_retry: StrictBool = True
    oom_growth: float = Field(1.5, ge=1.1, le=4.0)
    oom_max_growths: int = Field(2, ge=1, le=10)
    restarts: int = Field(0, ge=0, le=INT32_MAX)
    #: elastic bounds: the job starts once this many of the role's tasks hold containers, the rest join as YARN
    #: grants them, and a lost task is replaced while the others go on; below it for longer than the job's
    #: ``elastic_grace_s`` the job fails (None: not elastic, every task is needed)
    min_instances: Optional[int] = Field(None, gt=0, le=INT32_MAX)
    untracked: Optional[bool] = None
    #: an untracked role whose failure (past its restarts) is only logged, e.g. a TF evaluator; without it such a
    #: failure fails the job, since the others cannot go on without it (a parameter server)
    optional: bool = False
    large: bool = False  # the task saturates a GPU on its own (see gpu.policy.packing_pays)
    #: the GPU models a task of this role accepts (e.g. ``["A100", "H100"]``), as the nodes publish them in their
    #: ``gpu-model`` node attribute; None: any GPU. Only for roles that ask for GPUs (``gpus`` or ``gpu_memory``)
    gpu_models: Optional[list[Text]] = None

    @field_validator("memory", "gpu_memory", "gpu_context", mode="before")
    @classmethod
    def _not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):  # pydantic would take True for 1 (MiB) before parse_size_mb sees it
            raise ValueError(f"not a size: {value!r}")
        return value

    @field_validator("memory")
    @classmethod
    def _size(cls, value: Union[int, str]) -> int:
        return parse_size_mb(value)

    @field_validator("gpu_memory")
    @classmethod
    def _gpu_size(cls, value: Optional[Union[int, str]]) -> Optional[Union[int, str]]:
        if isinstance(value, str) and value.strip().lower().startswith(AUTO):
            head, sep, first = value.strip().partition(":")
            if head.lower() != AUTO or (sep and not first.strip()):
                raise ValueError(
                    f"expected a size, {AUTO!r} or '{AUTO}:<size>' (the first run's figure), got {value!r}"
                )
            return f"{AUTO}:{parse_size_mb(first)}" if sep else AUTO
        return None if value is None else parse_size_mb(value)

    @field_validator("gpu_context")
    @classmethod
    def _context_size(cls, value: Optional[Union[int, str]]) -> Optional[int]:
        if value is None:
            return value
        if value == 0 or (isinstance(value, str) and value.strip() == "0"):  # GPUs without a context (virtual ones)
            return 0
        return parse_size_mb(value)

    @field_validator("gpu_models")
    @classmethod
    def _gpu_models(cls, models: Optional[list[str]]) -> Optional[list[str]]:
        if models is None:
            return None
        if not models:
            raise ValueError("name at least one GPU model, or drop gpu_models (any GPU)")
        for i, model in enumerate(models):
            if len(model) > GPU_MODEL_MAX_LENGTH or not re.fullmatch(GPU_MODEL_PATTERN, model):
                raise _FieldError(
                    str(i),
                    f"{model!r} cannot be a GPU model as YARN's node attributes carry it: a letter or digit, then "
                    f"letters, digits, '-', '_', '.' (at most {GPU_MODEL_MAX_LENGTH} characters), e.g. 'A100'",
                )
            if model in models[:i]:
                raise _FieldError(str(i), f"{model!r} is named twice")
        return models

    @model_validator(mode="after")
    def _one_gpu_mode(self) -> RoleSpec:
        if self.gpus is not None and self.gpu_memory is not None:
            raise ValueError("give either gpus (exclusive) or gpu_memory (shared), not both")
        if self.gpu_models is not None and self.gpus is None and self.gpu_memory is None:
            raise _FieldError(
                "gpu_models",
                "only a role that asks for GPUs can name their models: add gpus (whole GPUs) or gpu_memory "
                "(a share), or drop gpu_models",
            )
        if self.gpu_context is not None and self.gpu_memory is None:
            raise _FieldError(
                "gpu_context",
                "a context reserve is held beside a share of a GPU: add gpu_memory, or drop gpu_context (whole GPUs "
                "hold their context)",
            )
        if self.min_instances is not None and self.min_instances > self.instances:
            raise _FieldError(
                "min_instances", f"must be at most instances ({self.instances}), got {self.min_instances}"
            )
        return self

    @property
    def elastic(self) -> bool:
        """The role declares elastic bounds (``min_instances``)."""
        return self.min_instances is not None

    @property
    def memory_mb(self) -> int:
        return int(self.memory)

    @property
    def gpu_memory_auto(self) -> bool:
        """``gpu_memory: auto``: the figure is learned at submission (``MelonHook.resolve_learned``)."""
        return isinstance(self.gpu_memory, str)

    @property
    def gpu_memory_first_mb(self) -> Optional[int]:
        """The figure after ``auto:`` (the first run's, without history), else None."""
        value = self.gpu_memory  # a str exactly when gpu_memory_auto
        return int(value.split(":")[1]) if isinstance(value, str) and ":" in value else None

    @property
    def gpu_memory_mb(self) -> int:
        if self.gpu_memory_auto:
            raise ValueError(
                "gpu_memory is 'auto' and not resolved yet (MelonHook.resolve_learned resolves it before submission)"
            )
        return int(self.gpu_memory or 0)

    @property
    def gpu_context_mb(self) -> Optional[int]:
        """The context reserve the spec sets (``gpu_context``), None when it leaves it to be learned."""
        return None if self.gpu_context is None else int(self.gpu_context)

    @property
    def oom_growths(self) -> int:
        """How many times a task of this role may grow after an OOM (0: oom_retry is off, or exclusive GPUs)."""
        return self.oom_max_growths if self.oom_retry and self.gpus is None else 0


class InputSpec(BaseModel):
    """A dataset in HDFS that YARN localizes into every container (PUBLIC: cached per node across jobs)."""

    model_config = ConfigDict(extra="forbid")

    path: Text
    name: Optional[Text] = None
    type: Literal["FILE", "ARCHIVE"] = "FILE"
    visibility: Literal["PUBLIC", "PRIVATE", "APPLICATION"] = "PUBLIC"

    @field_validator("path")
    @classmethod
    def _hdfs(cls, value: str) -> str:
        if not value.startswith(("hdfs://", "/")):
            raise ValueError(f"must be an hdfs:// URI or an absolute HDFS path, got {value!r}")
        return value

    @field_validator("name")
    @classmethod
    def _link(cls, value: Optional[str]) -> Optional[str]:
        problem = None if value is None else check_link_name(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _derived_link(self) -> InputSpec:
        problem = None if self.name is not None else check_link_name(self.link_name)
        if problem:
            raise _FieldError("path", f"its last part is the file's name in the container: {problem}; set name")
        return self

    @property
    def link_name(self) -> str:
        return self.name or self.path.rstrip("/").rsplit("/", 1)[-1]


class EnvironmentSpec(BaseModel):
    """Where the containers' Python comes from: the node's own, a packed env archive, or a Docker image."""

    model_config = ConfigDict(extra="forbid")

    python: Optional[Text] = None
    archive: Optional[Text] = None
    docker_image: Optional[Text] = None

    @field_validator("docker_image")
    @classmethod
    def _image(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not _DOCKER_IMAGE.fullmatch(value):
            raise ValueError(f"not a Docker image reference (e.g. 'registry:5000/team/tf:2.21'): {value!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EnvironmentSpec:
        if self.archive and self.docker_image:
            raise ValueError("give either archive or docker_image, not both")
        if self.archive:
            if not self.archive.startswith(("hdfs://", "/", "file:///")):
                raise _FieldError(
                    "archive",
                    "must be an hdfs:// URI, an absolute HDFS path or a file:///… local "
                    f"file (staged for you), got {self.archive!r}",
                )
            if not self.python:
                raise _FieldError(
                    "python", "an archive needs python: the interpreter's path inside it, e.g. 'env/bin/python'"
                )
            link, _, rest = self.python.partition("/")
            problem = check_link_name(link)
            if problem or not rest:
                raise _FieldError(
                    "python",
                    "with an archive, give the interpreter's relative path inside it, "
                    f"'<folder>/bin/python' (the folder names the unpacked archive), "
                    f"got {self.python!r}" + (f": {problem}" if problem else ""),
                )
        return self


class JobSpec(BaseModel):
    """A distributed training job. See the module docstring; ``roles`` maps role name → :class:`RoleSpec`."""

    model_config = ConfigDict(extra="forbid")

    name: Text
    framework: Literal["tensorflow", "pytorch", "generic"] = "generic"
    code: Optional[Text] = None
    entrypoint: Text
    env: dict[EnvName, Text] = Field(default_factory=dict)
    queue: Text = "default"
    #: YARN's application priority in the queue: a number, or ``auto`` (learned: longer runs first, from the task's
    #: run times, ``gpu/learned.py``'s :func:`priority`; 0 while it has none)
    priority: Union[Literal["auto"], Annotated[int, Field(ge=-INT32_MAX, le=INT32_MAX)]] = "auto"
    max_attempts: int = Field(1, gt=0, le=INT32_MAX)
    tags: list[Text] = Field(default_factory=list)
    roles: dict[Text, RoleSpec]
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    inputs: list[InputSpec] = Field(default_factory=list)
    outputs: dict[Text, Text] = Field(default_factory=dict)
    #: the role whose task 0 publishes the outputs (default: the role that decides success, else the first
    #: tracked role); an existing output is replaced only with overwrite_outputs
    output_role: Optional[Text] = None
    overwrite_outputs: bool = False
    tensorboard_log_dir: Optional[Text] = None
    #: start TensorBoard next to the TensorBoard task (see :attr:`tensorboard_role`), served through the AM at
    #: ``<rm>/proxy/<app>/tensorboard/``: true = on a fresh local folder of that container, a string = that log dir
    #: (same as true with ``tensorboard_log_dir``). The job writes its summaries to ``$MELON_TENSORBOARD_LOG_DIR``.
    tensorboard: Optional[Union[StrictBool, Text]] = None
    register_timeout_s: int = Field(300, gt=0, le=INT32_MAX)
    #: all-or-nothing gang formation: the AM holds granted containers unlaunched until every task has one; a gang
    #: still incomplete after this many seconds gives them all back and asks again after a random backoff (half to
    #: one and a half of it). 0: off (each container starts as it comes, as YARN gives them). Below YARN's
    #: container-allocation expiry (600 s): a granted container not started by then is taken back.
    gang_hold_s: float = Field(60, ge=0, le=500)
    #: fail the job when its gang has not been granted whole after this many seconds (None: wait, like YARN)
    queue_timeout_s: Optional[int] = Field(None, gt=0, le=INT32_MAX)
    #: an elastic role (``min_instances``) with fewer live tasks than its minimum for longer than this fails the
    #: job, naming the lost tasks; meanwhile their replacements are asked for
    elastic_grace_s: float = Field(60, ge=0, le=INT32_MAX)
    #: the stall watchdog: a job whose tasks report steps (``report(step=...)``, the Keras callback) and none of
    #: whose live tasks reports a new step for longer than this, and than 5 times the longest stretch between steps
    #: seen so far, is treated as a lost gang: restarted whole within its restarts, then failed naming the stalled
    #: tasks and their last steps. Jobs that report no steps are not watched. 0: off (docs/elastic.md)
    stall_timeout_s: float = Field(900, ge=0, le=INT32_MAX)
    #: pytorch: how each task starts the entrypoint: ``python`` (the env:// rendezvous: MASTER_ADDR/PORT, RANK,
    #: WORLD_SIZE per container) or ``torchrun`` (one torchrun agent per container, c10d rendezvous on the first
    #: member's address and port)
    launcher: Literal["python", "torchrun"] = "python"
    #: torchrun: processes per container (``--nproc-per-node``), e.g. one per GPU of the role's ``gpus``
    nproc_per_node: int = Field(1, gt=0, le=1024)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(f"must start with a letter and hold only letters, digits, '_', '.', '-': {value!r}")
        return value

    @field_validator("env")
    @classmethod
    def _port_range(cls, env: dict[str, str]) -> dict[str, str]:
        """``MELON_PORT_RANGE``: the ports the job's AM and tasks listen on (a firewall's open range), refused here
        rather than by an AM or executor on the cluster."""
        if ports.VAR in env:
            try:
                ports.parse_range(env[ports.VAR])
            except ValueError as exc:
                raise _FieldError(ports.VAR, str(exc)) from None
        return env

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, value: str) -> str:
        if not value or not value.strip():
            raise ValueError("must not be empty")
        try:  # the executor splits it the same way (runtime/executor.py)
            argv = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot be split into arguments as a shell would ({exc}): {value!r}") from None
        if not argv:
            raise ValueError(f"holds no command, only quoting or comments: {value!r}")
        return value.strip()

    @field_validator("tensorboard", mode="before")
    @classmethod
    def _tensorboard(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, (bool, str)):
            raise ValueError(f"expected true, false or a log dir (a string), got {value!r}")
        return value

    @field_validator("queue")
    @classmethod
    def _queue(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str]) -> list[str]:
        for i, tag in enumerate(tags):
            if not tag.strip() or not tag.isascii() or len(tag) > MAX_TAG_LENGTH:
                raise _FieldError(
                    str(i), f"YARN takes non-empty ASCII tags of at most {MAX_TAG_LENGTH} characters, got {tag!r}"
                )
            # the identity tag is the provider's alone (reattach finds a task's app by it); YARN lower-cases tags
            if tag.strip().lower().startswith(IDENTITY_TAG_PREFIX):
                raise _FieldError(
                    str(i),
                    f"the {IDENTITY_TAG_PREFIX!r} prefix is reserved for the tag the provider adds itself, got {tag!r}",
                )
        return tags

    @field_validator("outputs")
    @classmethod
    def _outputs(cls, outputs: dict[str, str]) -> dict[str, str]:
        for name in outputs:  # each becomes the environment variable MELON_OUTPUT_<NAME>
            if not re.fullmatch(r"[A-Za-z0-9_]+", name):
                raise _FieldError(
                    name, f"an output's name becomes MELON_OUTPUT_<NAME>: letters, digits and '_' only, got {name!r}"
                )
            if not outputs[name].strip():
                raise _FieldError(name, "an output needs a path")
        return outputs

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

    @field_validator("roles")
    @classmethod
    def _roles(cls, roles: dict[str, RoleSpec]) -> dict[str, RoleSpec]:
        if not roles:
            raise ValueError("at least one role is needed")
        for role in roles:
            if not _NAME.fullmatch(role):
                raise ValueError(f"role name {role!r} must start with a letter (letters, digits, '_', '.', '-')")
        return roles

    @model_validator(mode="after")
    def _framework_rules(self) -> JobSpec:
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
        self._launcher_rules()
        for name, role in roles.items():
            if role.untracked is None:
                role.untracked = name == "ps"
        self._elastic_rules()
        for name, role in roles.items():
            if role.optional and not role.untracked:
                raise ValueError(
                    f"roles.{name}.optional: only an untracked role can be optional (the job waits for "
                    f"every tracked task); add untracked: true or drop optional"
                )
        if all(role.untracked for role in roles.values()):
            raise ValueError("roles: at least one role must be tracked (untracked: false)")
        self._tensorboard_rules()
        if self.output_role is not None and self.output_role not in roles:
            raise ValueError(f"output_role: {self.output_role!r} is not a role of the job ({', '.join(roles)})")
        # every localized file gets one name in the container: YARN keeps only one resource per name
        env = self.environment  # an archive always has its python (EnvironmentSpec)
        seen = {env.python.split("/", 1)[0]: "environment.python"} if env.archive and env.python else {}
        for i, item in enumerate(self.inputs):
            link = item.link_name
            if link in seen:
                raise _FieldError(
                    f"inputs.{i}.name",
                    f"{link!r} is already the container name of {seen[link]}; give each input its own name",
                )
            seen[link] = f"inputs.{i}"
        return self

    def _elastic_rules(self) -> None:
        """Elastic bounds only where the framework re-forms its group with the members left: PyTorch (torchrun's
        elastic rendezvous) and generic jobs (the job's own membership, ``MELON_CLUSTER``). TensorFlow's
        MultiWorkerMirroredStrategy needs its whole cluster back, so a TF role cannot be elastic."""
        for name, role in self.roles.items():
            if not role.elastic:
                continue
            if self.framework == "tensorflow":
                raise _FieldError(
                    f"roles.{name}.min_instances",
                    "tensorflow cannot go on with fewer workers (MultiWorkerMirroredStrategy needs the "
                    "whole cluster back): elastic roles are for pytorch and generic jobs",
                )
            if role.untracked:
                raise _FieldError(f"roles.{name}.min_instances", "an untracked role cannot be elastic")
            if self.framework == "pytorch" and self.launcher != "torchrun":
                raise _FieldError(
                    f"roles.{name}.min_instances",
                    "an elastic pytorch role needs launcher: torchrun (its rendezvous re-forms with the "
                    "members left; the env:// rendezvous of launcher: python has a fixed WORLD_SIZE)",
                )

    def _launcher_rules(self) -> None:
        if self.launcher == "torchrun" and self.framework != "pytorch":
            raise _FieldError("launcher", f"torchrun launches pytorch jobs; this job's framework is {self.framework!r}")
        if self.nproc_per_node == 1:
            return
        if self.launcher != "torchrun":
            raise _FieldError("nproc_per_node", "several processes per container need launcher: torchrun")
        for name, role in self.roles.items():
            if role.gpu_memory is not None:
                raise _FieldError(
                    "nproc_per_node",
                    f"roles.{name} shares a GPU (gpu_memory), whose cap is one "
                    "process's: give it whole GPUs (gpus) or one process per container",
                )
            if role.gpus is not None and role.gpus < self.nproc_per_node:
                raise _FieldError(
                    "nproc_per_node",
                    f"{self.nproc_per_node} processes per container, but roles.{name} "
                    f"has {role.gpus} GPU(s): one process per GPU",
                )

    def _tensorboard_rules(self) -> None:
        if isinstance(self.tensorboard, str):
            if not self.tensorboard.strip():
                raise _FieldError("tensorboard", "give true or a log dir, not an empty string")
            if self.tensorboard_log_dir is not None and self.tensorboard_log_dir != self.tensorboard:
                raise _FieldError(
                    "tensorboard",
                    "names a log dir and so does tensorboard_log_dir: give it once "
                    "(tensorboard: <dir>, or tensorboard: true with "
                    "tensorboard_log_dir: <dir>)",
                )

    # ---- derived -------------------------------------------------------------------------------------------
    @property
    def tensorboard_dir(self) -> Optional[str]:
        """The log dir TensorBoard watches and the job writes to: ``tensorboard`` (a string), else
        ``tensorboard_log_dir``; None: a local folder chosen by the executor (or no TensorBoard)."""
        return self.tensorboard if isinstance(self.tensorboard, str) else self.tensorboard_log_dir

    @property
    def tensorboard_role(self) -> Optional[str]:
        """The role whose task 0 runs TensorBoard (when ``tensorboard`` asks for it): the success role (chief,
        master), else the first tracked role."""
        if not self.tensorboard:
            return None
        return self.success_role or next(name for name, role in self.roles.items() if not role.untracked)

    @property
    def publishing_role(self) -> str:
        """The role whose task 0 publishes the outputs: ``output_role``, else the success role, else the first
        tracked role."""
        return (
            self.output_role
            or self.success_role
            or next(name for name, role in self.roles.items() if not role.untracked)
        )

    @property
    def success_role(self) -> Optional[str]:
        """The role whose task 0 ends the job on success: chief (TF), master (PyTorch); else all tracked tasks."""
        for role in ("chief", "master"):
            if role in self.roles:
                return role
        return None

    @property
    def rendezvous_beside_am(self) -> bool:
        """An elastic torchrun job: its agents' rendezvous store is served beside the AM (the plan's
        ``rendezvous_store``), so that no member's loss takes it along."""
        return self.launcher == "torchrun" and any(role.elastic for role in self.roles.values())

    @property
    def gang_roles(self) -> tuple[str, ...]:
        """The roles restarted whole when one of their tasks is lost (the plan's ``restart_gang``): a TensorFlow
        job's ``chief`` and ``worker`` when it has no ``ps``. ``MultiWorkerMirroredStrategy`` builds its collectives
        once per process for a fixed cluster, so every member needs a new process with the live addresses;
        ``ParameterServerStrategy``'s chief goes on without a lost worker, which is restarted alone."""
        if self.framework != "tensorflow" or "ps" in self.roles:
            return ()
        return tuple(name for name in ("chief", "worker") if name in self.roles)

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

        text: str = yaml.safe_dump(self.to_dict(), sort_keys=True)
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, base_dir: Union[str, Path, None] = None) -> "JobSpec":
        if not isinstance(data, dict):
            raise JobSpecError(f"job: expected a mapping, got {type(data).__name__}")
        try:
            return cls.model_validate(data, context={"base_dir": str(base_dir) if base_dir else None})
        except ValidationError as exc:
            raise JobSpecError(_format_errors(exc)) from None

    @classmethod
    def from_json(cls, text: str, *, base_dir: Union[str, Path, None] = None) -> "JobSpec":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JobSpecError(f"job: not valid JSON: {exc}") from None
        return cls.from_dict(data, base_dir=base_dir)

    @classmethod
    def from_yaml(cls, text: str, *, base_dir: Union[str, Path, None] = None) -> "JobSpec":
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise JobSpecError(f"job: not valid YAML: {exc}") from None
        return cls.from_dict(data, base_dir=base_dir)

    @classmethod
    def load(
        cls, job: Union["JobSpec", dict[str, Any], str, Path], *, base_dir: Union[str, Path, None] = None
    ) -> "JobSpec":
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
            if text.lstrip().startswith("{"):
                # JSON text (e.g. a template rendered with tojson): read as JSON, since YAML decodes a \uD83D\uDE00
                # escape pair as two lone surrogates instead of one character
                try:
                    data = json.loads(text)
                except ValueError:
                    pass  # a YAML flow mapping
                else:
                    return cls.from_dict(data, base_dir=base_dir)
            return cls.from_yaml(text, base_dir=base_dir)
        raise JobSpecError(f"job: expected a JobSpec, dict or YAML/JSON path, got {type(job).__name__}")


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        # a key given by the user (env, roles, outputs) is quoted when it would break the one-line message
        parts = list(err["loc"])
        field = getattr((err.get("ctx") or {}).get("error"), "field", None)
        if field is not None:
            parts.append(field)
        loc = ".".join(str(p) if str(p) and str(p).isprintable() else repr(p) for p in parts)
        loc = loc or "job"
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        given = err.get("input")
        if err["type"] not in ("value_error",) and not isinstance(given, (dict, list)):
            msg = f"{msg} (got {given!r})"
        lines.append(f"{loc}: {msg}")
    return "invalid job spec: " + "; ".join(lines)
