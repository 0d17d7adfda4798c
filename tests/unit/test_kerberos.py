"""Kerberos settings without a KDC: one ticket cache per principal, handed to the auth objects, never KRB5CCNAME
(the logins themselves, against a real KDC: tests/integration/test_secure_live.py, tests/security/test_staging.py)."""

from __future__ import annotations

import os

import pytest

from airflow_provider_melon.hooks.kerberos import KerberosError, KerberosSettings, TicketKeeper, default_ccache


@pytest.fixture
def keytab(tmp_path):
    path = tmp_path / "any.keytab"
    path.write_bytes(b"\x05\x02")  # validate() only checks that it is a readable file
    return str(path)


def test_keytab_logins_of_two_principals_get_two_caches_not_airflows(keytab, monkeypatch):
    monkeypatch.setenv("AIRFLOW__KERBEROS__CCACHE", "/tmp/airflow_krb5_ccache")
    alice = KerberosSettings.resolve({"kerberos_keytab": keytab}, principal="alice@R")
    bob = KerberosSettings.resolve({"kerberos_keytab": keytab}, principal="bob@R")
    assert alice.ccache == default_ccache("alice@R") != bob.ccache == default_ccache("bob@R")
    assert "/tmp/airflow_krb5_ccache" not in (alice.ccache, bob.ccache)
    # without a keytab: the cache `airflow kerberos` keeps
    assert KerberosSettings.resolve({}, principal="airflow@R").ccache == "/tmp/airflow_krb5_ccache"


def test_two_principals_on_one_cache_file_are_refused(keytab, tmp_path):
    shared = str(tmp_path / "shared.ccache")
    TicketKeeper(KerberosSettings("alice@R", keytab, shared))
    TicketKeeper(KerberosSettings("alice@R", keytab, shared))  # the same principal again: fine
    with pytest.raises(
        KerberosError,
        match=r"kerberos_ccache .*shared.ccache already holds the tickets of "
        r"'alice@R'.*give 'bob@R' its own cache",
    ):
        TicketKeeper(KerberosSettings("bob@R", keytab, shared))


def test_the_auth_object_carries_the_keepers_cache_and_the_environment_is_left_alone(keytab, tmp_path, monkeypatch):
    import spnego
    from requests_kerberos import HTTPKerberosAuth

    monkeypatch.setenv("KRB5CCNAME", "FILE:/somebody/elses")
    keeper = TicketKeeper(KerberosSettings("carol@R", keytab, str(tmp_path / "carol.ccache")))
    auth = keeper.auth()
    assert isinstance(auth, HTTPKerberosAuth)
    assert auth.principal == spnego.KerberosCCache(ccache=f"FILE:{tmp_path / 'carol.ccache'}", principal="carol@R")
    keeper._export()
    assert os.environ["KRB5CCNAME"] == "FILE:/somebody/elses"
    # no cache configured at all: the principal in the process's default cache
    assert TicketKeeper(KerberosSettings("dave@R", None, None)).credential() == "dave@R"


def test_the_webhdfs_client_of_a_kerberos_hook_uses_the_yarn_hooks_cache(keytab, tmp_path, monkeypatch):
    """Under auth=kerberos the MelonHook builds the Kerberos WebHDFS client itself from the webhdfs connection (the
    HDFS provider's hook would need ``[core] security = kerberos`` and the process's default cache), on the YARN
    hook's own ticket, obtained before the client exists; the HDFS user is the principal's short name."""
    import json

    import spnego
    from hdfs.ext.kerberos import KerberosClient

    from airflow_provider_melon.hooks.melon import MelonHook
    from airflow_provider_melon.hooks.yarn import YarnHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_WEBHDFS_DEFAULT", json.dumps({"conn_type": "webhdfs", "host": "nn.example", "port": 9870})
    )
    monkeypatch.delenv("AIRFLOW__CORE__SECURITY", raising=False)
    ensured = []
    monkeypatch.setattr(TicketKeeper, "ensure", lambda self, force=False: ensured.append(self.s.principal))
    yarn = YarnHook(
        rm_urls=["http://rm.example:8088"],
        auth="kerberos",
        kerberos_principal="erin/host.example@R",
        kerberos_keytab=keytab,
        kerberos_ccache=str(tmp_path / "erin.ccache"),
    )
    hook = MelonHook(yarn_hook=yarn)
    assert hook.user == "erin" and hook.staging_dir == "/user/erin/.melon"  # not the OS user's home
    client = hook.hdfs
    assert isinstance(client, KerberosClient) and client.url == "http://nn.example:9870"
    assert ensured == ["erin/host.example@R"]  # the ticket came first
    assert client._session.auth.principal == spnego.KerberosCCache(
        ccache=f"FILE:{tmp_path / 'erin.ccache'}", principal="erin/host.example@R"
    )


@pytest.mark.parametrize("missing", ["requests_kerberos", "gssapi", "spnego"])
def test_a_kerberos_connection_without_the_extra_fails_at_once_naming_it(missing, keytab, tmp_path, monkeypatch):
    """The Kerberos libraries are the ``[kerberos]`` extra: without them (a None entry in sys.modules is how Python
    itself marks a module that cannot be imported), a Kerberos hook fails on its first use, before any request,
    with the pip command that fixes it."""
    import json
    import sys

    from airflow_provider_melon.hooks.yarn import YarnHook

    monkeypatch.setitem(sys.modules, missing, None)
    monkeypatch.setenv(
        "AIRFLOW_CONN_YARN_KRB",
        json.dumps(
            {
                "conn_type": "yarn",
                "host": "rm.invalid",
                "port": 8088,
                "extra": {
                    "auth": "kerberos",
                    "kerberos_principal": "frank@R",
                    "kerberos_keytab": keytab,
                    "kerberos_ccache": str(tmp_path / "frank.ccache"),
                },
            }
        ),
    )
    hook = YarnHook(yarn_conn_id="yarn_krb")
    with pytest.raises(KerberosError) as err:
        hook.get_conn()
    assert "airflow-provider-melon[kerberos]" in str(err.value)
    assert missing in str(err.value)
