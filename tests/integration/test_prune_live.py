"""`melon prune` on the real mini cluster: the staging folder loses what no live job uses (old code, the big-file
index, ended apps' plans) and keeps what a running job uses; a cached object's use is recorded on HDFS. Each test
stages into its own folder (``[melon] staging_dir``), so the rest of the suite's cache is left alone. A prune's cutoff
is at least an hour ago (staging_gc.MIN_AGE_S): the tests set the staged files' times back (what hours of disuse
leave) instead of waiting."""

from __future__ import annotations

import os
import posixpath
import time
import uuid

import pytest

from airflow_provider_melon.runtime.outputs import hdfs_path
from tests.integration.test_cli_live import generic, melon  # noqa: F401 - the `melon` fixture

pytestmark = pytest.mark.integration


def _age(client, root: str, ms: int) -> None:
    """Set the modification and access times of ``root`` and everything under it back by ``ms``."""
    when = int(time.time() * 1000) - ms
    for folder, dirs, files in client.walk(root):
        for path in [folder] + [f"{folder}/{name}" for name in dirs + files]:
            client.set_times(path, access_time=when, modification_time=when)


def _folder(url: str) -> str:
    """hdfs://nn:port/a/b/c/name → /a/b/c (a cache object's folder)."""
    return posixpath.dirname(hdfs_path(url))


def test_prune_deletes_what_no_live_job_uses_and_keeps_what_a_running_job_uses(  # noqa: F811 - the fixture
    melon, minicluster, jobs, tmp_path
):
    staging = f"/user/{minicluster.user}/.melon-prune-{uuid.uuid4().hex[:8]}"
    env = {"AIRFLOW__MELON__STAGING_DIR": staging}
    client = jobs.hook.hdfs
    old, live = tmp_path / "old", tmp_path / "live"
    old.mkdir()
    live.mkdir()
    (old / "train.py").write_text("print('old code')\n")
    (old / "weights.bin").write_bytes(os.urandom(9 << 20))  # a big file: its own object, found by the index
    release = tmp_path / "release"  # the running job runs until the test is done with it (containers run here)
    (live / "train.py").write_text(
        f"import os, time; print('live code', flush=True)\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.2)\n"
    )

    ended = melon.submit(generic("prune-ended", "python train.py") | {"code": str(old)}, "--wait", env=env)
    assert ended["returncode"] == 0, ended
    running = melon.submit(generic("prune-live", "python train.py") | {"code": str(live)}, env=env)
    # Its task's executor registered: the container was localized, so setting the staged files' times back below
    # cannot fail that. RUNNING is not enough: the AM says so once the NodeManager accepts the container, before it
    # localizes the files, which then no longer have the modification times the plan names, and the job fails.
    jobs.wait_status(running["app_id"], lambda s: any(t["state"] == "REGISTERED" for t in s.get("tasks") or []))
    _age(client, staging, 2 * 3600 * 1000)
    assert client.list(f"{staging}/cache/by-sample"), "the big file was staged through the by-sample index"

    old_objects = {_folder(ended["staged"][k]["url"]) for k in ("code", "code:weights.bin")}
    live_objects = {_folder(running["staged"][k]["url"]) for k in ("code", "runtime", "am_jar")}
    assert not old_objects & live_objects
    ended_plan, live_plan = f"{staging}/apps/{ended['app_id']}", f"{staging}/apps/{running['app_id']}"

    rc, dry, err = melon.json("prune", "--older-than", "1h", "--dry-run", env=env)
    assert rc == 0, err
    doomed = {(e["kind"], e["path"]) for e in dry["delete"]}
    assert {("object", p) for p in old_objects} | {("plan", ended_plan)} <= doomed, dry
    assert {k for k, _ in doomed} >= {"index", "index-dir"}, dry
    kept = {e["path"]: e["why"] for e in dry["kept"]}
    # on failure: the live application as the RM saw it, and the whole decision (a plan neither kept nor doomed was
    # newer than the cutoff; one doomed means the prune did not see the application live)
    assert kept.get(live_plan) == "application live", (jobs.app(running["app_id"]), dry)
    for path in live_objects:  # the running job's code, and the runtime and AM jar both jobs staged
        assert path not in {p for _, p in doomed} and kept[path] == f"in use by {running['app_id']}", dry
    assert all(client.status(p, strict=False) for p in old_objects | {ended_plan}), "a dry run deletes nothing"

    rc, done, err = melon.json("prune", "--older-than", "1h", env=env)
    assert rc == 0, err
    assert done["freed_bytes"] >= 9 << 20
    assert [p for p in old_objects | {ended_plan} if client.status(p, strict=False)] == []
    assert client.list(f"{staging}/cache/by-sample") == []
    assert all(client.status(p, strict=False) for p in live_objects | {live_plan})
    # ... and the running job never noticed
    assert jobs.app(running["app_id"])["state"] == "RUNNING"
    release.touch()
    assert jobs.wait(running["app_id"], timeout=180)["finalStatus"] == "SUCCEEDED"

    # What went costs a re-upload, no more: the old code runs again.
    again = melon.submit(generic("prune-again", "python train.py") | {"code": str(old)}, "--wait", env=env)
    assert again["returncode"] == 0 and again["staged"]["code:weights.bin"]["uploaded_bytes"] == 9 << 20, again


def test_a_cached_object_records_its_use_and_a_recent_one_stays(melon, minicluster, melon_hook, tmp_path):  # noqa: F811
    staging = f"/user/{minicluster.user}/.melon-prune-{uuid.uuid4().hex[:8]}"
    env = {"AIRFLOW__MELON__STAGING_DIR": staging}
    client = melon_hook.hdfs
    (tmp_path / "train.py").write_text("print('hi')\n")
    job = generic("prune-touch", "python train.py") | {"code": str(tmp_path)}
    first = melon.submit(job, "--wait", env=env)
    code = hdfs_path(first["staged"]["code"]["url"])
    uploaded = client.status(code)
    time.sleep(1.5)
    second = melon.submit(job, "--wait", env=env)
    assert second["staged"]["code"]["uploaded_bytes"] == 0
    used = client.status(code)
    # the access time moved (the use), the modification time did not (YARN's localizer checks it)
    assert used["modificationTime"] == uploaded["modificationTime"]
    assert used["accessTime"] > uploaded["modificationTime"] + 1000, (uploaded, used)

    rc, out, err = melon.json("prune", "--older-than", "1h", env=env)
    assert rc == 0 and out["delete"] == [], (out, err)
    assert client.status(code, strict=False) is not None


def test_prune_refuses_a_bad_age_before_touching_anything(melon):  # noqa: F811
    result = melon.run("prune", "--older-than", "soon")
    assert result.returncode == 2, result
    assert "--older-than 'soon'" in result.stderr and "7d" in result.stderr
    for age in ("-1d", "0", "59m"):
        result = melon.run("prune", f"--older-than={age}")
        assert result.returncode == 2 and f"--older-than '{age}': must be 1h or more" in result.stderr, result.stderr
