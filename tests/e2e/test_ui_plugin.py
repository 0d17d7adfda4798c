"""The MeLoN UI plugin in a real headless Chromium (Debian's chromium + chromedriver, driven by Selenium) against the
real Airflow of the e2e session (api-server, scheduler, dag-processor, triggerer) on the mini cluster, with a running
shared-GPU job: log in through Airflow's login form, open each page as a person would, check what they would check,
and keep screenshots (MELON_SCREENSHOTS=docs/img refreshes the README's; by default they go to a temp dir)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from airflow_provider_melon.plugin import MelonPlugin
from airflow_provider_melon.version_compat import AIRFLOW_V_3_1_PLUS
from tests.conftest import headless_chromium
from tests.waits import airflow_cause, causes, rm_cause, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DAG = "melon_ui_probe"


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    where = os.environ.get("MELON_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser():
    driver = headless_chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def probe(airflow_stack, melon_hook_module):
    """A run of the probe DAG whose train task is deferred while its 3 tasks report step/loss."""
    run_id = airflow_stack.trigger(DAG, conf={"seconds": 420})
    app_id = wait_for(
        lambda: airflow_stack.xcom(DAG, run_id, "train", key="app_id"),
        180,
        "the app id in XCom",
        cause=causes(airflow_cause(airflow_stack, DAG, run_id, "train"), rm_cause(melon_hook_module)),
    )
    wait_for(
        lambda: (
            len([t for t in (melon_hook_module.yarn.am_status(app_id) or {}).get("tasks", []) if t.get("step")]) == 3
        ),
        180,
        "3 tasks reporting steps",
        cause=causes(airflow_cause(airflow_stack, DAG, run_id, "train"), rm_cause(melon_hook_module, app_id)),
    )
    yield {"run_id": run_id, "app_id": app_id}
    try:
        melon_hook_module.yarn.kill_application(app_id)
    except Exception:  # noqa: BLE001 - already ended
        pass


@pytest.fixture(scope="module")
def melon_hook_module(minicluster):
    from airflow_provider_melon.cli import melon_hook_for_cluster

    return melon_hook_for_cluster(minicluster.work_dir)


def log_in(driver, airflow):
    """Log in through the Airflow UI's login form (SimpleAuthManager's or FAB's) as ``airflow``'s user."""
    driver.get(airflow.url + "/")
    return fill_login_form(driver, airflow)


def fill_login_form(driver, airflow):
    """Fill in the login form the browser shows (or is on its way to) as ``airflow``'s user, and send it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    user = wait_for(
        lambda: driver.find_element(By.NAME, "username"), 60, f"the login form (the browser is at {driver.current_url})"
    )
    user.send_keys(airflow.username)
    password = driver.find_element(By.NAME, "password")
    password.send_keys(airflow.password)
    password.send_keys(Keys.ENTER)
    wait_for(
        lambda: login_kept(driver),
        60,
        "the session cookie"
        if AIRFLOW_V_3_1_PLUS
        else "the session cookie (or, on Airflow 3.0's UI, its token in localStorage)",
    )
    return driver


def login_kept(driver) -> bool:
    """The browser, past the login form, holds the login: the ``_token`` cookie. Airflow 3.0's UI moves that cookie
    into ``localStorage["token"]`` (and deletes it) on its first API call after the login, so a 3.0 browser that
    logged in at the UI holds it there: readable by the UI's scripts only, never sent to a MeLoN page."""
    from urllib.parse import urlsplit

    if any(c["name"] == "_token" for c in driver.get_cookies()):
        return True
    return (
        not AIRFLOW_V_3_1_PLUS
        and "/login" not in urlsplit(driver.current_url).path
        and bool(driver.execute_script("return window.localStorage.getItem('token')"))
    )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def answer(url: str, **headers) -> tuple[int, Any, str]:
    """``(status, headers, body)`` of a GET, redirects not followed."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=30) as resp:
            return resp.status, resp.headers, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode(errors="replace")


BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


def check_login_redirect(airflow) -> None:
    """A browser that opens a MeLoN page without a login is sent to the auth manager's login page with the page as
    its return URL, and lands on the page once logged in; API clients keep their JSON 401/403. ``airflow``: a real
    api-server (SimpleAuthManager's or FAB's)."""
    from urllib.parse import parse_qs, urljoin, urlsplit

    from selenium.webdriver.common.by import By

    page = "/melon/ti?dag_id=melon_ui_probe&run_id=manual__x&task_id=train&map_index=-1"
    code, headers, body = answer(airflow.url + page, Accept=BROWSER_ACCEPT)
    assert code in (302, 303, 307), (code, body[:300])
    location = urljoin(airflow.url + page, headers["location"])
    assert urlsplit(location).netloc == urlsplit(airflow.url).netloc and "/login" in urlsplit(location).path, location
    assert parse_qs(urlsplit(location).query)["next"] == [airflow.url + page], location
    # the login page it names is a real one
    code, _, body = answer(location, Accept=BROWSER_ACCEPT)
    assert code == 200 or (code in (302, 303, 307) and "login" in body.lower() + location), (code, body[:300])
    # scripts: JSON, no redirect (no Accept: text/html; or a bearer token, even with it)
    for path, hdrs, want in (
        ("/melon/api/jobs", {"Accept": "application/json"}, 401),
        ("/melon/jobs", {}, 401),
        ("/melon/jobs", {"Accept": BROWSER_ACCEPT, "Authorization": "Bearer not-a-jwt"}, 403),
    ):
        code, headers, body = answer(airflow.url + path, **hdrs)
        assert code == want and headers.get("Content-Type", "").startswith("application/json"), (path, code, body)
        assert json.loads(body)["detail"] in ("Not authenticated", "Invalid JWT token"), body
    # a real browser, no cookies: the login form, then back on the page it asked for, drawn
    driver = headless_chromium()
    try:
        driver.get(airflow.url + "/melon/jobs")
        fill_login_form(driver, airflow)
        wait_for(
            lambda: driver.current_url == airflow.url + "/melon/jobs",
            60,
            "the browser back on /melon/jobs after the login",
        )
        loaded = wait_for(
            lambda: driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"), 60, "/melon/jobs to load"
        )
        assert loaded != "error", driver.find_element(By.ID, "root").text
        # the login ends while the page is open: its next refresh (every 10 s) takes the browser to the login page
        driver.delete_all_cookies()
        fill_login_form(driver, airflow)
        wait_for(
            lambda: driver.current_url == airflow.url + "/melon/jobs",
            60,
            "the browser back on /melon/jobs after the second login",
        )
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def logged_in(browser, airflow_stack):
    """The browser logged in as a user is: at the UI's login form. On Airflow 3.0 the UI keeps that login where a
    MeLoN page cannot see it (:func:`login_kept`), so the first MeLoN page a 3.0 user opens asks for the login once
    more and then shows the page; from then on the browser has the cookie every MeLoN page is served by."""
    from urllib.parse import urlsplit

    log_in(browser, airflow_stack)
    if not AIRFLOW_V_3_1_PLUS:
        page = f"{airflow_stack.url}/melon/gpus"
        browser.get(page)
        assert "/login" in urlsplit(browser.current_url).path, browser.current_url
        fill_login_form(browser, airflow_stack)
        wait_for(lambda: browser.current_url == page, 60, "the browser back on /melon/gpus after the login")
    return browser


def open_plugin_page(driver, base: str, route: str):
    """Open an external view as the UI's menu does (/plugin/<route>) and switch into its iframe; on Airflow 3.0
    (no external views) open the page itself, as a 3.0 user does (the plugin's href of that route)."""
    from selenium.webdriver.common.by import By

    driver.switch_to.default_content()
    if not AIRFLOW_V_3_1_PLUS:
        [href] = [v["href"] for v in MelonPlugin.external_views if v["url_route"] == route]
        driver.get(f"{base}/{href}")
    else:
        driver.get(f"{base}/plugin/{route}")
        frame = wait_for(lambda: driver.find_element(By.TAG_NAME, "iframe"), 60, f"the {route} iframe")
        driver.switch_to.frame(frame)
    loaded = wait_for(
        lambda: driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"), 60, f"{route} to load"
    )
    assert loaded != "error", driver.find_element(By.ID, "root").text


def test_json_endpoints_need_an_airflow_login(airflow_stack):
    for path in ("/melon/api/gpus", "/melon/api/jobs", "/melon/api/fit?gpu_memory=1GiB", "/melon/gpus"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(airflow_stack.url + path, timeout=30)
        assert err.value.code == 401, path
        request = urllib.request.Request(airflow_stack.url + path, headers={"Authorization": "Bearer not-a-jwt"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=30)
        assert err.value.code == 403, path
    body = airflow_stack._http("GET", "/melon/api/gpus")  # with the login's JWT
    assert body["totals"]["nodes"] == 2 and body["totals"]["gpus"] == 4


def test_a_browser_without_a_login_is_sent_to_the_login_page(airflow_stack):
    check_login_redirect(airflow_stack)


def test_gpu_page_shows_the_tasks_on_their_gpus(logged_in, airflow_stack, probe, shots):
    from selenium.webdriver.common.by import By

    driver = logged_in
    open_plugin_page(driver, airflow_stack.url, "melon-gpus")
    app_id = probe["app_id"]
    wait_for(
        lambda: len(driver.find_elements(By.CSS_SELECTOR, f'.seg[data-task^="{app_id}/"]')) == 3,
        60,
        "the probe's 3 tasks on the GPU bars",
    )
    assert driver.find_element(By.CSS_SELECTOR, '[data-total="nodes"]').text == "2"
    assert driver.find_element(By.CSS_SELECTOR, '[data-total="gpus"]').text == "4"
    assert len(driver.find_elements(By.CSS_SELECTOR, "[data-node-card]")) == 2
    assert len(driver.find_elements(By.CSS_SELECTOR, ".gpu[data-gpu]")) == 4
    # each task's bar is 6 GiB of a 16 GiB GPU, and the legend links back to the task instance
    for seg in driver.find_elements(By.CSS_SELECTOR, f'.seg[data-task^="{app_id}/"]'):
        width = float(seg.value_of_css_property("width").removesuffix("px"))
        bar = float(seg.find_element(By.XPATH, "..").value_of_css_property("width").removesuffix("px"))
        assert abs(width / bar - 6 / 16) < 0.02, (width, bar)
    links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, ".tasks a")]
    assert any(f"/dags/{DAG}/runs/{quote(probe['run_id'], safe='')}/tasks/train" in h for h in links), links
    assert driver.find_element(By.CSS_SELECTOR, '[data-queue="root.default"]').text.startswith("root.default")
    driver.switch_to.default_content()
    driver.save_screenshot(str(shots / "melon-gpus.png"))


def test_jobs_page_draws_the_loss_chart(logged_in, airflow_stack, probe, shots):
    from selenium.webdriver.common.by import By

    driver = logged_in
    open_plugin_page(driver, airflow_stack.url, "melon-jobs")

    def job_row():  # found afresh each time: the page redraws its rows on every refresh (old ones go stale)
        return driver.find_element(By.CSS_SELECTOR, f'tr[data-job="{probe["app_id"]}"]')

    row = wait_for(job_row, 30, "the job")
    assert "RUNNING" in row.text and "ui-probe" in row.text
    assert len(row.find_elements(By.CSS_SELECTOR, "[data-task-row]")) == 3
    # gpu_memory: auto: where the figure came from, and each task's expected memory
    note = row.find_element(By.CSS_SELECTOR, "[data-gpu-memory-note]").text
    assert note.startswith("roles.worker.gpu_memory auto: 6144 MiB ("), note
    assert all("6 GiB expected" in r.text for r in row.find_elements(By.CSS_SELECTOR, "[data-task-row]"))
    points = wait_for(
        lambda: [
            p
            for p in job_row().find_elements(By.CSS_SELECTOR, "svg.loss-chart polyline")
            if len(p.get_attribute("points").split()) >= 3
        ],
        60,
        "a drawn loss curve",
    )
    assert points
    links = wait_for(lambda: {a.text for a in job_row().find_elements(By.CSS_SELECTOR, ".links a")}, 30, "the links")
    assert links >= {"YARN application", "ApplicationMaster"}
    driver.switch_to.default_content()
    driver.save_screenshot(str(shots / "melon-jobs.png"))


def test_the_am_logs_link_serves_the_am_log(logged_in, airflow_stack, probe, melon_hook_module):
    """The jobs page's "AM logs" link is the plugin's, resolved by the browser against the page: it names Airflow
    (never a NodeManager's host) and serves the AM container's log as the NodeManager holds it."""
    from selenium.webdriver.common.by import By

    hook, app_id = melon_hook_module.yarn, probe["app_id"]
    [attempt] = hook.app_attempts(app_id)
    am_log = hook.container_log(attempt["nodeHttpAddress"], attempt["containerId"], "AppMaster.stdout").data.decode()
    assert "attempt 0 -> container_" in am_log, am_log[-2000:]
    driver = logged_in
    open_plugin_page(driver, airflow_stack.url, "melon-jobs")
    row = wait_for(lambda: driver.find_element(By.CSS_SELECTOR, f'tr[data-job="{app_id}"]'), 60, "the job")
    [link] = [a.get_attribute("href") for a in row.find_elements(By.CSS_SELECTOR, ".links a") if a.text == "AM logs"]
    assert link == f"{airflow_stack.url}/melon/api/jobs/{app_id}/logs", link
    driver.switch_to.default_content()
    driver.get(link)
    shown = wait_for(lambda: driver.find_element(By.TAG_NAME, "body").text, 30, "the AM log page")
    assert f"==> AppMaster.stdout of {attempt['containerId']}" in shown and "==> AppMaster.stderr" in shown, shown[:500]
    assert am_log.strip().splitlines()[0] in shown and "MelonAM: task worker:2 attempt 0 -> container_" in shown
    # one file; a file the container does not have, and another user's call without a login, refused
    token = {"Authorization": f"Bearer {airflow_stack.token()}"}
    code, headers, body = answer(f"{link}/AppMaster.stdout", **token)
    assert code == 200 and headers["Content-Type"].startswith("text/plain") and am_log in body, (code, body[:300])
    code, _, body = answer(f"{link}/launch_container.sh.bak", **token)
    assert code == 404 and json.loads(body)["detail"].startswith("file: "), (code, body)
    assert answer(link, Accept="application/json")[0] == 401


def test_task_instance_has_a_yarn_job_tab(logged_in, airflow_stack, probe, shots):
    from selenium.webdriver.common.by import By

    driver = logged_in
    driver.switch_to.default_content()
    if not AIRFLOW_V_3_1_PLUS:  # no task-instance tabs on 3.0: the tab's page itself, at the plugin's href
        [href] = [v["href"] for v in MelonPlugin.external_views if v["destination"] == "task_instance"]
        driver.get(
            f"{airflow_stack.url}/"
            + href.format(DAG_ID=DAG, RUN_ID=quote(probe["run_id"], safe=""), TASK_ID="train", MAP_INDEX=-1)
        )
    else:
        driver.get(f"{airflow_stack.url}/dags/{DAG}/runs/{quote(probe['run_id'], safe='')}/tasks/train")
        tab = wait_for(
            lambda: [a for a in driver.find_elements(By.TAG_NAME, "a") if a.text.strip() == "YARN job"][0],
            60,
            "the YARN job tab",
        )
        tab.click()
        frame = wait_for(lambda: driver.find_element(By.TAG_NAME, "iframe"), 60, "the tab's iframe")
        driver.switch_to.frame(frame)
    row = wait_for(lambda: driver.find_element(By.CSS_SELECTOR, f'tr[data-job="{probe["app_id"]}"]'), 60, "the job")
    assert "RUNNING" in row.text
    driver.switch_to.default_content()
    driver.save_screenshot(str(shots / "melon-ti-tab.png"))


def test_would_it_fit_form(logged_in, airflow_stack, probe, shots):
    from selenium.webdriver.common.by import By

    driver = logged_in
    open_plugin_page(driver, airflow_stack.url, "melon-fit")

    def ask(memory: str, tasks: int) -> dict:
        form = driver.find_element(By.CSS_SELECTOR, "form.fit")
        for name, value in (("gpu_memory", memory), ("instances", str(tasks))):
            field = form.find_element(By.NAME, name)
            field.clear()
            field.send_keys(value)
        form.find_element(By.TAG_NAME, "button").click()  # the page clears the last answer first
        return wait_for(
            lambda: (
                {
                    v.get_attribute("data-verdict"): v.text
                    for v in driver.find_elements(By.CSS_SELECTOR, "[data-verdict]")
                    if f"{tasks} task(s)" in driver.find_element(By.ID, "answer").text
                }
                or None
            ),
            30,
            "the answer",
        )

    never = ask("20GiB", 1)
    assert never["ever"].startswith("Never fits") and "16384 MiB" in never["ever"]
    answer = ask("6GiB", 4)
    assert answer["ever"].startswith("Fits the cluster")
    # the probe holds 3 x 6 GiB of the 4 x 16 GiB: the 4 new tasks still fit on the free memory
    assert answer["now"].startswith("Fits now") and "4 of 4 fit" in answer["now"], answer
    driver.switch_to.default_content()
    driver.save_screenshot(str(shots / "melon-fit.png"))


def test_extra_links_of_the_train_task_open_real_pages(logged_in, airflow_stack, probe):
    from selenium.webdriver.common.by import By

    driver = logged_in
    driver.switch_to.default_content()
    links = airflow_stack.api("GET", f"/dags/{DAG}/dagRuns/{quote(probe['run_id'], safe='')}/taskInstances/train/links")
    urls = {name: url for name, url in links["extra_links"].items() if url}
    assert set(urls) == {"YARN Application", "MeLoN AM Status"}, links
    expected = {"YARN Application": probe["app_id"], "MeLoN AM Status": f"MeLoN {probe['app_id']}"}
    for name, url in urls.items():
        driver.get(url)
        body = wait_for(lambda: driver.find_element(By.TAG_NAME, "body").text, 30, f"{name} page")
        assert expected[name] in body, (name, url, body[:500])
        # the title names the app, and an app id may hold "404": the RM's start time in ms does at times
        # (application_1796404009497_0030 failed stop 37's CI). The rest of the title must name no error.
        rest = driver.title.replace(probe["app_id"], "")
        assert "404" not in rest and "Error" not in rest, (name, driver.title)


def test_gpu_page_load_time_with_ten_apps(logged_in, airflow_stack, probe, jobs):
    """Not a timed assertion: prints how long the GPU page takes to show 2 nodes with 10 running apps (the probe
    and 9 single-task sleepers), measured in the browser from navigation to the data drawn."""
    from selenium.webdriver.common.by import By

    for i in range(9):
        jobs.submit(
            {
                "name": f"ui-load-{i}",
                "framework": "generic",
                "entrypoint": "python -c 'import time; time.sleep(600)'",
                "roles": {"worker": {"memory": 128, "gpu_memory": "1GiB"}},
            }
        )
    for app_id in jobs.submitted:
        jobs.wait(app_id, timeout=300, states={"RUNNING"})
    driver = logged_in
    times = []
    for _ in range(3):
        driver.switch_to.default_content()
        driver.get("about:blank")
        started = time.monotonic()
        driver.get(f"{airflow_stack.url}/melon/gpus")
        wait_for(lambda: driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"), 60, "the GPU page")
        times.append(time.monotonic() - started)
    running = airflow_stack._http("GET", "/melon/api/jobs")["jobs"]
    assert sum(j["state"] == "RUNNING" for j in running) >= 10
    print(
        f"[ui] GPU page, 2 nodes and {sum(j['state'] == 'RUNNING' for j in running)} running apps: "
        f"loaded in {', '.join(f'{t:.2f}' for t in times)} s (median {sorted(times)[1]:.2f} s)"
    )
    print(json.dumps({"gpu_page_load_s": sorted(times)[1]}))
