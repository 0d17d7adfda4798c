"""`melon doctor`'s scheduler check reads `yarn.cluster.max-application-priority` from the RM's /conf: below
learned.MAX_PRIORITY, `priority: auto` cannot order the queue, and the check warns with the fix. (The check on a
real RM that allows them: tests/integration/test_doctor_live.py.)"""

from __future__ import annotations

import types

import pytest
import requests_mock as rm_mock

from airflow_provider_melon.cli.doctor import CALCULATOR_KEY, DRC, PRIORITY_KEY, Doctor
from airflow_provider_melon.hooks.yarn import YarnHook

RM = "http://rm:8088"


def _check(rm, top):
    rm.get(f"{RM}/ws/v1/cluster/scheduler", json={"scheduler": {"schedulerInfo": {"type": "capacityScheduler"}}})
    rm.get(f"{RM}/conf?name={CALCULATOR_KEY}", json={"property": {"key": CALCULATOR_KEY, "value": DRC}})
    if top is None:  # YARN's default: not in the RM's configuration
        rm.get(f"{RM}/conf?name={PRIORITY_KEY}", status_code=404)
    else:
        rm.get(f"{RM}/conf?name={PRIORITY_KEY}", json={"property": {"key": PRIORITY_KEY, "value": top}})
    yarn = YarnHook(rm_urls=[RM], user="alice")
    return Doctor(types.SimpleNamespace(yarn=yarn)).check_scheduler()


@pytest.mark.parametrize("top, status", [(None, "warn"), ("0", "warn"), ("10", "warn"), ("25", "ok"), ("50", "ok")])
def test_the_scheduler_check_warns_when_priorities_cannot_order_the_queue(top, status):
    with rm_mock.Mocker() as rm:
        finding = _check(rm, top)
    assert finding.status == status, finding
    if status == "warn":
        assert f"{PRIORITY_KEY} is {top or '0 (unset)'}" in finding.detail
        assert finding.fix == f"yarn-site.xml on the RM: {PRIORITY_KEY} = 25; restart the RM"
    else:
        assert finding.detail.endswith(f"application priorities up to {top}")
