"""The NameNode restarted while a job's code is being uploaded: the upload retries, and nothing half-written is
ever taken as cached (uploads go to a unique name beside the target, then are renamed into place)."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from airflow_provider_melon.dev import minicluster as mc
from tests.waits import hdfs_cause, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_namenode_restart_during_staging(fault_hook, fault_cluster, fault_row):
    data = os.urandom(192 * 1024 * 1024)  # big enough that the restart lands while it is being written
    digest = hashlib.sha256(data).hexdigest()
    target_dir = f"{fault_hook.cache_dir}/{digest}"
    with fault_row(
        "NameNode restarted during staging (192 MiB upload)",
        hook=fault_hook,
        apps=False,
        end=None,
        outputs=[f"{target_dir}/code.zip"],
    ) as row:
        _restart_during_staging(fault_hook, fault_cluster, row, data, digest, target_dir)


def _restart_during_staging(fault_hook, fault_cluster, row, data: bytes, digest: str, target_dir: str):
    outcome: dict = {}

    def stage():
        try:
            outcome["staged"] = fault_hook.stage_content("code.zip", data)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = exc

    stager = threading.Thread(target=stage)
    stager.start()
    # the upload is under way: its temporary file exists beside the target
    wait_for(
        lambda: any(
            n.endswith(".tmp")
            for n in (fault_hook.hdfs.list(target_dir) if fault_hook.hdfs.status(target_dir, strict=False) else [])
        ),
        60,
        "the upload's temporary file",
        every=0.05,
        cause=hdfs_cause(fault_hook, target_dir),
    )
    row.injected()
    restarted = mc.control(fault_cluster, "namenode/restart")
    stager.join(timeout=300)
    assert not stager.is_alive(), "staging did not finish within 300 s of the restart"
    assert "error" not in outcome, f"staging failed: {outcome.get('error')}"
    recovered_s = row.recovered()
    staged = outcome["staged"]
    assert staged.size == len(data) and staged.uploaded_bytes == len(data)

    # what is under the target is the whole object, and only it: no temporary file, no lock left behind
    with fault_hook.hdfs.read(f"{target_dir}/code.zip") as reader:
        assert hashlib.sha256(reader.read()).hexdigest() == digest
    assert fault_hook.hdfs.list(target_dir) == ["code.zip"]
    # staged again: found cached, nothing uploaded
    assert fault_hook.stage_content("code.zip", data).uploaded_bytes == 0
    print(f"NameNode restart took {restarted['seconds']} s; staging finished {recovered_s:.1f} s after it began")
