"""Session fixtures: the real Hadoop mini cluster (started here, stopped here) and hooks bound to it.

Set MELON_TEST_CLUSTER_DIR to the work dir of an already running cluster (`melon minicluster start`) to
reuse it while iterating; by default each session starts its own on ports from MELON_TEST_PORT_BASE
(default 19000, so it does not collide with a demo cluster on 18000).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from airflow_provider_melon import minicluster as mc


@pytest.fixture(scope="session")
def minicluster():
    reuse = os.environ.get("MELON_TEST_CLUSTER_DIR")
    if reuse:
        details = mc.read_details(Path(reuse))
        if details is None:
            pytest.fail(f"MELON_TEST_CLUSTER_DIR={reuse} has no running cluster (no cluster.json)")
        yield details
        return
    work_dir = Path(tempfile.mkdtemp(prefix="melon-minicluster-"))
    port_base = int(os.environ.get("MELON_TEST_PORT_BASE", "19000"))
    try:
        details = mc.start(work_dir, port_base=port_base, timeout=240)
    except mc.MiniClusterError as exc:
        pytest.fail(str(exc))
    try:
        yield details
    finally:
        mc.stop(work_dir)
        if not os.environ.get("MELON_KEEP_CLUSTER_DIR"):
            shutil.rmtree(work_dir, ignore_errors=True)


@pytest.fixture
def yarn_hook(minicluster):
    from airflow_provider_melon.hooks.yarn import YarnHook

    return YarnHook(rm_urls=[minicluster.rm_web_url], user=minicluster.user)


@pytest.fixture
def melon_hook(minicluster):
    """A MelonHook bound to the mini cluster: real WebHDFS, real RM."""
    from airflow_provider_melon.cli import melon_hook_for_cluster

    return melon_hook_for_cluster(minicluster.work_dir)
