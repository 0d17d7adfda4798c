"""A chaos soak on the embedded cluster (docs/elastic.md): several jobs at once, a random container of a random running
job SIGKILLed every ``--every`` seconds (now and then the ApplicationMaster), then a table: kills by kind, jobs that
ended by themselves, jobs that succeeded, duplicate applications, and the seconds from each kill to the killed task
(or its gang) registered again. Not part of ``make test``; its results are committed in ``results/``.

The jobs (each with restarts enough for the kills it may get: the soak checks that every job ends by itself, and that
a job whose losses stayed within its budget SUCCEEDS): an elastic torchrun DDP job (3 workers, min 2), a TensorFlow
MultiWorkerMirroredStrategy job with BackupAndRestore (2 workers, restarted whole), and a generic checkpointed job (2
workers). The scripts are the fault suite's (tests/faults).

    .venv/bin/python benchmarks/soak_chaos.py --minutes 15 --every 30-60
    MELON_FAULT_CLUSTER_DIR=<a running cluster> .venv/bin/python benchmarks/soak_chaos.py --minutes 4 --every 20-40
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_provider_melon.dev import minicluster as mc  # noqa: E402
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES  # noqa: E402
from airflow_provider_melon.spec import JobSpec  # noqa: E402
from benchmarks.provenance import ran_at  # noqa: E402
from tests.faults.conftest import app_containers_prefix, container_group  # noqa: E402
from tests.faults.test_elastic_faults import ELASTIC_DDP, TF_MWMS  # noqa: E402
from tests.faults.test_yarn_faults import CHECKPOINTED  # noqa: E402


def jobs(work: Path, scale: float, restarts: int) -> dict[str, dict]:
    """The soak's jobs, each training for about ``scale`` x 4 minutes undisturbed."""
    out = {}
    for name, script, entry, framework, roles in (
        (
            "soak-ddp",
            ELASTIC_DDP,
            "python train.py {w}/ckpt {n} 0.3".replace("{n}", str(int(600 * scale))),
            "pytorch",
            {"worker": {"instances": 3, "min_instances": 2, "restarts": restarts, "memory": 1536}},
        ),
        (
            "soak-tf",
            TF_MWMS,
            "python train.py {w} {n} 0.3".replace("{n}", str(int(300 * scale))),
            "tensorflow",
            {"worker": {"instances": 2, "restarts": restarts, "memory": 1536}},
        ),
        (
            "soak-generic",
            CHECKPOINTED,
            "python train.py {w}/ckpt {n}".replace("{n}", str(int(240 * scale))),
            "generic",
            {"worker": {"instances": 2, "restarts": restarts, "memory": 256}},
        ),
    ):
        w = work / name
        (w / "code").mkdir(parents=True)
        (w / "ckpt").mkdir()
        (w / "code" / "train.py").write_text(script)
        job = {
            "name": name,
            "framework": framework,
            "code": str(w / "code"),
            "entrypoint": entry.replace("{w}", str(w)),
            "roles": roles,
            "elastic_grace_s": 120,
            "max_attempts": 3,
        }
        if framework == "pytorch":
            job["launcher"] = "torchrun"
        out[name] = job
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=15, help="how long containers are killed")
    parser.add_argument("--every", default="30-60", help="seconds between kills, low-high")
    parser.add_argument("--am-share", type=float, default=0.15, help="share of the kills aimed at an AM")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    low, high = (float(x) for x in args.every.split("-"))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"# {' '.join([Path(sys.executable).name, *sys.argv])}; seed {seed}; {ran_at()}", flush=True)
    reuse = os.environ.get("MELON_FAULT_CLUSTER_DIR")
    work = Path(tempfile.mkdtemp(prefix="melon-soak-"))
    cluster = (
        mc.read_details(Path(reuse))
        if reuse
        else mc.start(
            work / "cluster",
            port_base=int(os.environ.get("MELON_FAULT_PORT_BASE", "21000")) + 600,
            nodemanagers=3,
            nm_expiry_ms=12_000,
            rm_recovery=True,
            timeout=300,
        )
    )
    from airflow_provider_melon.cli import melon_hook_for_cluster
    from airflow_provider_melon.submission import identity_tag

    hook = melon_hook_for_cluster(cluster.work_dir)
    # restarts: the most kills one job may take (a kill of an AM is not one: the next attempt restarts the gang)
    most = int(args.minutes * 60 / low) + 1
    specs = jobs(work, max(1.0, args.minutes / 4 + 1), most)
    apps, tags = {}, {}
    for name, job in specs.items():
        tags[name] = identity_tag("soak", "chaos", name, uuid.uuid4().hex)
        apps[name] = hook.submit(JobSpec.from_dict(job), tags=[tags[name]])["app_id"]
        print(f"submitted {name}: {apps[name]}", flush=True)
    kills: list[dict] = []
    deadline = time.monotonic() + args.minutes * 60
    pending: list[dict] = []  # kills whose recovery is awaited
    next_kill = time.monotonic() + rng.uniform(low, high)
    try:
        while time.monotonic() < deadline or pending:
            now = time.monotonic()
            for k in list(pending):  # recovered: the killed task registered again in a new container, or app ended
                status = hook.yarn.am_status(apps[k["job"]]) or {}
                app = hook.yarn.get_application(apps[k["job"]])
                tasks = status.get("tasks") or []
                again = (
                    [t for t in tasks if t["state"] == "REGISTERED" and t["container_id"] not in k["before"]]
                    if tasks
                    else []
                )
                if (
                    app["state"] in TERMINAL_STATES
                    or (k["task"] == "am" and tasks and all(t["state"] == "REGISTERED" for t in tasks))
                    or any(f"{t['role']}:{t['index']}" == k["task"] for t in again)
                ):
                    k["recovered_s"] = round(now - k["at"], 1) if app["state"] not in TERMINAL_STATES else None
                    k["app_then"] = app["state"]
                    pending.remove(k)
                elif now - k["at"] > 600:
                    k["recovered_s"] = None
                    pending.remove(k)
            if now >= next_kill and now < deadline:
                next_kill = now + rng.uniform(low, high)
                live = {n: a for n, a in apps.items() if hook.yarn.get_application(a)["state"] == "RUNNING"}
                if not live:
                    break
                name = rng.choice(sorted(live))
                app_id = live[name]
                status = hook.yarn.am_status(app_id) or {}
                tasks = [t for t in status.get("tasks") or [] if t["state"] == "REGISTERED"]
                if not tasks:
                    continue
                attempt = hook.yarn.app_attempts(app_id)[-1]
                if rng.random() < args.am_share:
                    task, kind = "am", "AM"
                    prefix = attempt["containerId"]
                    env: dict = {}
                else:
                    t = rng.choice(tasks)
                    task = f"{t['role']}:{t['index']}"
                    kind = "task 0" if t["index"] == 0 else "other task"
                    prefix = app_containers_prefix(app_id, int(attempt.get("id") or 1))
                    env = {"MELON_ROLE": t["role"], "MELON_INDEX": str(t["index"])}
                try:
                    os.killpg(container_group(re.sub(r"^container_e\d+_", "container_", prefix), **env), signal.SIGKILL)
                except (AssertionError, ProcessLookupError) as exc:
                    print(f"  no kill ({exc})", flush=True)
                    continue
                k = {
                    "job": name,
                    "task": task,
                    "kind": kind,
                    "at": time.monotonic(),
                    "before": {t["container_id"] for t in tasks},
                }
                kills.append(k)
                pending.append(k)
                print(f"{time.strftime('%H:%M:%S')} SIGKILL {name} {task} ({kind})", flush=True)
            time.sleep(1)
        ends = {}
        for name, app_id in apps.items():  # every job must end by itself: a bound, never a kill
            bound = time.monotonic() + 900
            while time.monotonic() < bound and hook.yarn.get_application(app_id)["state"] not in TERMINAL_STATES:
                time.sleep(2)
            app = hook.yarn.get_application(app_id)
            ends[name] = (app["state"], app["finalStatus"], app.get("diagnostics", "")[:200])
    finally:
        for app_id in apps.values():
            try:
                if hook.yarn.get_application(app_id)["state"] not in TERMINAL_STATES:
                    hook.yarn.kill_application(app_id)
            except Exception:  # noqa: BLE001 - cleanup
                pass
        if not reuse:
            mc.stop(work / "cluster")
    print(
        "\n| job | kills (task 0 / other / AM) | ended by itself | final | duplicate apps | kill -> registered again (s) |"
    )
    print("|---|---|---|---|---|---|")
    for name, app_id in apps.items():
        mine = [k for k in kills if k["job"] == name]
        by = [sum(k["kind"] == kind for k in mine) for kind in ("task 0", "other task", "AM")]
        dup = max(0, len(hook.yarn.find_applications([tags[name]])) - 1)
        state, final, diag = ends[name]
        rec = [k.get("recovered_s") for k in mine]
        print(
            f"| {name} | {len(mine)} ({by[0]} / {by[1]} / {by[2]}) | {'yes' if state in TERMINAL_STATES else 'NO'} "
            f"| {final}{'' if final == 'SUCCEEDED' else ': ' + diag} | {dup} | {rec} |"
        )
    print(
        f"\nkills: {len(kills)}; jobs ended by themselves: {sum(e[0] in TERMINAL_STATES for e in ends.values())}"
        f"/{len(ends)}; succeeded: {sum(e[1] == 'SUCCEEDED' for e in ends.values())}/{len(ends)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
