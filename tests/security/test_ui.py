"""Hostile tenants against the UI plugin: a real Airflow with the FAB auth manager (per-DAG permissions, users and
roles made with the FAB CLI as an admin would) on the mini cluster, two DAGs whose train tasks run real MeLoN jobs,
and what a tenant can plant on the cluster: a MeLoN app that copies alice's tags and claims her task instance in its
labels, with markup for a name and a ``javascript:`` TensorBoard link, and an app that is not a MeLoN one.

* ``reader`` may read DAG A only: A's job, 403 on B's (``/api/ti``, ``/api/jobs/<id>``), no B job and not the
  planted one in the lists, B's tasks anonymous on the GPU page.
* ``nobody`` may read no DAG: nothing but anonymous reservations.
* ``conn_id`` naming a connection that is not of type yarn, or none: 422 naming the field.
* the admin (every DAG) sees the planted app, not attributed to any DAG, its markup as text in a real browser.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from urllib.parse import quote

import pytest

from airflow_provider_melon.dev import minicluster as mc
from airflow_provider_melon.dev.local_airflow import LocalAirflow, LocalAirflowError
from tests.conftest import REPO, headless_chromium
from tests.e2e.test_ui_plugin import answer, check_login_redirect, log_in, melon_hook_module, wait_for  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DAG_A, DAG_B = "melon_sec_ui_a", "melon_sec_ui_b"
XSS = '<img src=x onerror="window.__pwned=1">'
DAGS = """
import pendulum
from pathlib import Path
from airflow.sdk import DAG
from airflow_provider_melon.operators.train import MelonTrainOperator

for dag_id in ({a!r}, {b!r}):
    with DAG(dag_id=dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False,
             params={{"seconds": 600}}) as dag:
        MelonTrainOperator(task_id="train", deferrable=True, poll_interval=5, job={{
            "name": dag_id.replace("_", "-"), "framework": "generic",
            "code": str(Path(__file__).resolve().parent / "ui_probe"),
            "entrypoint": "python progress.py --seconds {{{{ params.seconds }}}}", "env": {{"MELON_HEARTBEAT_S": "2"}},
            "roles": {{"worker": {{"instances": 1, "memory": 256, "vcores": 1, "gpu_memory": "2GiB"}}}}}})
    globals()[dag_id] = dag
""".format(a=DAG_A, b=DAG_B)


def get(client, path: str) -> tuple[int, object]:
    """``(status, body)`` of a GET as ``client``'s user (the body: JSON, or the error's detail text)."""
    try:
        return 200, client._http("GET", path)
    except LocalAirflowError as exc:
        found = re.search(r"HTTP (\d+): (.*)", str(exc), re.S)
        if not found:
            raise
        return int(found.group(1)), found.group(2)


@pytest.fixture(scope="module")
def fab(minicluster, tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-fab")
    dags = home / "dags"
    dags.mkdir()
    (dags / "melon_sec_ui.py").write_text(DAGS)
    shutil.copytree(REPO / "tests" / "e2e" / "dags" / "ui_probe", dags / "ui_probe")
    env = mc.airflow_env(minicluster, home, dags, sys.executable)
    conns = home / "connections.json"
    conns.write_text(
        json.dumps({**json.loads(conns.read_text()), "not_yarn": {"conn_type": "http", "host": "127.0.0.1", "port": 9}})
    )
    with LocalAirflow(env, parallelism=4, auth_manager="fab") as stack:
        yield stack


@pytest.fixture(scope="module")
def world(fab, melon_hook_module):
    """Both DAGs' jobs running (their AMs serving), the planted apps, and the three users' clients."""
    from airflow_provider_melon.spec import JobSpec

    hook = melon_hook_module
    reader = fab.add_user("reader", "reader-pw", dags=(DAG_A,))
    nobody = fab.add_user("nobody", "nobody-pw")
    runs = {dag: fab.trigger(dag) for dag in (DAG_A, DAG_B)}
    apps = {
        dag: wait_for(lambda dag=dag: fab.xcom(dag, runs[dag], "train", key="app_id"), 240, f"{dag}'s app id in XCom")
        for dag in runs
    }
    for dag, app_id in apps.items():
        wait_for(
            lambda app_id=app_id: any(t.get("step") for t in (hook.yarn.am_status(app_id) or {}).get("tasks", [])),
            240,
            f"{dag}'s task reporting steps",
        )
    # the tenant: alice's tags copied from the RM, her task instance claimed in the labels, markup for a name
    a_app = hook.yarn.get_application(apps[DAG_A])
    submit = hook.yarn.submit_application
    spec = JobSpec.model_validate(
        {
            "name": "planted",
            "framework": "generic",
            "entrypoint": "python -c 'import time; time.sleep(600)'",
            "roles": {"worker": {"memory": 128, "gpu_memory": "1GiB"}},
        }
    )
    planted = {}
    try:
        for kind, app_type in (("melon", "MELON"), ("other", "OTHER")):
            hook.yarn.submit_application = lambda ctx, t=app_type: submit(
                {**ctx, "application-name": XSS, "application-type": t}
            )
            planted[kind] = hook.submit(
                spec,
                tags=a_app["applicationTagList"],
                labels={
                    "dag_id": DAG_A,
                    "task_id": "train",
                    "run_id": runs[DAG_A],
                    "map_index": -1,
                    "tensorboard": "javascript:window.__pwned=1",
                },
            )["app_id"]
    finally:
        hook.yarn.submit_application = submit
    wait_for(
        lambda: all(hook.yarn.get_application(a)["state"] == "RUNNING" for a in planted.values()),
        240,
        "the planted apps running",
    )
    yield {"reader": reader, "nobody": nobody, "admin": fab, "runs": runs, "apps": apps, "planted": planted}
    for app_id in [*apps.values(), *planted.values()]:
        try:
            hook.yarn.kill_application(app_id)
        except Exception:  # noqa: BLE001 - already ended
            pass


def logs(client, app_id: str) -> tuple[int, str]:
    """``(status, text)`` of the AM logs of ``app_id`` as ``client``'s user (text/plain, not JSON)."""
    code, _, body = answer(f"{client.url}/melon/api/jobs/{app_id}/logs", Authorization=f"Bearer {client.token()}")
    return code, body


def test_a_browser_without_a_login_is_sent_to_the_fab_login_page(fab):
    check_login_redirect(fab)


def ti_path(dag: str, run_id: str) -> str:
    return f"/melon/api/ti?dag_id={dag}&run_id={quote(run_id, safe='')}&task_id=train&map_index=-1"


def test_a_reader_of_dag_a_sees_a_and_nothing_of_b(world, attack):
    reader, apps, runs = world["reader"], world["apps"], world["runs"]
    code, listed = get(reader, "/melon/api/jobs")
    ids = {j["id"] for j in listed["jobs"]} if code == 200 else set()
    with attack("reader of DAG A lists MeLoN jobs: B's job in the list", expected="absent") as row:
        row.got = "listed" if apps[DAG_B] in ids else "absent"
    with attack("reader of DAG A lists MeLoN jobs: the planted app claiming A's TI", expected="absent") as row:
        row.got = "listed" if world["planted"]["melon"] in ids else "absent"
    assert apps[DAG_A] in ids, listed  # A's own job is there, attributed to its task instance
    [a_job] = [j for j in listed["jobs"] if j["id"] == apps[DAG_A]]
    assert a_job["dag_id"] == DAG_A and a_job["ti_url"].startswith(f"dags/{DAG_A}/runs/"), a_job
    with attack("reader of DAG A reads /melon/api/ti of DAG B", expected="403") as row:
        row.got = str(get(reader, ti_path(DAG_B, runs[DAG_B]))[0])
    with attack("reader of DAG A reads /melon/api/jobs/<B's app>", expected="403") as row:
        row.got = str(get(reader, f"/melon/api/jobs/{apps[DAG_B]}")[0])
    with attack("reader of DAG A reads the AM logs of B's app (/melon/api/jobs/<B's app>/logs)", expected="403") as row:
        row.got = str(logs(reader, apps[DAG_B])[0])
    code, ti = get(reader, ti_path(DAG_A, runs[DAG_A]))
    with attack("planted app with A's tags (identity tag too) on A's YARN job tab", expected="only A's own app") as row:
        got = [j["id"] for j in ti["jobs"]] if code == 200 else code
        row.got = "only A's own app" if got == [apps[DAG_A]] else f"{got}"
    code, job = get(reader, f"/melon/api/jobs/{apps[DAG_A]}")
    assert code == 200 and job["dag_id"] == DAG_A, job
    code, text = logs(reader, apps[DAG_A])  # A's own AM log: served, as the NodeManager holds it
    assert code == 200 and "MelonAM: task worker:0 attempt 0 -> container_" in text, (code, text[:500])


def test_the_gpu_page_shows_other_tenants_as_anonymous_capacity(world, attack):
    apps = world["apps"]
    for who, named in (("reader", {apps[DAG_A]}), ("nobody", set())):
        code, body = get(world[who], "/melon/api/gpus")
        tasks = [t for n in body["nodes"] for g in n["gpus"] for t in g["tasks"]] if code == 200 else []
        with attack(f"{who} on /melon/api/gpus: names of jobs of DAGs it may not read", expected="anonymous") as row:
            leaks = {t["app_id"] for t in tasks if t.get("app_id")} - named
            row.got = f"named {sorted(leaks)}" if leaks else ("anonymous" if code == 200 else str(code))
        # every running job's memory still counts: B's (and, for nobody, A's) task as an anonymous reservation
        assert sum(1 for t in tasks if t.get("anonymous")) >= (1 if who == "reader" else 2), tasks
        assert {t["app_id"] for t in tasks if t.get("app_id")} == named, tasks


def test_a_user_with_no_dag_rights_sees_nothing(world, attack):
    nobody, apps, runs = world["nobody"], world["apps"], world["runs"]
    with attack("user with no DAG rights lists MeLoN jobs", expected="0 jobs") as row:
        code, body = get(nobody, "/melon/api/jobs")
        row.got = f"{len(body['jobs'])} jobs" if code == 200 else str(code)
    with attack("user with no DAG rights reads /melon/api/ti of DAG A", expected="403") as row:
        row.got = str(get(nobody, ti_path(DAG_A, runs[DAG_A]))[0])
    with attack("user with no DAG rights reads /melon/api/jobs/<A's app>", expected="403") as row:
        row.got = str(get(nobody, f"/melon/api/jobs/{apps[DAG_A]}")[0])
    with attack("user with no DAG rights reads the AM logs of A's app", expected="403") as row:
        row.got = str(logs(nobody, apps[DAG_A])[0])


def test_non_melon_apps_and_foreign_connections_are_refused(world, attack):
    admin = world["admin"]
    with attack("admin reads /melon/api/jobs/<an app that is not MeLoN's> (AM proxied)", expected="404") as row:
        row.got = str(get(admin, f"/melon/api/jobs/{world['planted']['other']}")[0])
    with attack("admin reads the AM logs of an app that is not MeLoN's", expected="404") as row:
        row.got = str(logs(admin, world["planted"]["other"])[0])
    for conn_id in ("not_yarn", "no_such_conn"):
        with attack(
            f"conn_id={conn_id} (the api-server would use that connection's credentials)", expected="422 conn_id"
        ) as row:
            code, detail = get(world["reader"], f"/melon/api/jobs?conn_id={conn_id}")
            row.got = f"{code} conn_id" if code == 422 and "conn_id" in str(detail) else f"{code} {detail!s:.60}"


def test_the_planted_app_renders_as_text_for_the_admin(world, attack):
    from selenium.webdriver.common.by import By

    admin, planted = world["admin"], world["planted"]["melon"]
    code, job = get(admin, f"/melon/api/jobs/{planted}")
    assert code == 200, job
    with attack(
        "planted app claiming A's TI in its labels: attributed (admin's view)", expected="no DAG, no TI link"
    ) as row:
        row.got = (
            "no DAG, no TI link"
            if job["dag_id"] is None and job["ti_url"] is None
            else f"dag {job['dag_id']}, link {job['ti_url']}"
        )
    with attack("planted app's javascript: TensorBoard label as a link", expected="dropped") as row:
        row.got = "dropped" if not any("javascript" in u.lower() for u in job["links"].values()) else str(job["links"])
    driver = headless_chromium()
    try:
        log_in(driver, admin)
        for page, selector in (("jobs", f'tr[data-job="{planted}"]'), ("gpus", ".tasks")):
            with attack(f"markup in a planted app's name on the {page} page", expected="shown as text") as row:
                driver.get(f"{admin.url}/melon/{page}")
                wait_for(
                    lambda: driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"),
                    60,
                    f"the {page} page",
                )
                shown = wait_for(
                    lambda: XSS in " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)),
                    30,
                    f"the planted name as text on {page}",
                )
                pwned = driver.execute_script("return window.__pwned")
                injected = driver.find_elements(By.CSS_SELECTOR, "#root img")
                row.got = (
                    "shown as text"
                    if shown and pwned is None and not injected
                    else (f"script ran={pwned}, <img> injected={len(injected)}, text shown={shown}")
                )
    finally:
        driver.quit()
