"""The executor's messages to the AM (``runtime.protocol.RegisterBody`` and ``HeartbeatBody``), declared once: the
committed JSON Schema the AM's jar checks every body against is the declaration's, the bodies a real executor
subprocess sends the in-test AM pass it, and a body that breaks it is refused naming the field."""

from __future__ import annotations

import json
import textwrap

import jsonschema
import pytest

from airflow_provider_melon.am import messages
from airflow_provider_melon.runtime import executor, peak
from airflow_provider_melon.runtime.progress import MAX_METRICS
from tests import oom_texts
from tests.unit.test_executor import am_factory, exec_env, finish, inventory, start  # noqa: F401 - fixtures
from tests.unit.test_executor_oom import oom_env, run_logged


def _validator(message: str) -> jsonschema.Draft202012Validator:
    """The AM's check of one message: the committed file's ``$defs``, entered at the message's name."""
    schema = json.loads(messages.MESSAGES_SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": f"#/$defs/{message}"})


def _problems(message: str, body: dict) -> list[str]:
    return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator(message).iter_errors(body)]


def test_the_committed_schema_is_the_declarations():
    committed = messages.MESSAGES_SCHEMA_PATH.read_text()
    assert committed == messages.messages_schema_text(), (
        "am/messages.schema.json is stale: python -m airflow_provider_melon.am.messages --write"
    )


def test_the_schemas_bounds_are_the_runtimes():
    defs = json.loads(messages.MESSAGES_SCHEMA_PATH.read_text())["$defs"]
    beat = defs["HeartbeatBody"]["properties"]
    assert beat["gpu_memory_peak_source"]["enum"] == list(peak.SOURCES)
    assert defs["OomReport"]["properties"]["peak_source"]["enum"] == list(peak.SOURCES)
    assert beat["metrics"]["maxProperties"] == MAX_METRICS
    assert set(defs["RegisterBody"]["required"]) == {"role", "index", "port"}
    assert set(defs["HeartbeatBody"]["required"]) == {"role", "index"}


# the job: a progress report (the runtime's own report()) with metrics, then a moment for a heartbeat to carry it
REPORTING = textwrap.dedent(
    """
    import time
    from airflow_provider_melon.runtime import report
    for step in range(1, 4):
        report(step=step, total=3, loss=1.0 / step, accuracy=0.5 + step / 10, lr=1e-3)
        time.sleep(0.3)
    """
)


def test_what_the_executor_sends_passes_the_schema(tmp_path, am_factory, inventory):
    """Two real executors (a shared-GPU job that reports progress; one that runs out of GPU memory), every body
    they post checked as the AM checks it, and between them every kind of field the heartbeat carries."""
    am = am_factory(["worker:0"])
    (tmp_path / "job.py").write_text(REPORTING)
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_ENTRYPOINT=f"python {tmp_path / 'job.py'}",
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_GPU_MEMORY_MB=2048,
    )
    rc, _, err = finish(start(tmp_path, env))
    assert rc == 0, err

    oom_dir = tmp_path / "oom"
    oom_dir.mkdir()
    oom_am = am_factory(["worker:0"])
    oom = oom_env(
        oom_dir,
        oom_am,
        oom_texts.TF_GPU_OOM_STDERR,
        MELON_FRAMEWORK="tensorflow",
        MELON_GPU_INVENTORY=inventory(8192, 16384),
        MELON_GPU_MEMORY_MB=1024,
    )
    rc, _, err = run_logged(oom_dir, oom)
    assert rc == executor.EXIT_GPU_OOM, err

    registrations = am.registrations + oom_am.registrations
    heartbeats = am.heartbeats + oom_am.heartbeats
    assert registrations and heartbeats
    for body in registrations:
        assert _problems("register", body) == [], body
    for body in heartbeats:
        assert _problems("heartbeat", body) == [], body
    sent = {key for body in heartbeats for key in body}
    assert {"step", "total", "loss", "metrics", "gpu", "gpu_memory_peak_mb", "gpu_memory_peak_source"} <= sent
    assert {"oom", "message", "container_id"} <= sent
    assert {"gpu", "gpu_memory_mb", "port", "host", "pid", "mps"} <= {k for b in registrations for k in b}


REGISTRATION = {"role": "worker", "index": 0, "host": "10.0.0.1", "port": 5000, "gpu": None, "gpu_memory_mb": 0}


@pytest.mark.parametrize(
    "message,change,field",
    [
        ("register", {"port": 70000}, "/port"),
        ("register", {"port": -1}, "/port"),
        ("register", {"port": "5000"}, "/port"),
        ("register", {"mps": "yes"}, "/mps"),
        ("register", {"surprise": 1}, "surprise"),
        ("heartbeat", {"total": 0}, "/total"),
        ("heartbeat", {"step": "ten"}, "/step"),
        ("heartbeat", {"gpu_memory_peak_source": "guess"}, "/gpu_memory_peak_source"),
        ("heartbeat", {"oom": {"cap_mb": "4g"}}, "/oom/cap_mb"),
        ("heartbeat", {"oom": {"peak_source": "nvml"}}, "/oom/peak_source"),
        ("heartbeat", {"metrics": {f"m{i}": 1.0 for i in range(MAX_METRICS + 1)}}, "/metrics"),
        ("heartbeat", {"tensorboard_url": "http://host:6006/path"}, "/tensorboard_url"),
        ("heartbeat", {"tensorboard_url": "ftp://host:6006"}, "/tensorboard_url"),
    ],
)
def test_a_body_that_breaks_the_contract_is_refused_naming_the_field(message, change, field):
    base = REGISTRATION if message == "register" else {"role": "worker", "index": 0}
    problems = _problems(message, {**base, **change})
    assert problems and all(field in p for p in problems), problems


@pytest.mark.parametrize("url", ["", "http://node-1.example.com:6006", "http://10.0.0.7:40123/", "http://[::1]:6006"])
def test_a_tensorboard_origin_passes(url):
    assert _problems("heartbeat", {"role": "worker", "index": 0, "tensorboard_url": url}) == []
