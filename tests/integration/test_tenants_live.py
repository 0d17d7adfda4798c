"""Tenants on the plain (simple-auth) mini cluster started with ``tenants=True`` (see minicluster.TENANTS): the
``airflow`` service user submits *as* alice or bob (doAs), into their queues, with application ACLs for the
``melon-admins`` group; HDFS permissions are on. Everything is observed on the real RM and NameNode.

The cluster is this module's own (ports from ``$MELON_TENANTS_PORT_BASE``, default 24000, so it does not collide
with the session cluster on 19000 or the fault cluster); ``MELON_TENANTS_CLUSTER_DIR`` reuses a running one
(``melon minicluster start --tenants``).
"""

from __future__ import annotations

import time

import pytest
import requests
from hdfs import InsecureClient
from hdfs.util import HdfsError

from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.hadoop.queues import QueueError
from airflow_provider_melon.hadoop.rm_json import YarnApiError
from airflow_provider_melon.hooks.melon import MelonHook
from airflow_provider_melon.runtime.outputs import hdfs_path
from airflow_provider_melon.spec import JobSpec
from tests.conftest import running_cluster

pytestmark = pytest.mark.integration

T = mc.TENANTS
SERVICE = T["service_user"]
ADMIN_ACL = " " + T["admin_group"]  # a Hadoop ACL: no users, the admin group


@pytest.fixture(scope="module")
def tenants_cluster():
    # one NodeManager with the 4 GPUs: with two, the scheduler sometimes reserved B's GPU request on the full node
    # while preemption freed a GPU on the other, and B waited for A to end (seen in 1 of 3 runs)
    yield from running_cluster(
        "MELON_TENANTS_CLUSTER_DIR",
        "melon-tenants-",
        "MELON_TENANTS_PORT_BASE",
        tenants=True,
        nodemanagers=1,
        gpus=4,
        gpu_memory_mb=65536,
        timeout=240,
    )


class Tenants:
    def __init__(self, details, code):
        self.details = details
        self.code = code
        self.nn = details.webhdfs_url.rsplit("/webhdfs/v1", 1)[0]
        self.submitted: list[str] = []

    def hook(self, user: str, hdfs_client=None) -> MelonHook:
        """What the operator builds for run_as=user: the service user's connection, acting for ``user``."""
        return mc.tenant_hook(self.details, user, hdfs_client=hdfs_client, admin_acl=ADMIN_ACL)

    def superuser_hdfs(self) -> InsecureClient:
        return InsecureClient(self.nn, user=self.details.user)

    def spec(self, name: str, queue: str, instances: int = 1, gpus: int = 0, seconds: int = 300) -> JobSpec:
        role = {"instances": instances, "memory": 256, "vcores": 1}
        if gpus:
            role["gpus"] = gpus
        return JobSpec.from_dict(
            {
                "name": name,
                "framework": "generic",
                "entrypoint": f"sleep {seconds}",
                "queue": queue,
                "code": str(self.code),
                "env": {"MELON_GPU_WAIT_S": "5"},
                "roles": {"worker": role},
            }
        )

    def submit(self, hook: MelonHook, spec: JobSpec) -> dict:
        result = hook.submit(spec)
        self.submitted.append(result["app_id"])
        return result

    def wait_tasks(self, hook: MelonHook, app_id: str, count: int, timeout: float = 240) -> dict:
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            status = hook.am_status(app_id)
            tasks = (status or {}).get("tasks") or []
            if len([t for t in tasks if t["state"] in ("REGISTERED", "RUNNING")]) >= count:
                return status
            time.sleep(0.5)
        raise AssertionError(f"{app_id}: {count} task(s) not running after {timeout}s: {status}")

    def kill_all(self):
        admin = self.hook(T["admin_user"])
        for app_id in self.submitted:
            try:
                if admin.yarn.get_state(app_id) not in TERMINAL_STATES:
                    admin.yarn.kill_application(app_id)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass


@pytest.fixture(scope="module")
def tenants(tenants_cluster, tmp_path_factory):
    code = tmp_path_factory.mktemp("tenant-code")
    (code / "train.py").write_text("print('alice private code')\n")
    t = Tenants(tenants_cluster, code)
    yield t
    t.kill_all()


class _Untouchable:
    """An HDFS client that fails the test if anything is staged through it."""

    def __getattr__(self, name):
        raise AssertionError(f"HDFS was used ({name}) although the submission should have failed before staging")


def _wait_state(hook: MelonHook, app_id: str, states, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app = hook.yarn.get_application(app_id)
        if app["state"] in states:
            return app
        time.sleep(0.5)
    raise AssertionError(f"{app_id} not in {states}: {app}")


def test_tenant_app_is_the_tenants_staged_privately_and_guarded_by_acls(tenants):
    alice, bob, ops = tenants.hook("alice"), tenants.hook("bob"), tenants.hook(T["admin_user"])
    result = tenants.submit(alice, tenants.spec("alice-private", "tenant_a", seconds=600))
    app_id = result["app_id"]
    app = _wait_state(alice, app_id, ("RUNNING",))
    # the RM's user is the tenant, not the service user that made the calls
    assert (app["user"], app["queue"]) == ("alice", "root.tenant_a")

    # staging: in alice's home, every folder 0700 and hers
    code_url = result["staging"].files["code"].url
    code_path = hdfs_path(code_url)
    assert code_path.startswith("/user/alice/.melon/cache/")
    su = tenants.superuser_hdfs()
    for folder in ("/user/alice", "/user/alice/.melon", "/user/alice/.melon/cache", "/user/alice/.melon/apps"):
        st = su.status(folder)
        assert (st["owner"], st["permission"]) == ("alice", "700"), (folder, st)

    # bob cannot kill alice's app: the RM answers 403
    with pytest.raises(YarnApiError) as killed:
        bob.yarn.kill_application(app_id)
    assert killed.value.status == 403 and "Unauthorized attempt to kill" in killed.value.message
    assert "by remote user bob" in killed.value.message
    # bob reading alice's app on the RM: not a 403 (the RM answers 200) but without what VIEW_APP guards
    seen_by_bob = bob.yarn.get_application(app_id)
    seen_by_alice = alice.yarn.get_application(app_id)
    assert seen_by_alice.get("amContainerLogs") and not seen_by_bob.get("amContainerLogs")
    assert seen_by_bob["state"] == "RUNNING"
    # ... while the AM's own pages, which the RM web proxy forwards to anyone (it only logs "bob is accessing
    # unchecked ..."), are refused by the AM itself: the proxy names the caller in its proxy-user cookie and the AM
    # checks the app's VIEW ACL (owner, melon-admins, yarn.admin.acl): 403 for bob, for /tensorboard/ too
    tenants.wait_tasks(alice, app_id, 1)
    rm = tenants.details.rm_web_url.rstrip("/")

    def view(user: str, path: str = "status") -> requests.Response:
        r = requests.get(
            f"{rm}/proxy/{app_id}/{path}",
            params={"user.name": SERVICE, "doAs": user},
            allow_redirects=False,
            timeout=30,
        )
        print(f"GET /proxy/{app_id}/{path} as {SERVICE} doAs={user}: {r.status_code} {r.text[:300]!r}")
        return r

    denied = view("bob")
    assert denied.status_code == 403, denied.text
    assert f"user bob may not view {app_id} (owner alice)" in denied.json()["error"]
    assert view("bob", "tensorboard/").status_code == 403
    assert view("bob", "").status_code == 403
    with pytest.raises(YarnApiError) as refused:  # what the hook's am_status makes of it
        bob.yarn.am_status(app_id)
    assert refused.value.status == 403 and "user bob may not view" in refused.value.message
    for user in ("alice", T["admin_user"]):  # the owner, and ops by the melon-admins group in the VIEW ACL
        shown = view(user)
        assert shown.status_code == 200, shown.text
        assert shown.json()["app_id"] == app_id and shown.json()["tasks"][0]["state"] in ("REGISTERED", "RUNNING")
    assert view("alice", "tensorboard/").status_code == 503  # past the check: the job has no TensorBoard
    # nor read her staged code: HDFS permission denied (WebHDFS 403 AccessControlException)
    bob_hdfs = InsecureClient(tenants.nn, user=SERVICE, proxy="bob")
    with pytest.raises(HdfsError) as denied:
        with bob_hdfs.read(code_path) as reader:
            reader.read()
    assert "Permission denied: user=bob" in str(denied.value)
    with alice.hdfs.read(code_path) as reader:  # alice can
        assert reader.read()[:2] == b"PK"

    # the admin group (application ACLs set at submit) can view and kill it
    seen_by_ops = ops.yarn.get_application(app_id)
    assert seen_by_ops.get("amContainerLogs")
    ops.yarn.kill_application(app_id)
    app = _wait_state(alice, app_id, ("KILLED",))
    assert f"killed by user {T['admin_user']}" in app["diagnostics"]


def test_unknown_queue_fails_before_anything_is_staged(tenants):
    hook = tenants.hook("alice", hdfs_client=_Untouchable())
    with pytest.raises(QueueError) as err:
        hook.submit(tenants.spec("nowhere", "tenant_zz"))
    message = str(err.value)
    assert "'tenant_zz'" in message and "no such leaf queue" in message and "`queue`" in message
    assert "root.tenant_a" in message and "root.tenant_b" in message


def test_a_job_larger_than_the_queue_maximum_fails_before_staging(tenants):
    """tenant_b may grow to 50 % of the cluster: 2 of the 4 GPUs; 3 GPUs can never run there, 2 can."""
    hook = tenants.hook("bob", hdfs_client=_Untouchable())
    with pytest.raises(QueueError) as err:
        hook.submit(tenants.spec("too-wide", "tenant_b", instances=3, gpus=1))
    assert "needs 3 GPU(s)" in str(err.value) and "maximum 2 GPU(s)" in str(err.value)
    report = hook.check_queue(tenants.spec("fits", "tenant_b", instances=2, gpus=1))
    assert report.ok and report.maximum["yarn.io/gpu"] == 2


def test_a_gang_above_the_users_limit_in_the_queue_fails_before_staging(tenants):
    """The default queue has 20 % of the cluster and YARN's default user-limit-factor 1: one user may hold 1 of the 4
    GPUs there (and YARN grants one container past that), so ops' 3-GPU gang could get 2 containers, hold them and
    never start. Refused before anything is staged, naming the setting; the same gang fits alice's tenant_a (40 %,
    factor 2.5). The numbers come from the real RM's scheduler answer."""
    hook = tenants.hook(T["admin_user"], hdfs_client=_Untouchable())
    with pytest.raises(QueueError) as err:
        hook.submit(tenants.spec("user-limited", "default", instances=3, gpus=1))
    message = str(err.value)
    assert f"user {T['admin_user']} may hold at most 1 GPU(s)" in message, message
    assert "yarn.scheduler.capacity.root.default.user-limit-factor" in message
    report = tenants.hook("alice", hdfs_client=_Untouchable()).check_queue(
        tenants.spec("fits-tenant-a", "tenant_a", instances=3, gpus=1)
    )
    assert report.ok and report.user_limit["yarn.io/gpu"] == 4, report.message


def test_a_user_airflow_may_not_impersonate_fails_at_the_first_call(tenants):
    su = tenants.superuser_hdfs()
    before = su.status("/user/mallory", strict=False)
    hook = tenants.hook("mallory")
    with pytest.raises(YarnApiError) as err:
        hook.submit(tenants.spec("intruder", "default"))
    assert err.value.status == 403
    assert "User: airflow is not allowed to impersonate mallory" in str(err.value)
    assert "hadoop.proxyuser.airflow.users" in str(err.value)
    # nothing staged: mallory has no home, and no cache object appeared anywhere for the attempt
    assert before is None and su.status("/user/mallory", strict=False) is None
    assert all(su.status(f"/user/{u}/.melon", strict=False) is None for u in ("airflow", "mallory"))


def test_tenant_b_gets_its_guarantee_back_by_preemption(tenants):
    """A fills every GPU (its queue may grow to 100 %); B (guaranteed 40 %) submits a one-GPU job: the scheduler
    preempts one of A's containers and B's task starts. B's wait, submit → its task registered, is printed."""
    alice, bob = tenants.hook("alice"), tenants.hook("bob")
    gpus = tenants.details.details["nodemanagers"] * tenants.details.details["gpus_per_node"]
    a_id = tenants.submit(alice, tenants.spec("a-fills", "tenant_a", instances=gpus, gpus=1, seconds=900))["app_id"]
    tenants.wait_tasks(alice, a_id, gpus)
    assert alice.yarn.node_gpu_summary()["total"]["gpus_used"] == gpus
    start = time.monotonic()
    b_id = tenants.submit(bob, tenants.spec("b-one", "tenant_b", instances=1, gpus=1, seconds=900))["app_id"]
    tenants.wait_tasks(bob, b_id, 1, timeout=240)
    waited = time.monotonic() - start
    a_app = alice.yarn.get_application(a_id)
    print(
        f"\nTENANT-B-WAIT {waited:.1f} s (submit -> B's one-GPU task registered), A preempted "
        f"{a_app.get('numNonAMContainerPreempted')} container(s)"
    )
    assert int(a_app.get("numNonAMContainerPreempted") or 0) >= 1
    assert a_app["state"] == "RUNNING"  # A lost a task to preemption, not the job
