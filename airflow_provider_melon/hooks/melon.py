"""MelonHook: stage a job's files to HDFS, submit its ApplicationMaster to YARN, read the AM's status.

Staging is content-addressed, so a second submit of unchanged code uploads 0 bytes, and safe under concurrency
through :func:`airflow_provider_melon.hadoop.hdfs_io.put_once`. HDFS is reached through the ``hdfs`` package's
WebHDFS client built from the ``webhdfs`` connection, or any ``hdfs.Client`` passed in. ``docs/internals.md``,
"Staging a job", describes the cache layout and what is staged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import tenacity

from airflow_provider_melon import rm, submission
from airflow_provider_melon.gpu import context as _context
from airflow_provider_melon.gpu import learned
from airflow_provider_melon.gpu import preflight as _preflight
from airflow_provider_melon.hadoop import memory_history
from airflow_provider_melon.hadoop import queues as _queues
from airflow_provider_melon.hadoop.bundle import (
    CODE_SPLIT_BYTES,
    deterministic_zip,
    folder_files,
    runtime_files,
    split_code_files,
    write_deterministic_zip,
)
from airflow_provider_melon.hadoop.compat import constraints_on_heartbeats_only, hadoop_version, missing_feature
from airflow_provider_melon.hadoop.hdfs_io import (
    MelonHdfsError,
    Source,
    file_sha256,
    hdfs_errors,
    open_source,
    put_file_hashing,
    put_once,
    quiet_client_logs,
    source_size,
)
from airflow_provider_melon.hooks.yarn import YarnApiError, YarnHook
from airflow_provider_melon.provider_info import STAGING_RETRY_S_DEFAULT
from airflow_provider_melon.runtime import outputs as _outputs
from airflow_provider_melon.spec import TORCH_ROLES, JobSpec, RoleSpec
from airflow_provider_melon.submission import StagedFile

log = logging.getLogger(__name__)


def packaged_am_jar() -> Path:
    """The ApplicationMaster jar shipped inside this package (``airflow_provider_melon/am/``; appmaster/build.sh
    puts it there for wheels and for editable installs alike)."""
    from importlib.resources import files

    return Path(str(files("airflow_provider_melon").joinpath("am", submission.AM_JAR)))


#: how long one read of the RM's node list serves :meth:`MelonHook.nodes`: a submission's checks read it within seconds
NODES_FRESH_S = 60.0
#: a local file of at least this size is hashed while it uploads when its content is new (see stage_file)
HASH_WHILE_UPLOADING_BYTES = 8 << 20
#: report key prefix of such a file (``code:<path in the folder>``) and its object's name in the cache
CODE_FILE_KEY = "code:"
CODE_FILE_OBJECT = "code-file"


@dataclass
class StagingReport:
    """What a submission staged: each file and the bytes actually uploaded (0 when all were cached)."""

    files: dict[str, StagedFile] = field(default_factory=dict)

    @property
    def uploaded_bytes(self) -> int:
        return sum(f.uploaded_bytes for f in self.files.values())


class MelonHook:
    """Stages and submits MeLoN jobs; reads their AM status. Composes a YarnHook and an HDFS client."""

    #: code files at least this big are staged as their own objects beside the code archive (see
    #: :func:`split_code_files`)
    code_split_bytes: int = CODE_SPLIT_BYTES

    def __init__(
        self,
        yarn_conn_id: str = "yarn_default",
        webhdfs_conn_id: str = "webhdfs_default",
        *,
        yarn_hook: Optional[YarnHook] = None,
        hdfs_client: Any = None,
        user: Optional[str] = None,
        am_jar: Optional[str] = None,
        am_classpath: Optional[str] = None,
        default_python: Optional[str] = None,
        container_env: Optional[dict] = None,
        fs_default_fs: Optional[str] = None,
        staging_retry_s: Optional[float] = None,
        proxy_user: Optional[str] = None,
        admin_acl: Optional[str] = None,
        gpu_context_mb: Optional[int] = None,
        alone_after_s: Optional[float] = None,
    ) -> None:
        self.yarn = yarn_hook or YarnHook(yarn_conn_id)
        self.webhdfs_conn_id = webhdfs_conn_id
        quiet_client_logs()
        self._hdfs = hdfs_client
        self._nodes: Optional[tuple[float, list[dict]]] = None  # (read at, the RM's nodes): see nodes()
        extra = self._yarn_extra()
        #: run as this user (doAs on every RM and WebHDFS call): the connection's user submits *for* them, the app
        #: is theirs in YARN, staging lands in their HDFS home. The cluster must allow it (hadoop.proxyuser.*).
        #: ``proxy_user``, else the YARN hook's, else the YARN connection's extra ``proxy_user``.
        self.proxy_user = proxy_user or getattr(self.yarn, "proxy_user", None) or extra.get("proxy_user") or None
        if self.proxy_user:
            self.yarn.proxy_user = self.proxy_user
        # the YARN connection's user (its login): staging lands in that user's HDFS home, as the app runs as them
        self.user = (
            self.proxy_user
            or user
            or getattr(self.yarn, "remote_user", None)
            or extra.get("user")
            or os.environ.get("USER", "root")
        )
        override = am_jar or extra.get("am_jar") or _conf("am_jar")
        self.am_jar = Path(override) if override else packaged_am_jar()
        self.am_classpath = am_classpath or extra.get("am_classpath") or None
        self.default_python = default_python or extra.get("python") or "python3"
        self.container_env = dict(extra.get("container_env") or {}, **(container_env or {}))
        self.fs_default_fs = fs_default_fs or extra.get("fs_default_fs")
        #: who besides the owner may view and kill the job's applications (a Hadoop ACL, "users groups"):
        #: ``admin_acl``, else the connection extra ``admin_acl``, else ``[melon] admin_acl``; none by default
        self.admin_acl = admin_acl or extra.get("admin_acl") or _conf("admin_acl") or None
        #: ``[melon] staging_dir`` ({user} is replaced): cache/ (content-addressed), apps/ (plans), profiles/
        self.staging_dir = (_conf("staging_dir") or "/user/{user}/.melon").format(user=self.user).rstrip("/")
        self.cache_dir = f"{self.staging_dir}/cache"
        #: MiB a shared-mode task reserves on its GPU besides its expected memory before its runs teach it more (the
        #: CUDA context, the libraries' buffers), for every framework: ``gpu_context_mb``, else the connection
        #: extra's, else ``[melon] gpu_context_mb``; None: each framework's own first-run figure (gpu/context.py)
        context = _first_given(gpu_context_mb, extra.get("gpu_context_mb"), _conf("gpu_context_mb"), default=None)
        try:
            self.gpu_context_mb: Optional[int] = None if context in (None, "") else int(context)
        except (TypeError, ValueError):
            raise ValueError(f"gpu_context_mb: expected whole MiB, got {context!r}") from None
        if self.gpu_context_mb is not None and self.gpu_context_mb < 0:
            raise ValueError(f"gpu_context_mb: must be 0 or more MiB, got {context!r}")
        #: seconds from which a run's learned run time gives it whole GPUs instead of a share (``alone_after_s``, else
        #: the connection extra's, else ``[melon] alone_after_s``, else learned.ALONE_AFTER_S; 0: never)
        alone = _first_given(
            alone_after_s, extra.get("alone_after_s"), _conf("alone_after_s"), default=learned.ALONE_AFTER_S
        )
        try:
            self.alone_after_s = float(alone)
        except (TypeError, ValueError):
            raise ValueError(f"alone_after_s: expected seconds, got {alone!r}") from None
        if not self.alone_after_s >= 0:
            raise ValueError(f"alone_after_s: must be 0 (never) or more seconds, got {alone!r}")
        #: how long an upload keeps retrying a NameNode that is restarting / in safe mode (``staging_retry_s``, else
        #: ``[melon] staging_retry_s``, else its declared default, provider_info.STAGING_RETRY_S_DEFAULT)
        self.staging_retry_s = float(
            staging_retry_s if staging_retry_s is not None else _conf("staging_retry_s") or STAGING_RETRY_S_DEFAULT
        )

    def _yarn_extra(self) -> dict:
        conn_id = getattr(self.yarn, "yarn_conn_id", None)
        if not getattr(self.yarn, "from_connection", True) or not conn_id:
            return {}
        try:
            return dict(self.yarn.get_connection(conn_id).extra_dejson)
        except Exception:  # noqa: BLE001 - no Airflow connection: explicit arguments only
            return {}

    # ---- HDFS -----------------------------------------------------------------------------------------------
    @property
    def hdfs(self):
        if self._hdfs is None:
            self._hdfs = self._webhdfs_client()
        return self._hdfs

    @hdfs.setter
    def hdfs(self, client) -> None:
        """Use ``client`` (an ``hdfs.Client``, or a wrapper of one: the CLI's upload progress) for HDFS."""
        self._hdfs = client

    def _webhdfs_client(self):
        """The ``hdfs`` package's WebHDFS client for the ``webhdfs`` connection, built from its fields as the HDFS
        provider's ``WebHDFSHook`` reads them (that provider need not be installed): Host (several, comma-separated:
        NameNode HA), Port, Schema (a path prefix), Login, Password (HTTP basic auth) and the extras ``use_ssl``,
        ``verify``, ``cert``/``key``, ``cookies``, ``headers``. Of several NameNodes, the first that answers
        ``GETFILESTATUS /`` is used (a standby one answers with an error); one is used as it is, and its first
        call's error says what is wrong. ``auth=kerberos`` on the yarn connection: SPNEGO on the YARN hook's own
        ticket (obtained from its keytab first), as the principal's short name; ``[core] security = kerberos``
        alone: SPNEGO on the process's default ticket cache, as the HDFS provider's hook does. Otherwise simple
        auth as :attr:`user`; with a proxy user, as the connection's login acting for them (``doas``)."""
        from hdfs import HdfsError

        conn = self.yarn.get_connection(self.webhdfs_conn_id)
        extra = dict(conn.extra_dejson or {})
        tickets = self.yarn._kerberos_tickets() if getattr(self.yarn, "auth_mode", None) == "kerberos" else None
        kerberos = tickets is not None or _core_security() == "kerberos"
        ssl = str(extra.get("use_ssl", "")).strip().lower() in ("true", "1")
        namenodes = [h.strip() for h in str(conn.host or "").split(",") if h.strip()]
        tried = []
        for namenode in namenodes:
            url = (
                f"{'https' if ssl else 'http'}://{namenode}"
                + (f":{conn.port}" if conn.port else "")
                + (f"/{conn.schema}" if conn.schema else "")
            )
            session = _webhdfs_session(conn, extra, ssl, kerberos)
            if tickets is not None:  # a valid ticket first
                client = tickets.webhdfs_client(url, proxy=self.proxy_user or None, session=session)
            elif kerberos:
                from hdfs.ext.kerberos import KerberosClient

                client = KerberosClient(url, proxy=self.proxy_user or None, session=session)
            else:
                from hdfs import InsecureClient

                # with a proxy user the connection's own login authenticates and doas= names the user it acts for
                client = InsecureClient(
                    url,
                    user=(conn.login or None) if self.proxy_user else self.user,
                    proxy=self.proxy_user or None,
                    session=session,
                )
            if len(namenodes) == 1:  # nothing to choose between
                return client
            try:
                with hdfs_errors("status", "/"):
                    client.status("/")
                return client
            except (MelonHdfsError, HdfsError) as exc:
                tried.append(f"{url}: {exc}")
        raise MelonHdfsError(
            "connect",
            f"(connection {self.webhdfs_conn_id})",
            "no NameNode answered"
            + (" with Kerberos" if kerberos else "")
            + ": "
            + ("; ".join(tried) or "the connection has no host"),
            "set the webhdfs connection's host and port to the NameNode's HTTP address (dfs.namenode.http-address)",
            retriable=True,
        )

    def hdfs_uri(self, path: str) -> str:
        if path.startswith("hdfs://"):
            return path
        if not self.fs_default_fs:
            raise ValueError("fs_default_fs is unknown: set it in the YARN connection extra ('fs_default_fs')")
        return self.fs_default_fs.rstrip("/") + path

    def in_staging_dir(self, uri: str) -> bool:
        """``uri`` lies in the (0700, private) staging folder: YARN may localize it for the application only."""
        return (_outputs.hdfs_path(uri) or "").startswith(self.staging_dir + "/")

    def file_status(self, path: str) -> Optional[dict]:
        hdfs_path = _in_hdfs(path)
        with hdfs_errors("status", path):
            return self.hdfs.status(hdfs_path, strict=False)

    def stat_file(self, path: str, *, folder_ok: bool = False) -> StagedFile:
        """Size and time of an HDFS file (``folder_ok``: or folder: YARN localizes a folder whole) for a
        localized resource."""
        st = self.file_status(path)
        if not st or st.get("type") not in (("FILE", "DIRECTORY") if folder_ok else ("FILE",)):
            raise FileNotFoundError(f"{path} is not a file{' or folder' if folder_ok else ''} in HDFS")
        return StagedFile(self.hdfs_uri(_in_hdfs(path)), int(st["length"]), int(st["modificationTime"]))

    def put_bytes(self, path: str, data: Source, *, cached: bool = True, sha256: Optional[str] = None) -> StagedFile:
        """Put ``data`` (bytes, or a local file's path: streamed from disk, never read whole) at ``path``.
        ``cached``: an immutable object (content-addressed) — uploaded once however many tasks stage it at the
        same time (:func:`put_once`); else written (overwritten) here. ``sha256``: the digest the uploaded bytes
        must have (a local file rewritten since it was hashed is refused, never stored under the old digest)."""

        def put() -> tuple[dict, bool]:
            if cached:
                return put_once(self.hdfs, path, data, sha256=sha256)
            with hdfs_errors("write", path), open_source(data) as body:
                self.hdfs.write(path, data=body, overwrite=True)
            st = self.file_status(path)
            if st is None:  # deleted by someone else since
                raise MelonHdfsError("status", path, "gone right after it was written")
            return st, True

        st, fresh = self._retrying(path, put)
        return self._staged(path, st, source_size(data) if fresh else 0)

    def _retrying(self, what: str, put):
        """``put()``, retried while the NameNode restarts or is in safe mode, within ``staging_retry_s``."""
        return tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, MelonHdfsError) and e.retriable),
            stop=tenacity.stop_after_delay(self.staging_retry_s),
            wait=tenacity.wait_exponential(multiplier=0.5, max=8),
            before_sleep=lambda rs: log.warning(
                "staging %s: %s; retrying (attempt %d, up to %.0f s)",
                what,
                rs.outcome.exception() if rs.outcome else None,  # set before any sleep
                rs.attempt_number,
                self.staging_retry_s,
            ),
            reraise=True,
        )(put)

    def _staged(self, path: str, st: dict, uploaded: int) -> StagedFile:
        staged = StagedFile(self.hdfs_uri(path), int(st["length"]), int(st["modificationTime"]), uploaded)
        log.info("staged %s (%d bytes, %s)", staged.url, staged.size, "uploaded" if uploaded else "cached")
        if not uploaded:
            self._touch(path)
        return staged

    def _touch(self, path: str) -> None:
        """Set a cached object's access time (never its modification time, which YARN's localizer checks): its
        last use, which ``melon prune`` keeps objects by (:mod:`airflow_provider_melon.hadoop.staging_gc`). Best effort:
        a NameNode with access times off (``dfs.namenode.accesstime.precision`` 0) refuses, and prune then goes
        by upload time, costing at most a re-upload."""
        try:
            self.hdfs.set_times(_in_hdfs(path), access_time=int(time.time() * 1000))
        except Exception as exc:  # noqa: BLE001 - the submission goes on either way
            log.debug("could not set the access time of %s: %s", path, exc)

    def _private_staging_dir(self) -> None:
        """The staging folder, made 0700 when it is created: staged code is its user's alone to read (an existing
        folder keeps its mode, and costs one status call). Its parent (the user's home) is made first with the
        cluster's default mode: HDFS would give missing parents the 0700 too, and a home no one else may enter
        makes every dataset in it unfit for YARN's PUBLIC cache ("not publicly accessible"). Retried like uploads
        while the NameNode restarts."""

        def mkdir() -> None:
            with hdfs_errors("mkdir", self.staging_dir):
                if self.hdfs.status(self.staging_dir, strict=False) is not None:
                    return
                self.hdfs.makedirs(posixpath.dirname(self.staging_dir))  # a no-op on an existing home
                self.hdfs.makedirs(self.staging_dir, permission="700")

        self._retrying(self.staging_dir, mkdir)

    def stage_content(self, name: str, data: bytes) -> StagedFile:
        digest = hashlib.sha256(data).hexdigest()
        return self.put_bytes(f"{self.cache_dir}/{digest}/{name}", data)

    def stage_file(self, name: str, path: Path) -> StagedFile:
        """:meth:`stage_content` of a local file, hashed and uploaded in blocks (a 1 GiB env archive costs a
        few blocks of memory, not 1 GiB). From :data:`HASH_WHILE_UPLOADING_BYTES` on, content never staged
        before is hashed while it uploads, reading it once (:func:`airflow_provider_melon.hadoop.hdfs_io.put_file_hashing`).
        """
        path = Path(path)
        if path.stat().st_size < HASH_WHILE_UPLOADING_BYTES:
            digest = file_sha256(path)
            return self.put_bytes(f"{self.cache_dir}/{digest}/{name}", path, sha256=digest)
        where, st, fresh = self._retrying(str(path), lambda: put_file_hashing(self.hdfs, self.cache_dir, name, path))
        return self._staged(where, st, path.stat().st_size if fresh else 0)

    def stage_zip(self, name: str, files: list[tuple[str, Path]]) -> StagedFile:
        """:meth:`stage_file` of the :func:`deterministic_zip` of ``files``, built in a temporary file."""
        with tempfile.TemporaryDirectory(prefix="melon-stage-") as tmp:
            archive = Path(tmp, name)
            with open(archive, "wb") as out:
                write_deterministic_zip(files, out)
            return self.stage_file(name, archive)

    # ---- staging --------------------------------------------------------------------------------------------
    def stage(self, spec: JobSpec) -> StagingReport:
        report = StagingReport()
        self._private_staging_dir()
        if spec.code and not spec.code.startswith("hdfs://"):
            files = folder_files(Path(spec.code))
            small, large = split_code_files(files, self.code_split_bytes)
            if small:
                report.files["code"] = self.stage_zip("code.zip", small)
            elif not large:  # YARN cannot localize an empty archive (FSDownload fails on the missing folder)
                log.warning("code folder %s is empty: nothing staged, tasks run in the container folder", spec.code)
            for rel, path in large:  # each its own object: editing a .py file does not upload these again
                report.files[CODE_FILE_KEY + rel] = self.stage_file(CODE_FILE_OBJECT, path)
        elif spec.code:
            report.files["code"] = self.stat_file(spec.code)
        report.files["runtime"] = self.stage_content("melon_runtime.zip", deterministic_zip(runtime_files()))
        if not self.am_jar.is_file():
            raise FileNotFoundError(
                f"AM jar {self.am_jar} not found: this copy of the provider was installed without it (install a "
                "wheel built with appmaster/build.sh, i.e. `pip wheel .` with JDK 17 and Maven) or set [melon] am_jar"
            )
        report.files["am_jar"] = self.stage_file(submission.AM_JAR, self.am_jar)
        for item in spec.inputs:
            report.files[f"input:{item.path}"] = self.stat_file(item.path, folder_ok=True)
        if spec.environment.archive:
            report.files["env_archive"] = self.stage_env_archive(spec.environment.archive)
        return report

    def stage_env_archive(self, archive: str) -> StagedFile:
        """An HDFS archive as it is; a ``file://`` one (e.g. from ``melon pack-env``) staged content-addressed,
        streamed from disk."""
        if not archive.startswith("file://"):
            return self.stat_file(archive)
        local = Path(archive[len("file://") :])
        if not local.is_file():
            raise FileNotFoundError(f"environment.archive: {archive} is not a local file")
        return self.stage_file(local.name, local)

    def missing_outputs(self, outputs: Optional[dict]) -> list:
        """The declared HDFS outputs (name → target) not in HDFS, as ``'name' (target)``; MelonHdfsError when one
        cannot be checked."""
        missing = []
        for name, target in (outputs or {}).items():
            path = _outputs.hdfs_path(str(target))
            if path is None:
                continue
            try:
                found = self.file_status(path) is not None
            except Exception as exc:  # noqa: BLE001 - any HDFS failure: the output is not known to be there
                raise MelonHdfsError(
                    "status", path, f"output {name!r} ({target}) could not be checked in HDFS: {exc}"
                ) from exc
            if not found:
                missing.append(f"{name!r} ({target})")
        return missing

    def _webhdfs_url(self) -> Optional[str]:
        """Where the output task publishes (the WebHDFS address this hook uses; ``MELON_WEBHDFS_URL`` in the
        connection's ``container_env`` wins, for clusters whose NodeManagers see the NameNode elsewhere)."""
        url = getattr(self.hdfs, "url", None)
        return str(url) if url else None

    def check_outputs(self, spec: JobSpec) -> None:
        """Refuse, before anything is submitted, a job whose HDFS output exists (unless ``overwrite_outputs``)."""
        if spec.overwrite_outputs:
            return
        for name, target in spec.outputs.items():
            path = _outputs.hdfs_path(target)
            if path and self.file_status(path) is not None:
                raise FileExistsError(
                    f"outputs.{name}: {target} exists; set overwrite_outputs: true in the job to "
                    "replace it (or write each run to its own path, e.g. with run_slug)"
                )

    # ---- submission -----------------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, tags: Optional[list[str]] = None, labels: Optional[dict] = None) -> dict:
        """Stage, write the plan, submit. Returns ``{app_id, tracking_url, staging: StagingReport}``.
        ``labels`` go into the plan and come back in the AM's status (the operator passes its task instance). A
        shared role without a context reserve (not resolved: :meth:`resolve_learned`) gets its first-run figure."""
        spec = self.with_contexts(spec)[0]
        self.check_gpu_models(spec)
        # a shared task asks YARN for its slot on the cluster's largest GPU (policy.ask_mb), or its models' largest
        largest = self.largest_gpu_mb() if any(r.gpu_memory_mb for r in spec.roles.values()) else None
        role_largest = {
            name: self.largest_gpu_mb(role.gpu_models)
            for name, role in spec.roles.items()
            if role.gpu_models and role.gpu_memory_mb
        }
        self.check_queue(spec, largest)
        self.check_outputs(spec)
        report = self.stage(spec)
        files = report.files
        new_app = self.yarn.new_application()
        app_id = new_app["application-id"]
        env = files.get("env_archive")
        plan = submission.build_plan(
            spec,
            code=files.get("code"),
            runtime=files["runtime"],
            code_files={k[len(CODE_FILE_KEY) :]: f for k, f in files.items() if k.startswith(CODE_FILE_KEY)},
            inputs={i.path: files[f"input:{i.path}"] for i in spec.inputs},
            env_archive=env,
            env_archive_visibility="APPLICATION" if env and self.in_staging_dir(env.url) else "PUBLIC",
            default_python=self.default_python,
            largest_gpu_mb=largest,
            role_largest_gpu_mb=role_largest,
            container_env=self.container_env,
            labels=labels,
            webhdfs_url=self._webhdfs_url() if spec.outputs else None,
            hdfs_user=self.user,
            staged_urls=[f.url for f in files.values()],  # all it uses, the AM jar too: for `melon prune`
            # the AM writes its final /status there (read by final_status)
            status_file=self.hdfs_uri(self.status_path(app_id)) if self.fs_default_fs else self.status_path(app_id),
        )
        plan_file = self.put_bytes(
            f"{self.staging_dir}/apps/{app_id}/{submission.PLAN_FILE}",
            json.dumps(plan, indent=1, sort_keys=True).encode(),
            cached=False,
        )
        files["plan"] = plan_file
        context = submission.build_submission(
            spec,
            app_id=app_id,
            am_jar=files["am_jar"],
            plan=plan_file,
            secret=secrets.token_hex(16),
            tags=list(tags or []),
            am_classpath=self.am_classpath,
            acls=submission.application_acls(self.user, self.admin_acl) if self.admin_acl else None,
        )
        if getattr(self.yarn, "auth_mode", None) == "kerberos":
            self._add_delegation_tokens(context)
        self.yarn.submit_application(context)
        log.info("submitted %s (%s); staged %d new bytes", app_id, spec.name, report.uploaded_bytes)
        return {"app_id": app_id, "staging": report, "plan": plan}

    def _add_delegation_tokens(self, context: dict) -> None:
        """Kerberos: an HDFS delegation token (renewer: the RM) in the submission's credentials, so YARN can
        localize the staged files and the containers can reach HDFS (:mod:`airflow_provider_melon.hadoop.delegation`)."""
        from airflow_provider_melon.hadoop import delegation

        url = self._webhdfs_url()
        if not url:
            raise ValueError("a Kerberos submission needs the WebHDFS address for its HDFS delegation token")
        renewer = delegation.rm_renewer(self.yarn, self._yarn_extra())
        if not self.fs_default_fs:
            raise ValueError("fs_default_fs is unknown: set it in the YARN connection extra ('fs_default_fs')")
        token = delegation.hdfs_delegation_token(self.yarn, url, renewer, self.fs_default_fs)
        creds = context["am-container-spec"].setdefault("credentials", {})  # keeps the AM secret's "secrets"
        creds["tokens"] = delegation.credentials({delegation.HDFS_TOKEN_ALIAS: token})["tokens"]

    def check_queue(self, spec: JobSpec, largest_gpu_mb: Optional[int] = None) -> Optional[_queues.QueueReport]:
        """Before anything is staged: the job's queue exists, runs, and its maximum and this user's limit in it can
        hold the whole gang (:mod:`airflow_provider_melon.hadoop.queues`); raises :class:`~airflow_provider_melon.hadoop.queues.QueueError`.
        It also fails a user the cluster refuses to let us act for (403, with the fix): ``largest_gpu_mb()``, which
        may read the nodes before it, only logs such an error.
        Other failures to read the scheduler only skip the check (the submission meets the RM anyway)."""
        try:
            scheduler = self.yarn.scheduler()
        except YarnApiError as exc:
            if exc.status in (401, 403):
                raise
            log.warning("queue check skipped: could not read the scheduler: %s", exc)
            return None
        report = _queues.ensure_queue_fits(
            scheduler,
            spec.queue,
            spec.roles,
            user=self.user,
            largest_gpu_mb=largest_gpu_mb,
        )
        log.info("%s: %s", spec.name, report.message)
        return report

    def test_connection(self) -> tuple[bool, str]:
        """Both halves a submission needs: the RM answers, and HDFS lists the user's staging folder's parent."""
        ok, message = self.yarn.test_connection()
        if not ok:
            return False, f"YARN: {message}"
        try:
            with hdfs_errors("status", "/"):
                self.hdfs.status("/", strict=True)
        except Exception as exc:  # noqa: BLE001 - reported to the UI
            return False, f"{message}; HDFS ({self.webhdfs_conn_id}): {exc}"
        return True, f"{message}; HDFS reachable, staging under {self.cache_dir}"

    # ---- AM status ------------------------------------------------------------------------------------------
    def status_path(self, app_id: str) -> str:
        """Where the AM of ``app_id`` leaves its final ``/status`` (every task's last report) before it ends."""
        return f"{self.staging_dir}/apps/{app_id}/{submission.STATUS_FILE}"

    def final_status(self, app_id: str) -> Optional[dict]:
        """The AM's final ``/status`` JSON of an ended application, from HDFS (:meth:`status_path`), or None when
        there is none (an AM that died, one that could not write it, an application of an older MeLoN)."""
        path = self.status_path(app_id)
        try:
            with hdfs_errors("read", path), self.hdfs.read(path) as reader:
                body = json.loads(reader.read())
        except Exception as exc:  # noqa: BLE001 - best effort: the caller falls back to what it saw last
            log.info("final AM status of %s not read from %s: %s", app_id, path, exc)
            return None
        return body if isinstance(body, dict) else None

    # ---- what earlier runs teach (gpu_memory: auto, priority: auto) ---------------------------------------------
    def first_context_mb(self, spec: JobSpec, role: str) -> tuple[int, str]:
        """The context reserve a shared role's task starts with before its runs teach it, and why: the admin's
        ``gpu_context_mb`` (this hook's), else its framework's figure (:func:`gpu.context.first_run_mb`; NCCL for a
        PyTorch role in a process group of several processes: torch.distributed's default backend on GPUs)."""
        if self.gpu_context_mb is not None:
            return self.gpu_context_mb, "the cluster's gpu_context_mb"
        members = [r for name, r in spec.roles.items() if name in TORCH_ROLES]
        nccl = (
            spec.framework == "pytorch"
            and role in TORCH_ROLES
            and sum(r.instances for r in members) * spec.nproc_per_node > 1
        )
        label = f"{spec.framework}{' with NCCL' if nccl else ''}"
        return _context.first_run_mb(spec.framework, nccl=nccl), f"the first-run figure for {label}"

    def with_contexts(self, spec: JobSpec, docs: Sequence[Mapping[str, Any]] = ()) -> tuple[JobSpec, list[str]]:
        """``spec`` with a context reserve on each shared role whose spec sets none (``gpu_context``): the larger of
        its first-run figure (:meth:`first_context_mb`) and what the history ``docs`` teach, and the lines saying so
        (:func:`memory_history.resolve_contexts`)."""
        contexts, lines = memory_history.resolve_contexts(
            lambda role: memory_history.role_runs(docs, role),
            spec.roles,
            lambda role: self.first_context_mb(spec, role),
        )
        if not contexts:
            return spec, []
        roles = dict(spec.roles)
        for name, mb in contexts.items():
            roles[name] = roles[name].model_copy(update={"gpu_context": mb})
        return spec.model_copy(update={"roles": roles}), lines

    def resolve_learned(self, spec: JobSpec, key: str) -> tuple[JobSpec, dict[str, list[str]]]:
        """``spec`` with what the history under ``key`` teaches filled in, and the lines saying where each figure
        came from, by field: ``gpu_context``, a line per shared role (:meth:`with_contexts`), ``gpu_memory``, a line
        per ``gpu_memory: auto`` role (learned, else its first run's ``auto:<size>``: :func:`memory_history.resolve`),
        and ``priority`` for ``priority: auto`` (:func:`learned.priority` of the task's recent run times; left
        ``auto`` while it has none, submitted as 0, below every learned priority). A run learned to take
        ``alone_after_s`` or more gets whole GPUs (``alone``: :meth:`_alone`). Unreadable history counts as none
        (logged). ValueError names a role with neither figure."""
        memory_auto = any(role.gpu_memory_auto for role in spec.roles.values())
        shares = any(role.gpu_memory and not role.gpus for role in spec.roles.values())
        if not shares and spec.priority != "auto":
            return spec, {}
        try:
            docs = memory_history.read_history(self.hdfs, self.staging_dir, key)
        except Exception as exc:  # noqa: BLE001 - no history is a first run, not a failed submission
            log.warning("run history of %s not read: %s", key, exc)
            docs = []
        resolved, notes = spec, {}
        resolved, context_lines = self.with_contexts(spec, docs)
        if context_lines:
            notes["gpu_context"] = context_lines
        if memory_auto:
            resolved = resolved.model_copy(deep=True)
            figures, notes["gpu_memory"] = memory_history.resolve(
                lambda role: memory_history.role_runs(docs, role), resolved.roles, self.largest_gpu_mb()
            )
            for name, mb in figures.items():
                resolved.roles[name] = resolved.roles[name].model_copy(update={"gpu_memory": mb})
        found = learned.learned_duration_s(docs)
        if spec.priority == "auto":
            if found is None:
                notes["priority"] = ["priority auto: 0 (no successful run time in the history yet)"]
            else:
                resolved = resolved.model_copy(update={"priority": learned.priority(found[0])})
                notes["priority"] = [f"priority auto: {resolved.priority} ({found[1]}; longer runs start first)"]
        if found is not None and 0 < self.alone_after_s <= found[0]:
            resolved, notes["alone"] = self._alone(resolved, found[0])
        return resolved, notes

    def _alone(self, spec: JobSpec, ran_s: float) -> tuple[JobSpec, list[str]]:
        """``spec`` with each shared role (``gpu_memory``) on whole GPUs (``gpus: 1``), for a run learned to take
        ``ran_s`` >= ``alone_after_s``, and a line per role saying so."""
        roles, lines = dict(spec.roles), []
        for name, role in spec.roles.items():
            if role.gpu_memory and not role.gpus:
                whole = {"gpu_memory": None, "gpu_context": None, "gpus": 1}  # a whole GPU holds its context
                roles[name] = RoleSpec.model_validate(role.model_dump() | whole)
                lines.append(
                    f"roles.{name}: a whole GPU per task, not a share (learned run time {ran_s / 3600:.1f} h, "
                    f"alone_after_s {self.alone_after_s / 3600:g} h: a neighbour would stretch it by up to 1.7x)"
                )
        return (spec.model_copy(update={"roles": roles}), lines) if lines else (spec, [])

    def nodes(self) -> list[dict]:
        """The RM's nodes (``YarnHook.nodes``), read once per :data:`NODES_FRESH_S`: the learned figure's cap, the
        operator's pre-flight check and the slot a shared task asks for judge one read of the cluster, not three (on
        a cluster of a thousand nodes the list is megabytes). A failed read is not kept."""
        now = time.monotonic()
        if self._nodes is None or now - self._nodes[0] > NODES_FRESH_S:
            self._nodes = (now, self.yarn.nodes())
        return self._nodes[1]

    def check_gpu_models(self, spec: JobSpec) -> None:
        """Before anything is staged, for a job whose roles name GPU models: the cluster has node attributes (Hadoop
        3.2+), the ResourceManager takes the AM's placement constraints (a CapacityScheduler,
        ``yarn.resourcemanager.placement-constraints.handler`` = ``scheduler``; else it would refuse the AM's requests
        at run time) and has nodes of each role's models
        (:func:`~airflow_provider_melon.gpu.preflight.ensure_models_placeable`). A setting that cannot be read refuses
        the job too: only nodes that cannot be listed skip their part (the operator's pre-flight reports them)."""
        if not any(role.gpu_models for role in spec.roles.values()):
            return
        try:
            handler = self.yarn.rm_conf(_preflight.PLACEMENT_HANDLER)
            scheduler_type = self.yarn.scheduler().get("type")
            version = hadoop_version(self.yarn.cluster_info())
        except Exception as exc:  # noqa: BLE001 - unknown is refused: the AM would fail at run time
            raise _preflight.PreflightError(
                f"roles {', '.join(n for n, r in spec.roles.items() if r.gpu_models)} name GPU models, but the "
                f"ResourceManager's {_preflight.PLACEMENT_HANDLER} or Hadoop version could not be read ({exc}): it "
                "must be 'scheduler', on Hadoop 3.2 or later"
            ) from None
        on_heartbeats = constraints_on_heartbeats_only(version)
        if on_heartbeats and self._plugin_orders_nodes():
            raise _preflight.PreflightError(
                f"roles {', '.join(n for n, r in spec.roles.items() if r.gpu_models)} name GPU models, but "
                f"{on_heartbeats}, and this ResourceManager places by the scheduler plug-in's node order (multi-node "
                "placement): the tasks would wait for ever. Turn multi-node placement off for the job's queue, or "
                "run on Hadoop 3.5 (docs/scheduler-plugin.md)"
            )
        try:
            nodes: Optional[list[dict]] = self.nodes()
        except Exception as exc:  # noqa: BLE001 - the operator's pre-flight says so too
            log.warning("the nodes' GPU models are not checked: could not read the cluster's nodes: %s", exc)
            nodes = None
        _preflight.ensure_models_placeable(
            nodes, spec.roles, handler, scheduler_type, missing_feature(version, "node-attributes")
        )

    def _plugin_orders_nodes(self) -> bool:
        """Whether the RM has loaded the scheduler plug-in's node order (its MBean's ``PolicyLoaded``: multi-node
        placement is on); False where its ``/jmx`` cannot be read (a restricted page: not refused on a guess)."""
        try:
            beans = self.yarn.rm_jmx(rm.STATS_MBEAN)
        except Exception as exc:  # noqa: BLE001 - an unreadable page is no proof either way
            log.warning("could not read the ResourceManager's /jmx for the scheduler plug-in: %s", exc)
            return False
        return any(bool(b.get("PolicyLoaded")) for b in beans)

    def largest_gpu_mb(self, models: Optional[list[str]] = None) -> Optional[int]:
        """The memory of the cluster's largest GPU (the RM's RUNNING nodes, as pre-flight reads them), or of its
        largest of ``models``; None when the RM cannot say (not reachable, no node advertising GPU memory): the
        learned figure is then not capped, and a shared task asks YARN for its need alone, not its slot."""
        try:
            if models:
                return _preflight.model_largest_gpu_mb(self.nodes(), models)
            largest = _preflight.check(self.nodes(), {}).largest_gpu_mb
        except Exception as exc:  # noqa: BLE001 - the cap is a bound, not a condition of submitting
            log.warning(
                "the cluster's largest GPU is unknown (nodes not read: %s): the learned GPU memory is not capped, "
                "and shared tasks ask YARN for their expected memory, not their slot",
                exc,
            )
            return None
        return int(largest) or None

    def record_run(self, key: str, app_id: str, final: Optional[dict], app: Optional[dict] = None) -> Optional[str]:
        """Add the ended run ``app_id`` to the history under ``key``: one record per shared-mode role (tasks with an
        ``initial_gpu_memory_mb`` in its AM's final status ``final``) and, when it succeeded, its training time
        (:func:`learned.ran_s` of the RM's report ``app`` and ``final``). Returns the file's path, or None when there
        is nothing to record (no final status: an AM that died)."""
        final = final or {}
        tasks = final.get("tasks")
        if not isinstance(tasks, list):
            return None
        planned = {
            t["role"]: (t.get("initial_gpu_memory_mb"), t.get("initial_gpu_context_mb"))
            for t in tasks
            if isinstance(t, dict) and isinstance(t.get("role"), str)
        }
        records = {
            role: learned.run_record(
                role,
                tasks,
                app_id=app_id,
                state=final.get("state"),
                at=time.time(),
                planned_mb=int(mb),
                planned_context_mb=context if isinstance(context, int) else None,
            )
            for role, (mb, context) in planned.items()
            if isinstance(mb, int) and mb > 0
        }
        ran = learned.ran_s(app, final)
        if not records and ran is None:
            return None
        return memory_history.record_run(self.hdfs, self.staging_dir, key, app_id, records, ran_s=ran)

    def am_status(self, app_id: str) -> Optional[dict]:
        """The AM's ``/status`` JSON through the RM web proxy, or None while the AM is not serving yet."""
        try:
            return self.yarn.am_status(app_id)
        except Exception as exc:  # noqa: BLE001 - the AM may be starting or gone; status is best effort
            log.debug("AM status of %s unavailable: %s", app_id, exc)
            return None


def _in_hdfs(uri: str) -> str:
    """``uri``'s HDFS path (:func:`~airflow_provider_melon.runtime.outputs.hdfs_path`); a ValueError naming it when
    it lies elsewhere (the job spec admits only HDFS paths where the hook looks, so this guards misuse)."""
    path = _outputs.hdfs_path(uri)
    if path is None:
        raise ValueError(f"{uri!r} is not in HDFS: give an hdfs:// URI or an absolute HDFS path")
    return path


def _core_security() -> Optional[str]:
    """Airflow's ``[core] security`` (``kerberos`` makes the HDFS provider's hook speak SPNEGO), None outside Airflow."""
    try:
        from airflow.configuration import conf

        return (conf.get("core", "security", fallback="") or "").strip().lower() or None
    except Exception:  # noqa: BLE001 - outside Airflow
        return None


def _webhdfs_session(conn: Any, extra: dict, ssl: bool, kerberos: bool) -> Any:
    """The HTTP session of a WebHDFS client: basic auth from a password, TLS settings, cookies and headers, as the
    HDFS provider's ``WebHDFSHook`` sets them. ``verify`` (a CA bundle path or true/false) defaults to false with
    simple auth, as that hook's does, and to true under Kerberos."""
    import requests

    session = requests.Session()
    if conn.password is not None and not kerberos:
        session.auth = (conn.login, conn.password)
    if ssl:
        verify = extra.get("verify", kerberos)
        if isinstance(verify, str) and verify.strip().lower() in ("true", "false"):
            verify = verify.strip().lower() == "true"
        session.verify = verify
        cert, key = extra.get("cert"), extra.get("key")
        if cert:
            session.cert = (cert, key) if key else cert
    if extra.get("cookies"):
        session.cookies.update(extra["cookies"])
    if extra.get("headers"):
        session.headers.update(extra["headers"])
    return session


def hdfs_home(yarn_conn_id: str = "yarn_default") -> str:
    """``/user/<user>``: the HDFS home of the user that MeLoN jobs on ``yarn_conn_id`` run as, the same user whose
    ``/user/<user>/.melon`` holds their staging (``MelonHook.user``: the connection's ``proxy_user``, else its
    login, else ``HADOOP_USER_NAME``/the OS user), so a DAG's HDFS folders go there, not under a hard-coded user.
    Reads the connection only, no network call. In a template: ``user_defined_macros={"hdfs_home": hdfs_home}``
    then ``{{ hdfs_home() }}/melon-demo``."""
    user = MelonHook(yarn_conn_id).user
    if not user or "/" in user:
        raise ValueError(f"yarn connection {yarn_conn_id!r}: no usable HDFS user ({user!r}); set its login")
    return f"/user/{user}"


def _first_given(*values: Any, default: Any) -> Any:
    """The first of ``values`` that is set (not None, not blank): an argument, then the connection's extra, then
    ``[melon]``; ``default`` when none is."""
    return next((v for v in values if v is not None and str(v).strip() != ""), default)


def _conf(key: str) -> Optional[str]:
    try:
        from airflow.configuration import conf

        return conf.get("melon", key, fallback=None)
    except Exception:  # noqa: BLE001 - outside Airflow
        return None


__all__ = [
    "CODE_FILE_KEY",
    "CODE_FILE_OBJECT",
    "HASH_WHILE_UPLOADING_BYTES",
    "MelonHook",
    "StagingReport",
    "hdfs_home",
    "packaged_am_jar",
]
