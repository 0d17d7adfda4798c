"""The MelonHook's WebHDFS client, built from the ``webhdfs`` connection's fields without the HDFS provider: who it
acts as, TLS and session settings, and NameNode HA (the first NameNode that answers, a standby one skipped).

The mini cluster runs one NameNode, so the HA tests run two stand-ins on loopback, real HTTP servers answering as
Hadoop's WebHDFS REST API documents it ("Error Responses": an IOException such as a standby NameNode's
StandbyException is HTTP 403 Forbidden with a ``RemoteException`` JSON body; GETFILESTATUS answers a
``FileStatus``). The client against the real mini clusters: tests/integration/test_cli_live.py (a webhdfs
connection), tests/integration/test_kerberos_cli_live.py (SPNEGO) and the example DAGs' e2e tests."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hdfs import InsecureClient

from airflow_provider_melon.hadoop.hdfs_io import MelonHdfsError
from airflow_provider_melon.hooks.melon import MelonHook
from airflow_provider_melon.hooks.yarn import YarnHook


def _hook(monkeypatch, conn: dict, **kwargs) -> MelonHook:
    monkeypatch.setenv("AIRFLOW_CONN_WEBHDFS_DEFAULT", json.dumps({"conn_type": "webhdfs", **conn}))
    monkeypatch.delenv("AIRFLOW__CORE__SECURITY", raising=False)
    return MelonHook(yarn_hook=YarnHook(rm_urls=["http://rm.invalid:8088"], user="alice"), **kwargs)


def test_the_client_needs_no_hdfs_provider(monkeypatch):
    """The HDFS provider is an extra: with it absent (a None entry in sys.modules is how Python marks a module that
    cannot be imported), the hook still builds its client from the connection, as the user the jobs run as."""
    for name in [m for m in sys.modules if m.startswith("airflow.providers.apache.hdfs")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "airflow.providers.apache.hdfs", None)
    client = _hook(monkeypatch, {"host": "nn.example", "port": 9870, "login": "svc", "schema": "gateway"}).hdfs
    assert isinstance(client, InsecureClient) and client.url == "http://nn.example:9870/gateway"
    assert client._session.params == {"user.name": "alice"} and client._proxy is None


def test_a_proxy_user_is_acted_for_by_the_connections_login(monkeypatch):
    client = _hook(monkeypatch, {"host": "nn.example", "port": 9870, "login": "svc"}, proxy_user="bob").hdfs
    assert client._session.params == {"user.name": "svc"} and client._proxy == "bob"


def test_ssl_verify_client_certificate_headers_and_basic_auth(monkeypatch):
    """The connection's extras as the HDFS provider's hook reads them: ``use_ssl`` (https), ``verify`` (a CA bundle
    path or true/false, default false), ``cert``/``key`` (mTLS), ``headers``, ``cookies``; a password: basic auth."""
    client = _hook(
        monkeypatch,
        {
            "host": "nn.example",
            "port": 9871,
            "login": "svc",
            "password": "pw",
            "extra": {
                "use_ssl": "true",
                "verify": "/etc/ssl/hadoop-ca.pem",
                "cert": "/c.pem",
                "key": "/k.pem",
                "headers": {"X-Tenant": "a"},
                "cookies": {"hadoop.auth": "t"},
            },
        },
    ).hdfs
    session = client._session
    assert client.url == "https://nn.example:9871"
    assert session.verify == "/etc/ssl/hadoop-ca.pem" and session.cert == ("/c.pem", "/k.pem")
    assert session.headers["X-Tenant"] == "a" and session.cookies["hadoop.auth"] == "t"
    assert session.auth == ("svc", "pw")
    plain = _hook(monkeypatch, {"host": "nn.example", "port": 9871, "extra": {"use_ssl": True}}).hdfs
    assert plain.url == "https://nn.example:9871" and plain._session.verify is False
    assert (
        _hook(monkeypatch, {"host": "nn.example", "extra": {"use_ssl": True, "verify": "True"}}).hdfs._session.verify
        is True
    )
    assert (
        _hook(monkeypatch, {"host": "nn.example", "port": 9870, "extra": {"use_ssl": "false"}}).hdfs.url
        == "http://nn.example:9870"
    )


class _NameNode(BaseHTTPRequestHandler):
    standby = False

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.standby:
            body = {
                "RemoteException": {
                    "exception": "StandbyException",
                    "javaClassName": "org.apache.hadoop.ipc.StandbyException",
                    "message": "Operation category READ is not supported in state standby",
                }
            }
            status = 403
        else:
            body = {"FileStatus": {"type": "DIRECTORY", "length": 0, "modificationTime": 0, "permission": "755"}}
            status = 200
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def namenodes():
    """Two NameNodes on one port, as a connection lists them (one Port for all hosts): a standby one on 127.0.0.2
    and an active one on 127.0.0.3 (loopback addresses both); yields the port."""
    standby = ThreadingHTTPServer(("127.0.0.2", 0), type("Standby", (_NameNode,), {"standby": True}))
    port = standby.server_address[1]
    active = ThreadingHTTPServer(("127.0.0.3", port), _NameNode)
    servers = [standby, active]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield port
    for s in servers:
        s.shutdown()
        s.server_close()


def test_of_several_namenodes_the_one_that_answers_is_used(monkeypatch, namenodes):
    """NameNode HA: the host lists the NameNodes; a standby one (403 StandbyException) is skipped."""
    hook = _hook(monkeypatch, {"host": "127.0.0.2,127.0.0.3", "port": namenodes})
    assert hook.hdfs.url == f"http://127.0.0.3:{namenodes}"
    assert hook.hdfs.status("/")["type"] == "DIRECTORY"


def test_no_namenode_answering_names_each_one_tried(monkeypatch, namenodes):
    hook = _hook(monkeypatch, {"host": "127.0.0.2, 127.0.0.4", "port": namenodes})  # nothing listens on .4
    with pytest.raises(MelonHdfsError) as err:
        hook.hdfs
    text = str(err.value)
    assert "connection webhdfs_default" in text and "no NameNode answered:" in text, text
    assert f"http://127.0.0.2:{namenodes}: " in text and f"http://127.0.0.4:{namenodes}: " in text, text
    assert "standby" in text, text
