"""`melon memory show|forget`: usage errors, and a WebHDFS that refuses (the error path; the commands on a real
HDFS, the owner's and another tenant's, are tested in tests/security/test_staging.py)."""

from __future__ import annotations

import pytest
import requests_mock as rm_mock

from tests.unit.test_cli_jobs import melon

WHERE = ["--rm", "http://rm1:8088", "--webhdfs", "http://nn:9870", "--user", "alice"]


@pytest.mark.parametrize("action", ["show", "forget"])
def test_a_bad_key_exits_2_naming_it(capsys, action):
    code, _, err = melon(capsys, "memory", action, "dag/../other", *WHERE)
    assert code == 2 and "memory history key 'dag/../other'" in err, err


def test_memory_needs_an_action(capsys):
    code, _, err = melon(capsys, "memory", *WHERE)
    assert code == 2 and "show" in err and "forget" in err, err


def test_a_refused_folder_is_an_error_not_an_empty_history(capsys):
    """WebHDFS's 403 for a folder one may not traverse: the client's ``status(strict=False)`` would answer None for
    it, which read as "no history" and made `forget` report nothing to forget."""
    denied = {
        "RemoteException": {
            "exception": "AccessControlException",
            "javaClassName": "org.apache.hadoop.security.AccessControlException",
            "message": "Permission denied: user=alice, access=EXECUTE, "
            'inode="/user/bob/.melon":bob:supergroup:drwx------',
        }
    }
    with rm_mock.Mocker() as m:
        m.get(rm_mock.ANY, status_code=403, json=denied)
        for action in ("show", "forget"):
            code, out, err = melon(capsys, "memory", action, "dag/task", *WHERE, "--staging-dir", "/user/bob/.melon")
            assert code == 1 and "Permission denied: user=alice" in err and "no history" not in out, (out, err)
        assert all(r.method == "GET" for r in m.request_history)  # nothing deleted


@pytest.mark.parametrize("growth", ["1.0", "4.5", "fast"])
def test_oom_growth_is_refused_where_the_spec_refuses_it(capsys, growth):
    """`--oom-growth` shows what a role's ``oom_growth`` would learn: a figure the spec refuses (its bounds are
    1.1-4.0) is refused here too, naming the option."""
    code, _, err = melon(capsys, "memory", "show", "dag/task", *WHERE, "--oom-growth", growth)
    assert code == 2 and f"--oom-growth {growth!r}" in err, err
