"""Staging and prune under hostile tenants and hostile timing, on the real clusters:

* a local ``file://`` environment archive lands in alice's 0700 staging folder: her job still localizes it (for the
  application, not PUBLIC, which YARN refuses for a private file), and bob cannot read it;
* a source file rewritten between its hash and its upload is never stored under the old digest;
* ``melon prune`` refuses a cutoff under an hour, keeps an upload in flight and a fresh plan, and, with a shared
  staging folder, keeps another user's live application's plan and objects;
* a tenant's learned GPU memory history (``gpu_memory: auto``) can be neither read nor poisoned by another tenant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import uuid

import pytest
from hdfs import InsecureClient
from hdfs.util import HdfsError

from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.hadoop import hdfs_io, staging_gc
from airflow_provider_melon.hadoop.app_state import LIVE_STATES, TERMINAL_STATES
from airflow_provider_melon.hooks import melon as melon_module
from airflow_provider_melon.hooks.melon import MelonHook
from airflow_provider_melon.hooks.yarn import YarnHook
from airflow_provider_melon.runtime.outputs import hdfs_path
from airflow_provider_melon.spec import JobSpec
from tests.integration.test_cli_live import CLI, REPO, generic, melon  # noqa: F401 - the `melon` fixture
from tests.integration.test_tenants_live import SERVICE, _wait_state, tenants, tenants_cluster  # noqa: F401

pytestmark = pytest.mark.integration

HOUR_MS = 3600 * 1000


def _as_bob(call) -> str:
    """What bob's HDFS call ended in, as an attack row's ``got``: its result, or HDFS's refusal of user bob."""
    try:
        return call()
    except HdfsError as exc:
        return "Permission denied: user=bob" if "Permission denied: user=bob" in str(exc) else str(exc)[:80]


# ---- a local env archive on the tenants cluster ------------------------------------------------------------
def test_alice_runs_with_a_local_env_archive_bob_cannot_read_it(tenants, tmp_path, attack):
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    (env_dir / "marker.txt").write_text("alice's env\n")
    archive = tmp_path / "alice-env.tar.gz"
    subprocess.run(
        [sys.executable, "-m", "airflow_provider_melon.cli", "pack-env", str(archive), "--venv", str(env_dir)],
        check=True,
        capture_output=True,
    )
    with tarfile.open(archive) as tar:
        assert "marker.txt" in tar.getnames()
    check = (
        "import pathlib, sys; text = (pathlib.Path(sys.prefix) / 'marker.txt').read_text(); "
        "assert text == \\\"alice's env\\n\\\", text; print('MARKER OK', sys.prefix)"
    )
    alice, bob = tenants.hook("alice"), tenants.hook("bob")
    spec = JobSpec.from_dict(
        {
            "name": "alice-local-env",
            "framework": "generic",
            "queue": "tenant_a",
            "entrypoint": f'python -c "{check}"',
            "code": str(tenants.code),
            "environment": {"archive": f"file://{archive}", "python": "env/bin/python"},
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
        }
    )
    result = tenants.submit(alice, spec)
    app_id = result["app_id"]
    staged = result["staging"].files["env_archive"]
    env_path = hdfs_path(staged.url)
    assert env_path.startswith("/user/alice/.melon/cache/"), staged

    # The RM lists every user's applications to anyone (what prune relies on): bob sees alice's live app, its
    # id, user and state, without what her VIEW ACL guards.
    listed = {a["id"]: a for a in bob.yarn.list_applications(states=LIVE_STATES)}
    print(f"bob's listing of live apps: {json.dumps(listed.get(app_id))[:400]}")
    assert listed[app_id]["user"] == "alice" and not listed[app_id].get("amContainerLogs"), listed.get(app_id)

    app = _wait_state(alice, app_id, TERMINAL_STATES, timeout=300)
    print(f"{app_id}: {app['state']}/{app.get('finalStatus')}: {app.get('diagnostics', '')[:600]}")
    assert "not publicly accessible" not in (app.get("diagnostics") or "")
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app.get("diagnostics")
    [resource] = [r for r in result["plan"]["local_resources"] if r["name"] == "env"]
    assert resource["visibility"] == "APPLICATION", resource

    bob_hdfs = InsecureClient(tenants.nn, user=SERVICE, proxy="bob")

    def bob_reads():
        with bob_hdfs.read(env_path) as reader:
            return f"read {len(reader.read())} bytes"

    with attack("bob reads alice's staged env archive in HDFS", expected="Permission denied: user=bob") as row:
        row.got = _as_bob(bob_reads)
    with alice.hdfs.read(env_path) as reader:  # she can
        assert reader.read(2) == b"\x1f\x8b"


# ---- a source rewritten between its hash and its upload ------------------------------------------------------
def test_a_file_rewritten_after_hashing_is_not_stored_under_the_old_digest(melon_hook, monkeypatch, tmp_path, attack):
    source = tmp_path / "weights.bin"
    first, second = os.urandom(4096), os.urandom(4096)  # contents no earlier run staged
    source.write_bytes(first)
    real_sha256, hashed = melon_module.file_sha256, []

    def hash_then_rewrite(path):  # the hook point between the hash and the upload: the file changes there
        digest = real_sha256(path)
        hashed.append(digest)
        source.write_bytes(second)  # same size: only the bytes tell
        return digest

    monkeypatch.setattr(melon_module, "file_sha256", hash_then_rewrite)
    with attack(
        "a source rewritten between hash and upload is cached under the old digest",
        expected="refused: changed while it was staged, nothing under the old digest",
    ) as row:
        try:
            staged = melon_hook.stage_file("weights.bin", source)
            row.got = f"staged {staged.url}"
        except hdfs_io.SourceChangedError as exc:
            row.got = "refused: changed while it was staged" if "changed while it was staged" in str(exc) else str(exc)
        folder = f"{melon_hook.cache_dir}/{hashed[0]}"
        left = melon_hook.hdfs.list(folder) if melon_hook.hdfs.status(folder, strict=False) else []
        if left:
            with melon_hook.hdfs.read(f"{folder}/weights.bin", length=8) as reader:
                row.got += f"; {folder} holds {left} starting {reader.read()!r}"
        else:
            row.got += ", nothing under the old digest"
    monkeypatch.undo()
    # staged again once it no longer changes: stored under the digest of what it holds now
    staged = melon_hook.stage_file("weights.bin", source)
    assert staged.url.endswith(f"/{real_sha256(source)}/weights.bin") and real_sha256(source) != hashed[0]
    with melon_hook.hdfs.read(hdfs_path(staged.url)) as reader:
        assert reader.read() == second


# ---- prune ---------------------------------------------------------------------------------------------------
def _cli(cluster, user: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    where = ["--rm", cluster.rm_web_url, "--webhdfs", cluster.webhdfs_url.rsplit("/webhdfs/v1", 1)[0], "--user", user]
    return subprocess.run(
        [*CLI, *args, *where], cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, **env}
    )


def test_prune_refuses_a_cutoff_under_an_hour_and_keeps_an_upload_in_flight(
    minicluster, melon_hook, attack, monkeypatch, tmp_path
):
    staging = f"/user/{minicluster.user}/.melon-inflight-{uuid.uuid4().hex[:8]}"
    env = {"AIRFLOW__MELON__STAGING_DIR": staging}
    client = melon_hook.hdfs
    # a fresh plan: written by a submission the RM does not know yet (the id is one the RM never gave)
    plan = f"{staging}/apps/application_1_0001/melon-plan.json"
    client.write(plan, data=b"{}")
    # an upload in flight: blocked in its first read, while its .tmp exists in HDFS
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(1 << 20))
    reading, release, real_read = threading.Event(), threading.Event(), hdfs_io.BlockReader.read

    def blocked_read(self, size=-1):
        reading.set()
        assert release.wait(300), "the test never released the upload"
        return real_read(self, size)

    monkeypatch.setattr(hdfs_io.BlockReader, "read", blocked_read)
    target = f"{staging}/cache/{uuid.uuid4().hex}/big.bin"
    upload = threading.Thread(target=lambda: hdfs_io.put_once(client, target, source), daemon=True)
    upload.start()
    try:
        assert reading.wait(120), "the upload never started reading its source"
        deadline, tmp = time.monotonic() + 60, []
        while not tmp and time.monotonic() < deadline:
            folder = target.rsplit("/", 1)[0]
            tmp = [
                n for n in (client.list(folder) if client.status(folder, strict=False) else []) if n.endswith(".tmp")
            ]
        assert tmp, f"no .tmp of the upload appeared in {folder}"
        for age in ("0", "59m"):
            with attack(f"prune --older-than {age} during an upload", expected="exit 2 naming --older-than") as row:
                result = _cli(minicluster, minicluster.user, "prune", "--older-than", age, "--json", env=env)
                row.got = f"exit {result.returncode}" + (
                    " naming --older-than"
                    if "--older-than" in result.stderr
                    else f": {result.stdout[:60]}{result.stderr[:60]}"
                )
        result = _cli(minicluster, minicluster.user, "prune", "--older-than", "1h", "--json", env=env)
        assert result.returncode == 0, result.stderr
        with attack("prune --older-than 1h deletes an upload in flight or a fresh plan", expected="both kept") as row:
            kept = [p for p in (f"{folder}/{tmp[0]}", plan) if client.status(p, strict=False)]
            row.got = "both kept" if len(kept) == 2 else f"kept only {kept}; deleted {json.loads(result.stdout)}"
    finally:
        release.set()
        upload.join(120)
    assert client.status(target)["length"] == 1 << 20


def test_alice_prune_of_a_shared_staging_folder_keeps_bobs_live_app(minicluster, attack, monkeypatch, tmp_path):
    """A shared ``staging_dir`` (no ``{user}``): bob's job runs from it; alice prunes it (the session cluster has
    HDFS permissions off, so both may write there)."""
    staging = f"/shared-melon-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AIRFLOW__MELON__STAGING_DIR", staging)  # [melon] staging_dir, for both hooks
    nn = minicluster.webhdfs_url.rsplit("/webhdfs/v1", 1)[0]
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("import time; print('bob trains', flush=True); time.sleep(600)\n")

    def hook(user: str) -> MelonHook:
        return MelonHook(
            yarn_hook=YarnHook(rm_urls=[minicluster.rm_web_url], user=user),
            hdfs_client=InsecureClient(nn, user=user),
            user=user,
            am_classpath=minicluster.am_classpath,
            default_python=sys.executable,
            container_env=mc.container_env(minicluster),
            fs_default_fs=minicluster.fs_default_fs,
        )

    bob, alice = hook("bob"), hook("alice")
    assert bob.staging_dir == alice.staging_dir == staging
    submitted = bob.submit(JobSpec.from_dict(generic("bob-shared", "python train.py") | {"code": str(code)}))
    app_id = submitted["app_id"]
    try:
        _wait_running_task(bob, app_id)
        objects = {
            hdfs_path(f.url).rsplit("/", 1)[0]
            for k, f in submitted["staging"].files.items()
            if k in ("code", "runtime", "am_jar")
        }
        plan = f"{staging}/apps/{app_id}"
        # two hours from now: everything bob staged looks unused for 2 h, so only his live app keeps it
        decision = staging_gc.prune(alice, 3600, now_ms=int(time.time() * 1000) + 2 * HOUR_MS)
        with attack(
            "alice's prune of a shared staging folder deletes bob's live app's plan and objects", expected="all kept"
        ) as row:
            gone = [p for p in sorted(objects | {plan}) if alice.hdfs.status(p, strict=False) is None]
            row.got = "all kept" if not gone else f"deleted {gone}"
        kept = {e.path: why for e, why in decision.kept}
        assert kept[plan] == "application live" and all(kept[p] == f"in use by {app_id}" for p in objects), kept
        assert bob.yarn.get_application(app_id)["state"] == "RUNNING"
    finally:
        bob.yarn.kill_application(app_id)


def _wait_running_task(hook: MelonHook, app_id: str, timeout: float = 240) -> None:
    """Until the app's task runs (its files are localized: nothing in the test can disturb that any more)."""
    deadline, status = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        status = hook.am_status(app_id)
        if any(t.get("state") in ("RUNNING", "REGISTERED") for t in (status or {}).get("tasks") or []):
            return
        time.sleep(0.5)
    raise AssertionError(f"{app_id}: no task running after {timeout} s: {status} / {hook.yarn.get_application(app_id)}")


# ---- learned GPU memory: a tenant's history is hers -------------------------------------------------------
def test_bob_can_neither_read_nor_poison_alices_learned_gpu_memory(tenants, attack):
    """Alice's ``gpu_memory: auto`` task learns from her own runs only: its history sits in her 0700
    staging folder. Bob tries to read it, to plant a record in it (a huge figure would make her next run hold a
    whole GPU; a tiny one would make it run out of memory), and to record under her DAG/task key with his own hook;
    her next figure is still the one her own run taught."""
    alice, bob = tenants.hook("alice"), tenants.hook("bob")
    key = "alice_dag/train"
    auto = JobSpec.from_dict(
        {
            "name": "alice-learns",
            "framework": "generic",
            "queue": "tenant_a",
            "entrypoint": "python -c \"print('alice trains')\"",
            "code": str(tenants.code),
            "env": {"MELON_GPU_WAIT_S": "5"},
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1, "gpu_memory": "auto:3GiB"}},
        }
    )
    spec, notes = alice.resolve_learned(auto, key)
    assert spec.roles["worker"].gpu_memory == 3072 and "no history yet" in notes["gpu_memory"][0], notes
    app_id = tenants.submit(alice, spec)["app_id"]
    app = _wait_state(alice, app_id, TERMINAL_STATES, timeout=300)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app.get("diagnostics")
    path = alice.record_run(key, app_id, alice.final_status(app_id))
    folder = path.rsplit("/", 1)[0]
    assert folder == f"/user/alice/.melon/profiles/{key}/memory", path
    st = tenants.superuser_hdfs().status(folder)
    assert (st["owner"], st["permission"]) == ("alice", "700"), st
    _, taught = alice.resolve_learned(auto, key)
    assert "learned from the last 1 run(s)" in taught["gpu_memory"][0], taught

    bob_hdfs = InsecureClient(tenants.nn, user=SERVICE, proxy="bob")
    with attack("bob lists alice's learned GPU memory history in HDFS", expected="Permission denied: user=bob") as row:
        row.got = _as_bob(lambda: f"listed {bob_hdfs.list(folder)}")
    planted = json.dumps(
        {
            "version": 1,
            "app_id": "application_1_1",
            "roles": {
                "worker": {
                    "role": "worker",
                    "app_id": "application_1_1",
                    "at": int(time.time()),
                    "state": "FAILED",
                    "initial_mb": 40000,
                    "expected_mb": 40000,
                    "peak_mb": 40000,
                    "oom": True,
                    "growths": 0,
                }
            },
        }
    )
    with attack("bob plants a record in alice's GPU memory history", expected="Permission denied: user=bob") as row:
        row.got = _as_bob(lambda: bob_hdfs.write(f"{folder}/application_1_1.json", data=planted) or "written")
    bob_path = bob.record_run(
        key,
        "application_1_1",
        {
            "state": "FAILED",
            "tasks": [
                {
                    "role": "worker",
                    "initial_gpu_memory_mb": 40000,
                    "expected_gpu_memory_mb": 40000,
                    "gpu_memory_peak_mb": 40000,
                    "oom": {"peak_mb": 40000},
                }
            ],
        },
    )
    assert bob_path.startswith("/user/bob/.melon/profiles/"), bob_path
    with attack("bob records under alice's DAG/task key: her next figure changes", expected="her own: 3072 MiB") as row:
        again, said = alice.resolve_learned(auto, key)
        row.got = f"her own: {again.roles['worker'].gpu_memory} MiB" if taught == said else f"{said}"


def test_melon_memory_show_and_forget_act_with_the_owners_staging_folder_rights(tenants, attack, capsys):
    """``melon memory show|forget KEY`` act through the caller's own HDFS client: alice sees and resets her task's
    history; bob, pointing the commands at her staging folder, is refused by HDFS (her folder is 0700) and her
    history stays as it was."""
    from airflow_provider_melon import cli
    from airflow_provider_melon.hadoop import memory_history

    alice = tenants.hook("alice")
    key = f"alice_dag/train-{uuid.uuid4().hex[:6]}"
    record = {
        "role": "worker",
        "app_id": "application_1_0007",
        "at": int(time.time()),
        "state": "SUCCEEDED",
        "initial_mb": 4096,
        "expected_mb": 4096,
        "peak_mb": 3520,
        "peak_source": "torch",
        "oom": False,
        "growths": 0,
    }
    path = memory_history.record_run(
        alice.hdfs, alice.staging_dir, key, "application_1_0007", {"worker": record}, ran_s=2460.0
    )
    where = ["--rm", tenants.details.rm_web_url, "--webhdfs", tenants.nn]

    def melon(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv) + where)
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = melon("memory", "show", key, "--user", "alice")
    assert code == 0, err
    assert "learned now 3872 MiB (learned from the last 1 run(s): peak 3520 MiB × 1.10" in out, out
    assert "application_1_0007" in out and "3520 (torch)" in out, out
    assert "run time: 41.0 min (median run time of the last 1 successful run(s): 41.0 min): priority auto 18" in out
    with attack(
        "bob shows alice's GPU memory history with `melon memory show`", expected="exit 1: Permission denied: user=bob"
    ) as row:
        code, out, err = melon("memory", "show", key, "--user", "bob", "--staging-dir", alice.staging_dir)
        row.got = f"exit {code}: " + ("Permission denied: user=bob" if "Permission denied: user=bob" in err else err)
    with attack(
        "bob forgets alice's GPU memory history with `melon memory forget`", expected="exit 1, her history kept"
    ) as row:
        code, out, err = melon("memory", "forget", key, "--user", "bob", "--staging-dir", alice.staging_dir)
        kept = tenants.superuser_hdfs().status(path, strict=False) is not None
        row.got = f"exit {code}, her history " + ("kept" if kept else "deleted")
    assert "Permission denied: user=bob" in err, err
    code, out, err = melon("memory", "forget", key, "--user", "alice")
    assert code == 0 and "forgot 1 run(s)" in out, (out, err)
    assert tenants.superuser_hdfs().status(path.rsplit("/", 1)[0], strict=False) is None
    code, out, _ = melon("memory", "show", key, "--user", "alice")
    assert code == 0 and "no history" in out, out


# ---- Kerberos: two principals in one process ---------------------------------------------------------------
def test_two_principals_in_one_process_each_authenticate_as_themselves(secure_cluster, tmp_path, attack, monkeypatch):
    """Two yarn connections with two principals (alice's and bob's keytabs) used at the same time from threads of
    one process (a triggerer, an api-server): every call is SPNEGO as its own principal (WebHDFS names the caller's
    home, the RM the submitter), and the process's KRB5CCNAME, here a cache no one has, is never changed."""
    from tests.integration.test_secure_live import _hook

    before = f"FILE:{tmp_path / 'the-process-default.ccache'}"
    monkeypatch.setenv("KRB5CCNAME", before)
    hooks = {name: _hook(secure_cluster, tmp_path, name=name) for name in ("alice", "bob")}
    barrier, seen, envs = threading.Barrier(len(hooks)), {name: [] for name in hooks}, set()

    def work(name: str) -> None:
        hook = hooks[name]
        barrier.wait(60)
        for _ in range(15):
            try:
                hook.cluster_info()  # the RM (a ticket check first)
                r = hook.get_url(f"{secure_cluster.webhdfs_url}/", params={"op": "GETHOMEDIRECTORY"})
                seen[name].append(r.json()["Path"] if r.status_code == 200 else f"HTTP {r.status_code}")
            except Exception as exc:  # noqa: BLE001 - what the call ended in is the observation
                seen[name].append(f"{type(exc).__name__}: {str(exc)[:80]}")
            envs.add(os.environ.get("KRB5CCNAME"))

    threads = [threading.Thread(target=work, args=(name,)) for name in hooks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    print({name: sorted(set(got)) for name, got in seen.items()})
    with attack(
        "two principals in one process: a call authenticates as the other one or fails",
        expected="each as its own principal, every call",
    ) as row:
        odd = {name: sorted({g for g in got if g != f"/user/{name}"}) for name, got in seen.items()}
        row.got = (
            "each as its own principal, every call"
            if all(len(seen[n]) == 15 for n in seen) and not any(odd.values())
            else f"{odd} ({ {n: len(g) for n, g in seen.items()} } calls)"
        )
    submitted = {}
    for name, hook in hooks.items():
        app_id = hook.new_application()["application-id"]
        hook.submit_application(
            {
                "application-id": app_id,
                "application-name": f"melon-two-{name}",
                "application-type": "MELON",
                "queue": "default",
                "max-app-attempts": 1,
                "am-container-spec": {"commands": {"command": "true"}},
                "resource": {"memory": 256, "vCores": 1},
            }
        )
        submitted[name] = app_id
    users = {name: hooks[name].get_application(app_id)["user"] for name, app_id in submitted.items()}
    for name, app_id in submitted.items():
        hooks[name].kill_application(app_id)
    assert users == {"alice": "alice", "bob": "bob"}, users
    with attack("the provider rewrites the process's KRB5CCNAME", expected="unchanged") as row:
        after = os.environ.get("KRB5CCNAME")
        changed = sorted({str(e) for e in envs | {after}} - {before})
        row.got = "unchanged" if not changed else f"set to {changed}"
