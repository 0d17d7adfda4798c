"""The hook on the Kerberos mini cluster (session fixture ``secure_cluster``): real SPNEGO on every RM and
WebHDFS call, tickets from keytabs (no kinit), and the bad inputs that must fail before anything is submitted."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest
import requests

from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hooks.kerberos import KerberosError
from airflow_provider_melon.hooks.yarn import YarnHook
from tests.waits import wait_for

pytestmark = pytest.mark.integration


def _hook(cluster, tmp_path, name="airflow", **kw) -> YarnHook:
    """The hook as a secure yarn connection configures it: Kerberos from ``name``'s keytab, a fresh cache."""
    args = dict(
        auth="kerberos",
        kerberos_principal=cluster.principal(name),
        kerberos_keytab=cluster.keytab(name),
        kerberos_ccache=str(tmp_path / f"{name}.ccache"),
        krb5_conf=cluster.krb5_conf,
        retries=0,
    )
    args.update(kw)
    return YarnHook(rm_urls=[cluster.rm_web_url], **args)


def test_secure_cluster_publishes_kdc_keytabs_and_krb5_conf(secure_cluster):
    d = secure_cluster.details
    kdir = Path(secure_cluster.work_dir) / "kerberos"
    assert d["secure"] == 1 and d["realm"] == "MELON.TEST"
    assert Path(secure_cluster.krb5_conf).parent == kdir
    conf = Path(secure_cluster.krb5_conf).read_text()
    assert "default_realm = MELON.TEST" in conf and f"kdc = {d['kdc']}" in conf
    assert set(d["keytabs"]) == {"services", "airflow", "alice", "bob"}
    for name, path in d["keytabs"].items():
        assert Path(path).parent == kdir and Path(path).stat().st_size > 0, name
    assert d["principals"]["airflow"] == "airflow@MELON.TEST"
    # the launcher really runs Hadoop in Kerberos mode (its published core-site)
    core = (Path(d["conf_dir"]) / "core-site.xml").read_text()
    assert "<name>hadoop.security.authentication</name><value>kerberos</value>" in core
    assert "<name>hadoop.http.authentication.type</name><value>kerberos</value>" in core


def test_rm_and_webhdfs_refuse_calls_without_a_ticket(secure_cluster):
    """SPNEGO is enforced: no Negotiate header → 401, and user.name (simple auth) is not accepted either."""
    rm = requests.get(f"{secure_cluster.rm_web_url}/ws/v1/cluster/info?user.name=airflow", timeout=10)
    assert rm.status_code == 401 and rm.headers.get("WWW-Authenticate", "").startswith("Negotiate")
    hdfs = requests.get(f"{secure_cluster.webhdfs_url}/?op=GETFILESTATUS&user.name=airflow", timeout=10)
    assert hdfs.status_code == 401
    simple = YarnHook(rm_urls=[secure_cluster.rm_web_url], user="airflow", retries=0)
    with pytest.raises(YarnApiError) as err:
        simple.cluster_info()
    assert err.value.status == 401 and "kerberos" in str(err.value).lower()


def test_hook_spnego_from_keytab_submit_status_kill(secure_cluster, tmp_path):
    """The whole RM surface with a ticket the hook obtained from the airflow keytab itself: the app is owned by
    the Kerberos identity (not a user.name), and kill goes through SPNEGO too."""
    ccache = tmp_path / "airflow.ccache"
    hook = _hook(secure_cluster, tmp_path)
    assert hook.cluster_info()["state"] == "STARTED"
    assert ccache.is_file() and ccache.stat().st_size > 0  # the keytab login wrote the ticket cache
    app_id = hook.new_application()["application-id"]
    tag = f"melon-secure-{uuid.uuid4().hex[:8]}"
    hook.submit_application(
        {
            "application-id": app_id,
            "application-name": "melon-secure-it",
            "application-type": "MELON",
            "queue": "default",
            "max-app-attempts": 1,
            "application-tags": {"tag": [tag]},
            "am-container-spec": {"commands": {"command": "sleep 120"}},
            "resource": {"memory": 256, "vCores": 1},
        }
    )
    try:
        app = hook.get_application(app_id)
        assert app["user"] == "airflow"
        # the NM launched the AM container (an AM that never registers stays ACCEPTED until killed)
        deadline = time.monotonic() + 90
        while (
            not mc.container_logs(secure_cluster.work_dir, app_id, "launch_container.sh")
            and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        assert mc.container_logs(secure_cluster.work_dir, app_id, "launch_container.sh")
        assert hook.get_state(app_id) == "ACCEPTED"
    finally:
        hook.kill_application(app_id)
    deadline = time.monotonic() + 60
    while hook.get_state(app_id) != "KILLED" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert hook.get_state(app_id) == "KILLED"


def test_tenant_identity_comes_from_its_keytab(secure_cluster, tmp_path):
    hook = _hook(secure_cluster, tmp_path, name="alice")
    app_id = hook.new_application()["application-id"]
    hook.submit_application(
        {
            "application-id": app_id,
            "application-name": "melon-secure-alice",
            "application-type": "MELON",
            "queue": "default",
            "max-app-attempts": 1,
            "am-container-spec": {"commands": {"command": "true"}},
            "resource": {"memory": 256, "vCores": 1},
        }
    )
    assert hook.get_application(app_id)["user"] == "alice"
    hook.kill_application(app_id)


def test_webhdfs_with_the_hooks_ticket_and_a_delegation_token(secure_cluster, tmp_path):
    """WebHDFS (the hdfs package's Kerberos client, what the HDFS provider's hook uses) works on the ticket the
    YARN hook keeps in its cache (handed to the client, not through KRB5CCNAME), and the NameNode issues an HDFS delegation token with the RM as renewer."""
    hook = _hook(secure_cluster, tmp_path)
    base = secure_cluster.webhdfs_url.rsplit("/webhdfs/v1", 1)[0]
    client = hook._kerberos_tickets().webhdfs_client(base)
    path = f"/tmp/melon-secure-{uuid.uuid4().hex[:8]}.txt"
    client.write(path, data=b"staged under kerberos", overwrite=True)
    with client.read(path) as reader:
        assert reader.read() == b"staged under kerberos"
    assert client.status(path)["owner"] == "airflow"
    renewer = secure_cluster.details["rm_principal"].split("/")[0].split("@")[0]
    resp = requests.get(
        f"{secure_cluster.webhdfs_url}/?op=GETDELEGATIONTOKEN&renewer={renewer}",
        timeout=10,
        auth=hook._kerberos_tickets().auth(),
    )
    assert resp.status_code == 200 and resp.json()["Token"]["urlString"]


# ---- bad input: each fails before anything reaches the RM, naming the setting and the fix ------------------


def test_wrong_keytab_names_the_keytab(secure_cluster, tmp_path):
    hook = _hook(secure_cluster, tmp_path, kerberos_keytab=secure_cluster.keytab("bob"))  # airflow ≠ bob's keytab
    with pytest.raises(KerberosError) as err:
        hook.cluster_info()
    msg = str(err.value)
    assert "kerberos_keytab" in msg and secure_cluster.keytab("bob") in msg and "airflow@MELON.TEST" in msg


def test_missing_keytab_file_and_missing_principal(secure_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__KERBEROS__PRINCIPAL", "")  # nor Airflow's [kerberos] principal
    with pytest.raises(KerberosError, match=r"kerberos_keytab .*nope.keytab does not exist"):
        _hook(secure_cluster, tmp_path, kerberos_keytab=str(tmp_path / "nope.keytab")).new_application()
    with pytest.raises(KerberosError, match="no principal: set kerberos_principal"):
        _hook(secure_cluster, tmp_path, kerberos_principal=None).new_application()


def test_no_keytab_and_an_empty_cache_says_run_airflow_kerberos(secure_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__KERBEROS__KEYTAB", str(tmp_path / "absent.keytab"))
    hook = YarnHook(
        rm_urls=[secure_cluster.rm_web_url],
        auth="kerberos",
        retries=0,
        kerberos_principal=secure_cluster.principal("airflow"),
        kerberos_ccache=str(tmp_path / "empty.ccache"),
        krb5_conf=secure_cluster.krb5_conf,
    )
    with pytest.raises(KerberosError, match=r"no Kerberos ticket in .*empty.ccache: run `airflow kerberos`"):
        hook.cluster_info()


def test_expired_ticket_in_the_cache_fails_with_the_fix(secure_cluster, tmp_path, monkeypatch):
    """A ticket ``airflow kerberos`` stopped renewing: 6 s lifetime (the KDC grants what krb5.conf asks), then the
    hook — no keytab, only that cache — refuses to call the RM and says the ticket expired."""
    from airflow_provider_melon.hooks.kerberos import KerberosSettings, TicketKeeper

    short = tmp_path / "krb5.conf"
    short.write_text(
        Path(secure_cluster.krb5_conf).read_text().replace("[libdefaults]\n", "[libdefaults]\n  ticket_lifetime = 6s\n")
    )
    ccache = str(tmp_path / "expiring.ccache")
    TicketKeeper(
        KerberosSettings(secure_cluster.principal("airflow"), secure_cluster.keytab("airflow"), ccache, str(short))
    ).ensure(force=True)
    monkeypatch.setenv("AIRFLOW__KERBEROS__KEYTAB", str(tmp_path / "absent.keytab"))
    hook = YarnHook(
        rm_urls=[secure_cluster.rm_web_url],
        auth="kerberos",
        retries=0,
        kerberos_principal=secure_cluster.principal("airflow"),
        kerberos_ccache=ccache,
        krb5_conf=str(short),
    )
    assert hook.cluster_info()["state"] == "STARTED"  # still valid
    time.sleep(7)
    hook._kerberos_tickets()._next_check = 0  # the hook re-checks every 30 s; do not wait for that here
    with pytest.raises(KerberosError, match=r"ticket in .*expiring.ccache expired: keep `airflow kerberos` running"):
        hook.cluster_info()


def test_cli_minicluster_status_reports_kerberos(secure_cluster):
    info = mc.status(secure_cluster.work_dir)
    assert info["running"] and info["secure"] and info["nodes"]
    assert info["keytabs"]["airflow"].endswith("airflow.keytab")
    conns = mc.airflow_connections(secure_cluster, "python3")
    assert conns["yarn_default"]["extra"]["auth"] == "kerberos"
    assert json.dumps(conns)  # what `melon minicluster start --secure` exports
    assert os.environ.get("KRB5_CONFIG") == secure_cluster.krb5_conf


# ---- delegation tokens: a real job on the secure cluster ---------------------------------------------------

TOKEN_PROBE = """import os
data = open(os.environ["HADOOP_TOKEN_FILE_LOCATION"], "rb").read()
print("TOKEN-PROBE", "HDFS_DELEGATION_TOKEN" if b"HDFS_DELEGATION_TOKEN" in data else "none", flush=True)
"""


def _wait_terminal(yarn, app_id, timeout=240):
    deadline = time.monotonic() + timeout
    app = yarn.get_application(app_id)
    while app["state"] not in TERMINAL_STATES and time.monotonic() < deadline:
        time.sleep(1)
        app = yarn.get_application(app_id)
    return app


def _token_probe_job(folder: Path, name: str, instances: int):
    """A generic job whose tasks run :data:`TOKEN_PROBE` (staged from ``folder``)."""
    from airflow_provider_melon.spec import JobSpec

    (folder / "probe.py").write_text(TOKEN_PROBE)
    return JobSpec.from_dict(
        {
            "name": name,
            "framework": "generic",
            "entrypoint": "python probe.py",
            "code": str(folder),
            "roles": {"worker": {"instances": instances, "memory": 256, "vcores": 1}},
        }
    )


def test_job_runs_on_the_secure_cluster_with_an_hdfs_delegation_token(secure_cluster, tmp_path):
    """MelonHook.submit on Kerberos: an HDFS delegation token (renewer: the RM) goes into the submission's
    credentials; the NM localizes the staged AM jar, plan and code with it; the AM hands it to its task container."""
    from airflow_provider_melon.cli import melon_hook_for_cluster

    hook = melon_hook_for_cluster(secure_cluster.work_dir)
    spec = _token_probe_job(tmp_path, "secure-probe", instances=1)
    app_id = hook.submit(spec)["app_id"]
    app = _wait_terminal(hook.yarn, app_id)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app.get("diagnostics")
    assert app["user"] == "airflow"
    out = "\n".join(mc.container_logs(secure_cluster.work_dir, app_id, "stdout").values())
    assert "TOKEN-PROBE HDFS_DELEGATION_TOKEN" in out


def test_without_the_token_yarn_cannot_localize_the_staged_files(secure_cluster, tmp_path, monkeypatch):
    """The control: the same submission without credentials fails in localization (the NM has no HDFS identity
    for the user), so the test above passes because of the token."""
    from airflow_provider_melon.cli import melon_hook_for_cluster
    from airflow_provider_melon.hooks.melon import MelonHook

    monkeypatch.setattr(MelonHook, "_add_delegation_tokens", lambda self, context: None)
    hook = melon_hook_for_cluster(secure_cluster.work_dir)
    spec = _token_probe_job(tmp_path, "secure-no-token", instances=1)
    app = _wait_terminal(hook.yarn, hook.submit(spec)["app_id"])
    assert app["finalStatus"] == "FAILED"
    assert "exitCode: -1000" in app["diagnostics"]  # a localization failure, before the AM ran


def test_am_secret_travels_in_credentials_and_appears_in_no_log(secure_cluster, tmp_path, monkeypatch):
    """The AM's secret is a credentials secret: the tasks register with it (read from their token files) and the
    job succeeds, yet it is in no launch script, NM/RM/AM/task log or RM answer."""
    from airflow_provider_melon.cli import melon_hook_for_cluster
    from airflow_provider_melon.hooks import melon as melon_module

    secret = f"melonsecret{uuid.uuid4().hex}"
    monkeypatch.setattr(melon_module.secrets, "token_hex", lambda n=16: secret)
    hook = melon_hook_for_cluster(secure_cluster.work_dir)
    spec = _token_probe_job(tmp_path, "secure-secret", instances=2)
    app_id = hook.submit(spec)["app_id"]
    app = _wait_terminal(hook.yarn, app_id)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app.get("diagnostics")
    work = Path(secure_cluster.work_dir)
    files = [
        p
        for p in work.rglob("*")
        if p.is_file()
        and (app_id in str(p) or p.name == "launcher.log")
        and not p.name.endswith(".tokens")
        and p.name != "container_tokens"
    ]
    launch_scripts = [p for p in files if p.name == "launch_container.sh"]
    assert len(launch_scripts) >= 3  # the AM's and both tasks' launch contexts were looked at
    assert any(p.name == "AppMaster.stderr" for p in files) and any(p.name == "stdout" for p in files)
    leaks = [str(p) for p in files if secret.encode() in p.read_bytes()]
    assert leaks == []
    assert secret not in json.dumps(app)


# ---- token renewal and the runtime's HDFS access ------------------------------------------------------------

OUTLIVE = """import os, time
time.sleep(float(os.environ["HOLD_S"]))  # past the token's first expiry: only the RM's renewal keeps it valid
with open(os.path.join(os.environ["MELON_OUTPUT_MODEL"], "weights.txt"), "w") as f:
    f.write("trained past the renew interval")
"""


def _webhdfs_status(cluster, path: str, token: str) -> requests.Response:
    """GETFILESTATUS authenticated by a delegation token alone (no SPNEGO, no user.name)."""
    return requests.get(f"{cluster.webhdfs_url}{path}", params={"op": "GETFILESTATUS", "delegation": token}, timeout=10)


def test_job_outlives_its_token_renew_interval_and_publishes_outputs_with_the_token(secure_cluster, tmp_path):
    """The NameNode here lets a delegation token live 20 s past its last renewal. A job runs 2.5 intervals and
    then publishes a declared output from its container over WebHDFS with the HDFS token from its token file
    (``delegation=``; ``user.name`` gets 401 on this cluster). It succeeds because the RM, the token's renewer,
    renewed it while the app ran (its log shows each renewal for the app); a token nobody renews, taken at the
    same moment, is refused as expired by then."""
    from airflow_provider_melon.cli import melon_hook_for_cluster
    from airflow_provider_melon.hadoop import delegation
    from airflow_provider_melon.spec import JobSpec
    from tests.conftest import SECURE_TOKEN_RENEW_S

    hook = melon_hook_for_cluster(secure_cluster.work_dir)
    target = f"/user/airflow/melon-renew-{uuid.uuid4().hex[:8]}/model"
    (tmp_path / "outlive.py").write_text(OUTLIVE)
    hold = 2.5 * SECURE_TOKEN_RENEW_S
    spec = JobSpec.from_dict(
        {
            "name": "secure-outlive",
            "framework": "generic",
            "entrypoint": "python outlive.py",
            "code": str(tmp_path),
            "env": {"HOLD_S": str(hold)},
            "outputs": {"model": f"hdfs://{target}"},
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
        }
    )
    # the control: a token for the same user whose renewer (airflow itself) never renews it
    unrenewed = delegation.hdfs_delegation_token(
        hook.yarn, secure_cluster.webhdfs_url, "airflow", secure_cluster.fs_default_fs
    )
    assert _webhdfs_status(secure_cluster, "/user/airflow", unrenewed).status_code == 200
    started = time.monotonic()
    app_id = hook.submit(spec)["app_id"]
    app = _wait_terminal(hook.yarn, app_id, timeout=hold + 240)
    ran = time.monotonic() - started
    out = "\n".join(mc.container_logs(secure_cluster.work_dir, app_id, "stderr").values())
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), (app.get("diagnostics"), out[-3000:])
    assert ran > 2 * SECURE_TOKEN_RENEW_S

    client = hook.yarn._kerberos_tickets().webhdfs_client(secure_cluster.webhdfs_url.rsplit("/webhdfs/v1", 1)[0])
    with client.read(f"{target}/weights.txt") as reader:
        assert reader.read() == b"trained past the renew interval"
    assert client.status(target)["owner"] == "airflow"

    log = (Path(secure_cluster.work_dir) / "launcher.log").read_text(errors="replace")
    renewals = [line for line in log.splitlines() if "Renewed delegation-token=" in line and app_id in line]
    print(
        f"\nTOKEN-RENEWAL {app_id}: ran {ran:.0f} s with a {SECURE_TOKEN_RENEW_S} s renew interval; "
        f"the RM renewed its HDFS token {len(renewals)} time(s):"
    )
    for line in renewals:
        print("  " + line[:23] + " ... " + line[line.index("Renewed") :][:60] + " ... " + line[line.index("exp=") :])
    assert len(renewals) >= 2  # the renewal at submit, then at least one by the RM's timer before expiry

    expired = _webhdfs_status(secure_cluster, "/user/airflow", unrenewed)
    print(f"the unrenewed control token after {ran:.0f} s: HTTP {expired.status_code} {expired.text[:160]}")
    assert expired.status_code == 403 and "expired" in expired.text


# ---- tenants on Kerberos: doAs, queues, ACLs and HDFS homes with real principals ---------------------------


def test_airflow_submits_for_alice_and_bob_is_refused_on_the_secure_cluster(secure_cluster, tmp_path):
    """The ``airflow`` principal submits *as* alice (doAs over SPNEGO) into her queue: the RM's app user is alice,
    the staging is hers (0700), and the HDFS delegation token (asked with doAs) is hers too (owner alice), so
    the NodeManager can localize files from her private home. Bob, with his own Kerberos ticket, can neither kill
    her app nor list her staging (403); the admin group sees the ACL-guarded fields."""
    import sys

    from airflow_provider_melon.hooks.melon import MelonHook
    from airflow_provider_melon.spec import JobSpec

    t, d = mc.TENANTS, secure_cluster
    (tmp_path / "alice.py").write_text("import time; print('alice private code', flush=True); time.sleep(30)\n")
    yarn = _hook(d, tmp_path, proxy_user="alice")
    nn = d.webhdfs_url.rsplit("/webhdfs/v1", 1)[0]
    webhdfs = yarn._kerberos_tickets().webhdfs_client  # on the YARN hook's ticket
    hook = MelonHook(
        yarn_hook=yarn,
        hdfs_client=webhdfs(nn, proxy="alice"),
        proxy_user="alice",
        admin_acl=" " + t["admin_group"],
        am_classpath=d.am_classpath,
        default_python=sys.executable,
        container_env=mc.container_env(d),
        fs_default_fs=d.fs_default_fs,
    )
    spec = JobSpec.from_dict(
        {
            "name": "secure-alice",
            "framework": "generic",
            "entrypoint": "python alice.py",
            "code": str(tmp_path),
            "queue": t["queues"]["alice"][0],
            "roles": {"worker": {"instances": 1, "memory": 256, "vcores": 1}},
        }
    )
    app_id = hook.submit(spec)["app_id"]
    app = hook.yarn.get_application(app_id)
    assert (app["user"], app["queue"]) == ("alice", "root.tenant_a")
    staging = webhdfs(nn, proxy="alice").status("/user/alice/.melon")
    assert (staging["owner"], staging["permission"]) == ("alice", "700")

    bob = _hook(d, tmp_path, name="bob")  # his own ticket cache: airflow's hook above keeps its own
    with pytest.raises(YarnApiError) as denied:
        bob.kill_application(app_id)
    listing = bob.get_url(f"{d.webhdfs_url}/user/alice/.melon", params={"op": "LISTSTATUS"})
    print(f"\nbob (Kerberos) kills alice's {app_id}: HTTP {denied.value.status} {str(denied.value)[:160]}")
    print(f"bob lists /user/alice/.melon: HTTP {listing.status_code} {listing.text[:160]}")
    assert denied.value.status == 403
    assert listing.status_code == 403 and "user=bob" in listing.text
    # the RM reports the AM container's log link once it has allocated that container (a NodeManager heartbeat after
    # the submission): the admin group sees it from then on, bob (no VIEW_APP) never does
    ops = _hook(d, tmp_path, name="airflow", proxy_user=t["admin_user"])
    wait_for(lambda: "amContainerLogs" in ops.get_application(app_id), 60, f"the AM container of {app_id} allocated")
    assert "amContainerLogs" not in bob.get_application(app_id)

    app = _wait_terminal(hook.yarn, app_id)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app.get("diagnostics")
    out = "\n".join(mc.container_logs(d.work_dir, app_id, "stdout").values())
    assert "alice private code" in out
    log = (Path(d.work_dir) / "launcher.log").read_text(errors="replace")
    token = [line for line in log.splitlines() if "Renewed delegation-token=" in line and app_id in line]
    print("alice's HDFS token, as the RM renews it:", token[0][token[0].index("(token for") :][:80] if token else None)
    assert token and "(token for alice: HDFS_DELEGATION_TOKEN owner=alice," in token[0], token[:1]


def test_doctor_checks_the_hooks_own_ticket(secure_cluster, tmp_path, monkeypatch):
    """`melon doctor`'s auth check reads the hook's ticket cache (its keytab login), not the process default,
    which may hold nothing: a hook with only an empty cache fails, naming it and the fix."""
    from airflow_provider_melon.cli.doctor import Doctor
    from airflow_provider_melon.hooks.melon import MelonHook

    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'nothing-here.ccache'}")
    ok = Doctor(MelonHook(yarn_hook=_hook(secure_cluster, tmp_path), user="airflow")).check_auth()
    assert ok.status == "ok" and "airflow.ccache" in ok.detail, ok
    monkeypatch.setenv("AIRFLOW__KERBEROS__KEYTAB", str(tmp_path / "absent.keytab"))
    empty = YarnHook(
        rm_urls=[secure_cluster.rm_web_url],
        auth="kerberos",
        retries=0,
        kerberos_principal=secure_cluster.principal("airflow"),
        kerberos_ccache=str(tmp_path / "empty.ccache"),
        krb5_conf=secure_cluster.krb5_conf,
    )
    failed = Doctor(MelonHook(yarn_hook=empty, user="airflow")).check_auth()
    assert failed.status == "fail" and "empty.ccache: run `airflow kerberos`" in failed.fix, failed
