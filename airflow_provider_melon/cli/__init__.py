# PYTHON_ARGCOMPLETE_OK (argcomplete: `melon` completes in a shell after `eval "$(register-python-argcomplete melon)"`)
"""``melon`` command line: MeLoN jobs on any YARN cluster (``melon submit|status|ls|logs|kill|wait``, in
:mod:`airflow_provider_melon.cli.jobs`), the embedded mini cluster, cluster checks (``melon doctor``), packing a
Python environment, and the parameter-server planner (``melon plan ...``,
:func:`airflow_provider_melon.planner.plan_main`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import argcomplete

from airflow_provider_melon import __version__
from airflow_provider_melon.dev import minicluster as mc

#: ``melon --help``'s text: plain, as a terminal shows it (the module docstring above is reST for the API docs)
DESCRIPTION = """\
MeLoN on any YARN cluster: jobs (submit, status, ls, logs, wait, kill, prune), a task's learned GPU memory
(memory show|forget), cluster checks (doctor), the embedded Hadoop cluster (minicluster, up), packing a Python
environment (pack-env) and the parameter-server planner (plan). `melon COMMAND --help` lists a command's options."""


def _embedded_cluster_here() -> None:
    from airflow_provider_melon.cli import jobs as cli_jobs

    if not cli_jobs.in_checkout():  # an installed wheel: say where it lives, write nothing into site-packages
        raise mc.MiniClusterError(cli_jobs.embedded_cluster_home())


def _cluster(args) -> int:
    work_dir = Path(args.work_dir)
    if args.action == "start":
        _embedded_cluster_here()
        details = mc.start(
            work_dir,
            port_base=args.port_base,
            nodemanagers=args.nodemanagers,
            gpus=args.gpus,
            gpu_memory_mb=args.gpu_memory_mb,
            nm_memory_mb=args.nm_memory_mb,
            timeout=args.timeout,
            secure=args.secure,
            tenants=args.tenants,
            token_renew_s=args.token_renew_s,
        )
        print(json.dumps(mc.status(details.work_dir), indent=2))
        print("# point your own Airflow at this cluster (connections as environment variables):", file=sys.stderr)
        for line in mc.connection_exports(details, sys.executable):
            print(line, file=sys.stderr)
        return 0
    if args.action == "stop":
        print("stopped" if mc.stop(work_dir) else "not running")
        return 0
    info = mc.status(work_dir)
    print(json.dumps(info, indent=2))
    return 0 if info["running"] else 1


def _up(args) -> int:
    """The embedded cluster and a real Airflow with the example DAGs, until Ctrl-C (or SIGTERM)."""
    import signal
    import time

    from airflow_provider_melon.dev.local_airflow import LocalAirflow

    def stop_on(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    _embedded_cluster_here()
    signal.signal(signal.SIGTERM, stop_on)
    signal.signal(signal.SIGINT, stop_on)
    work_dir, home = Path(args.work_dir), Path(args.airflow_home)
    dags = Path(args.dags).resolve()
    print(f"[up] starting the mini cluster in {work_dir} ...", flush=True)
    details = mc.start(work_dir, port_base=args.port_base, timeout=args.timeout)
    stack = LocalAirflow(mc.airflow_env(details, home, dags, sys.executable), port=args.port, password=args.password)
    try:
        print(f"[up] starting Airflow (api-server, scheduler, dag-processor, triggerer) in {home} ...", flush=True)
        stack.start()
        print(f"[up] Airflow UI   {stack.url}  (login {stack.username} / {args.password})")
        print(f"[up] MeLoN pages  {stack.url}/melon/gpus  {stack.url}/melon/jobs  (also in the UI's Browse menu)")
        print(f"[up] YARN RM      {details.rm_web_url}   WebHDFS {details.webhdfs_url}")
        print(f"[up] DAGs from {dags}; logs in {home}. Ctrl-C stops everything.", flush=True)
        while True:
            stack._check_alive()
            time.sleep(2)
    except KeyboardInterrupt:
        print("\n[up] stopping ...", flush=True)
        return 0
    finally:
        stack.stop()
        mc.stop(work_dir)
        print("[up] Airflow and the mini cluster stopped", flush=True)


def melon_hook_for_cluster(work_dir: Path):
    """A MelonHook bound to the embedded cluster in ``work_dir`` (no Airflow connection needed)."""
    from hdfs import InsecureClient

    from airflow_provider_melon.hooks.melon import MelonHook
    from airflow_provider_melon.hooks.yarn import YarnHook

    details = mc.read_details(work_dir)
    if details is None:
        raise SystemExit(f"no running mini cluster in {work_dir}: run `melon minicluster start` first")
    if details.secure:
        return _secure_melon_hook(details)
    return MelonHook(
        yarn_hook=YarnHook(rm_urls=[details.rm_web_url], user=details.user),
        hdfs_client=InsecureClient(details.webhdfs_url.rsplit("/webhdfs/v1", 1)[0], user=details.user),
        user=details.user,
        am_classpath=details.am_classpath,
        default_python=sys.executable,
        container_env=mc.container_env(details),
        fs_default_fs=details.fs_default_fs,
        gpu_context_mb=mc.GPU_CONTEXT_MB,
    )


def _secure_melon_hook(details, name: str = "airflow"):
    """The same on a Kerberos mini cluster: the ``name`` principal from its keytab, SPNEGO to RM and WebHDFS."""
    from airflow_provider_melon.hooks.melon import MelonHook
    from airflow_provider_melon.hooks.yarn import YarnHook

    yarn = YarnHook(
        rm_urls=[details.rm_web_url],
        auth="kerberos",
        kerberos_principal=details.principal(name),
        kerberos_keytab=details.keytab(name),
        kerberos_ccache=details.ccache(name),
        krb5_conf=details.krb5_conf,
    )
    tickets = yarn._kerberos_tickets()
    tickets.ensure(force=True)
    return MelonHook(
        yarn_hook=yarn,
        hdfs_client=tickets.webhdfs_client(details.webhdfs_url.rsplit("/webhdfs/v1", 1)[0]),
        user=name,
        am_classpath=details.am_classpath,
        default_python=sys.executable,
        container_env=mc.container_env(details),
        fs_default_fs=details.fs_default_fs,
        gpu_context_mb=mc.GPU_CONTEXT_MB,
    )


def _doctor(args) -> int:
    """``melon doctor``: the cluster as the job commands name it (``--rm/--webhdfs/--user``, or Airflow connections:
    ``yarn_default`` and ``webhdfs_default`` when neither is given), through :func:`cli_jobs.run` (its exit codes
    for what stops the checks from starting: a missing connection, bad usage)."""
    from airflow_provider_melon.cli import jobs as cli_jobs

    if not args.rm and not args.conn_id:
        args.conn_id = "yarn_default"
    if args.conn_id and not args.webhdfs_conn_id and not args.webhdfs:
        args.webhdfs_conn_id = "webhdfs_default"
    return cli_jobs.run(args)


def _doctor_checks(args, cluster) -> int:
    from airflow_provider_melon.cli.doctor import Doctor
    from airflow_provider_melon.cli.findings import as_json, render
    from airflow_provider_melon.cli.terminal import json_stream

    hook = cluster.melon_hook(resolve_fs=False)
    findings = Doctor(
        hook,
        queue=args.queue,
        submit_test=args.submit_test,
        timeout=args.timeout,
        fs_from_connection=cluster.mode == "conn",
    ).run()
    print(as_json(findings) if args.json else render(findings), file=json_stream() if args.json else sys.stdout)
    return 1 if any(f.status == "fail" for f in findings) else 0


def _pack_env(args) -> int:
    from airflow_provider_melon.cli.pack_env import pack_env

    out = pack_env(args.output, venv=args.venv, conda=args.conda)
    print(out)
    return 0


def main(argv: list[str] | None = None) -> int:
    from airflow_provider_melon.cli import jobs as cli_jobs
    from airflow_provider_melon.cli import memory as cli_memory
    from airflow_provider_melon.cli.exit_codes import EXIT_CODES, USAGE, error_json

    json_errors = "--json" in (sys.argv[1:] if argv is None else argv)

    class Parser(argparse.ArgumentParser):
        """argparse's parser (and its sub-parsers'), whose usage errors under ``--json`` are also a JSON object on
        stdout, as every other error of a command is (``cli_jobs.run``)."""

        def error(self, message: str):  # type: ignore[override]
            if json_errors:
                command = self.prog.split(" ", 1)[1] if " " in self.prog else None
                print(json.dumps({**error_json(USAGE, message), **({"command": command} if command else {})}))
            super().error(message)

    parser: argparse.ArgumentParser = Parser(
        prog="melon", description=DESCRIPTION, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_jobs.add_commands(sub, argparse.RawDescriptionHelpFormatter)
    cli_memory.add_command(sub, argparse.RawDescriptionHelpFormatter)

    cl = sub.add_parser("minicluster", help="start/stop/status of the embedded Hadoop 3.5 cluster")
    cl.add_argument("action", choices=["start", "stop", "status"])
    cl.add_argument("--work-dir", default=str(mc.DEFAULT_WORK_DIR))
    cl.add_argument("--port-base", type=int, default=mc.DEFAULT_PORT_BASE)
    cl.add_argument("--nodemanagers", type=int, default=2)
    cl.add_argument("--gpus", type=int, default=2)
    cl.add_argument("--gpu-memory-mb", type=int, default=32768)
    cl.add_argument("--nm-memory-mb", type=int, default=8192)
    cl.add_argument("--timeout", type=float, default=240)
    cl.add_argument(
        "--secure",
        action="store_true",
        help="Kerberos: a KDC with keytabs + krb5.conf in the work dir, SPNEGO on the RM, NMs and WebHDFS",
    )
    cl.add_argument(
        "--tenants",
        action="store_true",
        help="multi-tenant setup: queues tenant_a (alice) and tenant_b (bob) with preemption, ACLs, HDFS "
        "permissions, an `airflow` user that may impersonate the tenants (doAs)",
    )
    cl.add_argument(
        "--token-renew-s",
        type=float,
        default=0,
        help="the NameNode's delegation-token renew interval in seconds (default: Hadoop's 24 h); short, "
        "to see the RM renew a running job's HDFS token",
    )
    cl.set_defaults(func=_cluster)

    up = sub.add_parser("up", help="the embedded cluster + a real Airflow with the example DAGs, until Ctrl-C")
    up.add_argument("--work-dir", default=str(mc.DEFAULT_WORK_DIR))
    up.add_argument("--port-base", type=int, default=mc.DEFAULT_PORT_BASE)
    up.add_argument("--airflow-home", default=str(mc.REPO_ROOT / ".airflow-up"))
    up.add_argument("--dags", default=str(mc.REPO_ROOT / "dags"), help="DAGs folder (default: the example DAGs)")
    up.add_argument("--port", type=int, default=28080, help="the api-server's port on 127.0.0.1")
    up.add_argument("--password", default="admin", help="the admin user's password")
    up.add_argument("--timeout", type=float, default=300)
    up.set_defaults(func=_up)

    doctor_help = (
        "check that a cluster is ready for MeLoN jobs, from where Airflow runs (each finding with its "
        "fix); exit 1 if any check fails"
    )
    dr = sub.add_parser(
        "doctor",
        parents=[cli_jobs.cluster_options()],
        help=doctor_help,
        description=doctor_help + ". The cluster is named as for the job commands (the cluster options below).",
    )
    dr.add_argument("--queue", default="default", help="the YARN queue jobs will use")
    dr.add_argument(
        "--submit-test",
        action="store_true",
        help="then run a tiny job through the real path (stage, submit, AM, containers, output, logs), "
        "reporting each step and the nodes' Java, job Python, pynvml and framework",
    )
    dr.add_argument(
        "--python",
        help="with --submit-test: the job Python to probe (default: the connection's "
        "`python`, as for jobs that name none)",
    )
    dr.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="with --submit-test: seconds to wait for the AM, then for the job (default 300)",
    )
    dr.set_defaults(func=_doctor, command_func=_doctor_checks)

    pe = sub.add_parser("pack-env", help="pack a virtualenv (venv-pack) or conda env (conda-pack) to a tar.gz")
    pe.add_argument("output")
    group = pe.add_mutually_exclusive_group()
    group.add_argument("--venv", help="virtualenv folder (default: the current one)")
    group.add_argument("--conda", help="conda env name or prefix")
    pe.set_defaults(func=_pack_env)

    pl = sub.add_parser(
        "plan",
        add_help=False,
        help="recommend batch size, PS and workers for a PS job (prints JSON; `melon plan --help` for its options)",
    )
    pl.set_defaults(func=None)

    argcomplete.autocomplete(parser)  # shell completion: answers and exits when the shell's hook asks
    args, rest = parser.parse_known_args(argv)
    if args.command == "plan":  # everything after `plan` is the planner's own command line
        from airflow_provider_melon.planner import plan_main

        return plan_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return args.func(args)
    except mc.MiniClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
