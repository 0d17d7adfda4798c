"""The AM's task states, declared once on each side: Java's ``State`` enum (what ``GET /status`` reports) and
Python's ``hadoop.app_state.AM_TASK_STATES`` (what the follower, the UI and the tests read) name the same states."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_provider_melon.hadoop import app_state

STATE_JAVA = Path(__file__).resolve().parents[2] / "appmaster/am/src/main/java/org/melon/yarn/State.java"


def _java_states() -> tuple[str, ...]:
    body = STATE_JAVA.read_text().split("enum State {", 1)[1].split("}", 1)[0]
    body = re.sub(r"/\*.*?\*/|//[^\n]*", "", body, flags=re.S)
    return tuple(name.strip() for name in body.split(";")[0].split(",") if name.strip())


def test_python_and_the_am_name_the_same_task_states_in_the_same_order():
    assert _java_states() == app_state.AM_TASK_STATES


def test_the_ended_states_are_the_last_three():
    assert app_state.AM_TASK_ENDED == ("SUCCEEDED", "FAILED", "KILLED")
    assert set(app_state.AM_TASK_ENDED) < set(app_state.AM_TASK_STATES)
