"""`melon doctor`'s placement check reads the scheduler plug-in's MBean on the RM's /jmx: the error paths a live
cluster does not give on demand (an RM that loaded the allocator but not the node order, another version, a /jmx
this user may not read). The plug-in loaded and absent on real RMs: tests/integration/test_doctor_live.py."""

from __future__ import annotations

import types

import pytest
import requests_mock as rm_mock

from airflow_provider_melon import __version__, rm
from airflow_provider_melon.cli.doctor import Doctor
from airflow_provider_melon.hooks.yarn import YarnHook

RM = "http://rm:8088"
BEAN = {
    "name": rm.STATS_MBEAN,
    "Version": __version__,
    "PolicyLoaded": True,
    "SortedNodes": 1213,
    "SortPasses": 40,
    "FitChecks": 9,
    "FitRefusals": 2,
}


def _placement(jmx: dict | None = None, status: int = 200):
    with rm_mock.Mocker() as m:
        m.get(f"{RM}/jmx?qry={rm.STATS_MBEAN}", json=jmx, status_code=status)
        yarn = YarnHook(rm_urls=[RM], user="alice", retries=0)
        return Doctor(types.SimpleNamespace(yarn=yarn)).check_placement()


def test_the_plug_in_as_the_node_order_is_ok_with_what_it_did():
    finding = _placement({"beans": [BEAN]})
    assert finding.status == "ok", finding
    assert finding.detail == (
        f"the scheduler plug-in {__version__} is the CapacityScheduler's node order (best fit by GPU memory; 1213 "
        "node(s) in its last order); 9 node(s) checked for a GPU that holds an ask, 2 turned down"
    )


@pytest.mark.parametrize(
    "bean, said",
    [
        ({**BEAN, "PolicyLoaded": False}, "but multi-node placement does not order the nodes by"),
        ({**BEAN, "Version": "0.0.9"}, f"this provider is {__version__}"),
    ],
)
def test_a_half_installed_or_other_plug_in_warns(bean, said):
    finding = _placement({"beans": [bean]})
    assert finding.status == "warn" and said in finding.detail, finding
    assert rm.SCHEDULER_JAR.name in finding.fix


@pytest.mark.parametrize(
    "jmx, status, said", [({"beans": []}, 200, "has not loaded"), (None, 403, "could not be read")]
)
def test_no_plug_in_or_no_jmx_warns_with_the_install_steps(jmx, status, said):
    finding = _placement(jmx, status)
    assert finding.status == "warn" and said in finding.detail, finding
    assert "docs/scheduler-plugin.md" in finding.fix
