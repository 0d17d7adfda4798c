"""MelonTrainOperator: one Airflow task = one distributed training job on YARN (MeLoN).

``execute`` validates the job spec, reattaches to this task instance's application or runs pre-flight and
submits a new one, announces the application's links in XCom, waits for it (polling here or deferred to
:class:`~airflow_provider_melon.triggers.yarn.YarnApplicationTrigger`) with the job's own output in the task log,
and returns the job's outcome, per role and per task. ``on_kill`` kills the application unless
``cancel_on_kill=False``. ``docs/internals.md``, "The train operator", describes each step.
"""

from __future__ import annotations

import contextlib
import copy
import time
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import tenacity

from airflow_provider_melon.gpu import preflight as _preflight
from airflow_provider_melon.hadoop import memory_history
from airflow_provider_melon.hadoop.app_state import (
    LIVE_STATES,
    classify,
    ended_event,
    job_result,
    kill_waiting,
    killed_line,
    timeout_seconds,
)
from airflow_provider_melon.hadoop.hdfs_io import MelonHdfsError, hdfs_asset_uri
from airflow_provider_melon.hadoop.log_follower import DEFAULT_LINES_PER_POLL, DEFAULT_MAX_BYTES, LogFollower, chief_of
from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hadoop.watch import IO, Watch, WatchPolicy, drive, emit, watch
from airflow_provider_melon.hooks.melon import MelonHook
from airflow_provider_melon.links import (
    MelonAmStatusLink,
    TensorBoardLink,
    YarnApplicationLink,
    persist_job_links,
    yarn_application_url,
)
from airflow_provider_melon.operators import metrics
from airflow_provider_melon.spec import IDENTITY_TAG_PREFIX, JobSpec, JobSpecError, override_gpu_memory
from airflow_provider_melon.submission import (
    airflow_tags,
    deployment_id,
    not_reattachable,
    reattach_choice,
)
from airflow_provider_melon.triggers.yarn import FINAL_LOGS_KEY, MIN_POLL_INTERVAL, YarnApplicationTrigger
from airflow_provider_melon.version_compat import (
    AirflowException,
    AirflowFailException,
    Asset,
    BaseOperator,
    ResumableJobMixin,
    conf,
    with_runtime_outlets,
)

if TYPE_CHECKING:
    from airflow_provider_melon.hooks.yarn import YarnHook
    from airflow_provider_melon.version_compat import Context

_NO_OVERRIDE = (None, "", "None", "none", "null")
#: task state store key: the applications this task instance's tries killed (never reattached to, see _kill)
KILLED_KEY = "melon_killed_app_ids"


def output_assets(outputs: Optional[dict], fs_default_fs: Optional[str] = None) -> list:
    assets, seen = [], set()
    for value in (outputs or {}).values():
        uri = hdfs_asset_uri(value, fs_default_fs)
        if uri and uri not in seen:
            seen.add(uri)
            assets.append(Asset(uri))
    return assets


class MelonTrainOperator(ResumableJobMixin, BaseOperator):
    """Run a distributed training job on YARN and wait for it (see the module docstring).

    :param job: the job: dict, YAML/JSON path (relative to the DAG file's folder), YAML text or JobSpec.
        Templated.
    :param yarn_conn_id: connection of the ResourceManager (type ``yarn``).
    :param webhdfs_conn_id: WebHDFS connection used to stage code, runtime and AM jar.
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param poll_interval: seconds between RM polls, at least 5 (default ``[melon] poll_interval``, 10).
    :param timeout: seconds (or timedelta) this try may wait for the application; then it is killed
        (``cancel_on_kill``) and the task fails. Default: ``execution_timeout`` (if any).
    :param cancel_on_kill: kill the application when the task is killed or times out.
    :param stream_logs: log the AM's task states and last step/loss while the application runs.
    :param job_logs: stream the job's output (the chief's and failing tasks' stdout/stderr) into the task log
        (module docstring). Default: ``stream_logs``.
    :param job_log_lines_per_poll: most job log lines per poll (default ``[melon] job_log_lines_per_poll``, 200).
    :param job_log_max_bytes: most bytes of job output in the log of one task run (default
        ``[melon] job_log_max_bytes``, 5 MiB); then a line links the full logs.
    :param gpu_memory: override of ``gpu_memory`` for every role that declares one (e.g. a profiled figure
        from XCom). Templated; empty/``None`` means no override.
    :param reattach: look for this task instance's application by tags before submitting.
    :param preflight: check the job's GPU demand against the RM's nodes before submitting (module docstring).
    :param max_consecutive_failures: RM polls in a row that may fail (outage) before the task fails.
    :param log_every_n: heartbeat/progress log line every N polls.
    :param run_as: the user the job runs as (templated): the connection's user submits *for* them (``doAs`` on every
        RM and WebHDFS call, which the cluster must allow: ``hadoop.proxyuser.<connection user>.*``), the YARN
        application is theirs, staging lands in their HDFS home (0700). Default: the connection's user, or the
        task's ``owner`` when the yarn connection's extra says ``"run_as_owner": true``.
    :param yarn_queue: YARN queue (templated; ``queue`` is BaseOperator's executor queue); overrides the job's ``queue``. Checked before staging (it exists, and
        its maximum can hold the whole gang).
    :param admin_acl: who besides the owner may view and kill the application (a Hadoop ACL ``"users groups"``,
        e.g. ``" melon-admins"``); default the yarn connection's extra ``admin_acl`` / ``[melon] admin_acl``.
    :param durable: Airflow 3.3 ``ResumableJobMixin``: keep the application id in the task state store.
    :param memory_key: key of the GPU memory history ``gpu_memory: auto`` uses (templated; ``memory_history.task_key``).
    """

    template_fields: Sequence[str] = ("job", "gpu_memory", "run_as", "yarn_queue", "memory_key")
    template_fields_renderers = {"job": "json"}
    ui_color = "#c8e6c9"
    operator_extra_links = (YarnApplicationLink(), MelonAmStatusLink(), TensorBoardLink())
    external_id_key = "melon_yarn_app_id"

    def __init__(
        self,
        *,
        job: Union[dict, str, JobSpec],
        yarn_conn_id: str = "yarn_default",
        webhdfs_conn_id: str = "webhdfs_default",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: Optional[float] = None,
        timeout: Union[None, int, float, timedelta] = None,
        cancel_on_kill: bool = True,
        stream_logs: bool = True,
        gpu_memory: Union[None, int, str] = None,
        reattach: bool = True,
        preflight: bool = True,
        max_consecutive_failures: int = 5,
        log_every_n: int = 6,
        job_logs: Optional[bool] = None,
        job_log_lines_per_poll: Optional[int] = None,
        job_log_max_bytes: Optional[int] = None,
        run_as: Optional[str] = None,
        yarn_queue: Optional[str] = None,
        admin_acl: Optional[str] = None,
        memory_key: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.run_as = run_as
        self.yarn_queue = yarn_queue
        self.admin_acl, self.memory_key = admin_acl, memory_key
        if poll_interval is None:
            poll_interval = conf.getfloat("melon", "poll_interval", fallback=10.0)
        if float(poll_interval) < MIN_POLL_INTERVAL:
            raise ValueError(f"poll_interval must be at least {MIN_POLL_INTERVAL:g} seconds, got {poll_interval!r}")
        self.job = job
        self.yarn_conn_id = yarn_conn_id
        self.webhdfs_conn_id = webhdfs_conn_id
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self.timeout = timeout_seconds(timeout)
        self.cancel_on_kill = cancel_on_kill
        self.stream_logs = stream_logs
        self.gpu_memory = gpu_memory
        self.reattach = reattach
        self.preflight = preflight
        self.max_consecutive_failures = max(0, int(max_consecutive_failures))
        self.log_every_n = max(1, int(log_every_n))
        self.job_logs = bool(stream_logs if job_logs is None else job_logs)
        if job_log_lines_per_poll is None:
            job_log_lines_per_poll = conf.getint("melon", "job_log_lines_per_poll", fallback=DEFAULT_LINES_PER_POLL)
        if job_log_max_bytes is None:
            job_log_max_bytes = conf.getint("melon", "job_log_max_bytes", fallback=DEFAULT_MAX_BYTES)
        if int(job_log_lines_per_poll) < 1 or int(job_log_max_bytes) < 1:
            raise ValueError("job_log_lines_per_poll and job_log_max_bytes must be positive")
        self.job_log_lines_per_poll = int(job_log_lines_per_poll)
        self.job_log_max_bytes = int(job_log_max_bytes)
        self._submitted: set[str] = set()  # applications this process submitted (their logs start at byte 0)
        self._app_id: Optional[str] = None
        self._spec: Optional[JobSpec] = None
        self._deadline: Optional[float] = None
        self._announced: set[str] = set()
        self._results: dict[str, dict] = {}
        self._final_statuses: dict[str, Optional[dict]] = {}  # app id -> the AM's final /status (read once)
        self._state_store: Any = None  # context["task_state_store"] of this try (Airflow 3.3), for on_kill
        # Parse-time outlets for fully qualified hdfs:// outputs of a literal job, so the assets are known to
        # the scheduler before the first run; execute() completes them (fs.defaultFS-qualified paths).
        if not self.outlets and isinstance(job, (dict, JobSpec)):
            outputs = job.outputs if isinstance(job, JobSpec) else job.get("outputs")
            if isinstance(outputs, dict) and not any("{{" in str(v) for v in outputs.values()):
                try:
                    self.outlets = output_assets(outputs)
                except Exception:  # noqa: BLE001 - a bad URI is reported at execute time
                    pass

    # ---- hooks --------------------------------------------------------------------------------------------
    @cached_property
    def hook(self) -> MelonHook:
        return MelonHook(self.yarn_conn_id, self.webhdfs_conn_id, proxy_user=self.tenant(), admin_acl=self.admin_acl)

    def tenant(self) -> Optional[str]:
        """``run_as``, else the task's owner when the yarn connection says ``run_as_owner``, else None (the
        connection's own user)."""
        if self.run_as and str(self.run_as).strip():
            return str(self.run_as).strip()
        try:
            from airflow_provider_melon.hooks.yarn import BaseHook

            extra = dict(BaseHook.get_connection(self.yarn_conn_id).extra_dejson or {})
        except Exception:  # noqa: BLE001 - no connection: no impersonation
            return None
        if str(extra.get("run_as_owner", "")).lower() in ("true", "1", "yes") and self.owner:
            return str(self.owner)
        return None

    @property
    def yarn_hook(self) -> "YarnHook":
        return self.hook.yarn

    # ---- the spec -----------------------------------------------------------------------------------------
    def memory_key_for(self, context: "Context") -> str:  # this task instance's GPU memory history
        return memory_history.task_key(*self._ti_identity(context), memory_key=self.memory_key)

    def _base_dir(self) -> Optional[str]:
        dag = self.dag if self.has_dag() else None
        fileloc = getattr(dag, "fileloc", None)
        if fileloc and Path(fileloc).is_file():
            return str(Path(fileloc).resolve().parent)
        return None

    def load_spec(self) -> JobSpec:
        """The validated job (after the ``gpu_memory`` override). Raises :class:`JobSpecError`."""
        base_dir = self._base_dir()
        override = self.gpu_memory
        if isinstance(override, str):
            override = override.strip()
        queue = str(self.yarn_queue).strip() if self.yarn_queue else ""
        if override in _NO_OVERRIDE and not queue:
            return JobSpec.load(self.job, base_dir=base_dir)
        if isinstance(self.job, dict):
            data = copy.deepcopy(self.job)
        else:  # a path, YAML text or JobSpec: load it (resolves the code folder), override, validate again
            data = JobSpec.load(self.job, base_dir=base_dir).to_dict()
        if queue and isinstance(data, dict):  # the operator's queue wins over the job's
            data["queue"] = queue
        if override in _NO_OVERRIDE:
            return JobSpec.from_dict(data, base_dir=base_dir)
        shared = override_gpu_memory(data, override)
        if not shared:
            self.log.warning("gpu_memory=%r given, but no role of the job declares gpu_memory: ignored", override)
        spec = JobSpec.from_dict(data, base_dir=base_dir)
        if shared:
            self.log.info("gpu_memory of role(s) %s set to %s", ", ".join(shared), spec.roles[shared[0]].gpu_memory)
        return spec

    # ---- execute ------------------------------------------------------------------------------------------
    def execute(self, context: "Context") -> Any:
        self._spec = self.load_spec()  # validation: nothing has touched the network yet
        self._state_store = context.get("task_state_store")
        limit = self.timeout
        if self.execution_timeout is not None:
            exec_limit = self.execution_timeout.total_seconds()
            limit = exec_limit if limit is None else min(limit, exec_limit)
        self._deadline = time.time() + limit if limit else None
        if self.deferrable:
            return self._execute_deferrable(context)
        return self.execute_resumable(context)

    def _execute_deferrable(self, context: "Context") -> Any:
        app_id, app = self._attach_or_submit(context)
        store = context.get("task_state_store")
        if store is not None:
            try:
                store.set(self.external_id_key, app_id)
            except Exception as exc:  # noqa: BLE001 - durability is a bonus here; tags reattach anyway
                self.log.warning("Could not save %s in the task state store: %s", app_id, exc)
        extra = self._completion_kwargs()
        verdict = classify(app) if app else None
        if app and verdict is not None:  # already terminal (e.g. a succeeded app found by tags): no deferral
            return self._complete(context, ended_event(app_id, app, verdict), **extra)
        self.defer(
            trigger=YarnApplicationTrigger(
                app_id=app_id,
                yarn_conn_id=self.yarn_conn_id,
                poll_interval=self.poll_interval,
                deadline=self._deadline,
                cancel_on_kill=self.cancel_on_kill,
                max_consecutive_failures=self.max_consecutive_failures,
                log_every_n=self.log_every_n,
                last_state=(app or {}).get("state"),
                stream_progress=self.stream_logs,
                job_logs=self.job_logs,
                log_chief=self._log_chief(),
                log_lines_per_poll=self.job_log_lines_per_poll,
                log_max_bytes=self.job_log_max_bytes,
                log_state=self._initial_log_state(app_id),
                proxy_user=self.tenant(),
            ),
            method_name="execute_complete",
            kwargs=extra,
        )

    def execute_complete(
        self,
        context: "Context",
        event: dict[str, Any],
        outputs: Optional[dict] = None,
        roles: Optional[dict] = None,
        fs_default_fs: Optional[str] = None,
    ) -> Any:
        """Resumes the deferred task with the trigger's event."""
        self._state_store = context.get("task_state_store")
        if not isinstance(event, dict) or "status" not in event:
            raise AirflowException(f"Unexpected trigger event: {event!r}")
        if outputs is None or roles is None:
            # `airflow dags test` resumes with the event only (the defer kwargs are dropped): re-read the job.
            try:
                self._spec = self._spec or self.load_spec()
            except JobSpecError as exc:
                self.log.warning("Could not re-read the job for its outputs and roles: %s", exc)
            extra = self._completion_kwargs()
            outputs = extra["outputs"] if outputs is None else outputs
            roles = extra["roles"] if roles is None else roles
            fs_default_fs = fs_default_fs or extra["fs_default_fs"]
        self._final_job_logs(event, self._metric_tags(context))
        return self._complete(context, event, outputs=outputs, roles=roles, fs_default_fs=fs_default_fs)

    def _final_job_logs(self, event: dict[str, Any], tags: Optional[dict[str, str]] = None) -> None:
        """The rest of the job log the trigger left to the resumed task (``final_logs``; offsets in ``log_state``):
        into the task's own log, which no race of Airflow's log and event channels cuts short (triggers/yarn.py)."""
        state, app_id = event.get("log_state"), event.get("app_id")
        if not (event.get(FINAL_LOGS_KEY) and isinstance(state, dict) and app_id):
            return
        with contextlib.suppress(JobSpecError):  # the chief's role (unreadable: found from the AM's tasks)
            self._spec = self._spec or self.load_spec()
        try:
            app = self.yarn_hook.get_application(app_id)
        except Exception as exc:  # noqa: BLE001 - the lines stay in the NodeManagers' logs
            return self.log.warning(
                "The rest of the job log of %s was not read (%s): `melon logs %s`", app_id, exc, app_id
            )
        follower = self._log_follower(app_id, state)
        self._stream_job_logs(follower, self._final_status(app_id), app, final=True, tags=tags)

    # ---- reattach / submit --------------------------------------------------------------------------------
    def _ti_identity(self, context: "Context") -> tuple[str, str, str, int]:
        ti = context["ti"]
        dag_id = getattr(ti, "dag_id", None) or self.dag_id
        task_id = getattr(ti, "task_id", None) or self.task_id
        run_id = context.get("run_id") or getattr(ti, "run_id", None)
        map_index = getattr(ti, "map_index", None)
        map_index = -1 if map_index is None else int(map_index)
        return str(dag_id), str(task_id), str(run_id), map_index

    def tags_for(self, context: "Context") -> list[str]:
        return airflow_tags(*self._ti_identity(context), deployment=deployment_id())

    def submitting_user(self) -> Optional[str]:
        """The user this task's applications belong to in YARN: the tenant under ``run_as`` (doAs), else the
        connection's user (:attr:`MelonHook.user`)."""
        return self.hook.user

    def _killed_apps(self) -> set[str]:
        """Applications an earlier try of this task instance killed (the task state store, where there is one)."""
        store = self._state_store
        try:
            return set(store.get(KILLED_KEY) or []) if store is not None else set()
        except Exception as exc:  # noqa: BLE001 - unreadable: the RM's KILLED state still protects (see _kill)
            self.log.warning("Could not read %s from the task state store: %s", KILLED_KEY, exc)
            return set()

    def not_reattachable(self, app: dict, user: Optional[str], killed: set[str]) -> Optional[str]:
        """Why an application found by this task instance's identity tag must not be reattached to, or None
        (:func:`~airflow_provider_melon.submission.not_reattachable`)."""
        return not_reattachable(app, user, killed)

    def find_existing(self, tags: list[str]) -> Optional[dict]:
        """A live application of this task instance, or its newest one if that one SUCCEEDED; else None.

        Looked up by the identity tag alone (the readable ``airflow-*`` tags are cut and lower-cased, so other task
        instances may share them); only a MeLoN application of :meth:`submitting_user` that no earlier try of
        this task killed counts. Each one skipped is logged with the reason."""
        identity = [t for t in tags if t.startswith(IDENTITY_TAG_PREFIX)]
        user, killed = self.submitting_user(), self._killed_apps()
        apps = []
        for found in self.yarn_hook.find_applications(identity, match_all=True):
            why = self.not_reattachable(found, user, killed)
            if why:
                self.log.warning(
                    "Not reattaching to YARN application %s (%s/%s) found by tags: %s",
                    found.get("id"),
                    found.get("state"),
                    found.get("finalStatus"),
                    why,
                )
            else:
                apps.append(found)
        return reattach_choice(apps)

    def _attach_or_submit(self, context: "Context") -> tuple[str, Optional[dict]]:
        spec = self._spec or self.load_spec()
        tags = self.tags_for(context)
        if self.reattach:
            existing = self.find_existing(tags)
            if existing is not None:
                app_id = existing["id"]
                self.log.info(
                    "Reattaching to YARN application %s (%s/%s) found by tags; not submitting",
                    app_id,
                    existing.get("state"),
                    existing.get("finalStatus"),
                )
                metrics.reattached(self._metric_tags(context))
                self._announce(context, app_id, existing)
                return app_id, existing
        try:
            spec, notes = self.hook.resolve_learned(spec, self.memory_key_for(context))
        except ValueError as exc:
            raise AirflowFailException(f"{spec.name}: {exc}") from None
        self._spec = spec
        for line in (line for lines in notes.values() for line in lines):
            self.log.info("%s", line)
        self.run_preflight(spec)
        self.log.info(
            "Submitting %s (%d tasks in %s) with tags %s",
            spec.name,
            spec.task_count,
            ", ".join(spec.roles),
            ", ".join(tags),
        )
        dag_id, task_id, run_id, map_index = self._ti_identity(context)
        labels = {"dag_id": dag_id, "task_id": task_id, "run_id": run_id, "map_index": map_index}
        # the lines on the learned GPU memory ride along for the UI plugin's GPU view
        if notes.get("gpu_memory"):
            labels["gpu_memory"] = "; ".join(notes["gpu_memory"])
        result = self.hook.submit(spec, tags=tags, labels=labels)
        app_id = result["app_id"]
        self._app_id = app_id
        self._submitted.add(app_id)
        app = self._get_app_or_none(app_id)
        self._announce(context, app_id, app)
        return app_id, app

    def run_preflight(self, spec: JobSpec) -> Optional[_preflight.Report]:
        """Fail (AirflowFailException, with the numbers) when the job's GPU demand can never fit the cluster."""
        if not self.preflight:
            return None
        try:
            nodes = self.hook.nodes()
        except Exception as exc:  # noqa: BLE001 - advisory: the submission meets the RM anyway
            self.log.warning("Pre-flight skipped: could not read the cluster's nodes: %s", exc)
            return None
        report = _preflight.check(nodes, self.hook.with_contexts(spec)[0].roles)
        if not report.ok:
            raise AirflowFailException(f"{spec.name}: {report.message}")
        self.log.info("%s: %s", spec.name, report.message)
        return report

    def _get_app_or_none(self, app_id: str) -> Optional[dict]:
        try:
            return self.yarn_hook.get_application(app_id)
        except Exception as exc:  # noqa: BLE001 - the first poll will retry
            self.log.warning("Could not read %s right after submit: %s", app_id, exc)
            return None

    def _rm_url(self) -> Optional[str]:
        """The RM as people reach it (links): the connection's ``web_ui_url``, else the active RM."""
        try:
            return self.yarn_hook.web_ui_url
        except Exception:  # noqa: BLE001
            return None

    def _yarn_extra(self) -> dict:
        try:
            return dict(self.yarn_hook.get_connection(self.yarn_conn_id).extra_dejson or {})
        except Exception:  # noqa: BLE001 - no connection (explicit hooks): no extras
            return {}

    def _announce(self, context: "Context", app_id: str, app: Optional[dict]) -> None:
        """XCom: app id, tracking and AM status URLs, and each extra link's URL (once per app and try)."""
        self._app_id = app_id
        if app_id in self._announced:
            return
        self._announced.add(app_id)
        rm = self._rm_url()
        spec = self._spec
        tensorboard = spec is not None and (spec.tensorboard or spec.tensorboard_log_dir)
        persist_job_links(
            context,
            rm,
            app_id,
            app,
            tensorboard_link=bool(tensorboard),
            tensorboard=bool(tensorboard and spec and spec.tensorboard),
            tensorboard_dir=spec.tensorboard_dir if tensorboard and spec else None,
            tensorboard_template=self._yarn_extra().get("tensorboard_url") if tensorboard else None,
        )
        self.log.info("YARN application %s: %s", app_id, yarn_application_url(rm, app_id) if rm else app_id)

    def _link_am_status_to_app_page(self, context: "Context", app_id: str) -> None:
        """The application has ended, so its AM no longer serves the status page: the AM link now opens the
        application's page on the RM (at ``web_ui_url``), instead of the RM proxy's redirect, which names the
        RM by its own configured address (often not one a browser can reach: a gateway, a container network)."""
        rm = self._rm_url()
        if rm:
            MelonAmStatusLink.persist(context, yarn_application_url(rm, app_id))

    # ---- job logs -----------------------------------------------------------------------------------------
    def _log_chief(self) -> Optional[str]:
        """``role:0`` of the task that decides success (chief/master, else the first tracked role)."""
        spec = self._spec
        if spec is None:
            return None
        return chief_of((name, bool(role.untracked)) for name, role in spec.roles.items())

    def _initial_log_state(self, app_id: str) -> Optional[dict]:
        """None for an application this process submitted (its logs start at byte 0); else (reattached: what
        was shown before is unknown) the follower starts at each container's tail and says so."""
        return None if app_id in self._submitted else {"resume": True}

    def _log_follower(self, app_id: str, state: Optional[dict] = None) -> LogFollower:
        return LogFollower(
            self._log_chief(),
            lines_per_poll=self.job_log_lines_per_poll,
            max_bytes=self.job_log_max_bytes,
            state=state or self._initial_log_state(app_id),
        )

    def _stream_job_logs(
        self,
        follower: LogFollower,
        status: Optional[dict],
        app: Optional[dict],
        final: bool = False,
        tags: Optional[dict[str, str]] = None,
    ) -> None:
        for line in follower.poll(self.yarn_hook, status, app=app, final=final):  # never raises
            self.log.info("%s", line)
        metrics.log_lag(follower.take_lag(), tags)

    # ---- ResumableJobMixin (synchronous path) -------------------------------------------------------------
    def submit_job(self, context: "Context") -> str:
        app_id, _ = self._attach_or_submit(context)
        return app_id

    def get_job_status(self, external_id: Any, context: "Context") -> str:
        if str(external_id) in self._killed_apps():  # the RM may still show the kill in progress as RUNNING
            self.log.warning(
                "Not reconnecting to YARN application %s: an earlier try of this task killed it", external_id
            )
            return "KILLED/KILLED"
        try:
            app = self.yarn_hook.get_application(str(external_id))
        except YarnApiError as exc:
            if exc.status == 404:  # unknown to the RM (e.g. RM state lost): submit afresh
                return "UNKNOWN/UNKNOWN"
            raise
        return f"{app.get('state')}/{app.get('finalStatus')}"

    def is_job_active(self, status: str) -> bool:
        return status.split("/", 1)[0] in LIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return status == "FINISHED/SUCCEEDED"

    def poll_until_complete(self, external_id: Any, context: "Context") -> Any:
        """Watch the application until it ends (hadoop/watch.py); returns the result, raises on failure/timeout."""
        app_id = str(external_id)
        self._app_id = app_id
        policy = WatchPolicy(
            self.poll_interval,
            self._deadline,
            max_failures=self.max_consecutive_failures,
            log_every_n=self.log_every_n,
            stream_progress=self.stream_logs,
            follow_tasks=self.job_logs,
            job_logs=self.job_logs,
        )
        follower = self._log_follower(app_id)  # read only with job_logs
        tags = self._metric_tags(context)

        def logs(status: Optional[dict], app: dict, final: bool) -> None:
            # at the end the rest is read once: the final status names every container the tasks ran in
            status = self._final_status(app_id) if final else status
            self._stream_job_logs(follower, status, app, final=final, tags=tags)

        io: IO = {
            "now": lambda: time.time(),
            "get": lambda: self.yarn_hook.get_application(app_id),
            # once: the reconnect path of ResumableJobMixin (the XComs of the earlier try are gone)
            "seen": lambda app: self._announce(context, app_id, app),
            "status": lambda: self.hook.am_status(app_id),
            "logs": logs,
            "emit": lambda lines: emit(self.log, lines),
            "sleep": self._sleep,
        }
        return self._complete(context, drive(watch(Watch(app_id, policy)), io).event(), **self._completion_kwargs())

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def get_job_result(self, external_id: Any, context: "Context") -> Any:
        app_id = str(external_id)
        if app_id in self._results:
            return self._results[app_id]
        # ResumableJobMixin found this application already SUCCEEDED: no submit, no polling.
        app = self.yarn_hook.get_application(app_id)
        self._announce(context, app_id, app)
        return self._complete(context, ended_event(app_id, app), **self._completion_kwargs())

    # ---- completion ---------------------------------------------------------------------------------------
    def _completion_kwargs(self) -> dict[str, Any]:
        spec = self._spec
        return {
            "outputs": dict(spec.outputs) if spec else {},
            "roles": {name: role.instances for name, role in spec.roles.items()} if spec else {},
            "fs_default_fs": getattr(self.hook, "fs_default_fs", None),
        }

    def _complete(
        self,
        context: "Context",
        event: dict[str, Any],
        *,
        outputs: Optional[dict] = None,
        roles: Optional[dict] = None,
        fs_default_fs: Optional[str] = None,
    ) -> dict[str, Any]:
        status = event.get("status")
        app_id = event.get("app_id")
        self._app_id = app_id or self._app_id
        message = event.get("message") or f"YARN application {app_id}: {status}"
        final_json = self._ended(context, app_id) if app_id and status != "timeout" else None
        if status == "timeout":
            if self.cancel_on_kill and app_id:
                self._kill(app_id, "the task's timeout was reached")
                message += "; the application was killed"
            raise AirflowException(message)
        if status != "success" or event.get("final_status") != "SUCCEEDED":
            if status == "success":  # reached FINISHED but did not report SUCCEEDED
                message = f"YARN application {app_id} ended {event.get('state')}/{event.get('final_status')}" + (
                    f": {event.get('diagnostics')}" if event.get("diagnostics") else ""
                )
            raise AirflowException(message)

        self._check_outputs_exist(app_id, outputs)
        # Read after the application's final state: the AM's final /status (every task's last report, written to
        # HDFS before it unregistered), else a live AM's, else the last one a poll saw (may be a few seconds old).
        status_json = None if final_json or not app_id else self.hook.am_status(app_id) if self.stream_logs else None
        result = job_result(event, final_json, status_json, roles, outputs)
        ti = context["ti"]
        ti.xcom_push(key="final_status", value=result["final_status"])
        ti.xcom_push(key="outputs", value=result["outputs"])
        assets = output_assets(outputs, fs_default_fs)
        skipped = [v for v in (outputs or {}).values() if not hdfs_asset_uri(v, fs_default_fs)]
        if skipped:
            self.log.info("Outputs without a qualified hdfs:// URI are not assets: %s", ", ".join(map(str, skipped)))
        self.outlets = with_runtime_outlets(self.outlets, assets, self.log)
        self.log.info(
            "YARN application %s SUCCEEDED in %s s; outputs: %s",
            app_id,
            result["duration_s"],
            result["outputs"] or "none",
        )
        if app_id:
            self._results[app_id] = result
        return result

    def _check_outputs_exist(self, app_id: Optional[str], outputs: Optional[dict]) -> None:
        """Every declared HDFS output is in HDFS after a SUCCEEDED application, else the task fails naming the
        missing ones and declares no asset (an output task killed while it published, a path deleted since)."""
        try:
            missing = self.hook.missing_outputs(outputs)
        except MelonHdfsError as exc:
            raise AirflowException(
                f"YARN application {app_id} SUCCEEDED, but {exc.cause}; no asset is declared"
            ) from exc
        if missing:
            raise AirflowException(
                f"YARN application {app_id} SUCCEEDED, but declared output(s) "
                f"{', '.join(missing)} are not in HDFS; no asset is declared"
            )

    def _final_status(self, app_id: str) -> Optional[dict]:
        """The AM's final ``/status`` of the ended application (None if none), read from HDFS once."""
        if app_id not in self._final_statuses:
            self._final_statuses[app_id] = self.hook.final_status(app_id)
        return self._final_statuses[app_id]

    def _ended(self, context: "Context", app_id: str) -> Optional[dict]:
        """The application ended: its AM status link opens the RM's page; its metrics go out (the queue wait, gang
        formation, GPU memory and out-of-memory growths through Airflow's ``Stats``: :mod:`.metrics`); its AM's final
        status (None if none) and training time are added to the task's run history (``gpu_memory: auto``,
        ``priority: auto``), never failing."""
        self._link_am_status_to_app_page(context, app_id)
        final = self._final_status(app_id)
        app = self._get_app_or_none(app_id)
        metrics.emit_job_metrics(app, final, tags=self._metric_tags(context))
        try:
            path = self.hook.record_run(self.memory_key_for(context), app_id, final, app)
            if path:
                self.log.info("Run %s recorded in %s (gpu_memory: auto and priority: auto learn from it)", app_id, path)
        except Exception as exc:  # noqa: BLE001 - learning is a bonus; the run's result stands
            self.log.warning("Run %s not recorded in its history: %s", app_id, exc)
        return final

    # ---- metrics ------------------------------------------------------------------------------------------
    def _metric_tags(self, context: "Context") -> dict[str, str]:
        dag_id, task_id, _, _ = self._ti_identity(context)
        return {"dag_id": dag_id, "task_id": task_id}

    # ---- OpenLineage --------------------------------------------------------------------------------------
    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """What the OpenLineage provider reports of a finished run: the job's HDFS inputs and outputs as datasets,
        the YARN application as a job facet (its name, queue, framework) and a run facet (its id and RM page).
        Built by :mod:`airflow_provider_melon.operators.lineage`, imported only here (the OpenLineage provider is optional)."""
        from airflow_provider_melon.operators.lineage import train_lineage

        spec = self._spec or self.load_spec()
        rm = self._rm_url() if self._app_id else None
        return train_lineage(
            spec,
            self._app_id,
            getattr(self.hook, "fs_default_fs", None),
            yarn_application_url(rm, self._app_id) if rm and self._app_id else None,
        )

    # ---- kill ---------------------------------------------------------------------------------------------
    def _kill(self, app_id: str, why: str) -> None:
        """Kill the application, never to be reattached to: first noted in the task state store (a later try
        skips it, also while the RM still shows the kill in progress as RUNNING), then, once the RM took the
        kill, waited for (at most :data:`KILL_WAIT_S`) until the RM reports it ended, so that a later try
        without a task state store (Airflow < 3.3) does not find it live either. Never raises."""
        self.log.info("Killing YARN application %s: %s", app_id, why)
        store = self._state_store
        if store is not None:
            try:
                store.set(KILLED_KEY, sorted(self._killed_apps() | {app_id}))
            except Exception as exc:  # noqa: BLE001 - the wait below still covers the next try
                self.log.warning("Could not note the kill of %s in the task state store: %s", app_id, exc)
        try:
            self.yarn_hook.kill_application(app_id)
        except Exception as exc:  # noqa: BLE001 - a kill path never raises
            self.log.warning("Could not kill YARN application %s: %s", app_id, exc)
            return
        try:
            state = kill_waiting(tenacity.Retrying)(self.yarn_hook.get_state, app_id)
        except Exception as exc:  # noqa: BLE001
            self.log.warning("Could not read YARN application %s after the kill: %s", app_id, exc)
            return
        emit(self.log, [killed_line(app_id, state)])

    def on_kill(self) -> None:
        if not self._app_id:
            return
        if not self.cancel_on_kill:
            self.log.info("cancel_on_kill=False: leaving YARN application %s running", self._app_id)
            return
        self._kill(self._app_id, "the task was killed")


__all__ = ["MelonTrainOperator", "output_assets"]
