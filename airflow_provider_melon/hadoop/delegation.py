"""Delegation tokens for a job on a Kerberos cluster.

A YARN application cannot log in to Kerberos: it works on tokens it is handed. Before submit, the hook asks the
NameNode (WebHDFS ``GETDELEGATIONTOKEN``, SPNEGO as the Airflow principal) for an HDFS delegation token whose
renewer is the ResourceManager, and puts it in the submission's ``am-container-spec.credentials``. The RM renews it
while the application runs; the NodeManagers localize the staged files with it; the AM hands its tokens (all but
the AMRM token) to every task container (``HADOOP_TOKEN_FILE_LOCATION``).
"""

from __future__ import annotations

from typing import Any

#: the alias of the HDFS token in the application's credentials
HDFS_TOKEN_ALIAS = "melon.hdfs.delegation"


def short_name(principal: str | None) -> str | None:
    """``airflow/host@REALM`` → ``airflow``: the user Hadoop's default ``auth_to_local`` rule (``DEFAULT``) makes of
    a principal of its own realm, i.e. the HDFS user and YARN application owner of calls made with its ticket (and
    the RM's short name as a token renewer); None for no principal."""
    if not principal:
        return None
    return str(principal).split("@", 1)[0].split("/", 1)[0] or None


def rm_renewer(yarn: Any, extras: dict[str, Any] | None = None) -> str:
    """The RM's Kerberos short name: the yarn connection's ``rm_principal`` extra, else the RM's own
    ``yarn.resourcemanager.principal`` (its ``/conf``)."""
    principal = (extras or {}).get("rm_principal") or yarn.rm_conf("yarn.resourcemanager.principal")
    if not principal:
        raise ValueError(
            "cannot tell the ResourceManager's Kerberos principal (the token renewer): set rm_principal "
            "in the yarn connection's extra (e.g. rm/_HOST@EXAMPLE.COM)"
        )
    return short_name(str(principal)) or str(principal)


def hdfs_delegation_token(yarn: Any, webhdfs_url: str, renewer: str, fs_default_fs: str) -> str:
    """An HDFS delegation token (its URL-safe string form, as WebHDFS and the RM's REST credentials carry it),
    obtained over WebHDFS with the YARN hook's SPNEGO session. Asked as kind ``HDFS_DELEGATION_TOKEN`` for the
    NameNode's RPC address (``fs_default_fs``): WebHDFS would otherwise issue a ``WEBHDFS delegation`` token, which
    the RM cannot renew over RPC ("Failed to renew token") and the NodeManagers' HDFS client would not pick."""
    service = fs_default_fs.split("://", 1)[-1].rstrip("/")
    tickets = yarn._kerberos_tickets()
    if tickets is not None:
        tickets.ensure()
    base = webhdfs_url.rstrip("/")
    if not base.endswith("/webhdfs/v1"):
        base += "/webhdfs/v1"
    resp = yarn.get_url(
        f"{base}/",
        params={"op": "GETDELEGATIONTOKEN", "renewer": renewer, "kind": "HDFS_DELEGATION_TOKEN", "service": service},
    )
    if resp.status_code != 200:
        raise RuntimeError(
            f"WebHDFS refused a delegation token (HTTP {resp.status_code}, renewer {renewer}): {resp.text[:300]}"
        )
    token: str | None = ((resp.json() or {}).get("Token") or {}).get("urlString")
    if not token:
        raise RuntimeError(f"WebHDFS answered no delegation token: {resp.text[:300]}")
    return token


def credentials(tokens: dict[str, str], secrets: dict[str, str] | None = None) -> dict[str, Any]:
    """``am-container-spec.credentials`` of the RM REST submission: token alias → URL-safe token string, secret
    alias → base64 value."""
    out: dict[str, Any] = {"tokens": {"entry": [{"key": k, "value": v} for k, v in tokens.items()]}}
    if secrets:
        out["secrets"] = {"entry": [{"key": k, "value": v} for k, v in secrets.items()]}
    return out
