"""``tensorboard: true`` on the real mini cluster: TensorBoard starts beside the chief, registers with the AM, and
its page and data load through the RM web proxy (``/proxy/<app>/tensorboard/``) while the job runs, in a real
headless Chromium too (the charts' POSTs included); it is gone once the job has ended."""

from __future__ import annotations

import base64
import json
import re
import socket
import time
from urllib.parse import urlencode, urlsplit

import pytest
import requests

from tests.conftest import headless_chromium

pytestmark = pytest.mark.integration


# Writes one scalar series with tf.summary into $MELON_TENSORBOARD_LOG_DIR/train, then stays up until the test
# creates the stop file (same machine: the mini cluster runs its containers here), at most 5 minutes.
CHIEF = """\
import os, time
import tensorflow as tf
logdir = os.environ["MELON_TENSORBOARD_LOG_DIR"]
print("LOGDIR", logdir, flush=True)
writer = tf.summary.create_file_writer(os.path.join(logdir, "train"))
with writer.as_default():
    for step in range(5):
        tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
writer.flush()
print("SUMMARY WRITTEN", flush=True)
deadline = time.time() + 300
while time.time() < deadline and not os.path.exists(os.environ["STOP_FILE"]):
    time.sleep(0.5)
"""


def _poll(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as exc:  # noqa: BLE001 - not there yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


@pytest.fixture(scope="module")
def tb_job(minicluster, melon_hook, tmp_path_factory):
    """The running job, its TensorBoard registered with the AM: {app_id, base (through the RM proxy), tb, ...}."""
    from tests.conftest import Jobs

    pytest.importorskip("tensorboard")
    jobs = Jobs(melon_hook, minicluster, tmp_path_factory)
    tmp = tmp_path_factory.mktemp("tb")
    (tmp / "code").mkdir()
    (tmp / "code" / "chief.py").write_text(CHIEF)
    stop = tmp / "stop"
    app_id = jobs.submit(
        {
            "name": "tensorboard-live",
            "framework": "tensorflow",
            "code": str(tmp / "code"),
            "entrypoint": "python chief.py",
            "tensorboard": True,
            "env": {"STOP_FILE": str(stop), "TF_CPP_MIN_LOG_LEVEL": "2"},
            "roles": {"chief": {"instances": 1, "memory": "2g", "vcores": 1}},
        }
    )
    http = requests.Session()
    http.trust_env = False
    try:
        status = jobs.wait_status(
            app_id,
            lambda s: (s.get("tensorboard") or {}).get("url") or (s.get("tensorboard") or {}).get("error"),
            timeout=240,
        )
        yield {
            "jobs": jobs,
            "app_id": app_id,
            "http": http,
            "stop": stop,
            "tb": status["tensorboard"],
            "shots": tmp,
            "base": f"{minicluster.rm_web_url.rstrip('/')}/proxy/{app_id}/tensorboard/",
        }
    finally:
        stop.write_text("stop")
        jobs.kill_all()


@pytest.fixture(scope="module")
def melon_hook(minicluster):  # module scope for tb_job (the conftest one is per test)
    from airflow_provider_melon.cli import melon_hook_for_cluster

    return melon_hook_for_cluster(minicluster.work_dir)


def test_page_and_data_through_the_rm_proxy(tb_job):
    http, base, tb = tb_job["http"], tb_job["base"], tb_job["tb"]
    assert tb["error"] is None and tb["task"] == "chief:0", tb

    page = http.get(base, timeout=30)
    print(f"\nGET {base} -> {page.status_code} {page.headers.get('Content-Type')} {len(page.content)} bytes")
    print("page excerpt:", page.text[:200].replace("\n", " "))
    assert page.status_code == 200, page.text[:500]
    assert page.headers["Content-Type"].startswith("text/html")
    assert '<meta name="tb-relative-root" content="./">' in page.text and "TensorBoard" in page.text
    assert page.text.startswith('<!doctype html><script src="__melon/post-as-get.js"></script>')

    # the script the page loads, by its relative path: assets resolve under the proxy's prefix too
    script = re.search(r'src="(index\.js[^"]*)"', page.text)
    assert script, page.text[-2000:]
    js = http.get(base + script.group(1), timeout=30)
    print(f"GET {base}{script.group(1)} -> {js.status_code} {js.headers.get('Content-Type')} {len(js.content)} bytes")
    assert js.status_code == 200 and "javascript" in js.headers["Content-Type"] and len(js.content) > 100_000

    def runs():
        r = http.get(base + "data/runs", timeout=30)
        return r.status_code == 200 and "train" in r.json() and r.json()

    print(f"GET {base}data/runs ->", _poll(runs, 90, "the run 'train' in TensorBoard"))

    # TensorBoard lists a run as soon as it finds its folder and loads the run's events in a later reload pass:
    # until then the scalars plugin reports itself disabled, so wait for the data, as a user reloading would.
    def scalars_enabled():
        r = http.get(base + "data/plugins_listing", timeout=30)
        return r.status_code == 200 and r.json()["scalars"]["enabled"] is True

    _poll(scalars_enabled, 90, "the scalars plugin enabled (the run's events loaded)")
    print(f"GET {base}data/plugins_listing -> 200 scalars enabled")

    def five_steps():
        r = http.get(base + "data/plugin/scalars/scalars", params={"run": "train", "tag": "loss"}, timeout=30)
        return r.status_code == 200 and len(r.json()) == 5 and r

    scalars = _poll(five_steps, 90, "the five 'loss' steps in TensorBoard")
    steps = [[point[1], round(point[2], 3)] for point in scalars.json()]
    print(f"GET {base}data/plugin/scalars/scalars?run=train&tag=loss -> {scalars.status_code} {steps}")
    assert steps == [[0, 1.0], [1, 0.5], [2, 0.333], [3, 0.25], [4, 0.2]]

    # The dashboards fetch their charts by POST, which Hadoop's RM proxy refuses: the page's post-as-get.js sends
    # them as a GET the AM turns back into the POST.
    form = urlencode({"tag": "loss", "runs": "train"})
    post = http.post(
        base + "data/plugin/scalars/scalars_multirun",
        data=form,
        timeout=30,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    print(f"POST {base}data/plugin/scalars/scalars_multirun -> {post.status_code} (the RM proxy's own answer)")
    as_get = http.get(
        f"{base}__melon/post/data/plugin/scalars/scalars_multirun?__melon_form="
        + base64.urlsafe_b64encode(form.encode()).decode().rstrip("="),
        timeout=30,
    )
    print(
        f"GET {base}__melon/post/data/plugin/scalars/scalars_multirun?__melon_form=... -> {as_get.status_code} "
        f"{as_get.text[:100]}"
    )
    assert as_get.status_code == 200 and [p[1] for p in as_get.json()["train"]] == [0, 1, 2, 3, 4], as_get.text[:500]


def test_the_dashboard_draws_in_a_browser(tb_job):
    """Headless Chromium opens TensorBoard through the RM proxy; its chart requests (POSTs) come back 200."""
    driver = headless_chromium(performance_log=True)
    seen: dict = {}
    try:
        driver.get(tb_job["base"])

        def chart_data():
            for entry in driver.get_log("performance"):
                msg = json.loads(entry["message"])["message"]
                if msg["method"] == "Network.responseReceived":
                    r = msg["params"]["response"]
                    seen[r["url"]] = r["status"]
            posts = {u: s for u, s in seen.items() if "/__melon/post/" in u}
            charts = [u for u in posts if "/timeseries/timeSeries" in u or "/scalars/scalars_multirun" in u]
            return (
                charts
                and all(s == 200 for s in posts.values())
                and "loss" in driver.execute_script("return document.body.innerText")
                and posts
            )

        try:
            posts = _poll(chart_data, 90, "the dashboard's chart requests")
        except AssertionError:
            driver.save_screenshot(str(tb_job["shots"] / "tensorboard-failed.png"))
            print("requests:", json.dumps(seen, indent=1)[:6000])
            print("console:", driver.get_log("browser")[:30])
            raise
        for url, code in sorted(posts.items()):
            print(f"browser: {url.split('?')[0]} -> {code}")
        time.sleep(2)  # let the chart draw, for the record
        driver.save_screenshot(str(tb_job["shots"] / "tensorboard-through-rm-proxy.png"))
        print(f"screenshot: {tb_job['shots'] / 'tensorboard-through-rm-proxy.png'}")
        failed = {u: s for u, s in seen.items() if s >= 400 and tb_job["app_id"] in u}
        assert not failed, failed
    finally:
        driver.quit()


def test_tensorboard_is_gone_when_the_job_ends(tb_job):
    jobs, http, base, tb = tb_job["jobs"], tb_job["http"], tb_job["base"], tb_job["tb"]
    tb_job["stop"].write_text("stop")
    app = jobs.wait(tb_job["app_id"], timeout=120)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
    origin = urlsplit(tb["url"])

    def refused():
        try:
            socket.create_connection((origin.hostname, origin.port), timeout=2).close()
        except OSError:
            return True
        return False

    assert _poll(refused, 30, f"TensorBoard at {tb['url']} stopped")
    after = http.get(base, timeout=30, allow_redirects=False)
    print(f"\nafter the job: GET {base} -> {after.status_code}; {tb['url']} refuses connections")
    assert "tb-relative-root" not in after.text
    logs = "\n".join(jobs.container_logs(tb_job["app_id"], "stderr").values())
    assert "TensorBoard serving" in logs and "TensorBoard stopped" in logs, logs[-3000:]
