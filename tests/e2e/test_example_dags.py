"""The example DAGs, green under `airflow dags test` (triggers run inline) against the real mini cluster."""

from __future__ import annotations

import json
import uuid
import pytest

from airflow_provider_melon import minicluster as mc
from airflow_provider_melon.spec import JobSpec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _marker(output: str, marker: str) -> dict:
    lines = [line.split(marker + " ", 1)[1] for line in output.splitlines() if marker + " {" in line]
    assert lines, f"{marker} not in the DAG's output"
    return json.loads(lines[-1])


def test_mnist_pipeline(airflow, melon_hook):
    result = airflow.run("dags", "test", "melon_mnist_pipeline", timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    published = _marker(out, "MELON_RESULT")
    assert published["accuracy"] >= published["threshold"]
    path = melon_hook.hdfs_path(published["published"])
    assert "saved_model.pb" in melon_hook.hdfs.list(path)
    # train and evaluate ran as YARN applications tagged with this DAG
    apps = melon_hook.yarn.find_applications(["airflow-dag:melon_mnist_pipeline"])
    assert {a["name"] for a in apps} >= {"mnist-mwms", "mnist-evaluate"}
    assert all(a["finalStatus"] == "SUCCEEDED" for a in apps if a["name"] in ("mnist-mwms", "mnist-evaluate"))


def test_hpo_fanout(airflow, melon_hook):
    result = airflow.run("dags", "test", "melon_hpo_fanout", timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    best = _marker(out, "MELON_HPO_BEST")
    assert best["lr"] in (0.01, 0.1, 0.5, 1.0) and 0 < best["accuracy"] <= 1
    trials = [a for a in melon_hook.yarn.find_applications(["airflow-dag:melon_hpo_fanout"])
              if a["name"].startswith("hpo-trial-")]
    assert len({a["name"] for a in trials}) == 4
    maps = {t for a in trials for t in a["applicationTags"].split(",") if t.startswith("airflow-map:")}
    assert maps == {"airflow-map:0", "airflow-map:1", "airflow-map:2", "airflow-map:3"}
    # The trials deferred, and the trigger (not the task) followed each app to its end.
    assert out.count("Pausing task as DEFERRED") == 4, out[-5000:]
    for a in trials:
        assert any(f"YARN application {a['id']} reached FINISHED" in line and "YarnApplicationTrigger" in line
                   for line in out.splitlines()), a["id"]


def test_ps_planned(airflow, melon_hook, minicluster):
    result = airflow.run("dags", "test", "melon_ps_planned", timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    assert "Plan: batch 1024 per worker, 2 parameter server(s), 2 worker(s)" in out, out[-5000:]
    [app] = melon_hook.yarn.find_applications(["airflow-dag:melon_ps_planned"])
    assert (app["name"], app["finalStatus"]) == ("ps-planned", "SUCCEEDED"), app.get("diagnostics")
    # the job ran what the plan said: the chief's TF cluster had 2 workers and 2 PS, at batch 1024
    logs = mc.container_logs(minicluster.work_dir, app["id"])
    assert sum("[ps-train] ps:" in text and "serving" in text for text in logs.values()) == 2, logs
    assert sum("[ps-train] worker:" in text and "serving" in text for text in logs.values()) == 2, logs
    assert any("[ps-train] batch 1024 per worker; 2 worker(s), 2 ps" in text for text in logs.values()), logs


def test_external_app_watch(airflow, melon_hook, tmp_path):
    tag = f"external-{uuid.uuid4().hex[:8]}"
    (tmp_path / "code").mkdir()
    spec = JobSpec.from_dict({"name": "submitted-elsewhere", "framework": "generic", "code": str(tmp_path / "code"),
                              "entrypoint": "python -c \"import time; time.sleep(8)\"", "tags": [tag],
                              "roles": {"worker": {"memory": 256}}})
    app_id = melon_hook.submit(spec)["app_id"]
    result = airflow.run("dags", "test", "melon_external_app_watch", "--conf", json.dumps({"tag": tag}), timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    assert app_id in out
    assert melon_hook.yarn.get_application(app_id)["state"] == "FINISHED"
