"""A real Airflow on this machine: api-server, scheduler, dag-processor and triggerer (LocalExecutor) as four
processes, pointed at the embedded mini cluster, and a small REST client that triggers DAG runs the way the
UI's Trigger button does (``POST /api/v2/dags/{dag_id}/dagRuns`` with ``logical_date: null``).

Used by ``make demo`` and by the end-to-end tests. :class:`LocalAirflow` runs the components on a private
PostgreSQL (:class:`LocalPostgres`); :class:`AirflowApi` is the client. ``docs/internals.md``, "A local Airflow",
gives the settings and why the database is PostgreSQL.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
AUTH_MANAGERS = {
    "simple": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
    "fab": "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager",
}
TERMINAL_RUN_STATES = frozenset({"success", "failed"})


class LocalAirflowError(RuntimeError):
    """A component did not start, exited, or an API call failed; the message carries the log tail."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPostgres:
    """A throw-away PostgreSQL server for Airflow's metadata DB: ``initdb`` in a temp dir, trust auth, listening
    on 127.0.0.1 only. As root it runs as the ``postgres`` user (PostgreSQL refuses to run as root)."""

    def __init__(self, port: int = 0):
        self.port = port or free_port()
        self.data_dir: Optional[Path] = None
        self.bindir = self._bindir()

    @staticmethod
    def _bindir() -> Path:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if found:
            return Path(found[-1]).parent
        initdb = shutil.which("initdb")
        if initdb:
            return Path(initdb).parent
        raise LocalAirflowError(
            "PostgreSQL is not installed (no initdb): `apt-get install postgresql` (scripts/setup.sh does this)"
        )

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/airflow"

    def _run(self, *args: str, timeout: float = 120) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/")
        if result.returncode != 0:
            raise LocalAirflowError(
                f"{' '.join(args[:2])} failed ({result.returncode}):\n{(result.stdout + result.stderr)[-3000:]}"
            )

    def start(self) -> "LocalPostgres":
        self.data_dir = Path(tempfile.mkdtemp(prefix="melon-pg-"))
        if os.geteuid() == 0:
            pg = pwd.getpwnam("postgres")
            os.chown(self.data_dir, pg.pw_uid, pg.pw_gid)
        data = str(self.data_dir / "data")
        self._run("initdb", "-D", data, "-U", "airflow", "--auth=trust", "-E", "UTF8", "--no-sync")
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data_dir} -c fsync=off -c max_connections=200"
        self._run("pg_ctl", "-D", data, "-o", opts, "-l", str(self.data_dir / "postgres.log"), "-w", "start")
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "airflow", "airflow")
        return self

    def stop(self) -> None:
        if self.data_dir is None:
            return
        try:
            self._run("pg_ctl", "-D", str(self.data_dir / "data"), "-m", "fast", "-w", "stop", timeout=60)
        except (LocalAirflowError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir = None


class AirflowApi:
    """A small client of Airflow's public REST API (``/api/v2``), logged in as the UI's login form does
    (``POST /auth/token`` with SimpleAuthManager's user and password). Used against the local Airflow below and
    against the docker/ deployment."""

    def __init__(self, url: str, username: str = "admin", password: str = "admin", alive: Optional[Any] = None):
        self.url = url.rstrip("/")
        self.username = username
        self.password = password
        self._token: Optional[str] = None
        self._alive = alive or (lambda: None)

    def _check_alive(self) -> None:
        self._alive()

    # ---- REST ------------------------------------------------------------------------------------------------
    def token(self) -> str:
        """Log in as the UI's login form does (``POST /auth/token``); the JWT is kept for later calls."""
        if self._token is None:
            body = self._http("POST", "/auth/token", {"username": self.username, "password": self.password}, auth=False)
            self._token = body["access_token"]
        return self._token

    def _http(
        self, method: str, path: str, body: Optional[dict] = None, *, auth: bool = True, timeout: float = 30
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:2000]
            raise LocalAirflowError(f"{method} {path} -> HTTP {exc.code}: {detail}") from None
        return json.loads(text) if text else None

    def api(self, method: str, path: str, body: Optional[dict] = None) -> Any:
        """An authenticated call to the public REST API (``path`` below ``/api/v2``)."""
        return self._http(method, "/api/v2" + path, body)

    def wait_dag(self, dag_id: str, timeout: float = 180) -> dict:
        """Wait until the dag-processor has parsed ``dag_id`` (the UI lists it)."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            try:
                return self.api("GET", f"/dags/{quote(dag_id)}")
            except LocalAirflowError as exc:
                if "404" not in str(exc) or time.monotonic() > deadline:
                    errors = self.api("GET", "/importErrors").get("import_errors")
                    raise LocalAirflowError(f"DAG {dag_id} not available: {exc}; import errors: {errors}") from None
            time.sleep(2)

    def trigger(self, dag_id: str, conf: Optional[dict] = None, run_id: Optional[str] = None) -> str:
        """Trigger a run as the UI's Trigger button does (no logical date; ``run_id``: the form's "Run id"
        field, else Airflow's own); returns its ``dag_run_id``."""
        self.wait_dag(dag_id)
        body: dict[str, Any] = {"logical_date": None, "conf": conf or {}}
        if run_id:
            body["dag_run_id"] = run_id
        run = self.api("POST", f"/dags/{quote(dag_id)}/dagRuns", body)
        return run["dag_run_id"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 900) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            run = self.api("GET", f"/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}")
            if run["state"] in TERMINAL_RUN_STATES:
                return run
            time.sleep(3)
        raise LocalAirflowError(
            f"run {dag_id}/{run_id} not finished within {timeout:.0f}s:\n{self.run_picture(dag_id, run_id)}"
        )

    def run_picture(self, dag_id: str, run_id: str, task_id: Optional[str] = None, lines: int = 25) -> str:
        """What Airflow shows of a run, for a failure message: every task instance's state (with its trigger and
        triggerer), then the log tail of ``task_id`` (else of every task instance not yet succeeded). Never
        raises (a failure message must not fail)."""
        try:
            tis = self.task_instances(dag_id, run_id)
        except Exception as exc:  # noqa: BLE001
            return f"(task instances of {dag_id}/{run_id} unavailable: {exc!r})"
        out = [f"task instances of {dag_id}/{run_id}:"]
        for ti in tis:
            name = ti["task_id"] + (f"[{ti['map_index']}]" if ti.get("map_index", -1) >= 0 else "")
            trigger = (ti.get("trigger") or {}).get("classpath", "").rsplit(".", 1)[-1]
            triggerer = (ti.get("triggerer_job") or {}).get("id")
            out.append(
                f"  {name}: {ti['state']} (try {ti.get('try_number')}"
                + (f", trigger {trigger} on triggerer {triggerer}" if trigger else "")
                + ")"
            )
        for ti in tis:
            if (task_id is not None and ti["task_id"] != task_id) or (task_id is None and ti["state"] == "success"):
                continue
            try:
                text = self.task_log(
                    dag_id, run_id, ti["task_id"], ti.get("map_index", -1), max(1, int(ti.get("try_number") or 1))
                )
                tail = "\n".join(f"    {line[:300]}" for line in text.splitlines()[-lines:])
            except Exception as exc:  # noqa: BLE001
                tail = f"    (log unavailable: {exc!r})"
            out.append(f"  log of {ti['task_id']} (try {ti.get('try_number')}), last {lines} lines:\n{tail}")
        return "\n".join(out)

    def set_task_state(self, dag_id: str, run_id: str, task_id: str, state: str, map_index: int = -1) -> dict:
        """Mark a task instance ``state`` (``failed``, ``success``, ``skipped``) as the UI's "Mark as" does:
        ``PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}`` with ``new_state``."""
        path = f"/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}/taskInstances/{quote(task_id)}"
        if map_index >= 0:
            path += f"/{map_index}"
        return self.api("PATCH", path, {"new_state": state})

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        body = self.api("GET", f"/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}/taskInstances?limit=100")
        return body["task_instances"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        return {
            f"{ti['task_id']}[{ti['map_index']}]" if ti["map_index"] >= 0 else ti["task_id"]: ti["state"]
            for ti in self.task_instances(dag_id, run_id)
        }

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        path = (
            f"/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}/taskInstances/{quote(task_id)}/xcomEntries/"
            f"{quote(key)}?map_index={map_index}&deserialize=true"
        )
        return self.api("GET", path)["value"]

    def triggerer_job_ids(self) -> list[int]:
        """Ids of the triggerer jobs the metadata DB knows as alive (one per running triggerer process)."""
        jobs = self.api("GET", "/jobs?job_type=TriggererJob&is_alive=true&limit=100").get("jobs") or []
        return [job["id"] for job in jobs]

    def task_log(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1, try_number: int = 1) -> str:
        """The task's log as the UI shows it (structured lines joined as text)."""
        path = (
            f"/dags/{quote(dag_id)}/dagRuns/{quote(run_id, safe='')}/taskInstances/{quote(task_id)}/logs/"
            f"{try_number}?full_content=true&map_index={map_index}"
        )
        body = self.api("GET", path)
        content = body.get("content") if isinstance(body, dict) else body
        if isinstance(content, list):
            lines = []
            for item in content:
                if isinstance(item, dict):
                    extra = {k: v for k, v in item.items() if k not in ("event", "timestamp", "level", "logger")}
                    lines.append(
                        " ".join(
                            str(x)
                            for x in (
                                item.get("timestamp", ""),
                                item.get("level", ""),
                                item.get("logger", ""),
                                item.get("event", ""),
                            )
                            if x
                        )
                        + (f" {extra}" if extra else "")
                    )
                else:
                    lines.append(str(item))
            return "\n".join(lines)
        return str(content)


class LocalAirflow(AirflowApi):
    """Airflow's four long-running components for ``env`` (an environment from ``minicluster.airflow_env``),
    and the REST client (:class:`AirflowApi`) logged in to them.

    ``start()`` starts a private PostgreSQL, migrates the DB, starts the components (their output goes to
    ``<AIRFLOW_HOME>/<component>.log``) and waits until the api-server reports the scheduler, dag-processor and
    triggerer healthy. ``stop()`` stops them all.
    """

    def __init__(
        self,
        env: dict,
        port: int = 0,
        parallelism: int = 4,
        username: str = "admin",
        password: str = "admin",
        airflow_bin: str = str(Path(sys.executable).parent / "airflow"),
        auth_manager: str = "simple",
    ):
        if auth_manager not in AUTH_MANAGERS:
            raise ValueError(f"auth_manager: {auth_manager!r} is not one of {', '.join(AUTH_MANAGERS)}")
        self.auth_manager = auth_manager
        self.port = port or free_port()
        super().__init__(f"http://127.0.0.1:{self.port}", username, password)
        self.parallelism = parallelism
        self.airflow_bin = airflow_bin
        self.procs: dict[str, subprocess.Popen] = {}
        self._db: Optional[LocalPostgres] = None
        self.home = Path(env["AIRFLOW_HOME"])
        self.env = dict(env)
        passwords = self.home / "simple_auth_manager_passwords.json"
        self.home.mkdir(parents=True, exist_ok=True)
        passwords.write_text(json.dumps({self.username: self.password}))
        self.env.update(
            {
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__AUTH_MANAGER": AUTH_MANAGERS[auth_manager],
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{self.username}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": self.url,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__API__EXPOSE_CONFIG": "False",
                # the scheduler's/worker's and the triggerer's log servers listen on fixed ports (8793/8794, on every
                # address) unless told: two local Airflows on one host (tests beside a demo, make compat beside make
                # test) would fight for them, and the loser's component dies
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            }
        )
        from airflow_provider_melon.version_compat import JWT_ISSUER_MUST_BE_SET, XCOM_DESERIALIZE_NEEDS_CONFIG

        if JWT_ISSUER_MUST_BE_SET:  # Airflow 3.0 with PyJWT 2.11+: no token without an issuer (version_compat.py)
            self.env.setdefault("AIRFLOW__API_AUTH__JWT_ISSUER", "melon-local-airflow")
        if XCOM_DESERIALIZE_NEEDS_CONFIG:  # Airflow 3.0: xcom() reads values deserialized
            self.env.setdefault("AIRFLOW__API__ENABLE_XCOM_DESERIALIZE_SUPPORT", "True")

    def log_file(self, component: str) -> Path:
        return self.home / f"{component}.log"

    def log_tail(self, component: str, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file(component).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def start(self, timeout: float = 300) -> "LocalAirflow":
        self._db = LocalPostgres().start()
        self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = self._db.url
        try:
            self._start_components(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_components(self, timeout: float) -> None:
        result = subprocess.run(
            [self.airflow_bin, "db", "migrate"], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if result.returncode != 0:
            raise LocalAirflowError(f"airflow db migrate failed:\n{(result.stdout + result.stderr)[-3000:]}")
        if self.auth_manager == "fab":
            self.fab_cli("fab-db", "migrate")
            self.fab_cli(
                "users",
                "create",
                "--username",
                self.username,
                "--password",
                self.password,
                "--role",
                "Admin",
                "--email",
                f"{self.username}@example.invalid",
                "--firstname",
                self.username,
                "--lastname",
                "admin",
            )
        for component in COMPONENTS:
            self.start_component(component)
        self.wait_healthy(timeout)

    def start_component(self, component: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start one component (its output appended to ``<AIRFLOW_HOME>/<component>.log``); ``env`` adds to the
        stack's environment for this process only (a config override for one component)."""
        args = [self.airflow_bin, component]
        if component == "api-server":
            args += ["--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log_file(component), "ab") as log:
            self.procs[component] = subprocess.Popen(
                args,
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self.procs[component]

    def kill_component(self, component: str, sig: int = signal.SIGKILL) -> None:
        """Kill one component's process group (SIGKILL: as a crashed host would lose it; no clean-up runs)."""
        proc = self.procs.pop(component)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(30)

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise LocalAirflowError(f"airflow {name} exited with code {proc.returncode}:\n{self.log_tail(name)}")

    def wait_healthy(self, timeout: float = 300) -> dict:
        """Wait until ``/api/v2/monitor/health`` reports every component healthy."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                last = self._http("GET", "/api/v2/monitor/health", auth=False)
                parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
                if all((last.get(p) or {}).get("status") == "healthy" for p in parts):
                    return last
            except (OSError, LocalAirflowError) as exc:
                last = exc
            time.sleep(1)
        raise LocalAirflowError(
            f"Airflow not healthy within {timeout:.0f}s (last: {last}); api-server log:\n{self.log_tail('api-server')}"
        )

    def stop(self, timeout: float = 30) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(5)
        self.procs.clear()
        if self._db is not None:
            self._db.stop()
            self._db = None

    def __enter__(self) -> "LocalAirflow":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def fab_cli(self, *args: str) -> str:
        """``airflow <args>`` that must succeed (the FAB commands: users, roles); returns its output."""
        result = self.cli(*args)
        if result.returncode != 0:
            raise LocalAirflowError(
                f"airflow {' '.join(args[:2])} failed ({result.returncode}):\n{(result.stdout + result.stderr)[-3000:]}"
            )
        return result.stdout

    def add_user(self, username: str, password: str, *, dags: tuple[str, ...] = ()) -> AirflowApi:
        """FAB only: a user whose own role may read just ``dags`` (none: no DAG), made as an admin would with the
        FAB CLI (``roles create``, ``sync-perm --include-dags``, ``roles add-perms -r DAG:<id> -a can_read``,
        ``users create``); returns a
        client logged in as that user. The DAGs must have been parsed (FAB makes their resources then)."""
        if self.auth_manager != "fab":
            raise LocalAirflowError("add_user needs auth_manager='fab' (SimpleAuthManager has no per-DAG rights)")
        role = f"{username}_role"
        self.fab_cli("roles", "create", role)
        for dag_id in dags:
            self.wait_dag(dag_id)
        if dags:
            self.fab_cli("sync-perm", "--include-dags")  # the DAGs' FAB resources (DAG:<id>)
        for dag_id in dags:
            self.fab_cli("roles", "add-perms", role, "-r", f"DAG:{dag_id}", "-a", "can_read")
        self.fab_cli(
            "users",
            "create",
            "--username",
            username,
            "--password",
            password,
            "--role",
            role,
            "--email",
            f"{username}@example.invalid",
            "--firstname",
            username,
            "--lastname",
            "user",
        )
        return AirflowApi(self.url, username, password, alive=self._check_alive)

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """``airflow <args>`` against this Airflow's home (e.g. ``dags trigger``, as an operator would type it)."""
        return subprocess.run([self.airflow_bin, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
