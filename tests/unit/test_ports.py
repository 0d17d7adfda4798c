"""The framework's port comes from outside the kernel's ephemeral range (runtime/ports.py): an outgoing connection
on the node can never be handed it between the executor's release and the framework's bind (the PS race)."""

import json
import random
import socket
from pathlib import Path

import pytest

from airflow_provider_melon.runtime import ports
from tests.unit.test_executor import am_factory, entry, exec_env, finish, start  # noqa: F401 (fixture)


def proc(tmp_path, port_range, reserved=""):
    d = tmp_path / "proc"
    d.mkdir(exist_ok=True)
    (d / "ip_local_port_range").write_text(port_range + "\n")
    (d / "ip_local_reserved_ports").write_text(reserved + "\n")
    return str(d)


def test_default_range_is_above_the_ephemeral_range(tmp_path):
    rng, skip, why = ports.listen_range(None, proc(tmp_path, "32768\t60999", "61000-61002,65000"))
    assert rng == (61000, 65535)
    assert {61000, 61001, 61002, 65000} <= skip and 61003 not in skip
    assert "above the ephemeral range 32768-60999" == why


def test_a_range_that_reaches_the_top_gives_the_ports_below_it(tmp_path):
    assert ports.listen_range(None, proc(tmp_path, "40000 65000"))[0] == (30000, 39999)
    assert ports.listen_range(None, proc(tmp_path, "1500 65000"))[0] is None  # no room anywhere: the kernel's
    assert ports.listen_range(None, str(tmp_path / "absent"))[0] is None


def test_melon_port_range_wins(tmp_path):
    assert ports.listen_range(ports.parse_range("50100-50200"), proc(tmp_path, "32768 60999"))[0] == (50100, 50200)


#: MELON_PORT_RANGE's cases, shared with the AM's PortRangeTest (one rule on both sides)
PORT_RANGE_CASES = json.loads((Path(__file__).parent.parent / "data" / "port_range_cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", PORT_RANGE_CASES, ids=lambda c: ascii(c["text"]))
def test_melon_port_range_parses_the_shared_cases_and_names_the_field(case):
    if "range" in case:
        assert ports.parse_range(case["text"]) == tuple(case["range"])
        return
    message = {"format": "expected 'low-high'", "bounds": "needs 1024 <= low <= high <= 65535"}[case["error"]]
    with pytest.raises(ValueError, match="MELON_PORT_RANGE") as raised:
        ports.parse_range(case["text"])
    assert message in str(raised.value)


def test_reserve_skips_taken_and_reserved_ports():
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    taken = held.getsockname()[1]
    # taken (bind fails), reserved (skipped), then the real random choice: a fixed third port (taken + 1 once) can be
    # held by another socket of the machine, and the test then failed for want of picks
    picks = iter([taken, 1])
    tried = []

    def choose(lo, hi):
        tried.append(next(picks, None) or random.randint(lo, hi))
        return tried[-1]

    sock = ports.reserve("127.0.0.1", (1, 65535), skip={1}, choose=choose)
    try:
        assert tried[:2] == [taken, 1] and len(tried) >= 3, tried
        assert sock.getsockname()[1] == tried[-1] not in (taken, 1)
    finally:
        sock.close()
        held.close()


def test_reserve_gives_up_with_a_clear_error_when_the_range_is_full():
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    try:
        with pytest.raises(OSError, match=f"no free port in {port}-{port}"):
            ports.reserve("127.0.0.1", (port, port))
    finally:
        held.close()


def _ephemeral():
    lo, hi = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    return lo, hi


def test_the_executor_registers_a_port_outside_the_ephemeral_range(tmp_path, am_factory):
    """Fails with the old executor (bind to port 0: the kernel hands out an ephemeral port)."""
    am = am_factory(["worker:0"])
    env = exec_env(tmp_path, am, "worker", 0, MELON_ENTRYPOINT=entry("print('ok')"))
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    port = int(am.registrations[0]["port"])
    lo, hi = _ephemeral()
    assert not lo <= port <= hi, (port, lo, hi)
    assert f"port {port} reserved on" in err


def test_the_executor_takes_its_port_from_melon_port_range(tmp_path, am_factory):
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    am = am_factory(["worker:0"])
    env = exec_env(tmp_path, am, "worker", 0, MELON_PORT_RANGE=f"{port}-{port}", MELON_ENTRYPOINT=entry("print('ok')"))
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    assert int(am.registrations[0]["port"]) == port
    assert "(MELON_PORT_RANGE)" in err


def test_a_bad_melon_port_range_exits_2_naming_it(tmp_path, am_factory):
    am = am_factory(["worker:0"])
    env = exec_env(tmp_path, am, "worker", 0, MELON_PORT_RANGE="lots", MELON_ENTRYPOINT=entry("print('ok')"))
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 2
    assert "MELON_PORT_RANGE='lots'" in err and not am.registrations
