"""Extra links: URL builders, persist() to XCom, get_link() from XCom, and how the operator registers them."""

from __future__ import annotations

from unittest import mock

import pytest

from airflow_provider_melon.links import (
    MelonAmStatusLink,
    TensorBoardLink,
    YarnApplicationLink,
    am_status_url,
    tensorboard_url,
    yarn_application_url,
)

APP = "application_1700000000000_0042"
LINKS = (YarnApplicationLink, MelonAmStatusLink, TensorBoardLink)


def test_url_builders():
    assert yarn_application_url("http://rm:8088/", APP) == f"http://rm:8088/cluster/app/{APP}"
    assert am_status_url("https://rm.example:8090", APP) == f"https://rm.example:8090/proxy/{APP}/"
    assert YarnApplicationLink.url("http://rm:8088", APP) == f"http://rm:8088/cluster/app/{APP}"
    assert MelonAmStatusLink.url("http://rm:8088", APP) == f"http://rm:8088/proxy/{APP}/"


@pytest.mark.parametrize(
    "base,logdir,expected",
    [
        ("http://tb:6006", "hdfs://nn:8020/tb/run 1", "http://tb:6006?logdir=hdfs://nn:8020/tb/run%201"),
        ("http://tb/open?x=1", "/tb/a", "http://tb/open?x=1&logdir=/tb/a"),
        ("http://tb:6006/#scalars&logdir={logdir}", "/tb/a", "http://tb:6006/#scalars&logdir=/tb/a"),
        (None, "/tb/a", None),
        ("http://tb:6006", None, None),
    ],
)
def test_tensorboard_url(base, logdir, expected):
    assert tensorboard_url(base, logdir) == expected
    assert TensorBoardLink.url(base, logdir) == expected


def test_keys_and_names_are_distinct():
    assert len({link.xcom_key for link in LINKS}) == 3
    assert len({link.name for link in LINKS}) == 3
    assert YarnApplicationLink().name == "YARN Application"


@pytest.mark.parametrize("link", LINKS)
def test_persist_pushes_under_the_link_key(link):
    ti = mock.Mock()
    link.persist({"ti": ti}, "http://example/x")
    ti.xcom_push.assert_called_once_with(key=link.xcom_key, value="http://example/x")


def test_persist_without_url_pushes_nothing():
    ti = mock.Mock()
    TensorBoardLink.persist({"ti": ti}, None)
    ti.xcom_push.assert_not_called()


@pytest.mark.parametrize("link", LINKS)
def test_get_link_reads_the_url_from_xcom(link):
    ti_key = mock.Mock(dag_id="d", task_id="t", run_id="r", map_index=-1)
    store = {
        YarnApplicationLink.xcom_key: f"http://rm:8088/cluster/app/{APP}",
        MelonAmStatusLink.xcom_key: f"http://rm:8088/proxy/{APP}/",
        TensorBoardLink.xcom_key: "http://tb:6006?logdir=/tb",
    }
    with mock.patch(
        "airflow_provider_melon.links.XCom.get_value", side_effect=lambda *, ti_key, key: store.get(key)
    ) as get_value:
        assert link().get_link(operator=mock.Mock(), ti_key=ti_key) == store[link.xcom_key]
    get_value.assert_called_once_with(ti_key=ti_key, key=link.xcom_key)


def test_get_link_without_xcom_is_empty():
    with mock.patch("airflow_provider_melon.links.XCom.get_value", return_value=None):
        assert TensorBoardLink().get_link(operator=mock.Mock(), ti_key=mock.Mock()) == ""


def test_operator_links_serialize_with_their_xcom_keys():
    """What the API server gets: each link's name mapped to its xcom_key (it reads the URL from XCom)."""
    from airflow.sdk import DAG

    try:
        from airflow.serialization.serialized_objects import OperatorSerialization
    except ImportError:  # Airflow 3.0: the same classmethod on SerializedBaseOperator
        from airflow.serialization.serialized_objects import SerializedBaseOperator as OperatorSerialization

    from airflow_provider_melon.operators.train import MelonTrainOperator

    with DAG("links_dag"):
        op = MelonTrainOperator(
            task_id="train", job={"name": "x", "entrypoint": "python a.py", "roles": {"worker": {}}}, poll_interval=5
        )
    encoded = OperatorSerialization.serialize_operator(op)["_operator_extra_links"]
    assert encoded == {link.name: link.xcom_key for link in LINKS}
