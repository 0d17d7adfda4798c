"""Pure builders: a JobSpec plus staged files → the AM plan (``melon-plan.json``) and the RM submission JSON.

No I/O here, so every field YARN sees can be tested without a cluster. The shapes follow
docs/protocol.md (plan) and the RM REST ``ApplicationSubmissionContext`` (see field-notes.md).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from dataclasses import dataclass
from typing import Any, Optional

from airflow_provider_melon.spec import JobSpec

AM_CLASS = "org.melon.yarn.MelonApplicationMaster"
AM_JAR = "melon-appmaster.jar"
PLAN_FILE = "melon-plan.json"
CODE_LINK = "code"
RUNTIME_LINK = "melon_runtime"
APPLICATION_TYPE = "MELON"
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


@dataclass(frozen=True)
class StagedFile:
    """A file in HDFS as YARN's localizer needs it: URI, exact length and modification time (ms)."""

    url: str
    size: int
    timestamp: int
    uploaded_bytes: int = 0

    def local_resource(self, type_: str = "FILE", visibility: str = "APPLICATION") -> dict:
        return {"resource": self.url, "type": type_, "visibility": visibility, "size": self.size,
                "timestamp": self.timestamp}


def run_tag(run_id: str) -> str:
    """A short stable tag for an Airflow run id (YARN tags are ≤ 100 chars, lower-cased, ASCII)."""
    return "airflow-run:" + hashlib.sha256(run_id.encode()).hexdigest()[:16]


def airflow_tags(dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> list[str]:
    """The tags that identify one task instance's submission: a retry finds its app by them."""
    return ["melon", f"airflow-dag:{dag_id}"[:100], f"airflow-task:{task_id}"[:100], run_tag(run_id),
            f"airflow-map:{map_index}"]


def container_python(spec: JobSpec, default_python: str) -> str:
    env = spec.environment
    if env.python:
        return env.python if not env.archive else "./" + env.python
    if env.docker_image:
        return "python3"
    return default_python


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
) -> dict:
    """The ApplicationMaster's plan (docs/protocol.md §2). ``labels`` (e.g. the Airflow task instance that
    submitted it) are echoed by the AM's ``/status``, for the UI."""
    local = [dict(name=RUNTIME_LINK, url=runtime.url, type="ARCHIVE", visibility="APPLICATION",
                  size=runtime.size, timestamp=runtime.timestamp)]
    if code is not None:
        local.append(dict(name=CODE_LINK, url=code.url, type="ARCHIVE", visibility="APPLICATION",
                          size=code.size, timestamp=code.timestamp))
    for item in spec.inputs:
        staged = inputs[item.path]
        local.append(dict(name=item.link_name, url=staged.url, type=item.type, visibility=item.visibility,
                          size=staged.size, timestamp=staged.timestamp))
    if spec.environment.archive:
        if env_archive is None:
            raise ValueError("environment.archive given but not staged")
        link = spec.environment.python.split("/", 1)[0]
        local.append(dict(name=link, url=env_archive.url, type="ARCHIVE", visibility="PUBLIC",
                          size=env_archive.size, timestamp=env_archive.timestamp))
    env = dict(container_env or {})
    env.update(spec.env)
    env.update(
        PYTHONPATH=f"./{RUNTIME_LINK}" + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH") else ""),
        # base64: YARN writes env values unescaped into launch_container.sh, and entrypoints carry quotes.
        MELON_ENTRYPOINT_B64=base64.b64encode(spec.entrypoint.encode()).decode(),
        MELON_FRAMEWORK=spec.framework,
        MELON_JOB_NAME=spec.name,
        MELON_LARGE_ROLES=",".join(sorted(r for r, role in spec.roles.items() if role.large)),
        PYTHONUNBUFFERED="1",
    )
    if spec.tensorboard_log_dir:
        env["MELON_TENSORBOARD_LOG_DIR"] = spec.tensorboard_log_dir
    if spec.outputs:  # published by the output task (runtime/outputs.py)
        env["MELON_OUTPUTS_B64"] = base64.b64encode(json.dumps(spec.outputs, sort_keys=True).encode()).decode()
        env["MELON_OUTPUT_ROLE"] = spec.publishing_role
        env["MELON_OUTPUT_OVERWRITE"] = "1" if spec.overwrite_outputs else "0"
        if webhdfs_url:
            env.setdefault("MELON_WEBHDFS_URL", webhdfs_url)
        if hdfs_user:
            env.setdefault("MELON_HDFS_USER", hdfs_user)
    if spec.inputs:
        env["MELON_INPUTS"] = ",".join(i.link_name for i in spec.inputs)
    if spec.environment.docker_image:
        env["YARN_CONTAINER_RUNTIME_TYPE"] = "docker"
        env["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"] = spec.environment.docker_image
    python = container_python(spec, default_python)
    return {
        "app_name": spec.name,
        "roles": [
            {"name": name, "instances": role.instances, "memory_mb": role.memory_mb, "vcores": role.vcores,
             "gpus": role.gpus or 0, "gpu_memory_mb": role.gpu_memory_mb, "restarts": role.restarts,
             "tracked": not role.untracked}
            for name, role in spec.roles.items()
        ],
        "success_role": spec.success_role,
        "command": f"{shlex.quote(python)} -m airflow_provider_melon.runtime.executor",
        "env": env,
        "local_resources": local,
        "register_timeout_s": spec.register_timeout_s,
        "labels": dict(labels or {}),
    }


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
) -> dict:
    """The RM REST ``ApplicationSubmissionContext`` that starts our AM."""
    classpath = f"./{AM_JAR}<CPS>{am_classpath or DEFAULT_AM_CLASSPATH}"
    command = (f"{{{{JAVA_HOME}}}}/bin/java {am_java_opts} {AM_CLASS} {PLAN_FILE} "
               "1><LOG_DIR>/AppMaster.stdout 2><LOG_DIR>/AppMaster.stderr")
    all_tags = sorted({t.lower() for t in ["melon", *spec.tags, *tags]})
    return {
        "application-id": app_id,
        "application-name": spec.name,
        "application-type": APPLICATION_TYPE,
        "queue": spec.queue,
        "priority": spec.priority,
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
            "environment": {
                "entry": [
                    {"key": "CLASSPATH", "value": classpath},
                    {"key": "MELON_SECRET", "value": secret},
                ]
            },
            "commands": {"command": command},
        },
    }
