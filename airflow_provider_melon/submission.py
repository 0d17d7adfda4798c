"""Pure builders: a JobSpec plus staged files → the AM plan (``melon-plan.json``) and the RM submission JSON.

No I/O here, so every field YARN sees can be tested without a cluster. The shapes follow
docs/protocol.md (plan) and the RM REST ``ApplicationSubmissionContext`` (see field-notes.md).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_melon import rm
from airflow_provider_melon.gpu import policy
from airflow_provider_melon.hadoop.app_state import LIVE_STATES
from airflow_provider_melon.runtime import framework as _framework
from airflow_provider_melon.runtime import ports
from airflow_provider_melon.runtime.tokens import AM_SECRET_ALIAS
from airflow_provider_melon.spec import (
    GPU_MODEL_MAX_LENGTH,
    GPU_MODEL_PATTERN,
    IDENTITY_TAG_PREFIX,
    RESERVED_LINK_PREFIX,
    JobSpec,
    RoleSpec,
)

AM_CLASS = "org.melon.yarn.MelonApplicationMaster"
AM_JAR = "melon-appmaster.jar"
PLAN_FILE = "melon-plan.json"
#: beside the plan in HDFS: the AM's final ``/status``, written before it unregisters (``plan["status_file"]``)
STATUS_FILE = "melon-status.json"
CODE_LINK = "code"
#: link name prefix of the code folder's big files, localized one by one beside the code archive; the executor
#: puts each at its path in the folder (``MELON_CODE_FILES_B64``: link name → path)
CODE_FILE_LINK = RESERVED_LINK_PREFIX
RUNTIME_LINK = "melon_runtime"
APPLICATION_TYPE = "MELON"
#: the application's VIEW_APP ACL in the AM's environment: who besides the owner and the YARN admins may read the
#: AM's pages through the RM web proxy (appmaster ViewAcl.java)
VIEW_ACL_ENV = "MELON_VIEW_ACL"
# YARN's default yarn.application.classpath, expanded by the NodeManager: what a real cluster's AM needs.
DEFAULT_AM_CLASSPATH = "<CPS>".join(
    [
        "{{HADOOP_CONF_DIR}}",
        "{{HADOOP_COMMON_HOME}}/share/hadoop/common/*",
        "{{HADOOP_COMMON_HOME}}/share/hadoop/common/lib/*",
        "{{HADOOP_HDFS_HOME}}/share/hadoop/hdfs/*",
        "{{HADOOP_HDFS_HOME}}/share/hadoop/hdfs/lib/*",
        "{{HADOOP_YARN_HOME}}/share/hadoop/yarn/*",
        "{{HADOOP_YARN_HOME}}/share/hadoop/yarn/lib/*",
    ]
)


_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What the NodeManager's launch script would read specially in a value (see yarn_shell_value): YARN's own
# tokens, split with an empty "" so YARN does not see them, and bash's specials inside double quotes.
_YARN_SPECIAL = r"(?P<split>\{(?=\{)|\}(?=\})|<(?=(?:CPS|LOG_DIR|ADD_OPENS)>))|(?P<escape>[\\\"`$])"
_YARN_LITERAL = re.compile(_YARN_SPECIAL)
# ... and, for values that may refer to variables, the references YARN documents, kept as they are.
_YARN_EXPANDING = re.compile(
    r"(?P<ref>\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\}|\{\{[A-Za-z_][A-Za-z0-9_]*\}\}"
    r"|<CPS>|<LOG_DIR>)|" + _YARN_SPECIAL
)


def _yarn_token(match: re.Match[str]) -> str:
    split: Optional[str] = match.group("split")
    if split:
        return split + '""'
    escape: Optional[str] = match.group("escape")
    if escape:
        return "\\" + escape
    ref: str = match.group("ref")  # only _YARN_EXPANDING has it, and then it matched
    return ref


def yarn_shell_value(value: str, *, expand: bool = False) -> str:
    """``value`` as it must be handed to YARN so that the container's shell yields ``value`` itself.

    The NodeManager (Hadoop 3.5 ``ContainerLaunch``) writes each environment value as ``export K="<value>"`` and
    the command as ``exec /bin/bash -c "<command>"`` into ``launch_container.sh``, unescaped, after replacing
    ``{{`` by ``$``, ``}}`` by nothing and ``<CPS>``/``<LOG_DIR>``/``<ADD_OPENS>`` by their values. So a ``"``,
    ``$(…)`` or a backtick in a value would end the quotes or run a command. Here backslash, ``"``, backtick
    and ``$`` are backslash-escaped (the escapes bash honours inside double quotes) and YARN's tokens are split
    by an empty ``""``, which bash drops. ``expand``: the variable references documented for job environment
    values stay live — ``$NAME``, ``${NAME}``, ``{{NAME}}``, ``<CPS>``, ``<LOG_DIR>`` — and nothing else.
    """
    if "\x00" in value:
        raise ValueError(f"a NUL byte cannot travel through YARN's launch script: {value!r}")
    return (_YARN_EXPANDING if expand else _YARN_LITERAL).sub(_yarn_token, value)


@dataclass(frozen=True)
class StagedFile:
    """A file in HDFS as YARN's localizer needs it: URI, exact length and modification time (ms)."""

    url: str
    size: int
    timestamp: int
    uploaded_bytes: int = 0

    def local_resource(self, type_: str = "FILE", visibility: str = "APPLICATION") -> dict[str, Any]:
        return {
            "resource": self.url,
            "type": type_,
            "visibility": visibility,
            "size": self.size,
            "timestamp": self.timestamp,
        }


def run_tag(run_id: str) -> str:
    """A short stable tag for an Airflow run id (YARN tags are ≤ 100 chars, lower-cased, ASCII)."""
    return "airflow-run:" + hashlib.sha256(run_id.encode()).hexdigest()[:16]


#: the deployment part of the identity where none is configured (the CLI, tests without Airflow)
DEFAULT_DEPLOYMENT = "default"


def identity_tag(deployment: str, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str:
    """The tag that names one task instance of one Airflow deployment: ``melon-id:`` + the SHA-256 (40 hex digits)
    of (deployment, dag, task, run, map index). Unlike the readable ``airflow-*`` tags, which YARN cuts at 100
    characters and lower-cases, two different task instances — long task-group ids that share a prefix, ids that
    differ only in case, the same DAG in a dev and a prod Airflow — never share it. Reattach and the UI look
    applications up by it; the readable tags are for people."""
    key = json.dumps([str(deployment), str(dag_id), str(task_id), str(run_id), int(map_index)])
    return IDENTITY_TAG_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:40]


def airflow_tags(
    dag_id: str, task_id: str, run_id: str, map_index: int = -1, *, deployment: str = DEFAULT_DEPLOYMENT
) -> list[str]:
    """The tags of one task instance's submission: ``melon``, the identity tag (:func:`identity_tag`, what a retry
    finds its app by) and the readable ``airflow-dag:``/``airflow-task:``/``airflow-run:``/``airflow-map:`` ones."""
    return [
        "melon",
        identity_tag(deployment, dag_id, task_id, run_id, map_index),
        f"airflow-dag:{dag_id}"[:100],
        f"airflow-task:{task_id}"[:100],
        run_tag(run_id),
        f"airflow-map:{map_index}",
    ]


def not_reattachable(app: dict[str, Any], user: Optional[str], killed: set[str]) -> Optional[str]:
    """Why an application found by a task instance's identity tag must not be reattached to, or None. Tags are
    not proof: any YARN user may put any tags on an application; ``killed``: those an earlier try killed."""
    if app.get("id") in killed:
        return "an earlier try of this task killed it"
    if app.get("applicationType") != APPLICATION_TYPE:
        return f"its type is {app.get('applicationType')!r}, not {APPLICATION_TYPE}"
    if user and app.get("user") != user:
        return f"it belongs to user {app.get('user')!r}, not {user!r}"
    return None


def reattach_choice(apps: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """Of a task instance's applications that may be reattached to (newest first): a live one, else the newest if it
    SUCCEEDED, else None (a failed or killed one means a fresh submit)."""
    live = [a for a in apps if a.get("state") in LIVE_STATES]
    if live:
        return live[0]
    if apps and apps[0].get("state") == "FINISHED" and apps[0].get("finalStatus") == "SUCCEEDED":
        return apps[0]
    return None


def deployment_id() -> str:
    """This Airflow deployment's part of the identity tag: ``[melon] deployment_id``, or (not set) a digest of the
    address its workers reach the API server at (``[core] execution_api_server_url``, else ``[api] base_url``) —
    the same for every worker and retry of one deployment, different for a dev and a prod Airflow that each set
    theirs. Not the metadata database's address: a task's worker process may not read it (Airflow 3's task
    runner replaces it with ``airflow-db-not-allowed:///``). Nothing set, or outside Airflow (the CLI):
    :data:`DEFAULT_DEPLOYMENT` — two such deployments on one cluster should set ``[melon] deployment_id``."""
    try:
        from airflow.configuration import conf
    except ImportError:
        return DEFAULT_DEPLOYMENT
    configured = (conf.get("melon", "deployment_id", fallback=None) or "").strip()
    if configured:
        return configured
    url = (
        (
            conf.get("core", "execution_api_server_url", fallback=None)
            or conf.get("api", "base_url", fallback=None)
            or ""
        )
        .strip()
        .rstrip("/")
    )
    if not url:
        return DEFAULT_DEPLOYMENT
    return "api-" + hashlib.sha256(url.encode()).hexdigest()[:16]


def container_python(spec: JobSpec, default_python: str) -> str:
    env = spec.environment
    if env.python:
        return env.python if not env.archive else "./" + env.python
    if env.docker_image:
        return "python3"
    return default_python


class _PlanPart(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _spec_bounds(model: type[BaseModel], name: str, *only: str) -> dict[str, Any]:
    """The bounds (``gt``, ``ge``, ``lt``, ``le``, or ``only`` these) of the job spec's field ``name``: they live in
    spec.py alone, and the plan's field (so the AM's schema check) takes them from there."""
    found: dict[str, Any] = {}
    for item in model.model_fields[name].metadata:
        for key in only or ("gt", "ge", "lt", "le"):
            if getattr(item, key, None) is not None:
                found[key] = getattr(item, key)
    return found


class PlanRole(_PlanPart):
    """One role of the plan: what the AM asks YARN for per task, and how often a task may be restarted."""

    name: str
    instances: int = Field(**_spec_bounds(RoleSpec, "instances"))
    memory_mb: int = Field(gt=0)
    vcores: int = Field(**_spec_bounds(RoleSpec, "vcores"))
    gpus: int = Field(ge=0, description="whole GPUs (yarn.io/gpu); 0 in MeLoN's shared mode")
    gpu_memory_mb: int = Field(ge=0, description="expected GPU memory per task (melon.io/gpu-memory); 0: none")
    restarts: int = Field(**_spec_bounds(RoleSpec, "restarts"))
    min_instances: int = Field(
        **_spec_bounds(RoleSpec, "min_instances"),
        description="the job starts once this many of the role's tasks hold containers "
        "and goes on while this many live (elastic); = instances: all needed",
    )
    tracked: bool = Field(description="false: the job does not wait for this role's tasks (e.g. parameter servers)")
    optional: bool = Field(
        description="true: a task of this (untracked) role failing past its restarts is "
        "only logged; false: it fails the job",
    )
    oom_growth: float = Field(
        **_spec_bounds(RoleSpec, "oom_growth"),
        description="after a task runs out of its expected GPU memory (exit 76, "
        "shared mode), its expected GPU memory is multiplied by this "
        "(at most the largest GPU seen) and the task asked for again",
    )
    oom_max_growths: int = Field(
        ge=0,
        **_spec_bounds(RoleSpec, "oom_max_growths", "le"),
        description="how many times a task's expected GPU memory may grow after an "
        "OOM (not counted against restarts); 0: an OOM fails the job",
    )
    gpu_context_mb: int = Field(
        ge=0,
        description="MiB each task of a shared role reserves on its GPU besides its "
        "expected memory (the CUDA context): asked of YARN and held on the ledger, while "
        "the process is capped at the expected memory; 0 without gpu_memory_mb",
    )
    gpu_slot_mb: int = Field(
        ge=0,
        description="MiB of the cluster's largest GPU each task of a shared role holds at least "
        "(gpu.policy.slot_mb: a fair share of the GPU): YARN is asked for the larger of this and "
        "the expected memory plus gpu_context_mb; 0: no slot (not shared, or the GPUs unknown)",
    )
    gpu_models: list[Annotated[str, Field(pattern=GPU_MODEL_PATTERN, max_length=GPU_MODEL_MAX_LENGTH)]] = Field(
        description="the GPU models a task accepts, as nodes publish them in their gpu-model node attribute: the AM "
        "asks for such a node with a placement constraint (a SchedulingRequest); empty: any node (a ResourceRequest)",
    )
    restart_gang: bool = Field(
        description="a lost task of this role ends and restarts every live task of every role so marked, which "
        "then register anew (TensorFlow's collective roles: MultiWorkerMirroredStrategy needs the whole cluster back)",
    )


class PlanResource(_PlanPart):
    """A file YARN localizes into every task container."""

    name: str
    url: str
    type: Literal["FILE", "ARCHIVE", "PATTERN"]
    visibility: Literal["PUBLIC", "PRIVATE", "APPLICATION"]
    size: int = Field(ge=0)
    timestamp: int = Field(ge=0)


class Plan(_PlanPart):
    """``melon-plan.json``: the contract between the Python side (:func:`build_plan` writes it) and the Java AM
    (``MelonApplicationMaster`` reads it), declared once. Its JSON Schema is ``am/plan.schema.json``
    (:func:`plan_schema_text`); ``tests/unit/test_plan_contract.py`` checks that the committed schema is this
    model's and that every field is written. The Java side: the AM reads the plan only through
    ``PlanFields`` constants, and its JUnit ``PlanSchemaTest`` checks each is in the schema."""

    app_name: str
    roles: list[PlanRole] = Field(min_length=1)
    success_role: Optional[str] = Field(description="its index-0 success ends the job; null: all tracked tasks")
    output_role: Optional[str] = Field(description="its task 0 publishes the outputs; null: no outputs")
    command: str = Field(description="the task command, already quoted for YARN's launch script")
    env: dict[str, str]
    local_resources: list[PlanResource]
    register_timeout_s: int = Field(**_spec_bounds(JobSpec, "register_timeout_s"))
    gang_hold_s: float = Field(
        **_spec_bounds(JobSpec, "gang_hold_s"), description="all-or-nothing gang formation hold; 0: off"
    )
    queue_timeout_s: int = Field(
        ge=0,
        **_spec_bounds(JobSpec, "queue_timeout_s", "le"),
        description="fail when the gang is not granted whole within this; 0: wait",
    )
    elastic_grace_s: float = Field(
        **_spec_bounds(JobSpec, "elastic_grace_s"),
        description="an elastic role below its min_instances for longer than this fails the job",
    )
    rendezvous_store: Optional[str] = Field(
        description="an elastic torchrun job: the shell line the AM runs in its container (with MELON_RDZV_HOST and "
        "MELON_RDZV_PORT) to serve the agents' rendezvous store; null: none (task 0's agent hosts it)",
    )
    stall_timeout_s: float = Field(
        **_spec_bounds(JobSpec, "stall_timeout_s"),
        description="no live task reporting a new step for longer than this (and than 5 times the longest stretch "
        "between steps seen) restarts the gang within its restarts, else fails the job; 0: off",
    )
    labels: dict[str, Any] = Field(description="echoed by the AM's /status (the submitting task instance)")
    staged: list[str] = Field(description="every staged file the job uses, the AM jar too (read by `melon prune`)")
    status_file: Optional[str] = Field(
        description="where the AM writes its final /status before it unregisters (read by the operator's final result)",
    )


#: the plan's JSON Schema, committed beside the AM jar (shipped in the wheel)
PLAN_SCHEMA_PATH = Path(__file__).resolve().parent / "am" / "plan.schema.json"


def plan_schema_text() -> str:
    """The JSON Schema of :class:`Plan`, as committed in :data:`PLAN_SCHEMA_PATH`
    (rewrite it with ``python -m airflow_provider_melon.submission --write-plan-schema``)."""
    return json.dumps(Plan.model_json_schema(), indent=2, sort_keys=True) + "\n"


def gpu_slot_mb(role: RoleSpec, largest_gpu_mb: Optional[int]) -> int:
    """What a task of ``role`` holds at least on a GPU of ``largest_gpu_mb`` when it shares one
    (:func:`policy.slot_mb`); 0 for a role that does not share, or when the cluster's GPUs are unknown."""
    if not role.gpu_memory_mb or role.gpus or not largest_gpu_mb:
        return 0
    return policy.slot_mb(role.gpu_memory_mb, largest_gpu_mb, large=role.large)


def _local_resource(name: str, staged: StagedFile, kind: str, visibility: str = "APPLICATION") -> dict[str, Any]:
    """One entry of the plan's ``local_resources``: a staged file YARN localizes as ``name``."""
    return dict(
        name=name, url=staged.url, type=kind, visibility=visibility, size=staged.size, timestamp=staged.timestamp
    )


def _plan_local_resources(
    spec: JobSpec,
    runtime: StagedFile,
    code: Optional[StagedFile],
    staged_code: dict[str, StagedFile],
    code_links: dict[str, str],
    inputs: dict[str, StagedFile],
    env_archive: Optional[StagedFile],
    env_archive_visibility: str,
) -> list[dict[str, Any]]:
    """The plan's ``local_resources``: the runtime, the code (an archive and/or its files linked as ``code_links``
    names), the inputs and the environment archive."""
    local = [_local_resource(RUNTIME_LINK, runtime, "ARCHIVE")]
    if code is not None:
        local.append(_local_resource(CODE_LINK, code, "ARCHIVE"))
    for link, rel in code_links.items():
        local.append(_local_resource(link, staged_code[rel], "FILE"))
    for item in spec.inputs:
        local.append(_local_resource(item.link_name, inputs[item.path], item.type, item.visibility))
    if spec.environment.archive:
        if env_archive is None:
            raise ValueError("environment.archive given but not staged")
        archive_python = spec.environment.python
        if archive_python is None:  # EnvironmentSpec refuses an archive without it
            raise ValueError("environment.archive given without environment.python")
        link = archive_python.split("/", 1)[0]
        local.append(_local_resource(link, env_archive, "ARCHIVE", env_archive_visibility))
    return local


def _task_env(
    spec: JobSpec,
    container_env: Optional[dict[str, str]],
    code_links: dict[str, str],
    webhdfs_url: Optional[str],
    hdfs_user: Optional[str],
) -> dict[str, str]:
    """The plan's ``env``, every task's environment: the connection's ``container_env`` and the job's ``env``
    (variables expanded by YARN's launch script), then the ``MELON_*`` settings the executor reads (literal)."""
    # YARN writes every value into launch_container.sh (see yarn_shell_value): the job's and the connection's
    # values may refer to variables ($NAME, {{NAME}}), ours are literal.
    user_env = dict(container_env or {})
    user_env.update(spec.env)
    for key in user_env:
        if not isinstance(key, str) or not _SHELL_NAME.fullmatch(key):
            raise ValueError(f"env: {key!r} is not an environment variable name")
    if ports.VAR in user_env and ports.VAR not in spec.env:  # the job's own is checked with its spec
        ports.parse_range(str(user_env[ports.VAR]), name=f"the yarn connection's container_env {ports.VAR}")
    # str(): a connection's container_env is JSON, where a value may be a number
    env = {key: yarn_shell_value(str(value), expand=True) for key, value in user_env.items()}
    ours = dict(
        # base64: the executor decodes it, so the entrypoint's quotes never meet a shell before its own shlex
        MELON_ENTRYPOINT_B64=base64.b64encode(spec.entrypoint.encode()).decode(),
        MELON_FRAMEWORK=spec.framework,
        MELON_JOB_NAME=spec.name,
        MELON_LARGE_ROLES=",".join(sorted(r for r, role in spec.roles.items() if role.large)),
        MELON_REGISTER_TIMEOUT_S=str(spec.register_timeout_s),  # the executor waits for its gang as long as the AM
        PYTHONUNBUFFERED="1",
    )
    if "PYTHONDONTWRITEBYTECODE" not in user_env:
        # the runtime and the code are localized once per node and shared by the containers there: a process writing
        # its bytecode into them raced YARN's listing of another container's files as it starts ("find: ... No such
        # file or directory": that container exited 1 before its executor ran). Bytecode already there is read.
        ours["PYTHONDONTWRITEBYTECODE"] = "1"
    if spec.launcher == "torchrun":  # the executor runs the entrypoint under torchrun (runtime/framework.py)
        ours["MELON_LAUNCHER"] = spec.launcher
        ours["MELON_NPROC_PER_NODE"] = str(spec.nproc_per_node)
        if any(role.elastic for role in spec.roles.values()):  # the rendezvous' bounds: every agent the same
            low = sum(role.min_instances or role.instances for role in spec.roles.values())
            high = sum(role.instances for role in spec.roles.values())
            ours["MELON_TORCHRUN_NNODES"] = f"{low}:{high}"
            # an agent re-forms its group after each failure, a lost member's among them: each other member once
            ours["MELON_TORCHRUN_MAX_RESTARTS"] = str(high)
    if spec.tensorboard_dir:
        ours["MELON_TENSORBOARD_LOG_DIR"] = spec.tensorboard_dir
    if spec.tensorboard:  # this task starts TensorBoard and registers it with the AM (runtime/tensorboard.py)
        ours["MELON_TENSORBOARD_TASK"] = f"{spec.tensorboard_role}:0"
    if spec.outputs:  # published by the output task (runtime/outputs.py)
        ours["MELON_OUTPUTS_B64"] = base64.b64encode(json.dumps(spec.outputs, sort_keys=True).encode()).decode()
        ours["MELON_OUTPUT_ROLE"] = spec.publishing_role
        ours["MELON_OUTPUT_OVERWRITE"] = "1" if spec.overwrite_outputs else "0"
        if webhdfs_url and "MELON_WEBHDFS_URL" not in user_env:
            ours["MELON_WEBHDFS_URL"] = webhdfs_url
        if hdfs_user and "MELON_HDFS_USER" not in user_env:
            ours["MELON_HDFS_USER"] = hdfs_user
    if code_links:
        ours["MELON_CODE_FILES_B64"] = base64.b64encode(json.dumps(code_links, sort_keys=True).encode()).decode()
    if spec.inputs:
        ours["MELON_INPUTS"] = ",".join(i.link_name for i in spec.inputs)
    if spec.environment.docker_image:  # read by YARN's docker runtime as is: the spec allows no special character
        ours["YARN_CONTAINER_RUNTIME_TYPE"] = "docker"
        ours["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"] = spec.environment.docker_image
    env.update({key: yarn_shell_value(value) for key, value in ours.items()})
    env["PYTHONPATH"] = f"./{RUNTIME_LINK}" + (f":{env['PYTHONPATH']}" if user_env.get("PYTHONPATH") else "")
    return env


def _plan_role(
    name: str, role: RoleSpec, gpu_context_mb: int, largest_gpu_mb: Optional[int], gang: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One role of the plan (:class:`PlanRole`); ``gang``: the job's :attr:`JobSpec.gang_roles`."""
    return {
        "name": name,
        "instances": role.instances,
        "memory_mb": role.memory_mb,
        "vcores": role.vcores,
        "gpus": role.gpus or 0,
        "gpu_memory_mb": role.gpu_memory_mb,
        "restarts": role.restarts,
        "min_instances": role.min_instances or role.instances,
        "tracked": not role.untracked,
        "optional": role.optional,
        "oom_growth": role.oom_growth,
        "oom_max_growths": role.oom_growths,
        "gpu_context_mb": (gpu_context_mb if role.gpu_context_mb is None else role.gpu_context_mb)
        if role.gpu_memory_mb
        else 0,
        "gpu_slot_mb": gpu_slot_mb(role, largest_gpu_mb),
        "gpu_models": list(role.gpu_models or ()),
        "restart_gang": name in gang,
    }


def build_plan(
    spec: JobSpec,
    *,
    code: Optional[StagedFile],
    runtime: StagedFile,
    inputs: dict[str, StagedFile],
    env_archive: Optional[StagedFile] = None,
    default_python: str = "python3",
    container_env: Optional[dict[str, str]] = None,
    labels: Optional[dict[str, Any]] = None,
    webhdfs_url: Optional[str] = None,
    hdfs_user: Optional[str] = None,
    code_files: Optional[dict[str, StagedFile]] = None,
    env_archive_visibility: str = "PUBLIC",
    staged_urls: Optional[list[str]] = None,
    status_file: Optional[str] = None,
    gpu_context_mb: int = 0,
    largest_gpu_mb: Optional[int] = None,
    role_largest_gpu_mb: Optional[dict[str, Optional[int]]] = None,
) -> dict[str, Any]:
    """The ApplicationMaster's plan (docs/protocol.md §2). ``labels`` (e.g. the Airflow task instance that
    submitted it) are echoed by the AM's ``/status``, for the UI. ``code_files``: the code folder's files
    staged on their own (path in the folder → staged file), see ``MelonHook.code_split_bytes``.
    ``env_archive_visibility``: PUBLIC (cached per node for every user) for a shared HDFS archive; APPLICATION
    for one in the private staging folder, which YARN refuses to localize PUBLIC ("not publicly accessible").
    ``gpu_context_mb``: what a shared role's task reserves on its GPU besides its expected memory when the role does
    not say (its ``gpu_context``: ``MelonHook`` sets it, learned or the framework's first-run figure).
    ``largest_gpu_mb``: the cluster's largest GPU, which a shared role's slot is sized against; None: unknown, no
    slot. ``role_largest_gpu_mb``: a role's own largest GPU instead (a role with ``gpu_models``: its models')."""
    staged_code = code_files or {}
    code_links = {f"{CODE_FILE_LINK}{i}": rel for i, rel in enumerate(sorted(staged_code))}
    local = _plan_local_resources(
        spec, runtime, code, staged_code, code_links, inputs, env_archive, env_archive_visibility
    )
    env = _task_env(spec, container_env, code_links, webhdfs_url, hdfs_user)
    python = container_python(spec, default_python)
    return Plan.model_validate(
        {
            "app_name": spec.name,
            "roles": [
                _plan_role(
                    name,
                    role,
                    gpu_context_mb,
                    (role_largest_gpu_mb or {}).get(name, largest_gpu_mb),
                    spec.gang_roles,
                )
                for name, role in spec.roles.items()
            ],
            "success_role": spec.success_role,
            # its task 0 publishes the outputs: the AM waits for its exit before it declares success
            "output_role": spec.publishing_role if spec.outputs else None,
            # shlex for the `bash -c` that runs it, yarn_shell_value for the double quotes YARN puts around it
            "command": yarn_shell_value(f"{shlex.quote(python)} -m airflow_provider_melon.runtime.executor"),
            "env": env,
            "local_resources": local,
            "register_timeout_s": spec.register_timeout_s,
            "gang_hold_s": spec.gang_hold_s,
            "queue_timeout_s": spec.queue_timeout_s or 0,
            "elastic_grace_s": spec.elastic_grace_s,
            "stall_timeout_s": spec.stall_timeout_s,
            "rendezvous_store": _framework.rendezvous_store_command(python) if spec.rendezvous_beside_am else None,
            "labels": dict(labels or {}),
            "staged": sorted(set(staged_urls or ())),
            "status_file": status_file,
        }
    ).model_dump(mode="json")


#: what the AM's container holds more for the rendezvous store beside it (torch imported: about 350 MiB resident)
RDZV_STORE_MEMORY_MB = 512


def build_submission(
    spec: JobSpec,
    *,
    app_id: str,
    am_jar: StagedFile,
    plan: StagedFile,
    secret: str,
    tags: list[str],
    am_classpath: Optional[str] = None,
    am_memory_mb: int = 512,
    am_java_opts: str = "-Xmx256m",
    acls: Optional[dict[str, str]] = None,
) -> dict[str, Any]:
    """The RM REST ``ApplicationSubmissionContext`` that starts our AM. ``acls``: application ACLs
    (``VIEW_APP``/``MODIFY_APP`` → a Hadoop ACL string, ``"users groups"``), see :func:`application_acls`; the
    ``VIEW_APP`` one also goes to the AM (``MELON_VIEW_ACL``), which checks it for the users the RM web proxy
    forwards (``proxy-user``) to its pages, as the RM checks it for its own (with ``yarn.acl.enable``)."""
    classpath = f"./{AM_JAR}<CPS>{am_classpath or DEFAULT_AM_CLASSPATH}"
    if spec.rendezvous_beside_am:  # the job's Python with torch beside the JVM (framework.RDZV_STORE_SCRIPT)
        am_memory_mb += RDZV_STORE_MEMORY_MB
    command = (
        f"{{{{JAVA_HOME}}}}/bin/java {am_java_opts} {AM_CLASS} {PLAN_FILE} "
        "1><LOG_DIR>/AppMaster.stdout 2><LOG_DIR>/AppMaster.stderr"
    )
    all_tags = sorted({t.lower() for t in ["melon", *spec.tags, *tags]})
    am_env = [{"key": "CLASSPATH", "value": classpath}]
    roles = spec.roles.values()
    if any(role.gpus or role.gpu_memory_mb for role in roles) and not any(role.gpu_models for role in roles):
        # the scheduler plug-in's allocator for this application's asks, where the RM has it (else YARN's default);
        # not for a job naming GPU models: the AM asks by placement constraints, which YARN's own allocator matches
        am_env.append({"key": rm.PLACEMENT_ENV, "value": rm.FIT_PLACEMENT})
    if acls and acls.get("VIEW_APP") is not None:  # for the AM's own pages (ViewAcl.java); none: owner and admins
        am_env.append({"key": VIEW_ACL_ENV, "value": yarn_shell_value(acls["VIEW_APP"])})
    return {
        "application-id": app_id,
        "application-name": spec.name,
        "application-type": APPLICATION_TYPE,
        "queue": spec.queue,
        # "auto" still unresolved (no run time in the task's history): 0, below every learned priority (the RM's
        # REST API would take a missing one for -1, not the queue's default)
        "priority": spec.priority if isinstance(spec.priority, int) else 0,
        "max-app-attempts": spec.max_attempts,
        "keep-containers-across-application-attempts": False,
        "unmanaged-AM": False,
        "application-tags": {"tag": all_tags},
        "resource": {"memory": am_memory_mb, "vCores": 1},
        "am-container-spec": {
            "local-resources": {
                "entry": [
                    {"key": AM_JAR, "value": am_jar.local_resource()},
                    {"key": PLAN_FILE, "value": plan.local_resource()},
                ]
            },
            "environment": {"entry": am_env},
            "commands": {"command": command},
            # the AM's secret as a credentials secret (the AM reads it from its UGI, hands it to its tasks in their
            # token files): no environment variable, so no launch script or NodeManager log ever shows it
            "credentials": {
                "secrets": {"entry": [{"key": AM_SECRET_ALIAS, "value": base64.b64encode(secret.encode()).decode()}]}
            },
            **(
                {"application-acls": {"entry": [{"key": k, "value": v} for k, v in sorted(acls.items())]}}
                if acls
                else {}
            ),
        },
    }


def application_acls(owner: str, admin_acl: Optional[str]) -> dict[str, str]:
    """``VIEW_APP`` and ``MODIFY_APP`` for the owner plus ``admin_acl`` (a Hadoop ACL: ``"user1,user2 group1,group2"``,
    ``" melon-admins"`` for a group only, ``"*"`` for everyone). The RM checks them only with ``yarn.acl.enable``;
    the owner and the YARN admins (``yarn.admin.acl``) always have access."""
    users, _, groups = (admin_acl or "").strip("\n").partition(" ")
    names = [owner] + [u for u in users.split(",") if u.strip() and u.strip() != owner]
    if users.strip() == "*":
        names = ["*"]
    acl = ",".join(n.strip() for n in names) + (
        " " + ",".join(g.strip() for g in groups.split(",") if g.strip()) if groups.strip() else ""
    )
    return {"VIEW_APP": acl, "MODIFY_APP": acl}


if __name__ == "__main__":  # python -m airflow_provider_melon.submission --write-plan-schema
    import sys

    if sys.argv[1:] != ["--write-plan-schema"]:
        sys.exit("usage: python -m airflow_provider_melon.submission --write-plan-schema")
    PLAN_SCHEMA_PATH.write_text(plan_schema_text())
    print(f"wrote {PLAN_SCHEMA_PATH}")
