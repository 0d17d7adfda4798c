"""MelonProfileOperator: measure (or, without a GPU, estimate) a job's expected GPU memory before it trains.

It takes the same ``job`` as :class:`~airflow_provider_melon.operators.train.MelonTrainOperator` and runs one task
of one role of it, wrapped by ``gpu.profiler``, as its own YARN application on whole GPUs. Submission, reattach,
pre-flight, waiting, kill and timeouts are the train operator's, since this class subclasses it. Its result goes
to XCom as ``expected_gpu_memory`` (a size string the job spec accepts), ``packing_pays`` and ``profile``.
``docs/internals.md``, "The profile operator", says how the task is built and what the result holds.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from airflow_provider_melon.gpu.profiler import HEADROOM_MB, SAFETY_MARGIN
from airflow_provider_melon.operators.train import MelonTrainOperator
from airflow_provider_melon.spec import JobSpec, JobSpecError
from airflow_provider_melon.version_compat import AirflowException

if TYPE_CHECKING:
    from airflow_provider_melon.version_compat import Context

#: Roles a one-task job of each framework can consist of (else the profile runs as ``generic``).
_ALONE = {"tensorflow": ("chief", "worker"), "pytorch": ("master", "worker")}
PROFILER_MODULE = "airflow_provider_melon.gpu.profiler"


class MelonProfileOperator(MelonTrainOperator):
    """Profile one task of ``job`` on YARN and push its expected GPU memory (see the module docstring).

    :param job: the training job, as for MelonTrainOperator (dict, YAML/JSON path or text, JobSpec). Templated.
    :param steps: training steps to profile (``MELON_PROFILE_STEPS``), at least 1. Templated.
    :param role: the role to profile (default: the success role -- chief/master -- else the first). Templated.
    :param gpu_memory_mb: GPU size for ``packing_pays`` (default: the largest GPU of the RM's running nodes,
        ``melon.io/gpu-memory / yarn.io/gpu``; else NVML's, else the profiler's 16 GiB).
    :param webhdfs_url: WebHDFS base URL the *container* writes the profile through (default: the
        ``webhdfs_conn_id`` client's URL, which must then be reachable from the cluster's nodes).
    :param profile_timeout: seconds the profiler lets the command run before killing it (default: none).

    Everything else (``yarn_conn_id``, ``webhdfs_conn_id``, ``deferrable``, ``poll_interval``, ``timeout``,
    ``reattach``, ``preflight``, ...) is MelonTrainOperator's.
    """

    template_fields: Sequence[str] = ("job", "gpu_memory", "steps", "role")
    ui_color = "#fff9c4"

    def __init__(
        self,
        *,
        job: Union[dict, str, JobSpec],
        steps: Union[int, str] = 20,
        role: Optional[str] = None,
        gpu_memory_mb: Optional[int] = None,
        webhdfs_url: Optional[str] = None,
        profile_timeout: Optional[float] = None,
        **kwargs: Any,
    ) -> None:
        explicit_outlets = kwargs.get("outlets")
        super().__init__(job=job, **kwargs)
        if not explicit_outlets:  # the training job's outputs are not this task's
            self.outlets = []
        if isinstance(steps, int) and steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        self.steps = steps
        self.role = role
        self.gpu_memory_mb = gpu_memory_mb
        self.webhdfs_url = webhdfs_url
        self.profile_timeout = profile_timeout
        self._profile_path: Optional[str] = None
        self._gpu_size_mb: Optional[int] = None

    # ---- the profile job ----------------------------------------------------------------------------------
    def profile_path_for(self, context: "Context") -> str:
        dag_id, task_id, run_id, map_index = self._ti_identity(context)
        digest = hashlib.sha256(f"{dag_id}\n{task_id}\n{run_id}".encode()).hexdigest()[:16]
        leaf = digest if map_index < 0 else f"{digest}-{map_index}"
        return f"{self.hook.staging_dir}/profiles/{dag_id}/{task_id}/{leaf}/profile.json"

    def _steps(self) -> int:
        try:
            steps = int(str(self.steps).strip())
        except ValueError:
            raise JobSpecError(f"steps: expected a whole number, got {self.steps!r}") from None
        if steps < 1:
            raise JobSpecError(f"steps: must be >= 1, got {steps}")
        return steps

    def choose_role(self, spec: JobSpec) -> str:
        role = (self.role or "").strip() if isinstance(self.role, str) else self.role
        if role:
            if role not in spec.roles:
                raise JobSpecError(f"role: {role!r} is not a role of the job ({', '.join(spec.roles)})")
            return role
        return spec.success_role or next(iter(spec.roles))

    def _container_webhdfs_url(self) -> str:
        url = self.webhdfs_url or getattr(self.hook.hdfs, "url", None)
        if not url:
            raise AirflowException("cannot tell the profile task where WebHDFS is: pass webhdfs_url=")
        return str(url)

    def profile_spec(
        self,
        spec: JobSpec,
        path: str,
        gpu_size_mb: Optional[int] = None,
        webhdfs_url: Optional[str] = None,
        user: Optional[str] = None,
    ) -> JobSpec:
        """The one-task job that profiles ``spec`` and writes the profile to ``path`` (module docstring)."""
        steps = self._steps()
        name = self.choose_role(spec)
        role = spec.roles[name].model_dump(mode="json", exclude_none=True)
        gpus = spec.roles[name].gpus or (1 if spec.roles[name].gpu_memory is not None else 0)
        role.pop("gpu_memory", None)
        role.pop("gpus", None)
        if gpus:
            role["gpus"] = gpus
        role.update(instances=1, restarts=0, untracked=False)
        framework = spec.framework if name in _ALONE.get(spec.framework, ()) else "generic"
        argv = ["python", "-m", PROFILER_MODULE, "--steps", str(steps), "--output", path]
        if webhdfs_url:
            argv += ["--webhdfs", webhdfs_url]
        if user:
            argv += ["--hdfs-user", user]
        if gpu_size_mb:
            argv += ["--gpu-memory-mb", str(int(gpu_size_mb))]
        if self.profile_timeout:
            argv += ["--timeout", str(float(self.profile_timeout))]
        data = spec.to_dict()
        data.pop("tensorboard_log_dir", None)
        data.pop("tensorboard", None)
        data.update(
            name=f"{spec.name}-profile",
            framework=framework,
            roles={name: role},
            outputs={},
            max_attempts=1,
            entrypoint=shlex.join(argv) + " -- " + spec.entrypoint,
            env=dict(spec.env, MELON_PROFILE_STEPS=str(steps)),
        )
        return JobSpec.from_dict(data)

    def load_spec(self) -> JobSpec:
        """The profile job built from the (validated) training job."""
        train = super().load_spec()
        if self._profile_path is None:
            raise AirflowException("the profile path is set from the task instance: call execute()")
        return self.profile_spec(
            train, self._profile_path, self._gpu_size_mb, self._container_webhdfs_url(), self.hook.user
        )

    def _largest_gpu_mb(self) -> Optional[int]:
        """The GPU size ``packing_pays`` is judged against: ``gpu_memory_mb``, else the cluster's largest GPU (None
        when the RM cannot say: the profiler has its own default)."""
        return int(self.gpu_memory_mb) if self.gpu_memory_mb else self.hook.largest_gpu_mb()

    # ---- execute ------------------------------------------------------------------------------------------
    def execute(self, context: "Context") -> Any:
        self._steps()  # a bad templated value fails before anything else
        self._profile_path = self.profile_path_for(context)
        self._gpu_size_mb = self._largest_gpu_mb()
        return super().execute(context)

    def execute_complete(
        self,
        context: "Context",
        event: dict[str, Any],
        outputs: Optional[dict] = None,
        roles: Optional[dict] = None,
        fs_default_fs: Optional[str] = None,
    ) -> Any:
        self._profile_path = self._profile_path or self.profile_path_for(context)
        return super().execute_complete(context, event, outputs=outputs, roles=roles, fs_default_fs=fs_default_fs)

    def _complete(self, context: "Context", event: dict[str, Any], **kw: Any) -> dict[str, Any]:
        result = super()._complete(context, event, **kw)  # raises unless the profile application SUCCEEDED
        app_id = result["app_id"]
        profile = self.read_profile(app_id)
        self.publish(context, profile)
        self._results[app_id] = profile  # what get_job_result (ResumableJobMixin) returns
        return profile

    # ---- the result ---------------------------------------------------------------------------------------
    def read_profile(self, app_id: Optional[str]) -> dict[str, Any]:
        path = self._profile_path
        try:
            with self.hook.hdfs.read(path) as reader:
                raw = reader.read()
        except Exception as exc:  # noqa: BLE001 - hdfs raises HdfsError for a missing file
            raise AirflowException(
                f"profile application {app_id} succeeded but its profile {path} could not be read: {exc}"
            ) from exc
        try:
            profile = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
        except ValueError as exc:
            raise AirflowException(f"profile {path} is not JSON: {exc}") from exc
        if not isinstance(profile, dict) or "method" not in profile:
            raise AirflowException(f"profile {path} has no 'method': {str(profile)[:300]}")
        written_by = profile.get("app_id")
        if app_id and written_by and written_by != app_id:
            raise AirflowException(
                f"profile {path} was written by {written_by}, not by {app_id} (a stale "
                "document; the profiling run did not write its own)"
            )
        profile["path"] = path
        profile.setdefault("app_id", app_id)
        return profile

    def publish(self, context: "Context", profile: dict[str, Any]) -> None:
        expected = profile.get("expected_mb")
        expected_size = f"{int(expected)}MiB" if expected else None
        profile["expected_gpu_memory"] = expected_size
        method = profile.get("method")
        if method == "nvml":
            util = profile.get("mean_sm_util")
            self.log.info(
                "Profile method: nvml (measured). Peak %s MiB, mean SM utilisation %s, step time %s s",
                profile.get("peak_mb"),
                "unknown" if util is None else f"{util:.2f}",
                _fmt(profile.get("step_time_s")),
            )
        elif method == "analytic":
            self.log.info(
                "Profile method: analytic (%s). Memory model peak %s MiB, step time %s s",
                profile.get("reason") or "estimated",
                profile.get("peak_mb"),
                _fmt(profile.get("step_time_s")),
            )
        else:
            self.log.warning(
                "Profile method: %s (%s): no GPU memory estimate; the training job keeps its declared gpu_memory",
                method,
                profile.get("reason") or "no reason given",
            )
        if profile.get("returncode"):
            self.log.warning("The profiled command exited %s", profile["returncode"])
        self.log.info(
            "expected_gpu_memory=%s (peak + %d%% + %d MiB), packing_pays=%s; profile at %s",
            expected_size,
            round(SAFETY_MARGIN * 100),
            HEADROOM_MB,
            profile.get("packing_pays"),
            profile.get("path"),
        )
        ti = context["ti"]
        ti.xcom_push(key="expected_gpu_memory", value=expected_size)
        ti.xcom_push(key="packing_pays", value=profile.get("packing_pays"))
        ti.xcom_push(key="profile", value=profile)


def _fmt(value: Any) -> str:
    return "unknown" if value is None else f"{float(value):.3f}"


__all__ = ["MelonProfileOperator"]
