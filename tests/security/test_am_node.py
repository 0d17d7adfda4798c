"""Hostile tenants against alice's ApplicationMaster pages and the node's GPU ledger.

The AM: on the tenants cluster (``yarn.acl.enable`` on) bob, who can reach the AM's port, reads it directly from
another address than the RM web proxy's (127.0.0.2: Linux answers all of 127.0.0.0/8 locally, and the mini
cluster's proxy connects from 127.0.0.1), forging the proxy's ``proxy-user`` cookie, and stalls the AM with
half-sent requests; alice's reads through the RM proxy and her job go on.

The ledger: an attacker of another OS user (``nobody``, through ``setpriv``) against a ledger directory laid out as
docs/ledger.md tells the admin, and the executor against a directory that others could write or made first.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from airflow_provider_melon.gpu.devices import DeviceInfo
from airflow_provider_melon.gpu.ledger import Ledger
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.spec import JobSpec
from tests.integration.test_tenants_live import SERVICE, tenants, tenants_cluster  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration

ATTACKER = "127.0.0.2"


def _direct(am: str, method: str, path: str, headers: dict, body: bytes = b"") -> tuple[int, str]:
    host, port = am.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30, source_address=(ATTACKER, 0))
    try:
        conn.request(method, path, body=body or None, headers=headers)
        r = conn.getresponse()
        text = r.read().decode(errors="replace")
        print(f"{method} http://{am}{path} from {ATTACKER}: {r.status} {text[:200]!r}")
        return r.status, text
    finally:
        conn.close()


def _proxy_view(tenants, app_id: str, user: str):
    import requests

    rm = tenants.details.rm_web_url.rstrip("/")
    return requests.get(f"{rm}/proxy/{app_id}/status", params={"user.name": SERVICE, "doAs": user}, timeout=30)


def test_bob_reads_alices_am_directly_and_stalls_it(tenants, attack):
    alice = tenants.hook("alice")
    spec = tenants.spec("alice-am-pages", "tenant_a", instances=2, seconds=40)
    app_id = tenants.submit(alice, spec)["app_id"]
    tenants.wait_tasks(alice, app_id, 2)
    am = alice.yarn.get_application(app_id)["amRPCAddress"]  # the AM's HTTP address (docs/protocol.md)
    forged = {"Cookie": "proxy-user=alice", "Host": am}

    for path in ("/status", "/", "/tensorboard/"):
        with attack(f"bob GETs alice's AM {path} directly, forging proxy-user=alice", expected="403") as row:
            code, text = _direct(am, "GET", path, forged)
            row.got = str(code) if '"tasks"' not in text else f"{code} with alice's tasks"
    with attack("bob POSTs a heartbeat to alice's AM without the secret", expected="403") as row:
        body = json.dumps({"role": "worker", "index": 0, "step": 999}).encode()
        row.got = str(_direct(am, "POST", "/heartbeat", {"Content-Type": "application/json"}, body)[0])

    stalled = []
    host, port = am.rsplit(":", 1)
    try:
        with attack(
            "bob holds 24 half-sent requests open on alice's AM; alice reads it through the RM proxy",
            expected="200 with her 2 tasks",
        ) as row:
            for _ in range(24):  # three times the AM's old pool
                s = socket.create_connection((host, int(port)), timeout=30, source_address=(ATTACKER, 0))
                s.sendall(b"GET /status HTTP/1.1\r\nHost: am\r\nX-Half: ")
                stalled.append(s)
            r = _proxy_view(tenants, app_id, "alice")
            tasks = r.json().get("tasks") if r.status_code == 200 else None
            row.got = f"{r.status_code} with her {len(tasks)} tasks" if tasks else f"{r.status_code} {r.text[:80]}"
    finally:
        for s in stalled:
            s.close()

    # alice's own read through the proxy, and her job, are untouched
    deadline = time.monotonic() + 180
    app = alice.yarn.get_application(app_id)
    while app["state"] not in TERMINAL_STATES and time.monotonic() < deadline:
        time.sleep(1)
        app = alice.yarn.get_application(app_id)
    assert app["finalStatus"] == "SUCCEEDED", app


# ---- the GPU ledger ----------------------------------------------------------------------------------------

ATTACKS = {
    "erase": "os.unlink(os.path.join(d, 'ledger.json'))",
    "forge": "open(os.path.join(d, 'ledger.json'), 'w').write('{\"version\": 1, \"reservations\": []}')",
    "replace": "p = os.path.join(d, 'forged'); open(p, 'w').write('{}'); os.replace(p, os.path.join(d, 'ledger.json'))",
    "lock": "import fcntl; fcntl.flock(os.open(os.path.join(d, 'ledger.lock'), os.O_RDWR), fcntl.LOCK_EX)",
}


def _as_nobody(code: str, d: Path) -> str:
    """Run ``code`` (with ``d``) as the OS user nobody; ``done`` or the exception's name."""
    script = (
        f"import os, sys\nd = sys.argv[1]\ntry:\n    {code}\n    print('done')\nexcept OSError as e:\n"
        f"    print(type(e).__name__)\n"
    )
    out = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c", script, str(d)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return (out.stdout.strip() or out.stderr.strip()[-120:]).splitlines()[-1]


@pytest.fixture
def reachable():
    """A folder under /tmp that other OS users can reach (pytest's tmp_path is 0700) but not write."""
    base = Path(tempfile.mkdtemp(prefix="melon-ledger-attack-", dir="/tmp"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_another_os_user_cannot_touch_a_ledger_laid_out_as_documented(reachable, attack):
    tmp_path = reachable
    d = tmp_path / "ledger"
    subprocess.run(["install", "-d", "-m", "2770", "-o", "root", "-g", "root", str(d)], check=True)
    led = Ledger(str(d))
    assert led.reserve("alice-task", os.getpid(), 4000, [DeviceInfo(0, "v0", "virtual", 16000)]) == 0
    for name, code in ATTACKS.items():
        with attack(f"nobody tries to {name} the node's ledger reservations", expected="PermissionError") as row:
            row.got = _as_nobody(code, d)
    assert [r["task_id"] for r in led.entries()] == ["alice-task"]
    # not refused for want of a path: nobody reaches the folder, and the same attack on the layout the ledger had
    # before (0777 folder, 0666 files) goes through
    assert _as_nobody("os.listdir(d)", tmp_path) == "done"
    old = tmp_path / "old"
    old.mkdir()
    os.chmod(old, 0o777)
    (old / "ledger.json").write_text("{}")
    assert _as_nobody(ATTACKS["erase"], old) == "done"
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp
    with attack(
        "nobody pre-creates the ledger directory in a /tmp-like folder; a task uses it",
        expected="refused: belongs to another user",
    ) as row:
        first = shared / "melon-ledger"
        assert (
            _as_nobody(
                "os.mkdir(os.path.join(d, 'melon-ledger'), 0o777); os.chmod(os.path.join(d, 'melon-ledger'), 0o777)",
                shared,
            )
            == "done"
        )
        try:
            Ledger(str(first)).reserve("alice-task-2", os.getpid(), 1000, [DeviceInfo(0, "v0", "virtual", 16000)])
            row.got = "reserved in nobody's directory"
        except ValueError as exc:
            row.got = "refused: belongs to another user" if "belongs to another user" in str(exc) else str(exc)


def test_the_executor_refuses_a_ledger_others_may_write(tenants, tmp_path, attack):
    """The executor of alice's GPU task, pointed at a world-writable ledger (as the old /tmp/melon-ledger was),
    exits 2; the AM's diagnostics name the path, its mode and the fix."""
    open_dir = Path("/tmp") / f"melon-open-ledger-{os.getpid()}"
    open_dir.mkdir(mode=0o777, exist_ok=True)
    os.chmod(open_dir, 0o777)
    try:
        alice = tenants.hook("alice")
        spec = JobSpec.from_dict(
            {
                "name": "alice-open-ledger",
                "framework": "generic",
                "entrypoint": "true",
                "queue": "tenant_a",
                "code": str(tenants.code),
                "env": {"MELON_LEDGER_DIR": str(open_dir)},
                "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1, "gpu_memory": "1GiB"}},
            }
        )
        app_id = tenants.submit(alice, spec)["app_id"]
        deadline = time.monotonic() + 180
        app = alice.yarn.get_application(app_id)
        while app["state"] not in TERMINAL_STATES and time.monotonic() < deadline:
            time.sleep(1)
            app = alice.yarn.get_application(app_id)
        diag = app.get("diagnostics") or ""
        print(f"{app_id}: {app['state']} {app['finalStatus']}: {diag}")
        with attack(
            "alice's GPU task on a world-writable ledger directory", expected="exited 2, names mode and fix"
        ) as row:
            named = f"{open_dir} is writable by others" in diag and "(0777)" in diag and "install -d -m 2770" in diag
            row.got = (
                "exited 2, names mode and fix"
                if "exited 2" in diag and named
                else f"{app['finalStatus']}: {diag[-120:]}"
            )
        assert not (open_dir / "ledger.json").exists(), "nothing was reserved there"
    finally:
        for p in open_dir.iterdir():
            p.unlink()
        open_dir.rmdir()
