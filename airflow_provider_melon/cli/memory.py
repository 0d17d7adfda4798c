"""``melon memory show|forget KEY``: a task's learned GPU memory history (``gpu_memory: auto``), read or reset.

They act as the job commands do, through the user's own HDFS client on the user's staging folder (``[melon]
staging_dir``, default ``/user/<user>/.melon``, or ``--staging-dir``): the history sits in that 0700 folder, so
what HDFS lets the user do there is what these commands may do; another user's folder answers permission denied.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from pydantic import ValidationError

from airflow_provider_melon.cli.exit_codes import EXIT_CODES, OK, UsageError
from airflow_provider_melon.cli.terminal import print_json
from airflow_provider_melon.gpu import learned
from airflow_provider_melon.hadoop import memory_history
from airflow_provider_melon.spec import RoleSpec

#: the spec's own default of a role's ``oom_growth``
OOM_GROWTH: float = RoleSpec.model_fields["oom_growth"].default


def _where(args, cluster) -> tuple[Any, str, str]:
    """``(hook, staging folder, history folder)`` of the command line's key; a bad key is a usage error."""
    try:
        memory_history.folder("/", args.key)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    hook = cluster.melon_hook(resolve_fs=False)
    staging = (args.staging_dir or hook.staging_dir).rstrip("/")
    return hook, staging, memory_history.folder(staging, args.key)


def _mib(value) -> str:
    return "-" if value is None else f"{value}"


def history(hook, staging: str, key: str, growth: float) -> dict:
    """What ``show`` prints: each role's runs (oldest first) and the figures they teach now: the expected memory
    (capped at the cluster's largest GPU less the context reserve, when the RM says it) and the context reserve
    beside it (the larger of the cluster's ``gpu_context_mb`` and the learned one; none learned yet: the job's
    framework's first-run figure applies, which the history does not know)."""
    docs = memory_history.read_history(hook.hdfs, staging, key)
    roles: dict[str, list] = {}
    for doc in docs:
        for role, record in doc["roles"].items():
            if isinstance(record, dict):
                roles.setdefault(role, []).append(record)
    largest = hook.largest_gpu_mb() if roles else None
    out = {}
    for role, runs in sorted(roles.items()):
        context = learned.learned_context_mb(runs, growth=growth)
        if hook.gpu_context_mb is not None and (context is None or hook.gpu_context_mb > context[0]):
            context = (hook.gpu_context_mb, "the cluster's gpu_context_mb")
        found = learned.learned_mb(runs, growth=growth, largest_gpu_mb=largest, context_mb=context[0] if context else 0)
        out[role] = {
            "runs": runs,
            "learned_mb": found[0] if found else None,
            "learned_from": found[1] if found else "nothing: no run succeeded or ran out of memory",
            "context_mb": context[0] if context else None,
            "context_from": context[1] if context else "nothing recorded: the framework's first-run figure",
        }
    ran = learned.learned_duration_s(docs)
    run_time = {"estimate_s": ran[0], "from": ran[1], "priority": learned.priority(ran[0])} if ran else None
    return {
        "key": key,
        "folder": memory_history.folder(staging, key),
        "oom_growth": growth,
        "roles": out,
        "run_time": run_time,
    }


def cmd_show(args, cluster) -> int:
    hook, staging, where = _where(args, cluster)
    shown = history(hook, staging, args.key, args.oom_growth)
    if args.json:
        print_json(shown)
        return OK
    if not shown["roles"] and not shown["run_time"]:
        print(f"{args.key}: no history in {where} (the next gpu_memory: auto run starts at its first-run figure)")
        return OK
    print(f"{args.key}: {where}")
    if shown["run_time"]:
        ran = shown["run_time"]
        print(f"  run time: {ran['estimate_s'] / 60:.1f} min ({ran['from']}): priority auto {ran['priority']}")
    for role, seen in shown["roles"].items():
        print(f"  role {role}: learned now {_mib(seen['learned_mb'])} MiB ({seen['learned_from']})")
        print(f"    context reserve beside it: {_mib(seen['context_mb'])} MiB ({seen['context_from']})")
        table = [("APP", "ENDED (UTC)", "STATE", "INITIAL", "EXPECTED", "PEAK (SOURCE)", "CONTEXT", "OOM", "GROWTHS")]
        for r in seen["runs"]:
            at = r.get("at")
            when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(at)) if isinstance(at, (int, float)) else "-"
            peak = _mib(r.get("peak_mb")) + (f" ({r['peak_source']})" if r.get("peak_source") else "")
            table.append(
                (
                    str(r.get("app_id") or "-"),
                    when,
                    str(r.get("state") or "-"),
                    _mib(r.get("initial_mb")),
                    _mib(r.get("expected_mb")),
                    peak,
                    _mib(r.get("context_mb")),
                    _oom(r),
                    str(r.get("growths") or 0),
                )
            )
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for row in table:
            print("    " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return OK


def _oom(record: dict) -> str:
    """``no``, or ``yes`` with which memory ran out (``cap``, ``outside`` the allocator)."""
    if not record.get("oom"):
        return "no"
    kinds = record.get("oom_kinds")
    return f"yes ({', '.join(kinds)})" if isinstance(kinds, list) and kinds else "yes"


def cmd_forget(args, cluster) -> int:
    hook, staging, where = _where(args, cluster)
    count = memory_history.forget(hook.hdfs, staging, args.key)
    if args.json:
        print_json({"key": args.key, "folder": where, "forgotten_runs": count})
    elif count:
        print(
            f"{args.key}: forgot {count} run(s) (deleted {where}); the next gpu_memory: auto run starts at its "
            "first-run figure"
        )
    else:
        print(f"{args.key}: no history in {where}: nothing to forget")
    return OK


def cmd_memory(args, cluster) -> int:
    return (cmd_show if args.action == "show" else cmd_forget)(args, cluster)


def add_command(sub, formatter) -> None:
    """``melon memory show|forget KEY`` on the ``melon`` parser's sub-parsers."""
    from airflow_provider_melon.cli import jobs as cli_jobs

    help_ = "show or reset a task's learned GPU memory (gpu_memory: auto)"
    p = sub.add_parser(
        "memory",
        parents=[cli_jobs.cluster_options()],
        help=help_,
        epilog=EXIT_CODES,
        formatter_class=formatter,
        description=(
            "show: each recorded run of a task (app, end time, state, initial/expected/peak MiB with "
            "the peak's source, context reserve, OOM and which memory ran out, growths) and the figures learned now, "
            "expected memory and context reserve; forget: delete the task's "
            "history, so its next run starts at its first-run figure. The history is in your staging "
            "folder's profiles/<KEY>/memory/."
        ),
    )
    p.add_argument("action", choices=["show", "forget"])
    p.add_argument(
        "key",
        help="the history's key: DAG_ID/TASK_ID for an Airflow task (DAG_ID/TASK_ID/map-N for a "
        "mapped task instance, or the operator's memory_key), jobs/<job name> for `melon submit` (or its "
        "--learn-as)",
    )
    p.add_argument("--staging-dir", help="the staging folder (default [melon] staging_dir, /user/<user>/.melon)")
    p.add_argument(
        "--oom-growth",
        type=_growth,
        default=OOM_GROWTH,
        help=f"show: the role's oom_growth, for what a run that ran out of memory teaches (default {OOM_GROWTH})",
    )
    p.set_defaults(func=cli_jobs.run, command_func=cmd_memory)


def _growth(text: str) -> float:
    """``--oom-growth``, validated as the spec validates a role's ``oom_growth`` (one definition of its bounds)."""
    try:
        return RoleSpec(oom_growth=text).oom_growth
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"--oom-growth {text!r}: {exc.errors()[0]['msg']}") from None
