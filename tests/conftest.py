"""Session fixtures: the real Hadoop mini cluster (started here, stopped here) and hooks bound to it.

Set MELON_TEST_CLUSTER_DIR to the work dir of an already running cluster (`melon minicluster start`) to
reuse it while iterating; by default each session starts its own on ports from MELON_TEST_PORT_BASE
(default 19000, so it does not collide with a demo cluster on 18000).

Airflow against the session's mini cluster, AIRFLOW_HOME in a temp dir, connections from a file (Airflow's
local-filesystem secrets backend), in two forms:

* ``airflow_stack`` — a real Airflow: api-server, scheduler, dag-processor and triggerer (LocalExecutor,
  parallelism 4) as separate processes (:class:`LocalAirflow`); DAGs are triggered through the REST API as the
  UI does. The example DAGs are tested on it (tests/e2e), and the triggerer fault (tests/faults).
* ``airflow`` — the CLI (`airflow dags test` / `airflow tasks test`), for the reattach/kill tests that crash a
  task process on purpose, and as a fast extra.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from airflow_provider_melon.cli.jobs import QUIETED_LOGGERS
from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.dev.local_airflow import LocalAirflow
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.spec import JobSpec

#: the fault and hostile-tenant tables, printed at the end of a run on any number of xdist workers
pytest_plugins = ["tests.evidence"]

REPO = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis comes with the test extra; without it only the property tests fail to import
    pass
else:
    # Property tests (tests/unit/test_fuzz_*.py, test_archive_safety.py) stay bounded: "melon" (the default) is
    # derandomized, so every run tries the same examples and a CI failure reproduces locally, and writes no
    # example database into the tree. HYPOTHESIS_PROFILE=melon-explore searches 10x wider with fresh randomness.
    settings.register_profile(
        "melon",
        max_examples=50,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile(
        "melon-explore", parent=settings.get_profile("melon"), max_examples=500, derandomize=False
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "melon"))


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

#: The suite's fixed port families: each mini cluster takes ports base+20..base+88 (its RM and NameNode), and some
#: tests start more clusters at base+100..base+800 or at ``MELON_TEST_PORT_BASE`` + 8500. Each is overridable by its
#: variable. Under pytest-xdist (``make test`` runs two workers), worker ``gwN`` uses every base minus
#: N × :data:`WORKER_PORT_SHIFT`: the whole layout spans under 9000 ports, so two workers never bind the same port,
#: and gw1's layout (10000-18600) stays below both gw0's and the kernel's ephemeral range (32768-).
PORT_BASES = {
    "MELON_TEST_PORT_BASE": 19000,
    "MELON_FAULT_PORT_BASE": 21000,
    "MELON_GANG_PORT_BASE": 22000,
    "MELON_TENANTS_PORT_BASE": 24000,
    "MELON_TEST_SECURE_PORT_BASE": 26000,
}
WORKER_PORT_SHIFT = 9000
MAX_WORKERS = 2

#: The modules on the session's Airflow (the fixtures ``airflow_stack``, ``airflow``): on two workers they run on one
#: (one :class:`ModuleGroups` group), so only that worker starts an Airflow. tests/e2e/ is all of them but one.
SESSION_AIRFLOW_MODULES = ("tests/e2e/", "tests/faults/test_triggerer_fault.py")
AIRFLOW_FIXTURES = {"airflow_stack", "airflow"}


def xdist_group(nodeid: str) -> str:
    """The group a test (its node id, or its module's path from the repository root) runs in on xdist workers."""
    module = nodeid.split("::", 1)[0]
    return "session-airflow" if module.startswith(SESSION_AIRFLOW_MODULES) else module


def port_base(var: str) -> int:
    """This process's base of the port family ``var`` (one of :data:`PORT_BASES`; shifted on a worker by
    :func:`pytest_configure`)."""
    return int(os.environ.get(var, PORT_BASES[var]))


def pytest_configure(config):
    workers = config.getoption("numprocesses", None)
    if isinstance(workers, int) and workers > MAX_WORKERS:
        raise pytest.UsageError(
            f"-n {workers}: at most {MAX_WORKERS} workers (tests/conftest.py PORT_BASES: a third "
            f"worker's ports would go below 1024)"
        )
    # this process's pytest-xdist worker (not $PYTEST_XDIST_WORKER: a pytest a test starts inherits that)
    worker = getattr(config, "workerinput", {}).get("workerid", "gw0")  # gw0, gw1; none outside xdist
    shift = int(worker.removeprefix("gw")) * WORKER_PORT_SHIFT
    if shift:  # every reader of a base (fixtures, tests, the scripts they run) sees this worker's own ports
        for var in PORT_BASES:
            os.environ[var] = str(port_base(var) - shift)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (``make test``) groups by :func:`xdist_group`: a module's tests on one worker (its module
    fixtures start once), and every module on the session's Airflow on one worker. (pytest-xdist's own loadgroup reads
    ``xdist_group`` marks through a node id suffix that pytest 9.2 no longer lets a plugin set: it scheduled test by
    test.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return ModuleGroups(config, log)


def pytest_collection_modifyitems(config, items):
    """A module on the session's Airflow that :data:`SESSION_AIRFLOW_MODULES` misses would start a second Airflow
    on the other worker: name it here, at collection, rather than let it cost a run its time."""
    missed = sorted(
        {
            item.location[0]
            for item in items
            if AIRFLOW_FIXTURES & set(item.fixturenames) and xdist_group(item.nodeid) != "session-airflow"
        }
    )
    if missed:
        raise pytest.UsageError(
            f"{', '.join(missed)} use the session's Airflow ({', '.join(sorted(AIRFLOW_FIXTURES))})"
            " but are not in tests/conftest.py SESSION_AIRFLOW_MODULES"
        )


def headless_chromium(*, performance_log: bool = False):
    """A Selenium driver of Debian's headless Chromium (the browser tests': UI plugin, TensorBoard); skips the test
    where chromium + chromium-driver are missing (scripts/setup.sh installs them). ``performance_log``: record the
    network events (``driver.get_log("performance")``). The caller quits it."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip(
            f"no Debian chromium + chromium-driver ({CHROMIUM}, {CHROMEDRIVER}): scripts/setup.sh installs them"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,950",
    ):
        opts.add_argument(arg)
    if performance_log:
        opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.implicitly_wait(0)
    return driver


def running_cluster(reuse_var: str, prefix: str, port_var: str, port_offset: int = 0, **start):
    """A mini cluster for a fixture to yield: the one running in ``$<reuse_var>`` if set, else one started on
    ports from :func:`port_base` of ``port_var`` (plus ``port_offset``, for a second cluster of that family) with
    ``start`` options, stopped and removed after."""
    reuse = os.environ.get(reuse_var)
    if reuse:
        details = mc.read_details(Path(reuse))
        if details is None:
            pytest.fail(f"{reuse_var}={reuse} has no running cluster (no cluster.json)")
        yield details
        return
    work_dir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        details = mc.start(work_dir, port_base=port_base(port_var) + port_offset, **start)
    except mc.MiniClusterError as exc:
        pytest.fail(str(exc))
    try:
        yield details
    finally:
        mc.stop(work_dir)
        if not os.environ.get("MELON_KEEP_CLUSTER_DIR"):
            shutil.rmtree(work_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def minicluster():
    yield from running_cluster("MELON_TEST_CLUSTER_DIR", "melon-minicluster-", "MELON_TEST_PORT_BASE", timeout=240)


@pytest.fixture(scope="session")
def secure_cluster():
    """A Kerberos mini cluster (KDC, keytabs + krb5.conf in its work dir, SPNEGO on RM/NM/WebHDFS) with the tenants'
    queues, ACLs and HDFS homes (alice, bob: Kerberos principals here), one NM; HDFS delegation tokens expire
    :data:`SECURE_TOKEN_RENEW_S` after their last renewal. Ports from MELON_TEST_SECURE_PORT_BASE (default 26000);
    MELON_TEST_SECURE_CLUSTER_DIR reuses a running one (start it with the same options:
    ``melon minicluster start --secure --tenants --token-renew-s 20 --nodemanagers 1``)."""
    yield from running_cluster(
        "MELON_TEST_SECURE_CLUSTER_DIR",
        "melon-secure-",
        "MELON_TEST_SECURE_PORT_BASE",
        secure=True,
        tenants=True,
        token_renew_s=SECURE_TOKEN_RENEW_S,
        nodemanagers=1,
        timeout=240,
    )


#: the secure cluster's NameNode delegation-token renew interval (Hadoop's default is 24 h): short, so a test job
#: outlives its token's first expiry
SECURE_TOKEN_RENEW_S = 20


@pytest.fixture
def yarn_hook(minicluster):
    from airflow_provider_melon.hooks.yarn import YarnHook

    return YarnHook(rm_urls=[minicluster.rm_web_url], user=minicluster.user)


@pytest.fixture
def melon_hook(minicluster):
    """A MelonHook bound to the mini cluster: real WebHDFS, real RM."""
    from airflow_provider_melon.cli import melon_hook_for_cluster

    return melon_hook_for_cluster(minicluster.work_dir)


class Jobs:
    def __init__(self, hook, cluster, tmp_path_factory):
        self.hook = hook
        self.cluster = cluster
        self.code = tmp_path_factory.mktemp("code")
        (self.code / "noop.py").write_text("print('noop')\n")
        self.submitted: list[str] = []

    def submit(self, job: dict, tags=None) -> str:
        job = dict(job)
        job.setdefault("code", str(self.code))
        spec = JobSpec.from_dict(job)
        app_id = self.hook.submit(spec, tags=tags)["app_id"]
        self.submitted.append(app_id)
        return app_id

    def app(self, app_id: str) -> dict:
        return self.hook.yarn.get_application(app_id)

    def wait(self, app_id: str, timeout: float = 240, states=TERMINAL_STATES) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            app = self.app(app_id)
            if app["state"] in states:
                return app
            time.sleep(1)
        raise AssertionError(f"{app_id} not in {states} after {timeout}s\n{self.picture(app_id)}")

    def status(self, app_id: str) -> dict | None:
        return self.hook.yarn.am_status(app_id)

    def wait_status(self, app_id: str, predicate, timeout: float = 180) -> dict:
        """The AM's status once ``predicate`` holds; fails at ``timeout``, or as soon as the app has ended while its
        AM serves no status (it will not start serving one)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.status(app_id)
            if last and predicate(last):
                return last
            if last is None and self.app(app_id)["state"] in TERMINAL_STATES:
                raise AssertionError(f"{app_id} ended with no AM status to match\n{self.picture(app_id)}")
            time.sleep(1)
        raise AssertionError(
            f"AM status of {app_id} never matched; last: {json.dumps(last)[:2000]}\n" + self.picture(app_id)
        )

    def picture(self, app_id: str) -> str:
        """What the RM says of the app and of the cluster: for a failure message (a wait that timed out)."""
        from tests.waits import rm_picture

        return rm_picture(self.hook, app_id, self.cluster)

    def cause(self, app_id: str):
        """:meth:`picture` as a wait's cause (``tests.waits.wait_for(..., cause=jobs.cause(app_id))``)."""
        return lambda: self.picture(app_id)

    def container_logs(self, app_id: str, name: str = "stdout") -> dict[str, str]:
        """container id → the log file's text, read from the NodeManagers' log dirs (mini cluster: local)."""
        return mc.container_logs(self.cluster.work_dir, app_id, name)

    def kill_all(self):
        for app_id in self.submitted:
            try:
                if self.app(app_id)["state"] not in TERMINAL_STATES:
                    self.hook.yarn.kill_application(app_id)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass


@pytest.fixture
def jobs(melon_hook, minicluster, tmp_path_factory):
    j = Jobs(melon_hook, minicluster, tmp_path_factory)
    yield j
    j.kill_all()


@pytest.fixture(autouse=True)
def _keep_cli_logger_levels():
    """A `melon` command run in the test process (``cli.main``) sets its loggers' levels for the process
    (:data:`QUIETED_LOGGERS`); give them back after each test, so no later test depends on which ran before it
    (one on two workers found ``hdfs`` at ERROR, left by another module's ``cli.main``)."""
    levels = {name: logging.getLogger(name).level for name in QUIETED_LOGGERS}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped test that names torch is a failure: ``make setup`` installs PyTorch, so its tests never skip (only
    ``MELON_TORCH_OPTIONAL=1``, the compat venvs of ``scripts/compat.sh``, which carry no framework, lets them).
    ``MELON_TEST_ALL=1`` (``make test-all``): every optional part is installed, so any skipped test is a failure (a
    missing chromium or dataset must not pass silently)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if "torch" in reason.lower() and os.environ.get("MELON_TORCH_OPTIONAL") != "1":
            report.outcome = "failed"
            report.longrepr = f"a PyTorch test must run (make setup installs torch), this one skipped: {reason}"
        elif os.environ.get("MELON_TEST_ALL") == "1":
            report.outcome = "failed"
            report.longrepr = f"MELON_TEST_ALL=1: every test must run, this one skipped: {reason}"


class AirflowRunner:
    def __init__(self, env: dict):
        self.env = env

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def popen(self, *args: str, log: Path) -> subprocess.Popen:
        fh = open(log, "w")
        return subprocess.Popen(
            [AIRFLOW, *args], env=self.env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )


def _home(minicluster, tmp_path_factory, name: str) -> dict:
    home = tmp_path_factory.mktemp(name)
    dags = home / "dags"
    shutil.copytree(REPO / "dags", dags)
    shutil.copytree(REPO / "tests" / "e2e" / "dags", dags, dirs_exist_ok=True)  # the test-only DAGs
    return mc.airflow_env(minicluster, home, dags, sys.executable)


@pytest.fixture(scope="session")
def airflow_stack(minicluster, tmp_path_factory):
    stack = LocalAirflow(_home(minicluster, tmp_path_factory, "airflow-stack"), parallelism=4)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def airflow(minicluster, tmp_path_factory):
    env = _home(minicluster, tmp_path_factory, "airflow-home")
    runner = AirflowRunner(env)
    result = runner.run("db", "migrate", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return runner
