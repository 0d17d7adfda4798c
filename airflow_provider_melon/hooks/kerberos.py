"""Kerberos tickets for the hooks: a keytab login into a private ticket cache per principal, without ``kinit``.

:class:`TicketKeeper` gives the YARN hook (and WebHDFS, through the same credential) a SPNEGO auth object for
its principal under ``auth=kerberos``, from a keytab or from the ticket cache that ``airflow kerberos`` keeps
fresh. Every failure is a :class:`KerberosError` that names the setting at fault and the fix.
``docs/internals.md``, "Kerberos tickets", describes the sources, the caches and the settings.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: a ticket closer than this to its end is replaced (from the keytab) before the next call
RENEW_MARGIN_S = 300
#: how often a call re-checks the cache (a check is a local cache read, no KDC round trip)
CHECK_EVERY_S = 30


class KerberosError(RuntimeError):
    """A Kerberos login that cannot work; the message names the setting and the fix."""


def airflow_kerberos(key: str) -> str | None:
    try:
        from airflow.configuration import conf
    except Exception:  # noqa: BLE001 - no Airflow: connection extras only
        return None
    try:
        value = conf.get("kerberos", key, fallback=None)
    except Exception:  # noqa: BLE001
        return None
    return str(value).strip() or None if value is not None else None


@dataclass
class KerberosSettings:
    """Where a ticket comes from. ``keytab_source`` says which setting named the keytab (for messages)."""

    principal: str | None
    keytab: str | None
    ccache: str | None
    krb5_conf: str | None = None
    keytab_source: str = "kerberos_keytab"

    @classmethod
    def resolve(cls, extras: dict[str, Any] | None = None, **explicit: Any) -> KerberosSettings:
        """Explicit arguments, then the connection extra, then Airflow's ``[kerberos]`` section."""
        ex = {k: v for k, v in (extras or {}).items() if v not in (None, "")}
        pick = {k: explicit.get(k) or ex.get(f"kerberos_{k}") for k in ("principal", "keytab", "ccache")}
        source = "kerberos_keytab"
        if not pick["keytab"]:
            airflow_keytab = airflow_kerberos("keytab")
            if airflow_keytab and Path(airflow_keytab).is_file():  # Airflow's default names a file few have
                pick["keytab"], source = airflow_keytab, "[kerberos] keytab"
        pick["principal"] = pick["principal"] or airflow_kerberos("principal")
        # a keytab login writes its cache: its own, never the one `airflow kerberos` keeps for its principal
        pick["ccache"] = pick["ccache"] or (
            default_ccache(pick["principal"]) if pick["keytab"] else airflow_kerberos("ccache")
        )
        krb5 = explicit.get("krb5_conf") or ex.get("krb5_conf")
        return cls(pick["principal"], pick["keytab"], pick["ccache"], krb5, source)


def default_ccache(principal: str | None) -> str:
    """The private ticket cache of ``principal``'s keytab logins when the extra names none: one file per user and
    principal (created 0600 by the Kerberos library)."""
    name = principal or ""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:64]
    return f"/tmp/melon_krb5cc_{os.getuid()}_{safe}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


#: cache → the principal whose keytab logins write it, in this process (two principals must not share one)
_CACHE_OWNERS: dict[str, str] = {}
_CACHE_OWNERS_LOCK = threading.Lock()


def _ccache_name(ccache: str) -> str:
    return ccache if ":" in ccache.split("/", 1)[0] else f"FILE:{ccache}"


def _explain(err: Exception, s: KerberosSettings) -> str:
    text = str(err)
    low = text.lower()
    if "not found in kerberos database" in low or "client not found" in low:
        return (
            f"principal {s.principal!r} is unknown to the KDC: check kerberos_principal (connection extra) "
            f"or [kerberos] principal"
        )
    # a keytab without the principal's key: MIT falls back to the (empty) cache and reports that instead
    if (
        "key table entry not found" in low
        or "no key table entry" in low
        or "no suitable keys" in low
        or (
            s.keytab
            and (
                "no credentials cache found" in low
                or "can't find client principal" in low
                or "matching credential not found" in low
            )
        )
    ):
        return (
            f"the keytab {s.keytab} ({s.keytab_source}) holds no key for {s.principal!r}: point "
            f"{s.keytab_source} at that principal's keytab, or set kerberos_principal to the principal it holds"
        )
    if "preauthentication failed" in low or "integrity" in low or "password incorrect" in low or "decrypt" in low:
        return (
            f"the keytab {s.keytab} ({s.keytab_source}) does not match the KDC's current key for "
            f"{s.principal!r} (a stale or foreign keytab): export a fresh keytab for it"
        )
    if "cannot contact any kdc" in low or "cannot find kdc" in low or "cannot resolve" in low:
        return (
            "no KDC answers for the principal's realm: check krb5.conf (the krb5_conf extra / KRB5_CONFIG) "
            f"({text.strip()})"
        )
    if "expired" in low:
        return (
            f"the Kerberos ticket in {s.ccache} expired: keep `airflow kerberos` running, or set "
            "kerberos_keytab so the hook renews the ticket itself"
        )
    if "no credentials" in low or "no such file" in low or "not found" in low:
        return (
            f"no Kerberos ticket in {s.ccache or 'the default cache'}: run `airflow kerberos` (with [kerberos] "
            "keytab and principal), or set kerberos_keytab and kerberos_principal in the connection extra"
        )
    return f"Kerberos login failed: {text.strip()}"


#: the libraries of the ``[kerberos]`` extra (requests-kerberos and, through pyspnego, gssapi): import name → package
KERBEROS_LIBRARIES = {"requests_kerberos": "requests-kerberos", "spnego": "pyspnego", "gssapi": "gssapi"}
#: what installs them (they build against the system's Kerberos: libkrb5-dev and a C compiler)
KERBEROS_EXTRA = "airflow-provider-melon[kerberos]"


def require_kerberos_libraries() -> None:
    """:class:`KerberosError` naming the extra when a Kerberos library is not importable."""
    import importlib

    for module, package in KERBEROS_LIBRARIES.items():
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise KerberosError(
                f"auth=kerberos needs {package} (import {module}: {exc}), which is not installed: "
                f"pip install '{KERBEROS_EXTRA}' (it builds against the system's Kerberos: "
                "libkrb5-dev and a C compiler)"
            ) from None


class TicketKeeper:
    """Keeps a valid ticket of one principal in its cache, and builds the SPNEGO auth objects that use it."""

    def __init__(self, settings: KerberosSettings):
        self.s = settings
        self._lock = threading.Lock()
        self._next_check = 0.0
        require_kerberos_libraries()
        self.validate()

    def validate(self) -> None:
        """Input checks that need no KDC: the keytab is a readable file, a keytab comes with a principal."""
        s = self.s
        if s.keytab:
            path = Path(s.keytab)
            if not path.is_file():
                raise KerberosError(
                    f"{s.keytab_source} {s.keytab} does not exist: point it at the keytab of "
                    f"{s.principal or 'the Airflow principal'}"
                )
            if not os.access(path, os.R_OK):
                raise KerberosError(f"{s.keytab_source} {s.keytab} is not readable by this user")
            if not s.principal:
                raise KerberosError(
                    f"{s.keytab_source} is set but no principal: set kerberos_principal in the "
                    "connection extra (or [kerberos] principal)"
                )
        if s.krb5_conf and not Path(s.krb5_conf).is_file():
            raise KerberosError(f"krb5_conf {s.krb5_conf} does not exist")
        if s.keytab and s.ccache:
            cache = _ccache_name(s.ccache)
            with _CACHE_OWNERS_LOCK:
                owner = _CACHE_OWNERS.setdefault(cache, str(s.principal))
            if owner != s.principal:
                raise KerberosError(
                    f"kerberos_ccache {s.ccache} already holds the tickets of {owner!r} in this "
                    f"process: give {s.principal!r} its own cache (or leave kerberos_ccache unset)"
                )

    def _export(self) -> None:
        if self.s.krb5_conf:
            os.environ["KRB5_CONFIG"] = str(self.s.krb5_conf)

    def credential(self) -> Any:
        """What requests-kerberos authenticates with (its ``principal``, handed to pyspnego): the principal's
        ticket in this keeper's cache (``spnego.KerberosCCache``); without a cache, the principal (or None) in the
        process's default cache."""
        if not self.s.ccache:
            return self.s.principal
        import spnego

        return spnego.KerberosCCache(ccache=_ccache_name(self.s.ccache), principal=self.s.principal)

    def auth(self) -> Any:
        """A SPNEGO ``requests`` auth object on this keeper's ticket (for the RM and WebHDFS)."""
        from requests_kerberos import OPTIONAL, HTTPKerberosAuth

        return HTTPKerberosAuth(mutual_authentication=OPTIONAL, principal=self.credential())

    def webhdfs_client(self, url: str, **kwargs: Any) -> Any:
        """The ``hdfs`` package's Kerberos WebHDFS client (what the HDFS provider's hook builds) on this keeper's
        ticket; ``kwargs`` go to it (``proxy``, ``root``, ...)."""
        from hdfs.ext.kerberos import KerberosClient

        self.ensure()
        return KerberosClient(url, mutual_auth="OPTIONAL", principal=self.credential(), **kwargs)

    def remaining(self) -> int | None:
        """Seconds the cached ticket (of the principal, when known) stays valid; None: no usable ticket."""
        import gssapi

        name = gssapi.Name(self.s.principal, gssapi.NameType.kerberos_principal) if self.s.principal else None
        # gssapi types a credential store as dict[bytes | str, bytes | str] (a dict is invariant: say so here)
        store: dict[bytes | str, bytes | str] | None = (
            {"ccache": _ccache_name(self.s.ccache)} if self.s.ccache else None
        )
        try:
            creds = (
                gssapi.Credentials(name=name, usage="initiate", store=store)
                if store
                else gssapi.Credentials(name=name, usage="initiate")
            )
            return int(creds.lifetime or 0)
        except gssapi.exceptions.ExpiredCredentialsError:
            return 0
        except gssapi.exceptions.GSSError:
            return None

    def login(self) -> None:
        """A fresh ticket from the keytab into the cache."""
        import gssapi

        s = self.s
        # with a keytab and a cache named, GSSAPI obtains the ticket (AS exchange) and writes it into the cache,
        # where the auth objects of this keeper (self.auth, self.credential) read it
        store: dict[bytes | str, bytes | str] = {
            "client_keytab": str(s.keytab),
            "ccache": _ccache_name(s.ccache or default_ccache(s.principal)),
        }
        name = gssapi.Name(s.principal, gssapi.NameType.kerberos_principal)
        try:
            gssapi.Credentials(name=name, usage="initiate", store=store)
        except gssapi.exceptions.GSSError as err:
            raise KerberosError(_explain(err, s)) from None

    def ensure(self, force: bool = False) -> None:
        """A valid ticket in the cache, or :class:`KerberosError`. Cheap when checked recently."""
        now = time.monotonic()
        if not force and now < self._next_check:
            return
        with self._lock:
            self._export()
            left = self.remaining()
            if self.s.keytab:
                if left is None or left < RENEW_MARGIN_S:
                    self.login()
            elif not left:  # no keytab: the cache `airflow kerberos` renews must hold a live ticket
                raise KerberosError(_explain(RuntimeError("ticket expired" if left == 0 else "no credentials"), self.s))
            self._next_check = now + CHECK_EVERY_S
