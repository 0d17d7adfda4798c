"""The job's own output in the task log, against the real mini cluster (real AM, real NodeManagers' log REST API):
the trigger (re-created from its serialized kwargs mid-run) and the operator's sync loop each put every line of the
chief's stdout in the log exactly once, in order, prefixed; a failing task's stderr reaches the log too."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from unittest import mock

import pytest

from airflow_provider_melon.hooks.yarn import AsyncYarnHook
from airflow_provider_melon.operators import metrics
from airflow_provider_melon.operators.train import MelonTrainOperator
from airflow_provider_melon.triggers.yarn import FINAL_LOGS_KEY, YarnApplicationTrigger
from airflow_provider_melon.version_compat import AirflowException

pytestmark = pytest.mark.integration

PRINTER = """\
import time
for i in range(30):
    print('line', i, flush=True)
    time.sleep(0.5)
"""

FAILER = """\
import os, sys, time
if os.environ["MELON_INDEX"] == "1":
    print("worker 1 loading its shard", flush=True)
    time.sleep(6)
    print("Traceback (most recent call last):", file=sys.stderr, flush=True)
    print("ValueError: boom on worker 1", file=sys.stderr, flush=True)
    sys.exit(3)
for i in range(240):
    print("alive", i, flush=True)
    time.sleep(0.5)
"""

EXPECTED = [f"worker:0 | line {i}" for i in range(30)]


def _job(jobs, name: str, script: str, instances: int = 1) -> dict:
    (jobs.code / f"{name}.py").write_text(script)
    return {
        "name": name,
        "framework": "generic",
        "code": str(jobs.code),
        "entrypoint": f"python {name}.py",
        "roles": {"worker": {"instances": instances, "memory": 256, "vcores": 1}},
    }


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _logger(name: str) -> tuple[logging.Logger, _Lines]:
    seen = _Lines()
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.handlers[:] = [seen]
    logger.propagate = False
    return logger, seen


def _job_lines(lines: list[str], prefix: str = "worker:0 | line ") -> list[str]:
    return [line for line in lines if line.startswith(prefix)]


def _trigger(minicluster, logger, **kw) -> YarnApplicationTrigger:
    kw.setdefault("poll_interval", 5)
    kw.setdefault("log_every_n", 1)
    trigger = YarnApplicationTrigger(**kw)
    trigger._hook = AsyncYarnHook(rm_urls=[minicluster.rm_web_url], user=minicluster.user)  # no Airflow connection
    trigger._log = logger  # the trigger's own lines, as the triggerer writes them into the task log
    return trigger


def test_trigger_streams_every_line_once_across_a_recreated_trigger(minicluster, jobs, melon_hook):
    """The trigger streams while the job runs, across a re-created trigger; what is left at the end is read by the
    resumed task (MelonTrainOperator._final_job_logs on the event): together, every line once, in order."""
    job = _job(jobs, "printer", PRINTER)
    app_id = jobs.submit(job)
    logger, seen = _logger("test_logs_live.trigger")

    async def scenario():
        first = _trigger(minicluster, logger, app_id=app_id, job_logs=True, log_chief="worker:0")
        task = asyncio.ensure_future(first.run().__anext__())
        while not _job_lines(seen.lines) and not task.done():  # the first job lines reached the log
            await asyncio.sleep(0.2)
        assert not task.done(), f"the application ended before the restart: {seen.lines}"
        task.cancel()  # the triggerer stops the trigger ...
        with pytest.raises(asyncio.CancelledError):
            await task
        await first.cleanup()
        shown_before = len(_job_lines(seen.lines))
        _, kwargs = first.serialize()  # ... and re-creates it from its serialized kwargs (a JSON column)
        second = _trigger(minicluster, logger, **json.loads(json.dumps(kwargs)))
        try:
            event = await asyncio.wait_for(second.run().__anext__(), 240)
        finally:
            await second.cleanup()
        return shown_before, kwargs, event

    shown_before, kwargs, event = asyncio.run(scenario())
    assert event.payload["status"] == "success", event.payload
    assert 0 < shown_before < 30, "the restart happened while the job was printing"
    assert kwargs["log_state"]["follow"], "the serialized kwargs carry the offsets"
    # the event hands the rest to the task; what is left for it depends on timing: a RUNNING poll may already have
    # read the worker's container to its end (the AM unregisters a while after its tasks exit: a loaded round saw
    # that: the make test-repeat round of 2026-12-03 16:38, docs/development.md), and then the task reads nothing more of it; either way, together,
    # every line once
    assert event.payload[FINAL_LOGS_KEY], "the rest is the task's"
    op = _operator(melon_hook, job)
    with mock.patch.object(MelonTrainOperator, "log", new_callable=mock.PropertyMock, return_value=logger):
        op._final_job_logs(event.payload)  # the resumed task, into the same log
    assert _job_lines(seen.lines) == EXPECTED, "\n".join(seen.lines)
    print("\n--- task log (trigger path) ---\n" + "\n".join(seen.lines))


def _operator(melon_hook, job: dict) -> MelonTrainOperator:
    op = MelonTrainOperator(task_id="train", job=job, poll_interval=5, deferrable=False, log_every_n=1)
    op.__dict__["hook"] = melon_hook  # the session's cluster, no Airflow connection
    return op


def _context() -> dict:
    ti = mock.Mock(dag_id="logs_live", task_id="train", run_id="manual__logs_live", map_index=-1)
    return {"ti": ti, "run_id": f"manual__logs_live_{id(ti)}"}


def test_operator_sync_loop_streams_every_line_once(minicluster, jobs, melon_hook):
    logger, seen = _logger("test_logs_live.operator")
    op = _operator(melon_hook, _job(jobs, "printer", PRINTER))
    with (
        mock.patch.object(MelonTrainOperator, "log", new_callable=mock.PropertyMock, return_value=logger),
        mock.patch.object(metrics, "log_lag", wraps=metrics.log_lag) as log_lag,
    ):
        result = op.execute(_context())
    jobs.submitted.append(result["app_id"])
    assert result["final_status"] == "SUCCEEDED"
    assert _job_lines(seen.lines) == EXPECTED, "\n".join(seen.lines)
    # the log lag is measured from the real NodeManagers' answers (their LogLastModifiedTime header)
    lags = [c.args[0] for c in log_lag.call_args_list if c.args[0] is not None]
    assert lags and all(lag >= 0 for lag in lags), log_lag.call_args_list


def test_a_failing_tasks_stderr_reaches_the_task_log(minicluster, jobs, melon_hook):
    logger, seen = _logger("test_logs_live.failing")
    op = _operator(melon_hook, _job(jobs, "failer", FAILER, instances=2))
    with mock.patch.object(MelonTrainOperator, "log", new_callable=mock.PropertyMock, return_value=logger):
        with pytest.raises(AirflowException, match="worker:1"):
            op.execute(_context())
    jobs.submitted.append(op._app_id)
    lines = seen.lines
    assert "worker:1 stderr | ValueError: boom on worker 1" in lines, "\n".join(lines)
    assert "worker:1 stderr | Traceback (most recent call last):" in lines
    assert lines.count("worker:1 stderr | ValueError: boom on worker 1") == 1
    assert any(line.startswith("worker:1 failed") for line in lines), "a line says whose output follows"
    alive = _job_lines(lines, "worker:0 | alive ")
    assert alive and alive == [f"worker:0 | alive {i}" for i in range(len(alive))], "the chief streamed meanwhile"


GROWER = """\
import os, sys
mb = int(os.environ["MELON_GPU_MEMORY_MB"])
print("running with", mb, "MiB", flush=True)
if mb < 2000:  # needs about 1.7 GiB: out of GPU memory at 1024 and 1536 MiB
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 700.00 MiB", file=sys.stderr, flush=True)
    sys.exit(76)
print("trained", flush=True)
"""

#: the task log of a task grown twice, in order: each container's output, then the AM's decision about it
GROWN = [
    "worker:0 | running with 1024 MiB",
    "[melon-am] worker:0 ... asking again with 1536 MiB",
    "worker:0 | running with 1536 MiB",
    "[melon-am] worker:0 ... asking again with 2304 MiB",
    "worker:0 | running with 2304 MiB",
    "worker:0 | trained",
]


def _grower(jobs) -> dict:
    job = _job(jobs, "grower", GROWER)
    job["roles"]["worker"]["gpu_memory"] = "1GiB"
    job["env"] = {"MELON_GPU_WAIT_S": "5"}
    return job


def _grown(lines: list[str]) -> list[str]:
    """The job's stdout and the AM's lines about worker:0, each AM line cut to its decision (the wording of the
    reason before it is the AM's: TaskBook)."""
    out = []
    for line in lines:
        if line.startswith("[melon-am] worker:0 "):
            decision = re.search(r"asking again with \d+ MiB", line)
            out.append("[melon-am] worker:0 ... " + decision.group(0) if decision else line)
        elif line.startswith("worker:0 | "):
            out.append(line)
    return out


def test_the_task_log_follows_a_task_into_each_container_it_grew_into(minicluster, jobs, melon_hook):
    """Out of GPU memory at 1024 and 1536 MiB, done at 2304 MiB in the same try: the operator's log shows each
    container's output in order, the AM's decision between them, and the task's stderr of each OOM."""
    logger, seen = _logger("test_logs_live.grown")
    op = _operator(melon_hook, _grower(jobs))
    with mock.patch.object(MelonTrainOperator, "log", new_callable=mock.PropertyMock, return_value=logger):
        result = op.execute(_context())
    jobs.submitted.append(result["app_id"])
    assert result["final_status"] == "SUCCEEDED"
    assert _grown(seen.lines) == GROWN, "\n".join(seen.lines)
    oom = "worker:0 stderr | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 700.00 MiB"
    assert seen.lines.count(oom) == 2, "\n".join(seen.lines)


def test_the_trigger_and_the_resumed_task_follow_a_grown_task_too(minicluster, jobs, melon_hook):
    """The same through the trigger (while the job runs) and the resumed task (the rest, from the event)."""
    job = _grower(jobs)
    app_id = jobs.submit(job)
    logger, seen = _logger("test_logs_live.grown_trigger")

    async def scenario():
        trigger = _trigger(minicluster, logger, app_id=app_id, job_logs=True, log_chief="worker:0")
        try:
            return await asyncio.wait_for(trigger.run().__anext__(), 240)
        finally:
            await trigger.cleanup()

    event = asyncio.run(scenario())
    assert event.payload["status"] == "success", event.payload
    op = _operator(melon_hook, job)
    with mock.patch.object(MelonTrainOperator, "log", new_callable=mock.PropertyMock, return_value=logger):
        op._final_job_logs(event.payload)
    assert _grown(seen.lines) == GROWN, "\n".join(seen.lines)
