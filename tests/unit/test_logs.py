"""LogFollower: offsets, partial lines, caps and the truncation line, serialization round trips (follower and
trigger), reattach, failing tasks, a dead node, 404s — and the operator's sync loop and the trigger using it.

The NodeManagers are emulated on requests_mock with the answer format of Hadoop 3.5's NMWebServices (the header
with the whole file's ``LogLength``, the bytes ``size`` asks for — the last ``-size`` bytes when negative — and the
footer), as read from a real NM (tests/integration/test_logs_live.py runs the same paths against the mini cluster).
The real YarnHook makes every call, so its parsing and auth parameters are exercised too.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from unittest import mock

import pytest
import requests
import requests_mock as rm_mock

from airflow_provider_melon.hadoop.log_follower import FETCH_WINDOW, RESUME_TAIL_BYTES, SLACK, LogFollower, chief_of
from airflow_provider_melon.hadoop.nodemanager import parse_container_log
from airflow_provider_melon.hooks.yarn import AsyncYarnHook, YarnHook
from airflow_provider_melon.triggers.yarn import FINAL_LOGS_KEY
from airflow_provider_melon.version_compat import XCom

#: the trigger saves the job log's offsets with the async XCom API, which Airflow 3.0 lacks (there it logs at DEBUG
#: and a re-created trigger goes on from its serialized offsets: docs/compatibility.md)
needs_async_xcom = pytest.mark.skipif(not hasattr(XCom, "aset"), reason="Airflow 3.0: no async XCom (XCom.aset)")

RM = "http://rm:8088"
APP = "application_1700000000000_0042"
CHIEF_CID = "container_1700000000000_0042_01_000002"
WORKER_CID = "container_1700000000000_0042_01_000003"
NODES = {"nm1:45454": "nm1:8042", "nm2:45454": "nm2:8042"}
LOG_URL = re.compile(r"http://(nm\d):8042/ws/v1/node/containers/([^/]+)/logs/([^/?]+)")


class FakeNM:
    """The NodeManagers' container-log endpoint: files grow when a test appends to them."""

    def __init__(self, m: rm_mock.Mocker):
        self.files: dict[tuple[str, str], bytearray] = {}
        self.requests: list[tuple[str, str, int | None]] = []  # answered
        self.attempts: list[tuple[str, str]] = []  # asked, answered or not
        self.down: set[str] = set()
        self.modified: dict[tuple[str, str], float] = {}
        m.get(LOG_URL, content=self._answer)
        m.get(
            f"{RM}/ws/v1/cluster/nodes",
            json={
                "nodes": {
                    "node": [{"id": nid, "nodeHTTPAddress": http, "state": "RUNNING"} for nid, http in NODES.items()]
                }
            },
        )

    def write(self, cid: str, file: str, data: str | bytes, at: float | None = None) -> None:
        """Append to a file; ``at``: when it was written (the header's LogLastModifiedTime), now by default."""
        self.files.setdefault((cid, file), bytearray()).extend(data.encode() if isinstance(data, str) else data)
        self.modified[(cid, file)] = time.time() if at is None else at

    def _answer(self, request, context):
        host, cid, file = LOG_URL.match(request.url).groups()
        self.attempts.append((host, cid))
        if host in self.down:
            raise requests.ConnectionError(f"Failed to establish a new connection: [Errno 111] {host}")
        if "text/plain" not in request.headers.get("Accept", "") and "*/*" not in request.headers.get("Accept", ""):
            context.status_code = 406  # what a real NM answers the session's default Accept: application/json
            return b"Not Acceptable"
        size = request.qs.get("size", [None])[0]
        size = None if size is None else int(size)
        self.requests.append((cid, file, size))
        assert request.qs.get("user.name") == ["alice"], "the hook's simple auth rides along"
        data = self.files.get((cid, file))
        if data is None:
            context.status_code = 404
            return b"HTTP 404 Not Found"
        length = len(data)
        part = bytes(data) if size is None else bytes(data[:size] if size >= 0 else data[max(0, length + size) :])
        head = (
            f"Container: {cid} on {host}:45454\nLogAggregationType: LOCAL\n{'=' * 68}\nLogType:{file}\n"
            f"LogLastModifiedTime:{time.strftime('%a %b %d %H:%M:%S +0000 %Y', time.gmtime(self.modified[(cid, file)]))}"
            f"\nLogLength:{length}\nLogContents:\n"
        ).encode()
        foot = (
            f"End of LogType:{file}.This log file belongs to a running container ({cid}) and so may not be "
            f"complete.\n{'*' * 71}\n\n"
        ).encode()
        context.headers["Content-Type"] = "text/plain;charset=utf-8"
        return head + part + foot


@pytest.fixture
def nm():
    with rm_mock.Mocker() as m:
        yield FakeNM(m)


@pytest.fixture
def hook():
    return YarnHook(rm_urls=[RM], user="alice", retries=0, backoff=0)


def app(state="RUNNING", final="UNDEFINED", diagnostics="", aggregation="DISABLED"):
    return {
        "id": APP,
        "user": "alice",
        "state": state,
        "finalStatus": final,
        "diagnostics": diagnostics,
        "trackingUrl": f"{RM}/proxy/{APP}/",
        "logAggregationStatus": aggregation,
        "amContainerLogs": "http://nm1:8042/node/containerlogs/container_1700000000000_0042_01_000001/alice",
    }


def task(role, index, state="RUNNING", cid=None, node="nm1:45454", **kw):
    return dict(
        {
            "role": role,
            "index": index,
            "state": state,
            "container_id": cid,
            "node_id": node,
            "attempt": 0,
            "exit_code": None,
        },
        **kw,
    )


def status(*tasks):
    return {"app_id": APP, "state": "RUNNING", "tasks": list(tasks)}


RUNNING = status(task("chief", 0, cid=CHIEF_CID), task("worker", 0, cid=WORKER_CID, node="nm2:45454"))


def job_lines(lines: list[str], prefix: str) -> list[str]:
    return [line[len(prefix) :] for line in lines if line.startswith(prefix)]


# ---------------------------------------------------------------------------------------------- offsets


def test_lines_once_in_order_and_a_partial_line_waits_for_its_newline(nm, hook):
    f = LogFollower("chief:0")
    nm.write(CHIEF_CID, "stdout", "Epoch 1/4\nEpoch 2")
    assert f.poll(hook, RUNNING, app=app()) == ["chief:0 | Epoch 1/4"]
    assert f.poll(hook, RUNNING, app=app()) == []  # "Epoch 2" has no newline yet
    nm.write(CHIEF_CID, "stdout", "/4\nEpoch 3/4\n")
    nm.write(CHIEF_CID, "stderr", "W0101 warning\n")
    assert f.poll(hook, RUNNING, app=app()) == [
        "chief:0 | Epoch 2/4",
        "chief:0 | Epoch 3/4",
        "chief:0 stderr | W0101 warning",
    ]
    nm.write(CHIEF_CID, "stdout", "done, no newline at the end")
    lines = f.poll(hook, None, app=app("FINISHED", "SUCCEEDED"), final=True)  # after the end: read once, all
    assert lines == ["chief:0 | done, no newline at the end"]
    before = len(nm.requests)
    assert f.poll(hook, None, app=app("FINISHED", "SUCCEEDED"), final=True) == []
    assert len(nm.requests) == before, "a container read to its end is not read again"
    # the worker is neither the chief nor failing: never read
    assert {cid for cid, _, _ in nm.requests} == {CHIEF_CID}


def test_requests_ask_for_the_unseen_tail_and_a_fast_grower_gets_a_second_larger_read(nm, hook):
    f = LogFollower("chief:0", lines_per_poll=100_000)
    nm.write(CHIEF_CID, "stdout", "a\n")
    f.poll(hook, RUNNING, app=app())
    assert nm.requests[0] == (CHIEF_CID, "stdout", -FETCH_WINDOW)  # first read: up to the window
    nm.requests.clear()
    burst = "".join(f"burst {i:06d} " + "x" * 100 + "\n" for i in range(1500))  # ~170 KiB > SLACK
    nm.write(CHIEF_CID, "stdout", burst)
    lines = job_lines(f.poll(hook, RUNNING, app=app()), "chief:0 | ")
    stdout_sizes = [size for cid, file, size in nm.requests if file == "stdout"]
    assert stdout_sizes[0] == -SLACK  # nothing unseen as far as it knew: only the slack
    assert stdout_sizes[1] == -(len(burst) + SLACK)  # placed by LogLength: asked again for all it had not seen
    assert lines == burst.splitlines()  # nothing lost, nothing twice


def test_carriage_returns_show_what_a_terminal_shows_and_bad_utf8_does_not_break(nm, hook):
    f = LogFollower("chief:0")
    nm.write(CHIEF_CID, "stderr", b"10%\r50%\r100%|#####|\n\xff\xfe bytes\n")
    assert f.poll(hook, RUNNING, app=app()) == ["chief:0 stderr | 100%|#####|", "chief:0 stderr | \ufffd\ufffd bytes"]


def test_parse_locates_the_bytes_by_length_not_by_the_footer():
    body = (
        b"Container: c on n\nLogAggregationType: LOCAL\n===\nLogType:stdout\nLogLastModifiedTime:x\n"
        b"LogLength:100\nLogContents:\nEnd of LogType:stdout is printed by the job\nEnd of LogType:stdout.\n"
    )
    chunk = parse_container_log(body, -42)
    assert chunk.length == 100 and chunk.start == 58
    assert chunk.data == b"End of LogType:stdout is printed by the job"[:42]
    with pytest.raises(ValueError):
        parse_container_log(b"<html>login</html>", -10)


def test_the_follower_measures_how_long_new_lines_took_to_reach_the_task_log(nm, hook):
    """The log lag: from the file's last write on its node (whole seconds) to the poll that showed its new lines;
    taken once, and nothing when a poll brought no new line."""
    f = LogFollower("chief:0")
    nm.write(CHIEF_CID, "stdout", "step 1\n", at=time.time() - 7)
    assert f.poll(hook, RUNNING, app=app()) == ["chief:0 | step 1"]
    lag = f.take_lag()
    assert lag is not None and 7 <= lag < 67, lag
    assert f.take_lag() is None  # taken
    f.poll(hook, RUNNING, app=app())  # nothing new
    assert f.take_lag() is None


def test_parse_reads_when_the_node_last_wrote_the_file():
    """The header's LogLastModifiedTime (Hadoop writes it as ``EEE MMM dd HH:mm:ss Z yyyy``, whole seconds) is the
    file's last write on the node, in seconds since the epoch; a header without a readable one gives None."""
    body = b"LogType:stdout\nLogLastModifiedTime:Mon Nov 30 19:27:34 +0800 2026\nLogLength:2\nLogContents:\nok\n"
    assert parse_container_log(body, None).modified == 1796038054.0  # 2026-11-30 11:27:34 UTC
    assert parse_container_log(body.replace(b"+0800 2026", b"x"), None).modified is None
    assert parse_container_log(b"LogLength:2\nLogContents:\nok", None).modified is None


# ---------------------------------------------------------------------------------------------- caps


def test_per_poll_cap_keeps_the_newest_lines_with_a_truncation_line_and_shares_fairly(nm, hook):
    f = LogFollower("chief:0", lines_per_poll=10)
    nm.write(CHIEF_CID, "stdout", "".join(f"out {i}\n" for i in range(30)))
    nm.write(CHIEF_CID, "stderr", "err 0\nerr 1\n")
    lines = f.poll(hook, RUNNING, app=app())
    link = f"http://nm1:8042/node/containerlogs/{CHIEF_CID}/alice/stdout/?start=0"
    # 10 lines: the small file keeps its 2, the big one shows its newest 8 after the truncation line
    assert lines == (
        [f"chief:0 | ... 22 lines skipped (more than 10 lines per poll); full log: {link}"]
        + [f"chief:0 | out {i}" for i in range(22, 30)]
        + ["chief:0 stderr | err 0", "chief:0 stderr | err 1"]
    )
    nm.write(CHIEF_CID, "stdout", "out 30\n")
    assert f.poll(hook, RUNNING, app=app()) == ["chief:0 | out 30"]  # skipped lines are not shown later


def test_total_cap_says_truncated_with_the_links_and_stops_reading(nm, hook):
    f = LogFollower("chief:0", max_bytes=100)
    nm.write(CHIEF_CID, "stdout", "".join(f"line {i:02d} ...........\n" for i in range(10)))  # 20 bytes a line
    lines = f.poll(hook, RUNNING, app=app())
    assert job_lines(lines, "chief:0 | ") == [f"line {i:02d} ..........." for i in range(5)]
    assert lines[-1] == (
        "... job log truncated: 100 bytes shown, the limit for this task is 100 bytes "
        "(job_log_max_bytes); full log: "
        f"chief:0: http://nm1:8042/node/containerlogs/{CHIEF_CID}/alice"
    )
    assert f.emitted_bytes == 100 and f.state()["capped"] is True
    asked = len(nm.requests)
    nm.write(CHIEF_CID, "stdout", "more\n")
    assert f.poll(hook, RUNNING, app=app()) == []
    assert f.poll(hook, None, app=app("FINISHED", "SUCCEEDED"), final=True) == []
    assert len(nm.requests) == asked, "nothing is read past the cap"


def test_a_line_longer_than_the_line_limit_is_cut_and_the_offset_moves_on(nm, hook):
    from airflow_provider_melon.hadoop.log_follower import MAX_LINE_BYTES

    f = LogFollower("chief:0")
    nm.write(CHIEF_CID, "stdout", "y" * (MAX_LINE_BYTES + 10))
    [line] = f.poll(hook, RUNNING, app=app())  # no newline, but too long to wait for one
    assert line == "chief:0 | " + "y" * MAX_LINE_BYTES + f" [line cut at {MAX_LINE_BYTES} bytes]"
    nm.write(CHIEF_CID, "stdout", "next\n")
    assert f.poll(hook, RUNNING, app=app()) == ["chief:0 | next"]


# ---------------------------------------------------------------------------------------------- restarts


def test_state_round_trips_through_json_and_a_successor_repeats_and_loses_nothing(nm, hook):
    first = LogFollower("chief:0")
    nm.write(CHIEF_CID, "stdout", "0\n1\n2")
    shown = job_lines(first.poll(hook, RUNNING, app=app()), "chief:0 | ")
    state = json.loads(json.dumps(first.state()))
    assert state["follow"][CHIEF_CID]["offsets"] == {"stdout": 4}  # "2" waits for its newline; no stderr yet
    nm.write(CHIEF_CID, "stdout", "\n3\n")
    second = LogFollower("chief:0", state=state)  # a re-created trigger: no AM status needed to go on
    shown += job_lines(second.poll(hook, None, app=app()), "chief:0 | ")
    nm.write(CHIEF_CID, "stdout", "4\n")
    shown += job_lines(second.poll(hook, None, app=app("FINISHED", "SUCCEEDED"), final=True), "chief:0 | ")
    assert shown == ["0", "1", "2", "3", "4"]


def test_reattached_without_offsets_starts_at_the_tail_at_a_line_start_and_says_so(nm, hook):
    old = "".join(f"old line {i:05d}\n" for i in range(2000))  # 32 KiB > RESUME_TAIL_BYTES
    nm.write(CHIEF_CID, "stdout", old)
    nm.write(CHIEF_CID, "stderr", "short\n")
    f = LogFollower("chief:0", lines_per_poll=10_000, state={"resume": True})
    lines = f.poll(hook, RUNNING, app=app())
    shown = job_lines(lines, "chief:0 | old line ")
    assert shown[-1] == "01999" and len(shown) == RESUME_TAIL_BYTES // len("old line 00000\n")
    skipped = len(old) - len(shown) * len("old line 00000\n")
    assert lines[0] == (
        f"chief:0 | ... {skipped} earlier bytes not shown (reattached to a running application); "
        f"full log: http://nm1:8042/node/containerlogs/{CHIEF_CID}/alice/stdout/?start=0"
    )
    assert "chief:0 stderr | short" in lines  # a file within the tail is shown whole
    # a container that starts after the reattach (the chief restarted) is read from its first byte
    new_cid = "container_1700000000000_0042_01_000009"
    nm.write(new_cid, "stdout", "".join(f"new {i}\n" for i in range(3000)))
    restarted = status(task("chief", 0, cid=new_cid, attempt=1), task("worker", 0, cid=WORKER_CID, node="nm2:45454"))
    lines = LogFollower("chief:0", lines_per_poll=10_000, state=f.state()).poll(hook, restarted, app=app())
    assert job_lines(lines, "chief:0 | new ") == [str(i) for i in range(3000)]


def _trigger(nm, script, ti=None, **kw):
    """A trigger on a real AsyncYarnHook whose RM answers follow ``script``: (what the chief prints meanwhile, the
    application; None: hang until cancelled)."""
    from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger

    trig = YarnApplicationTrigger(**kw)
    trig._hook = AsyncYarnHook(rm_urls=[RM], user="alice", retries=0, backoff=0)
    trig._log = mock.Mock()
    trig._sleep = lambda: asyncio.sleep(0.01)  # the poll interval, short: other tasks (XCom calls) run meanwhile
    trig.coalesce_polls = False  # its own GET per poll: get_application below is this trigger's
    trig.am_status = mock.AsyncMock(return_value=RUNNING)
    trig._task_instance = ti
    trig.hung = asyncio.Event()
    steps = iter(script)

    async def get_application(app_id):
        printed, answer = next(steps)
        nm.write(CHIEF_CID, "stdout", printed)
        if answer is None:
            trig.hung.set()
            await asyncio.Event().wait()
        return answer

    trig._hook.get_application = get_application
    run = trig.run

    async def run_then_resume():
        # the user's log: the trigger's lines, then what the resumed task logs of the rest the event left it
        async for event in run():
            if event.payload.get(FINAL_LOGS_KEY):
                _resume(event.payload, trig._log)
            yield event

    trig.run = run_then_resume
    return trig


def _resume(payload: dict, log: mock.Mock) -> None:
    """MelonTrainOperator.execute_complete's read of the rest of the job log (``_final_job_logs``), logging to
    ``log``; the RM says the application has ended."""
    from airflow_provider_melon.operators.train import MelonTrainOperator

    op = MelonTrainOperator(
        task_id="train",
        yarn_conn_id="yarn_test",
        job={"name": "j", "entrypoint": "python t.py", "roles": {"chief": {}, "worker": {}}},
    )
    conn = json.dumps({"conn_type": "yarn", "host": RM, "login": "alice"})
    with (
        mock.patch.dict("os.environ", {"AIRFLOW_CONN_YARN_TEST": conn}),
        mock.patch.object(YarnHook, "get_application", lambda self, app_id: app("FINISHED", "SUCCEEDED")),
        mock.patch.object(MelonTrainOperator, "log", new_callable=mock.PropertyMock, return_value=log),
    ):
        op._final_job_logs(payload)


async def _run_until_hung(trig):
    task = asyncio.ensure_future(trig.run().__anext__())
    await trig.hung.wait()  # its polls are done, the next one waits for the RM
    task.cancel()  # the triggerer stops it
    with pytest.raises(asyncio.CancelledError):
        await task


def _shown(*triggers) -> list[str]:
    return job_lines(
        [c.args[1] for t in triggers for c in t._log.info.call_args_list if c.args[0] == "%s"], "chief:0 | "
    )


def test_trigger_serialize_carries_the_offsets_and_a_recreated_trigger_goes_on(nm):
    async def scenario():
        first = _trigger(
            nm,
            [("a 0\na 1\n", app()), ("a 2\n", app()), ("", None)],
            app_id=APP,
            poll_interval=5,
            job_logs=True,
            log_chief="chief:0",
        )
        await _run_until_hung(first)
        classpath, kwargs = first.serialize()  # ... and starts it again from its serialized kwargs
        second = _trigger(nm, [("a 3\n", app("FINISHED", "SUCCEEDED"))], **json.loads(json.dumps(kwargs)))
        event = [e async for e in second.run()][0]
        return first, second, event

    first, second, event = asyncio.run(scenario())
    assert _shown(first, second) == ["a 0", "a 1", "a 2", "a 3"]  # "a 3": read by the resumed task
    assert event.payload["status"] == "success" and event.payload[FINAL_LOGS_KEY] is True
    assert event.payload["log_state"]["done"] == []  # the rest is the task's: the trigger read none of it


@needs_async_xcom
def test_a_crashed_triggerer_recreates_the_trigger_from_its_deferral_kwargs_and_the_xcom_has_the_offsets(nm):
    """Airflow keeps a trigger's kwargs as they were when the task deferred; the offsets reached since are in an
    XCom of the task instance, which the trigger of the new triggerer reads."""
    from types import SimpleNamespace

    from airflow_provider_melon.triggers.yarn import LOG_STATE_XCOM_KEY
    from airflow_provider_melon.version_compat import XCom

    xcoms: dict = {}

    async def aset(*, key, value, dag_id, task_id, run_id, map_index):
        xcoms[(key, dag_id, task_id, run_id, map_index)] = json.loads(json.dumps(value))

    async def aget_one(*, key, dag_id, task_id, run_id, map_index):
        for _ in range(20):  # slow, as a triggerer's first XCom call is (it starts its in-process API)
            await asyncio.sleep(0.01)
        return xcoms.get((key, dag_id, task_id, run_id, map_index))

    ti = SimpleNamespace(dag_id="d", task_id="train", run_id="r1", map_index=-1)
    deferred = {"app_id": APP, "poll_interval": 5, "job_logs": True, "log_chief": "chief:0"}

    printed = iter(range(1000))
    # the chief prints a line per poll; the first trigger's RM stops answering once it has shown lines and saved
    # their offsets (then the triggerer dies)
    first = _trigger(nm, ((f"a {next(printed)}\n", app()) for _ in range(1000)), ti=ti, **deferred)  # lazily
    real_get = first._hook.get_application

    async def get_application(app_id):
        if _shown(first) and xcoms:
            first.hung.set()
            await asyncio.Event().wait()
        return await real_get(app_id)

    first._hook.get_application = get_application

    async def scenario():
        await _run_until_hung(first)
        last = next(printed)
        second = _trigger(nm, [(f"a {last}\n", app("FINISHED", "SUCCEEDED"))], ti=ti, **deferred)  # the DB's kwargs
        event = [e async for e in second.run()][0]
        return last, second, event

    with mock.patch.object(XCom, "aset", aset), mock.patch.object(XCom, "aget_one", aget_one):
        last, second, event = asyncio.run(scenario())
    assert _shown(first) and _shown(second), "each trigger showed part of the output"
    # the batch the first trigger logged last comes again, marked (a reader drops it by its marks): nothing else
    again = [line for line in _shown(second) if line.startswith("... re-shown from")]
    assert again and [line for line in _shown(first, second) if line not in again] == [
        f"a {i}" for i in range(last + 1)
    ]
    saved = xcoms[(LOG_STATE_XCOM_KEY, "d", "train", "r1", -1)]
    assert saved["app_id"] == APP and saved["state"]["seq"] > 0
    # a trigger of another application (a new try that submitted again) ignores it
    other = _trigger(nm, [], ti=ti, **dict(deferred, app_id="application_1700000000000_0043"))
    with mock.patch.object(XCom, "aget_one", aget_one):
        asyncio.run(other._restore_log_state())
    assert other.log_state is None


def test_the_floor_is_two_batches_behind_even_for_a_container_read_to_its_end(nm, hook):
    f = LogFollower("chief:0")
    nm.write(CHIEF_CID, "stdout", "0\n1\n")
    f.poll(hook, RUNNING, app=app())
    nm.write(CHIEF_CID, "stdout", "2\n")
    f.poll(hook, RUNNING, app=app())
    nm.write(CHIEF_CID, "stdout", "3\n")
    assert f.poll(hook, None, app=app("FINISHED", "SUCCEEDED"), final=True) == ["chief:0 | 3"]
    assert f.state()["done"] == [CHIEF_CID]  # read to its end: never read again by this follower
    successor = LogFollower("chief:0", state=json.loads(json.dumps(f.floor())))
    assert successor.poll(hook, None, app=app("FINISHED", "SUCCEEDED"), final=True) == [
        f"chief:0 | ... re-shown from {CHIEF_CID}/stdout@4 after a triggerer restart",
        "chief:0 [re-shown @4] | 2",
        "chief:0 [re-shown @6] | 3",
    ]
    assert successor.state()["reshow"] == {} and successor.state()["done"] == [CHIEF_CID]


@needs_async_xcom
def test_lines_logged_just_before_a_triggerer_crash_are_shown_again_marked_never_lost(nm):
    """The batch a trigger logged last before the triggerer died may never have reached the log (its lines and the
    XCom save travel on different connections): the offsets a poll saves, before it logs its lines, are one batch
    behind, so the new trigger shows the last two batches again, saying from where, each repeated line marked with
    its offset; no line is lost, none the old trigger logged comes again unmarked."""
    from types import SimpleNamespace

    from airflow_provider_melon.version_compat import XCom

    xcoms: dict = {}

    async def aset(*, key, value, dag_id, task_id, run_id, map_index):
        xcoms[(key, dag_id, task_id, run_id, map_index)] = json.loads(json.dumps(value))

    async def aget_one(*, key, dag_id, task_id, run_id, map_index):
        return xcoms.get((key, dag_id, task_id, run_id, map_index))

    ti = SimpleNamespace(dag_id="d", task_id="train", run_id="r1", map_index=-1)
    deferred = {"app_id": APP, "poll_interval": 5, "job_logs": True, "log_chief": "chief:0"}
    printed = iter(range(1000))
    first = _trigger(nm, ((f"a {next(printed)}\na {next(printed)}\n", app()) for _ in range(1000)), ti=ti, **deferred)
    real_get = first._hook.get_application
    batches: list[int] = []  # the number of lines logged when each poll began

    async def get_application(app_id):
        batches.append(len(_shown(first)))
        if len(batches) > 3:
            first.hung.set()  # the triggerer dies now: what it logged in the last poll never reaches the log
            await asyncio.Event().wait()
        return await real_get(app_id)

    first._hook.get_application = get_application

    async def scenario():
        await _run_until_hung(first)
        last = next(printed)
        second = _trigger(nm, [(f"a {last}\n", app("FINISHED", "SUCCEEDED"))], ti=ti, **deferred)
        await second.run().__anext__()
        return last, second

    with mock.patch.object(XCom, "aset", aset), mock.patch.object(XCom, "aget_one", aget_one):
        last, second = asyncio.run(scenario())
    written = _shown(first)[: batches[-2]]  # the log of the first trigger, less its last batch
    again = [c.args[1] for c in second._log.info.call_args_list if c.args[0] == "%s"]
    plain = job_lines(again, "chief:0 | ")
    marked = [m.groups() for m in map(re.compile(r"chief:0 \[re-shown @(\d+)\] \| (.*)").fullmatch, again) if m]
    lost = [f"a {i}" for i in range(last + 1) if f"a {i}" not in written + plain + [t for _, t in marked]]
    assert not lost, f"lines lost across the triggerer crash: {lost}"
    assert [t for _, t in marked] == _shown(first)[batches[-3] :], "the last two batches, shown again and marked"
    offsets = [int(o) for o, _ in marked]
    assert offsets == [len("".join(f"a {i}\n" for i in range(n))) for n in range(batches[-3], batches[-1])]
    assert plain[0] == f"... re-shown from {CHIEF_CID}/stdout@{offsets[0]} after a triggerer restart"
    assert _shown(first)[: batches[-3]] + [t for _, t in marked] + plain[1:] == [f"a {i}" for i in range(last + 1)]


def _crash_then_successor(nm, monkeypatch, *, graceful: bool):
    """With remote logging on: a first trigger streams a few polls (saving offsets), then its triggerer dies
    (``graceful=False``: SIGKILL, no clean-up, its log never uploaded) or stops (``True``: cancelled, ``cleanup()``
    runs, Airflow uploads its log after); a successor re-created from the deferral kwargs. Returns (first, second,
    the XCom saved, the last line number)."""
    from types import SimpleNamespace

    import airflow_provider_melon.triggers.yarn as trigger_module
    from airflow_provider_melon.triggers.yarn import LOG_STATE_XCOM_KEY
    from airflow_provider_melon.version_compat import XCom

    monkeypatch.setattr(trigger_module, "remote_logging", lambda: True)
    xcoms: dict = {}

    async def aset(*, key, value, dag_id, task_id, run_id, map_index):
        xcoms[(key, dag_id, task_id, run_id, map_index)] = json.loads(json.dumps(value))

    async def aget_one(*, key, dag_id, task_id, run_id, map_index):
        return xcoms.get((key, dag_id, task_id, run_id, map_index))

    ti = SimpleNamespace(dag_id="d", task_id="train", run_id="r1", map_index=-1)
    deferred = {"app_id": APP, "poll_interval": 5, "job_logs": True, "log_chief": "chief:0"}
    printed = iter(range(1000))
    first = _trigger(nm, ((f"a {next(printed)}\n", app()) for _ in range(1000)), ti=ti, **deferred)
    real_get = first._hook.get_application
    polls = []

    async def get_application(app_id):
        polls.append(1)
        if len(polls) > 4:
            first.hung.set()
            await asyncio.Event().wait()
        return await real_get(app_id)

    first._hook.get_application = get_application

    async def scenario():
        await _run_until_hung(first)
        if graceful:
            await first.cleanup()  # what the triggerer runs on every exit but a SIGKILL
        saved = json.loads(json.dumps(xcoms[(LOG_STATE_XCOM_KEY, "d", "train", "r1", -1)]))
        last = next(printed)
        second = _trigger(nm, [(f"a {last}\n", app()), ("", app("FINISHED", "SUCCEEDED"))], ti=ti, **deferred)
        await second.run().__anext__()
        return saved, last, second

    with mock.patch.object(XCom, "aset", aset), mock.patch.object(XCom, "aget_one", aget_one):
        saved, last, second = asyncio.run(scenario())
    return first, second, saved, last


@needs_async_xcom
def test_remote_logging_a_successor_goes_on_from_what_the_task_log_holds_not_what_the_dead_trigger_printed(
    nm, monkeypatch
):
    """With remote logging Airflow uploads a trigger's log when it ends: a trigger killed unended leaves nothing in
    the task log the user reads. The successor goes on from the offsets the task log is known to hold (here: the
    deferral's, none), so every line reaches the log the user reads, those the dead trigger got to marked."""
    first, second, saved, last = _crash_then_successor(nm, monkeypatch, graceful=False)
    assert len(_shown(first)) >= 3, "the first trigger streamed several polls"
    assert saved["durable"]["seq"] == 0 and saved["state"]["seq"] > 0  # never advanced by the dead trigger
    again = [c.args[1] for c in second._log.info.call_args_list if c.args[0] == "%s"]
    plain = job_lines(again, "chief:0 | ")
    marked = [m.group(1) for m in map(re.compile(r"chief:0 \[re-shown @\d+\] \| (.*)").fullmatch, again) if m]
    # the user's log is the successor's alone: every line, in order, those the dead one had reached marked
    assert marked + plain[1:] == [f"a {i}" for i in range(last + 1)], again
    assert plain[0].startswith(f"... re-shown from {CHIEF_CID}/stdout@0 ")
    assert set(_shown(first)) <= set(marked)  # whatever the dead trigger printed comes again marked
    assert any("the task log is known to hold" in str(c.args) for c in second._log.info.call_args_list)


@needs_async_xcom
def test_remote_logging_a_trigger_that_ends_saves_its_offsets_as_held_by_the_task_log(nm, monkeypatch):
    """A trigger that ends (cancelled by a stopping triggerer: cleanup runs, then Airflow uploads its log) advances
    what the task log holds to its floor: the successor re-shows only the last batches, not the whole job."""
    first, second, saved, last = _crash_then_successor(nm, monkeypatch, graceful=True)
    assert saved["durable"] == saved["state"] and saved["durable"]["seq"] > 0
    again = [c.args[1] for c in second._log.info.call_args_list if c.args[0] == "%s"]
    marked = [m.group(1) for m in map(re.compile(r"chief:0 \[re-shown @\d+\] \| (.*)").fullmatch, again) if m]
    assert marked and len(marked) < len(_shown(first)), (marked, _shown(first))
    assert _shown(first)[: len(_shown(first)) - len(marked)] + marked + job_lines(again, "chief:0 | ")[1:] == [
        f"a {i}" for i in range(last + 1)
    ]


# ---------------------------------------------------------------------------------------------- failures


def test_failing_task_output_follows_and_a_replaced_container_is_read_to_its_end(nm, hook):
    f = LogFollower("chief:0")
    nm.write(CHIEF_CID, "stdout", "chief working\n")
    f.poll(hook, RUNNING, app=app())
    nm.write(WORKER_CID, "stderr", "Traceback (most recent call last):\nValueError: bad shard\n")
    failed = status(
        task("chief", 0, cid=CHIEF_CID),
        task("worker", 0, state="FAILED", cid=WORKER_CID, node="nm2:45454", exit_code=3),
    )
    lines = f.poll(hook, failed, app=app())
    assert lines == [
        "worker:0 failed (exit 3); its output follows",
        "worker:0 stderr | Traceback (most recent call last):",
        "worker:0 stderr | ValueError: bad shard",
    ]
    # a restart: the AM reports a new container for worker:0; the old one's last words are shown once
    nm.write(WORKER_CID, "stdout", "late line\n")
    again = status(
        task("chief", 0, cid=CHIEF_CID),
        task("worker", 0, cid="container_1700000000000_0042_01_000007", node="nm1:45454", attempt=1),
    )
    assert f.poll(hook, again, app=app()) == []  # already read to its end when it failed
    g = LogFollower("chief:0")
    g.poll(hook, RUNNING, app=app())
    lines = g.poll(hook, again, app=app())
    assert lines[0].startswith(f"worker:0: its container {WORKER_CID} ended and the task was started again (attempt 1")
    assert "worker:0 | late line" in lines and "worker:0 stderr | ValueError: bad shard" in lines


def test_after_a_failed_end_the_task_the_diagnostics_name_is_shown(nm, hook):
    f = LogFollower("chief:0")
    nm.write(CHIEF_CID, "stdout", "")
    f.poll(hook, RUNNING, app=app())
    nm.write(WORKER_CID, "stderr", "CUDA error: out of memory\n")
    ended = app("FINISHED", "FAILED", diagnostics="task worker:0 on nm2 exited 1: CUDA error: out of memory")
    lines = f.poll(hook, None, app=ended, final=True)
    assert lines == [
        "worker:0 failed the application; its output follows",
        "worker:0 stderr | CUDA error: out of memory",
    ]


def test_a_dead_node_gives_one_line_never_an_exception_and_the_rest_streams_on(nm, hook):
    nm.down.add("nm2")
    nm.write(CHIEF_CID, "stdout", "c0\n")
    f = LogFollower("chief:0")
    failed = status(
        task("chief", 0, cid=CHIEF_CID),
        task("worker", 1, state="FAILED", cid=WORKER_CID, node="nm2:45454", exit_code=137),
    )
    lines = f.poll(hook, failed, app=app())
    unavailable = [line for line in lines if line.startswith("logs of worker:1 unavailable")]
    assert unavailable == [
        f"logs of worker:1 unavailable: node nm2:45454 unreachable (ConnectionError); full log: "
        f"http://nm2:8042/node/containerlogs/{WORKER_CID}/alice"
    ]
    assert "chief:0 | c0" in lines
    assert nm.attempts.count(("nm2", WORKER_CID)) == 1  # its stderr is not tried right after its stdout failed
    for i in range(1, 8):
        nm.write(CHIEF_CID, "stdout", f"c{i}\n")
        assert f.poll(hook, failed, app=app()) == [f"chief:0 | c{i}"]  # said once; retried quietly
    assert nm.attempts.count(("nm2", WORKER_CID)) == 2  # once more, RETRY_EVERY_POLLS (6) polls later
    assert f.poll(hook, None, app=app("FINISHED", "FAILED"), final=True) == []  # and once after the end
    assert nm.attempts.count(("nm2", WORKER_CID)) == 3
    assert WORKER_CID in f.state()["done"]


def test_anything_odd_from_the_hook_never_raises(hook):
    broken = mock.Mock(spec=YarnHook)
    broken.nodes.side_effect = RuntimeError("RM down")
    broken.container_log.side_effect = RuntimeError("boom")
    f = LogFollower("chief:0")
    assert f.poll(broken, RUNNING, app=app()) == []  # nodes unknown: nothing said yet, asked again next poll
    broken.nodes.side_effect = None
    broken.nodes.return_value = [{"id": "nm1:45454", "nodeHTTPAddress": "nm1:8042"}]
    lines = f.poll(broken, RUNNING, app=app())
    assert lines == ["logs of chief:0 unavailable: boom"]
    assert f.poll(broken, {"tasks": "garbage"}, app={"weird": 1}) == []


def test_404_while_running_is_quiet_and_after_the_end_one_line_names_log_aggregation(nm, hook):
    f = LogFollower("chief:0")
    assert f.poll(hook, RUNNING, app=app()) == []  # the files do not exist yet
    lines = f.poll(hook, None, app=app("FINISHED", "SUCCEEDED", aggregation="SUCCEEDED"), final=True)
    assert lines == [
        "logs of chief:0 are no longer on its node: log aggregation is on (SUCCEEDED), the aggregated "
        f"log: http://nm1:8042/node/containerlogs/{CHIEF_CID}/alice"
    ]


def test_chief_rules():
    assert chief_of([("worker", False), ("chief", False), ("ps", True)]) == "chief:0"
    assert chief_of([("worker", False), ("master", False)]) == "master:0"
    assert chief_of([("ps", True), ("worker", False), ("evaluator", False)]) == "worker:0"
    assert chief_of([("ps", True)]) is None
    f = LogFollower()  # no chief given: the AM's task list decides, ps untracked
    f.poll(
        mock.Mock(spec=YarnHook, nodes=mock.Mock(return_value=[])),
        status(task("ps", 0, cid="c_ps"), task("worker", 0, cid="c_w0")),
        app=app(),
    )
    assert f.chief == "worker:0"


# ---------------------------------------------------------------------------------------------- a task's containers

C1, C2, C3 = (f"container_1700000000000_0042_01_00001{i}" for i in (1, 2, 3))


def ran(*containers):
    """The AM's container history of a task: (container, node, exit code) in order."""
    return [
        {"container_id": cid, "node_id": node, "attempt": n, "exit_code": code}
        for n, (cid, node, code) in enumerate(containers)
    ]


def event(seq, cid, text, name="worker:0"):
    return {"seq": seq, "time": 1700000000000 + seq, "task": name, "container_id": cid, "text": text}


GROW_1 = "exceeded its expected GPU memory (cap 1024 MiB; peak seen 1300 MiB): asking again with 1536 MiB"
GROW_2 = "exceeded its expected GPU memory (cap 1536 MiB; peak seen 1700 MiB): asking again with 2304 MiB"


def grown(state, cid, containers, events, **kw):
    return dict(status(task("worker", 0, state=state, cid=cid, containers=ran(*containers), **kw)), events=events)


def test_a_task_grown_twice_shows_each_containers_output_and_the_ams_decision_between_them(nm, hook):
    """The issue's task: out of GPU memory at 1024 and 1536 MiB, done at 2304 MiB. A poll saw only the second
    container; the final status names all three: each is read to its end in order, each decision after the output
    of the container it was about."""
    f = LogFollower("worker:0")
    for cid, mb in ((C1, 1024), (C2, 1536)):
        nm.write(cid, "stdout", f"running with {mb} MiB\n")
        nm.write(cid, "stderr", "torch.OutOfMemoryError: CUDA out of memory\n")
    nm.write(C3, "stdout", "running with 2304 MiB\ntrained\n")
    seen = f.poll(
        hook, grown("RUNNING", C2, [(C1, "nm1:45454", 76), (C2, "nm2:45454", None)], [event(1, C1, GROW_1)]), app=app()
    )
    seen += f.poll(
        hook,
        grown(
            "SUCCEEDED",
            C3,
            [(C1, "nm1:45454", 76), (C2, "nm2:45454", 76), (C3, "nm1:45454", 0)],
            [event(1, C1, GROW_1), event(2, C2, GROW_2)],
        ),
        app=app("FINISHED", "SUCCEEDED"),
        final=True,
    )
    assert seen == [
        "worker:0 | running with 1024 MiB",
        "worker:0 stderr | torch.OutOfMemoryError: CUDA out of memory",
        f"[melon-am] worker:0 {GROW_1}",
        "worker:0 | running with 1536 MiB",
        "worker:0 stderr | torch.OutOfMemoryError: CUDA out of memory",
        f"[melon-am] worker:0 {GROW_2}",
        "worker:0 | running with 2304 MiB",
        "worker:0 | trained",
    ]


def test_a_later_container_waits_until_the_one_before_it_is_read_to_its_end(nm, hook):
    """While the first container's node does not answer, its decision and the next container are not held back
    forever: the node is said unreachable once, then the rest goes on; nothing is shown twice."""
    f = LogFollower("worker:0")
    nm.write(C1, "stdout", "first\n")
    nm.write(C2, "stdout", "second\n")
    nm.down.add("nm2")
    restarted = grown(
        "RUNNING",
        C2,
        [(C1, "nm2:45454", 1), (C2, "nm1:45454", None)],
        [event(1, C1, "exited 1, restart 1/1 of role worker")],
    )
    lines = f.poll(hook, restarted, app=app())
    assert lines[0].startswith("logs of worker:0 unavailable: node nm2:45454 unreachable")
    assert lines[1:] == ["[melon-am] worker:0 exited 1, restart 1/1 of role worker", "worker:0 | second"]
    nm.down.clear()
    nm.write(C2, "stdout", "third\n")
    assert f.poll(hook, restarted, app=app()) == ["worker:0 | third"]  # the unreachable one waits for its retry
    lines = f.poll(
        hook,
        dict(restarted, tasks=[dict(restarted["tasks"][0], state="SUCCEEDED")]),
        app=app("FINISHED", "SUCCEEDED"),
        final=True,
    )
    assert lines == ["worker:0 | first"]


def test_a_restart_and_a_replacement_of_another_task_reach_the_log_too(nm, hook):
    """The chief restarted within its budget: its first container's output, the decision, the second's. A decision
    about a task whose output is not followed (nothing to wait for) is shown in the same round."""
    f = LogFollower("worker:0")
    nm.write(C1, "stdout", "epoch 1\n")
    nm.write(C1, "stderr", "RuntimeError: NCCL timeout\n")
    nm.write(C2, "stdout", "epoch 1 again\n")
    st = dict(
        status(
            task("worker", 0, cid=C2, attempt=1, containers=ran((C1, "nm1:45454", 1), (C2, "nm1:45454", None))),
            task("worker", 1, cid=None, state="PENDING", node=None),
        ),
        events=[
            event(1, C1, "exited 1, restart 1/2 of role worker"),
            event(2, None, "lost with its node: asking for a replacement", name="worker:1"),
        ],
    )
    assert f.poll(hook, st, app=app()) == [
        "worker:0 | epoch 1",
        "worker:0 stderr | RuntimeError: NCCL timeout",
        "[melon-am] worker:0 exited 1, restart 1/2 of role worker",
        "[melon-am] worker:1 lost with its node: asking for a replacement",
        "worker:0 | epoch 1 again",
    ]
    assert f.poll(hook, st, app=app()) == [], "each decision once"
    failed = dict(
        st, events=st["events"] + [event(3, None, "failed: on nm1 exited 3: Traceback\nValueError: x", name="worker:1")]
    )
    assert f.poll(hook, failed, app=app()) == [
        "[melon-am] worker:1 failed: on nm1 exited 3: Traceback",
        "[melon-am] worker:1 | ValueError: x",
    ]


def test_the_checkpoint_names_the_container_so_a_successor_goes_on_in_the_next_one(nm, hook):
    """A trigger re-created from the state (JSON) mid-way: the first container and the decision are not shown
    again, the second container goes on from its offset, the third is read from its start."""
    f = LogFollower("worker:0")
    nm.write(C1, "stdout", "running with 1024 MiB\n")
    nm.write(C2, "stdout", "running with 1536 MiB\n")
    first = grown("RUNNING", C2, [(C1, "nm1:45454", 76), (C2, "nm1:45454", None)], [event(1, C1, GROW_1)])
    assert f.poll(hook, first, app=app()) == [
        "worker:0 | running with 1024 MiB",
        f"[melon-am] worker:0 {GROW_1}",
        "worker:0 | running with 1536 MiB",
    ]
    state = json.loads(json.dumps(f.state()))
    assert C1 in state["done"] and state["follow"][C2]["offsets"] == {"stdout": 22}
    g = LogFollower("worker:0", state=state)
    nm.write(C2, "stdout", "step 1\n")
    nm.write(C3, "stdout", "running with 2304 MiB\n")
    lines = g.poll(
        hook,
        grown(
            "SUCCEEDED",
            C3,
            [(C1, "nm1:45454", 76), (C2, "nm1:45454", 76), (C3, "nm1:45454", 0)],
            [event(1, C1, GROW_1), event(2, C2, GROW_2)],
        ),
        app=app("FINISHED", "SUCCEEDED"),
        final=True,
    )
    assert lines == ["worker:0 | step 1", f"[melon-am] worker:0 {GROW_2}", "worker:0 | running with 2304 MiB"]


def test_the_floor_keeps_a_decision_behind_with_the_lines_before_it(nm, hook):
    """A triggerer that crashed right after logging a decision: its successor, from the floor, shows the
    decision again rather than lose it (a lower bound, like the lines)."""
    f = LogFollower("worker:0")
    nm.write(C1, "stdout", "running with 1024 MiB\n")
    st = grown("RUNNING", C2, [(C1, "nm1:45454", 76), (C2, "nm1:45454", None)], [event(1, C1, GROW_1)])
    assert f"[melon-am] worker:0 {GROW_1}" in f.poll(hook, st, app=app())
    g = LogFollower("worker:0", state=json.loads(json.dumps(f.floor())))
    assert f"[melon-am] worker:0 {GROW_1}" in g.poll(hook, st, app=app())


# ---------------------------------------------------------------------------------------------- the operator


def test_operator_sync_loop_streams_job_logs_and_reads_the_rest_at_the_end(nm, monkeypatch):
    from airflow_provider_melon.hooks.melon import MelonHook
    from airflow_provider_melon.operators.train import MelonTrainOperator

    monkeypatch.setenv("AIRFLOW_CONN_YARN_TEST", json.dumps({"conn_type": "yarn", "host": RM, "login": "alice"}))
    apps = iter([app(), app(), app("FINISHED", "SUCCEEDED")])
    steps = iter(["Epoch 1/2\n", "Epoch 2/2\n", "saved model"])

    def get_application(self, app_id):
        nm.write(CHIEF_CID, "stdout", next(steps))
        return next(apps)

    op = MelonTrainOperator(
        task_id="train",
        yarn_conn_id="yarn_test",
        poll_interval=5,
        deferrable=False,
        job={"name": "j", "entrypoint": "python t.py", "roles": {"ps": {}, "worker": {"instances": 2}}},
    )
    op._spec = op.load_spec()
    op._announced.add(APP)
    fake_log = mock.Mock()
    with (
        mock.patch.object(YarnHook, "get_application", get_application),
        mock.patch.object(MelonHook, "am_status", return_value=status(task("worker", 0, cid=CHIEF_CID))) as am,
        mock.patch.object(MelonTrainOperator, "_sleep"),
        mock.patch.object(MelonTrainOperator, "_complete", return_value={"ok": True}),
        mock.patch.object(MelonTrainOperator, "log", new_callable=mock.PropertyMock, return_value=fake_log),
    ):
        assert op.poll_until_complete(APP, {"ti": mock.Mock(dag_id="d", task_id="train", map_index=-1)}) == {"ok": True}
    logged = [c.args[0] % c.args[1:] for c in fake_log.info.call_args_list]
    assert am.call_count == 2  # every running poll (the containers), not only every log_every_n
    assert [line for line in logged if line.startswith("worker:0 |")] == [
        "worker:0 | Epoch 1/2",
        "worker:0 | Epoch 2/2",
        "worker:0 | saved model",
    ]
    # not submitted by this process (a reattach): the follower was told no offsets are known
    assert op._initial_log_state(APP) == {"resume": True}
    op._submitted.add(APP)
    assert op._initial_log_state(APP) is None
