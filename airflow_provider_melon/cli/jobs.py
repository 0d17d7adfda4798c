"""``melon submit | status | ls | logs | kill | wait``: MeLoN jobs on any YARN cluster.

The cluster comes from an Airflow connection (``--conn-id``, with ``--webhdfs-conn-id`` for staging: the provider's
own hooks, as in Airflow), from RM URLs (``--rm``, repeatable or comma-separated for HA, ``--webhdfs``,
``--user``), or, when neither is given, from the Airflow connection ``yarn_default`` (installed from the wheel) or the
embedded mini cluster in ``--work-dir`` (in a checkout of the repository).
Output is human-readable (:mod:`.terminal`), or JSON with ``--json``; exit codes: :mod:`.exit_codes`
(``melon --help``).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any, Optional

from airflow_provider_melon.cli.exit_codes import (
    EXIT_CODES,
    INTERRUPTED,
    OK,
    TIMED_OUT,
    CliError,
    NotFound,
    Unreachable,
    UsageError,
    error_json,
    exit_code_for,
)
from airflow_provider_melon.cli.terminal import (
    Progress,
    UploadProgress,
    app_exit_code,
    app_state_text,
    app_summary,
    duration,
    first_line,
    json_only_stdout,
    print_json,
    print_table,
    succeeded,
)
from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.hadoop.app_state import STATES, TERMINAL_STATES

APP_ID = re.compile(r"^application_\d+_\d+$")
#: the RM may be restarting or failing over while we poll an app we have seen: keep polling this long
POLL_GRACE_S = 120.0


# ---- the cluster ----------------------------------------------------------------------------------------------
def _split_urls(values: Optional[list[str]]) -> list[str]:
    return [u.strip() for v in values or [] for u in v.split(",") if u.strip()]


def in_checkout() -> bool:
    """Whether ``melon`` runs from a checkout of the repository (``appmaster/`` beside the package, where
    ``make setup`` builds the embedded cluster's launcher) rather than from an installed wheel."""
    return (mc.APPMASTER_DIR / "pom.xml").is_file()


def embedded_cluster_home() -> str:
    """What an installed ``melon`` says of the embedded cluster: where it lives, and what to use instead."""
    return (
        f"the embedded Hadoop cluster runs from a checkout of the airflow-provider-melon repository, not from "
        f"an installed package ({mc.REPO_ROOT}): its launcher is built there from appmaster/ (JDK 17, Maven). "
        "In a checkout, `make up` (or `make setup` then `.venv/bin/melon minicluster start`). Against your "
        "cluster, the job commands use the Airflow connection yarn_default (or --conn-id ID, or --rm URL)"
    )


class Cluster:
    """The hooks for the cluster the command line names (see the module docstring)."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rm_urls = _split_urls(args.rm)
        if self.rm_urls and args.conn_id:
            raise UsageError("give the cluster either as --conn-id or as --rm, not both")
        if not self.rm_urls and not args.conn_id and not in_checkout() and Path(args.work_dir) == mc.DEFAULT_WORK_DIR:
            # installed, no cluster named: the Airflow connection, as `melon doctor` (an embedded cluster started
            # from a checkout is named by its --work-dir)
            args.conn_id = "yarn_default"
        self.mode = "rm" if self.rm_urls else "conn" if args.conn_id else "embedded"
        self.details = None
        if self.mode == "embedded":
            self.details = mc.read_details(Path(args.work_dir))
            if self.details is None:
                raise Unreachable(
                    f"no cluster given and no mini cluster running in {args.work_dir}: pass --rm URL "
                    "or --conn-id ID (or start one with `melon minicluster start`)"
                )
        self._yarn = None

    @property
    def yarn(self):
        if self._yarn is None:
            from airflow_provider_melon.hooks.yarn import YarnHook

            if self.mode == "conn":
                self._yarn = YarnHook(self.args.conn_id, user=self.args.user)
            else:
                urls = self.rm_urls or [self.details.rm_web_url]
                user = self.args.user or (self.details.user if self.details else None)
                self._yarn = YarnHook(rm_urls=urls, user=user, retries=1, backoff=0.5)
        return self._yarn

    def melon_hook(self, resolve_fs: bool = True):
        """A MelonHook for staging and submitting (or pruning): the connection's extras, the embedded cluster's
        details, or the submit options (which override either). ``resolve_fs=False``: leave an unknown
        fs.defaultFS unset rather than ask the RM (``melon doctor`` reports it)."""
        from airflow_provider_melon.hooks.melon import MelonHook

        a = self.args
        opt = lambda name: getattr(a, name, None)  # noqa: E731 - submit's options; other commands lack them
        env = dict(mc.container_env(self.details)) if self.details else {}
        for item in opt("container_env") or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise UsageError(f"--container-env {item!r}: expected KEY=VALUE")
            env[key] = value
        webhdfs = a.webhdfs or (self.details.webhdfs_url if self.details else None)
        if self.mode == "rm" and not webhdfs:
            raise UsageError(
                f"{a.command} with --rm needs --webhdfs URL (the NameNode's HTTP address, e.g. "
                "http://namenode:9870), to reach the staging folder"
            )
        yarn = self.yarn
        client = None
        if webhdfs:
            from hdfs import InsecureClient

            client = InsecureClient(webhdfs.rstrip("/").rsplit("/webhdfs/v1", 1)[0], user=yarn.remote_user)
        details = self.details
        hook = MelonHook(
            a.conn_id or "yarn_default",
            a.webhdfs_conn_id or "webhdfs_default",
            yarn_hook=yarn,
            hdfs_client=client,
            am_classpath=opt("am_classpath") or (details.am_classpath if details else None),
            default_python=opt("python") or (sys.executable if details else None),
            container_env=env,
            fs_default_fs=opt("fs_default_fs") or (details.fs_default_fs if details else None),
            staging_retry_s=opt("staging_retry_s"),  # None: the hook's default, the same as in Airflow
            gpu_context_mb=opt("gpu_context_mb")
            if opt("gpu_context_mb") is not None
            else (mc.GPU_CONTEXT_MB if details else None),
        )
        if not hook.fs_default_fs and resolve_fs:
            value = yarn.rm_conf("fs.defaultFS")  # the RM's own configuration names the cluster's file system
            if not value or not value.startswith("hdfs://"):
                raise UsageError(
                    f"the cluster's fs.defaultFS is unknown (the RM says {value!r}): pass "
                    "--fs-default-fs hdfs://namenode:8020"
                )
            hook.fs_default_fs = value
        return hook


def _check_app_id(app_id: str) -> str:
    if not APP_ID.match(app_id):
        raise UsageError(f"{app_id!r} is not a YARN application id (application_<cluster timestamp>_<sequence>)")
    return app_id


# ---- polling --------------------------------------------------------------------------------------------------
def _transient(exc: BaseException) -> bool:
    """An RM that is away (restarting, failing over): no answer, a 5xx, a 307, a 404 while it recovers."""
    from airflow_provider_melon.hadoop.rm_json import YarnApiError

    status = getattr(exc, "status", "no")
    away = status is None or status == 307 or (isinstance(status, int) and (status >= 500 or status == 404))
    return isinstance(exc, YarnApiError) and away


def _watch(yarn, app_id: str, interval: float, timeout: Optional[float], first: Optional[dict], seen):
    """The :mod:`~airflow_provider_melon.hadoop.watch` of the app, ``seen`` called with each RM record: once the app
    has been seen, an RM that is away is ridden out for up to :data:`POLL_GRACE_S`."""
    from airflow_provider_melon.hadoop.watch import Watch, WatchPolicy, drive, watch

    deadline = None if timeout is None else time.monotonic() + timeout
    policy = WatchPolicy(interval, deadline, transient=_transient, grace_s=POLL_GRACE_S, look_at_deadline=True)
    io = {"now": time.monotonic, "get": lambda: yarn.get_application(app_id), "seen": seen, "sleep": time.sleep}
    return drive(watch(Watch(app_id, policy), first), io)


def wait_for(
    yarn, app_id: str, *, timeout: Optional[float], interval: float, bar: Progress, first: Optional[dict] = None
) -> Optional[dict]:
    """Watch the app until it ends: its last RM record, or None when ``timeout`` passed first."""

    def seen(app: dict) -> None:
        bar.update(
            float(app.get("progress") or 0) / 100,
            f"{app_state_text(app)} {duration(int(app.get('elapsedTime') or 0) / 1000)} {app_id}",
        )

    outcome = _watch(yarn, app_id, interval, timeout, first, seen)
    bar.clear()
    return None if outcome.verdict == "timeout" else outcome.app


# ---- commands -------------------------------------------------------------------------------------------------
def cmd_submit(args, cluster: Cluster) -> int:
    from airflow_provider_melon.spec import JobSpec

    path = Path(args.spec)
    if not path.is_file():
        raise UsageError(f"job spec {args.spec}: no such file")
    text = path.read_text()
    base = path.resolve().parent
    spec = JobSpec.from_json(text, base_dir=base) if path.suffix == ".json" else JobSpec.from_yaml(text, base_dir=base)
    hook = cluster.melon_hook()
    key = args.learn_as or f"jobs/{spec.name}"
    try:
        spec, notes = hook.resolve_learned(spec, key)
    except ValueError as exc:
        raise UsageError(f"job spec {args.spec}: {exc}") from None
    for line in (line for lines in notes.values() for line in lines):
        print(line, file=sys.stderr)
    bar = Progress()
    hook.hdfs = UploadProgress(hook.hdfs, bar)
    result = hook.submit(spec, tags=args.tag or None)
    app_id, report = result["app_id"], result["staging"]
    out: dict[str, Any] = {
        "app_id": app_id,
        "name": spec.name,
        "uploaded_bytes": report.uploaded_bytes,
        "staged": {
            k: {"url": f.url, "size": f.size, "uploaded_bytes": f.uploaded_bytes} for k, f in report.files.items()
        },
    }
    code = OK
    if not args.json:
        cached = sum(1 for f in report.files.values() if not f.uploaded_bytes)
        print(
            f"submitted {app_id} ({spec.name}): {report.uploaded_bytes} bytes uploaded, "
            f"{cached} of {len(report.files)} staged files cached"
        )
    if args.wait:
        app = wait_for(cluster.yarn, app_id, timeout=args.timeout, interval=args.interval, bar=bar)
        if app is None:
            out["final"] = None
            code = TIMED_OUT
            if not args.json:
                print(f"{app_id} still running after {args.timeout:g} s", file=sys.stderr)
        else:
            out["final"] = app_summary(app)
            code = app_exit_code(app)
            try:  # gpu_memory: auto and priority: auto learn from this run (docs/job-spec.md)
                out["memory_history"] = hook.record_run(key, app_id, hook.final_status(app_id), app)
            except Exception as exc:  # noqa: BLE001 - the run's outcome stands
                print(f"run {app_id} not recorded in its history: {exc}", file=sys.stderr)
            if not args.json:
                _print_outcome(app)
    if args.json:
        print_json(out)
    return code


def cmd_prune(args, cluster: Cluster) -> int:
    from airflow_provider_melon.hadoop import staging_gc
    from airflow_provider_melon.hadoop.log_follower import human_bytes

    try:
        older_than = staging_gc.parse_age(args.older_than)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    hook = cluster.melon_hook()
    decision = staging_gc.prune(hook, older_than, dry_run=args.dry_run)
    if args.json:
        print_json({"staging_dir": hook.staging_dir, "dry_run": args.dry_run, **decision.as_dict()})
        return OK
    verb = "would delete" if args.dry_run else "deleted"
    for e in decision.delete:
        print(f"{verb} {e.kind:9} {e.path}" + (f" ({human_bytes(e.bytes)})" if e.bytes else ""))
    for e, why in decision.kept:
        print(f"kept     {e.kind:9} {e.path}: {why}")
    print(
        f"{hook.staging_dir}: {verb} {len(decision.delete)} entries, {human_bytes(decision.freed_bytes)}; "
        f"kept {len(decision.kept)} old enough to go that are still in use"
    )
    return OK


def _print_outcome(app: dict) -> None:
    print(f"{app.get('id')} {app_state_text(app)} after {duration(int(app.get('elapsedTime') or 0) / 1000)}")
    if not succeeded(app) and app.get("diagnostics"):
        print(f"  diagnostics: {first_line(app['diagnostics'], 400)}")


def cmd_status(args, cluster: Cluster) -> int:
    app = cluster.yarn.get_application(_check_app_id(args.app_id))
    am = None
    if app.get("state") == "RUNNING":
        try:  # the AM's own view of its tasks, through the RM's proxy: best effort (it may be starting or ending)
            am = cluster.yarn.am_status(args.app_id)
        except Exception as exc:  # noqa: BLE001
            logging.getLogger(__name__).info("AM status of %s unavailable: %s", args.app_id, exc)
    if args.json:
        print_json({"app": app_summary(app), "am": am})
        return app_exit_code(app)
    s = app_summary(app)
    print(f"{s['id']}  {s['name']}")
    print(f"  state     {app_state_text(app)}   progress {s['progress']:.0f}%   elapsed {duration(s['elapsed_s'])}")
    print(f"  user      {s['user']}   queue {s['queue']}   type {s['type']}   tags {','.join(s['tags']) or '-'}")
    if s["tracking_url"]:
        print(f"  tracking  {s['tracking_url']}")
    if s["diagnostics"]:
        print(f"  diagnostics  {first_line(s['diagnostics'], 400)}")
    gang = (am or {}).get("gang") or {}
    if gang.get("hold_s") and not gang.get("formed"):
        print(f"  gang      {gang.get('message')}")
    tasks = (am or {}).get("tasks") or []
    if tasks:
        print(f"  tasks ({(am or {}).get('state') or 'AM'}):")
        for t in tasks:
            where = t.get("node_id") or t.get("host") or "-"
            extra = f" exit {t['exit_code']}" if t.get("exit_code") is not None else ""
            print(
                f"    {t.get('role')}:{t.get('index')}  {t.get('state')}  {t.get('container_id') or '-'}  "
                f"{where}{extra}"
            )
    return app_exit_code(app)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_DURATION_UNITS_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _duration_s(text: str, option: str) -> float:
    """``90s``, ``30m``, ``6h``, ``2d``, ``1w`` or plain seconds → seconds, more than 0."""
    match = _DURATION.match(str(text))
    seconds = float(match.group(1)) * _DURATION_UNITS_S[match.group(2).lower()] if match else 0.0
    if seconds <= 0:
        raise UsageError(f"{option} {text!r}: expected a duration above 0: 90s, 30m, 6h, 2d, 1w or seconds")
    return seconds


def cmd_ls(args, cluster: Cluster) -> int:
    states = [s.strip().upper() for v in args.state or [] for s in v.split(",") if s.strip()]
    bad = [s for s in states if s not in STATES]
    if bad:
        raise UsageError(f"--state {','.join(bad)}: YARN states are {', '.join(STATES)}")
    if args.limit < 0:
        raise UsageError(f"--limit {args.limit}: must be 0 (all) or more")
    tags = [t.strip().lower() for v in args.tag or [] for t in v.split(",") if t.strip()]
    since_ms = int((time.time() - _duration_s(args.newer_than, "--newer-than")) * 1000) if args.newer_than else None
    apps = cluster.yarn.list_applications(
        states=states or None,
        applicationTags=tags or None,
        applicationTypes=None if args.all_types else "MELON",
        user=args.owner or None,
        queue=args.queue or None,
        startedTimeBegin=since_ms,
    )
    if tags:  # the RM matches any tag; every one named must be there
        apps = [a for a in apps if set(tags) <= set(a.get("applicationTagList") or [])]
    if args.name:  # the RM has no name filter: a shell pattern, matched here
        apps = [a for a in apps if fnmatch.fnmatchcase(str(a.get("name") or ""), args.name)]
    if not args.all_types:
        apps = [a for a in apps if str(a.get("applicationType") or "").upper() == "MELON"]
    apps.sort(key=lambda a: int(a.get("startedTime") or 0), reverse=True)
    if args.limit:
        apps = apps[: args.limit]
    rows = [app_summary(a) for a in apps]
    if args.json:
        print_json(rows)
        return OK
    print_table(
        ("ID", "NAME", "USER", "STATE", "PROGRESS", "ELAPSED"),
        [
            (
                r["id"],
                first_line(r["name"], 40),
                r["user"] or "-",
                f"{r['state']}/{r['final_status']}",
                f"{r['progress']:.0f}%",
                duration(r["elapsed_s"]),
            )
            for r in rows
        ],
    )
    if not rows:
        print("(no applications)", file=sys.stderr)
    return OK


def cmd_wait(args, cluster: Cluster) -> int:
    app_id = _check_app_id(args.app_id)
    first = cluster.yarn.get_application(app_id)  # an unknown id fails here (4), not after a grace period
    app = wait_for(cluster.yarn, app_id, timeout=args.timeout, interval=args.interval, bar=Progress(), first=first)
    if app is None:
        print(f"error: {app_id} still running after {args.timeout:g} s (wait --timeout)", file=sys.stderr)
        return TIMED_OUT
    if args.json:
        print_json(app_summary(app))
    else:
        _print_outcome(app)
    return app_exit_code(app)


def cmd_kill(args, cluster: Cluster) -> int:
    yarn = cluster.yarn
    app_id = _check_app_id(args.app_id)
    app = yarn.get_application(app_id)
    if app.get("state") in TERMINAL_STATES:
        message = f"{app_id} already ended ({app_state_text(app)}): nothing to kill"
    else:
        yarn.kill_application(app_id)
        if args.no_wait:
            app, message = yarn.get_application(app_id), f"kill of {app_id} requested"
        else:
            ended = wait_for(yarn, app_id, timeout=args.timeout, interval=1.0, bar=Progress(), first=None)
            if ended is None:
                print(
                    f"error: kill of {app_id} requested, but it is still running after {args.timeout:g} s",
                    file=sys.stderr,
                )
                return TIMED_OUT
            app, message = ended, f"{app_id} {app_state_text(ended)}"
    if args.json:
        print_json(app_summary(app))
    else:
        print(message)
    return OK


def cmd_logs(args, cluster: Cluster) -> int:
    from airflow_provider_melon.hadoop import nodemanager as nm_logs

    yarn = cluster.yarn
    app_id = _check_app_id(args.app_id)
    app = yarn.get_application(app_id)
    logs = nm_logs.NodeLogs(yarn, app_id)

    def chosen(ref) -> bool:
        only = args.container
        return not only or any(c in (ref.id, ref.label) or ref.id.endswith("_" + c.lstrip("_")) for c in only)

    if args.follow:
        return _follow(args, yarn, app, logs, chosen)
    out = []
    served, found = _log_files(logs, app.get("state") not in TERMINAL_STATES, chosen, args.file)
    for ref, name, size in found:
        got = logs.fetch(ref, name) if size else (0, b"")
        text = got[1].decode("utf-8", "replace") if got else ""
        out.append({"container": ref.id, "label": ref.label, "node": ref.node_id, "file": name, "text": text})
    if not served:
        _no_logs(app, logs)
    if args.json:
        print_json({"app": app_summary(app), "logs": out})
        return OK
    for item in out:
        if not item["text"]:
            continue
        print(f"==> {item['label']} {item['container']} on {item['node'] or '?'}: {item['file']} <==")
        sys.stdout.write(item["text"] if item["text"].endswith("\n") else item["text"] + "\n")
    if not out:
        print(f"({app_id}: no log output yet)", file=sys.stderr)
    return OK


def _log_files(logs, running: bool, chosen, wanted) -> tuple[bool, list]:
    """``(served, [(container ref, file name, size)])``: the wanted files of the chosen containers, and whether any
    NodeManager served a container's listing at all."""
    from airflow_provider_melon.hadoop import nodemanager as nm_logs

    served, found = False, []
    for ref in logs.discover(running):
        files = logs.files(ref)
        if files is None:
            continue
        served = True
        if chosen(ref):
            found += [(ref, name, size) for name, size in files.items() if nm_logs.wanted_file(name, wanted)]
    return served, found


def _no_logs(app: dict, logs) -> None:
    """No NodeManager served any log of the app: say why (raises), unless it simply has not started yet."""
    from airflow_provider_melon.hadoop import nodemanager as nm_logs

    if logs.unreachable:
        raise Unreachable(
            f"NodeManager(s) {', '.join(sorted(logs.unreachable))} unreachable: cannot read the logs of {app.get('id')}"
        )
    if app.get("state") in TERMINAL_STATES:
        raise NotFound(nm_logs.gone_message(str(app.get("id")), app))


def _follow(args, yarn, app: dict, logs, chosen) -> int:
    """Print every log line once, as it comes, until the app ends (then what is left, and stop)."""
    from airflow_provider_melon.hadoop import nodemanager as nm_logs

    tails: dict[tuple[str, str], nm_logs.LogTail] = {}
    served = False

    def emit(ref, name: str, lines: list[str]) -> None:
        for line in lines:
            if args.json:
                print_json({"container": ref.id, "label": ref.label, "file": name, "line": line}, one_line=True)
            else:
                print(f"[{ref.label} {name}] {line}")
        if lines:
            sys.stdout.flush()

    def seen(app: dict) -> None:
        nonlocal served
        listed, found = _log_files(logs, app.get("state") not in TERMINAL_STATES, chosen, args.file)
        served = served or listed
        for ref, name, size in found:
            tail = tails.setdefault((ref.id, name), nm_logs.LogTail(logs, ref, name))
            emit(ref, name, tail.lines(size))

    app = _watch(yarn, str(app["id"]), args.interval, None, app, seen).app
    for (cid, name), tail in tails.items():
        emit(logs.containers[cid], name, tail.flush())
    if not served:
        _no_logs(app, logs)
    return OK


# ---- the command line -----------------------------------------------------------------------------------------
def cluster_options() -> argparse.ArgumentParser:
    """The options naming the cluster (``--conn-id``/``--rm``/``--webhdfs``/``--user``/``--work-dir``, ``--json``,
    ``-v``): one parent parser for every command that talks to a cluster (the job commands, ``melon doctor``)."""
    parent = argparse.ArgumentParser(add_help=False)
    g = parent.add_argument_group(
        "cluster (default: the Airflow connection yarn_default; in a checkout of the "
        "repository, the embedded mini cluster in --work-dir)"
    )
    g.add_argument("--conn-id", help="Airflow connection of the ResourceManager (type yarn), e.g. yarn_default")
    g.add_argument(
        "--webhdfs-conn-id", help="Airflow connection of WebHDFS, for submit's staging (default webhdfs_default)"
    )
    g.add_argument(
        "--rm",
        action="append",
        metavar="URL",
        help="ResourceManager web URL (http://rm:8088); repeat or comma-separate for HA",
    )
    g.add_argument("--webhdfs", metavar="URL", help="NameNode HTTP URL for submit's staging (http://nn:9870)")
    g.add_argument(
        "--user", help="user for simple auth (default: the connection's login, else HADOOP_USER_NAME, else your login)"
    )
    g.add_argument("--work-dir", default=str(mc.DEFAULT_WORK_DIR), help="the embedded cluster's folder")
    parent.add_argument("--json", action="store_true", help="print JSON")
    parent.add_argument("-v", "--verbose", action="store_true", help="log what the hooks do (on stderr)")
    return parent


def add_commands(sub, formatter) -> None:
    """Add the job commands to the ``melon`` parser's sub-parsers."""
    common = cluster_options()

    def add(name: str, help_: str, func) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name, parents=[common], help=help_, description=help_ + ".", epilog=EXIT_CODES, formatter_class=formatter
        )
        p.set_defaults(func=run, command_func=func)
        return p

    sb = add("submit", "stage and submit a job spec (YAML or JSON file)", cmd_submit)
    sb.add_argument("spec", help="the job spec file (.yaml, .yml or .json)")
    sb.add_argument("--tag", action="append", help="an application tag (repeatable), besides the spec's tags")
    sb.add_argument(
        "--wait",
        action="store_true",
        help="then wait until the app ends (exit code as `wait`); its GPU memory is recorded for gpu_memory: auto",
    )
    sb.add_argument(
        "--learn-as",
        metavar="KEY",
        help="the GPU memory history gpu_memory: auto learns from and "
        "--wait records to: DAG_ID/TASK_ID shares an Airflow task's (default jobs/<job name>)",
    )
    sb.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds (exit 124)")
    sb.add_argument("--interval", type=float, default=2.0, help="with --wait: seconds between polls")
    s = sb.add_argument_group("cluster settings a yarn connection's extra would give (override it)")
    s.add_argument("--fs-default-fs", help="hdfs://namenode:8020 (default: the RM's fs.defaultFS)")
    s.add_argument("--am-classpath", help="the AM's Hadoop classpath (default: YARN's application classpath)")
    s.add_argument("--python", help="the NodeManagers' interpreter for jobs that name none (default python3)")
    s.add_argument("--container-env", action="append", metavar="KEY=VALUE", help="environment of every container")
    s.add_argument(
        "--gpu-context-mb",
        type=int,
        help="MiB a shared task reserves on its GPU besides its expected memory before its runs teach it more, for "
        "the CUDA context and the libraries' buffers (default [melon] gpu_context_mb, else the framework's first-run "
        "figure; 0 on the embedded cluster)",
    )
    s.add_argument(
        "--staging-retry-s",
        type=float,
        default=None,
        help="how long staging retries a NameNode that is away (default: [melon] staging_retry_s, "
        "else 120, as in Airflow)",
    )

    st = add("status", "an application's state, progress and tasks (exit 1 if it FAILED or was KILLED)", cmd_status)
    st.add_argument("app_id")

    ls = add("ls", "list MeLoN applications, newest first", cmd_ls)
    ls.add_argument(
        "--state",
        action="append",
        help="only these YARN states (repeatable or comma-separated: RUNNING, FINISHED, FAILED, KILLED, ACCEPTED, ...)",
    )
    ls.add_argument("--tag", action="append", help="only apps carrying this tag (repeatable: all of them)")
    ls.add_argument("--owner", metavar="USER", help="only apps of this user (--user is who you act as)")
    ls.add_argument("--queue", help="only apps in this YARN queue")
    ls.add_argument(
        "--name", metavar="PATTERN", help="only apps whose name matches this shell pattern (mnist*, *-nightly)"
    )
    ls.add_argument(
        "--newer-than", metavar="AGE", help="only apps started less than this long ago (90s, 30m, 6h, 2d, 1w)"
    )
    ls.add_argument("--limit", type=int, default=20, help="at most this many (default 20; 0: all)")
    ls.add_argument("--all-types", action="store_true", help="not only MeLoN apps (Spark, MapReduce, ...)")

    lg = add("logs", "the AM's and tasks' container logs, from the NodeManagers", cmd_logs)
    lg.add_argument("app_id")
    lg.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="print new lines as they come, until the app ends (with --json: one JSON object per line)",
    )
    lg.add_argument(
        "--file",
        action="append",
        help="only this log file (stdout, stderr, AppMaster.stdout, ...; "
        "repeatable; default: all but the NodeManager's launch files)",
    )
    lg.add_argument(
        "--container",
        action="append",
        help="only this container: its id, id suffix (000002) or task (am, worker:0); repeatable",
    )
    lg.add_argument("--interval", type=float, default=2.0, help="with -f: seconds between polls")

    kl = add("kill", "kill an application and wait until YARN reports it KILLED", cmd_kill)
    kl.add_argument("app_id")
    kl.add_argument("--no-wait", action="store_true", help="return once the RM accepted the kill")
    kl.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for KILLED (default 120)")

    pr = add(
        "prune",
        "delete the staging cache objects no job used lately and the plans of ended apps (never what a live app uses)",
        cmd_prune,
    )
    pr.add_argument(
        "--older-than",
        default="7d",
        help="last used before this long ago: 7d, 12h, 30m or "
        "seconds; at least 1h, younger entries may be uploads in flight (default 7d)",
    )
    pr.add_argument("--dry-run", action="store_true", help="list what would go, delete nothing")

    wt = add("wait", "wait until an application ends (exit 0 if it SUCCEEDED, 1 if not)", cmd_wait)
    wt.add_argument("app_id")
    wt.add_argument("--timeout", type=float, help="give up after this many seconds (exit 124)")
    wt.add_argument("--interval", type=float, default=2.0, help="seconds between polls (default 2)")


#: the loggers a `melon` command sets to ERROR (INFO with --verbose) for its process
QUIETED_LOGGERS = ("airflow_provider_melon", "hdfs", "airflow", "urllib3")


def _quiet_logging(verbose: bool) -> None:
    """Airflow's logging writes to stdout; the CLI keeps stdout for its output, so log records go to stderr, and
    only errors unless ``--verbose``."""
    importlib.import_module("airflow_provider_melon.hooks.yarn")  # importing Airflow sets up its logging first

    from airflow_provider_melon.version_compat import stream_to_stderr

    for handler in list(logging.root.handlers):
        if isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) is sys.stdout:
            stream_to_stderr(logging.root, handler)
    if not logging.root.handlers:
        logging.basicConfig(stream=sys.stderr)
    level = logging.INFO if verbose else logging.ERROR
    for name in QUIETED_LOGGERS:
        logging.getLogger(name).setLevel(level)


def run(args) -> int:
    """Run a job command; every failure becomes one line on stderr and its exit code (:data:`EXIT_CODES`), and
    with ``--json`` also a JSON object on stdout (:func:`~.exit_codes.error_json`)."""
    try:
        if getattr(args, "app_id", None) is not None:
            _check_app_id(args.app_id)  # before looking for the cluster: bad input is told first
        with json_only_stdout(getattr(args, "json", False)):
            _quiet_logging(args.verbose)
            return args.command_func(args, Cluster(args))
    except KeyboardInterrupt:
        if getattr(args, "json", False):
            print_json(error_json(INTERRUPTED, "interrupted", args), one_line=True)
        return INTERRUPTED
    except BrokenPipeError:  # `melon logs APP | head`: the reader has what it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except Exception as exc:  # noqa: BLE001 - the one place errors become exit codes
        code, message = exit_code_for(exc, args)
        print(f"error: {message}", file=sys.stderr)
        if getattr(args, "json", False):
            print_json(error_json(code, message, args, exc), one_line=True)
        if args.verbose and not isinstance(exc, CliError):
            import traceback

            traceback.print_exc()
        return code
