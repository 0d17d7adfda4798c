"""Elastic roles (``min_instances``) on the fault suite's mini cluster: a member lost below the minimum fails the job
after the grace with a diagnostic naming the lost members; a member lost above it is replaced while the others go
on (PyTorch DDP under torchrun, CPU, gloo)."""

from __future__ import annotations

import pytest

from tests.waits import wait_for

from .conftest import app_containers_prefix, container_group, sigkill_group
from .test_yarn_faults import checkpointed_job, read_step

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def registered(status: dict) -> set[int]:
    return {t["index"] for t in status.get("tasks") or [] if t["state"] == "REGISTERED"}


def test_elastic_role_below_its_minimum_past_the_grace_fails_naming_the_lost_members(fault_jobs, fault_hook,
                                                                                      tmp_path, fault_row):
    """Three workers, at least two, no restarts: the first SIGKILL leaves two (the job goes on, nothing replaced), the
    second leaves one: after the 5 s grace the job fails, naming both lost workers and how they ended."""
    with fault_row("elastic worker SIGKILLed twice (3 workers, min 2, no restarts): FAILED naming the lost",
                   hook=fault_hook, end=("FINISHED", "FAILED")) as row:
        app_id = fault_jobs.submit(checkpointed_job(
            tmp_path, "elastic-below-min", 120, elastic_grace_s=5,
            roles={"worker": {"instances": 3, "min_instances": 2, "memory": 256}}), tags=row.tags)
        fault_jobs.wait_status(app_id, lambda s: registered(s) == {0, 1, 2}, timeout=120)
        wait_for(lambda: read_step(tmp_path, "worker2") >= 2, 60, "worker:2 at step 2", cause=fault_jobs.cause(app_id))
        prefix = app_containers_prefix(app_id)
        row.injected()
        sigkill_group(container_group(prefix, MELON_ROLE="worker", MELON_INDEX="2"))
        # one lost: two left, the minimum: the others go on and the app keeps running past the grace
        wait_for(lambda: registered(fault_jobs.status(app_id) or {}) == {0, 1}, 60, "worker:2 gone, 0 and 1 left",
                 cause=fault_jobs.cause(app_id))
        at = read_step(tmp_path, "worker1")
        wait_for(lambda: read_step(tmp_path, "worker1") >= at + 7, 60, "worker:1 training on past the 5 s grace",
                 cause=fault_jobs.cause(app_id))
        assert fault_jobs.app(app_id)["state"] == "RUNNING"
        sigkill_group(container_group(prefix, MELON_ROLE="worker", MELON_INDEX="1"))
        final = fault_jobs.wait(app_id, timeout=120)
        row.recovered()  # handled as designed: the job failed, naming the lost members
        assert (final["state"], final["finalStatus"]) == ("FINISHED", "FAILED"), final
        diag = final["diagnostics"]
        assert "elastic role worker below its minimum of 2 for more than 5.0 s (elastic_grace_s): 1 of 3 live" in diag, \
            diag
        lost = diag.split("; lost: ", 1)[1]
        assert "worker:1 (" in lost and "worker:2 (" in lost and lost.count("exited 137 (killed by SIGKILL)") == 2, diag
        am_log = "".join(fault_jobs.container_logs(app_id, "AppMaster.stdout").values())
        assert "not replaced: role worker's restarts (0) are used up" in am_log, am_log[-3000:]
