"""YARN ResourceManager REST hook: the whole RM surface the provider needs.

``YarnHook`` (sync, ``requests``) and ``AsyncYarnHook`` (for triggers) live in this one module, as Airflow's own
providers keep their sync and async hooks together. They share one implementation, so auth, HA failover,
timeouts, retries and parsing behave the same in both. Every RM error, including a malformed answer, is a
:class:`YarnApiError`; :meth:`YarnHook.container_log` reads a container's log from its NodeManager.
``docs/internals.md``, "The ResourceManager hook", describes what every call does.
"""

from __future__ import annotations

import getpass
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Iterable, Sequence, TypedDict
from urllib.parse import parse_qsl, quote, urljoin, urlsplit

import requests
import tenacity

from airflow_provider_melon.hadoop.nodemanager import (
    ContainerLogChunk,
    NodeManagerError,
    nm_base_url,
    read_container_log,
)
from airflow_provider_melon.hadoop.rm_json import (
    YarnApiError,
    as_dict,
    as_list,
    extract_rm_message,
    gpu_summary,
    normalise_node,
    parse_resource,
    split_tags,
    to_number,
)

# The connection form is declared in provider_info (Airflow reads it without importing this module).
# CONN_FORM_FIELDS is the whole form (the RM client's fields and MelonHook's): Airflow 3.0/3.1 take the form from
# get_connection_form_widgets only (version_compat.py), so it must list MelonHook's fields too.
from airflow_provider_melon.provider_info import CONN_FORM_FIELDS, YARN_UI_FIELD_BEHAVIOUR
from airflow_provider_melon.version_compat import BaseHook, connection_form_widgets, run_in_thread

if TYPE_CHECKING:
    from requests.auth import AuthBase

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT: tuple[float, float] = (5.0, 30.0)
MAX_REDIRECTS = 3
#: Failures with no usable HTTP answer: the next RM is tried, then the whole pass is retried.
_TRANSPORT_ERRORS = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)


class _RetryableError(Exception):
    """Internal: one pass over the RM list failed in a way worth retrying (connection/timeout/5xx)."""

    def __init__(self, error: YarnApiError):
        super().__init__(str(error))
        self.error = error


# --------------------------------------------------------------------------------------------------------
# The hook's URL, query and answer helpers
# --------------------------------------------------------------------------------------------------------

DEFAULT_RM_PORT = 8088


def _normalise_base_url(url: str, default_port: int = DEFAULT_RM_PORT, default_scheme: str = "http") -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = f"{default_scheme}://{url}"
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.port is None:
        netloc = f"{netloc}:{default_port}"
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{netloc}{path}"


def _default_user() -> str | None:
    """Like Hadoop's own clients under simple auth: ``HADOOP_USER_NAME``, else the OS login."""
    try:
        return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry (some containers)
        return None


def _parse_bool(value: Any, default: bool | str = True) -> bool | str:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.lower() in ("true", "yes", "1", "on"):
        return True
    if text.lower() in ("false", "no", "0", "off"):
        return False
    return text  # a CA bundle path


def _base_path(base: str) -> str:
    return urlsplit(base).path.rstrip("/")


def _q(segment: str) -> str:
    return quote(str(segment), safe="")


def _csv(values: Iterable[str] | str | None) -> str | None:
    if values is None:
        return None
    if isinstance(values, str):
        return values
    return ",".join(str(v) for v in values)


def _json_body(resp: requests.Response) -> dict[str, Any]:
    if 300 <= resp.status_code < 400:  # not the HA 307 (followed in _one_pass): e.g. an SSO login page
        raise YarnApiError(
            f"unexpected redirect to {resp.headers.get('Location')!r}", status=resp.status_code, url=resp.url
        )
    if not resp.content or not resp.content.strip():
        return {}
    try:
        body = resp.json()
    except (ValueError, RecursionError) as err:  # RecursionError: JSON nested deeper than Python recurses
        kind = resp.headers.get("Content-Type") or "no Content-Type"
        raise YarnApiError(
            f"RM answered non-JSON ({kind}): {resp.text[:200]!r}", status=resp.status_code, url=resp.url
        ) from err
    return body if isinstance(body, dict) else {"value": body}


def _short(body: Any) -> str:
    """A body for an error message: its repr, cut."""
    text = repr(body)
    return text if len(text) <= 200 else text[:200] + "…"


def _normalise_app(app: Any) -> dict[str, Any]:
    a = dict(as_dict(app))
    a["applicationTagList"] = split_tags(a.get("applicationTags"))
    return a


# --------------------------------------------------------------------------------------------------------
# The hook
# --------------------------------------------------------------------------------------------------------


class _ExplicitArgs(TypedDict):
    """The hook's own arguments, which ``_configure`` weighs against its connection's."""

    rm_urls: Sequence[str] | str | None
    user: str | None
    auth: str | AuthBase | None
    timeout: tuple[float, float] | float | None
    retries: int | None
    verify: bool | str | None
    kerberos_principal: str | None
    proxy_user: str | None


class YarnHook(BaseHook):
    """Sync client for the YARN ResourceManager REST API (``/ws/v1/cluster``).

    :param yarn_conn_id: Airflow connection (type ``yarn``). ``host``: one or several comma-separated RM base
        URLs (``http://rm1:8088,http://rm2:8088``; a bare host gets ``http`` and ``conn.port`` or 8088);
        ``login``: user for simple auth; extras ``auth`` (simple|kerberos), ``kerberos_principal``,
        ``connect_timeout``, ``read_timeout``, ``retries``, ``verify``, ``web_ui_url`` (the RM as users'
        browsers reach it, for links: a gateway or published address; default the active RM).
    :param rm_urls: RM base URLs; when given, no Airflow connection is looked up.
    :param user: user for simple auth (``user.name``); overrides the connection's login. Default: the
        connection's login, else ``HADOOP_USER_NAME``, else the OS user (as Hadoop's clients do).
    :param auth: ``"simple"``, ``"kerberos"`` or a ``requests.auth.AuthBase``; overrides the connection.
    :param proxy_user: act for this user (``doAs=<user>`` on every call, RM and NodeManagers): the hook's own user
        (simple auth's ``user.name`` or the Kerberos principal) submits, kills and reads *as* ``proxy_user``, which
        the cluster must allow (``hadoop.proxyuser.<user>.hosts/users/groups``). Default: the connection extra
        ``proxy_user``, else none. Settable later (``hook.proxy_user = ...``).
    :param timeout: ``(connect, read)`` seconds, applied to every call (the connection's
        ``connect_timeout``/``read_timeout`` apply when this is left at its default).
    :param retries: retries after the first attempt on connection errors, timeouts and 5xx (the
        connection's ``retries`` applies when this is left at its default). Each attempt tries every RM.
    :param backoff: base of the exponential backoff between attempts, seconds (0 in tests).
    """

    conn_name_attr = "yarn_conn_id"
    default_conn_name = "yarn_default"
    conn_type = "yarn"
    hook_name = "YARN ResourceManager"

    def __init__(
        self,
        yarn_conn_id: str = default_conn_name,
        *,
        rm_urls: Sequence[str] | str | None = None,
        user: str | None = None,
        auth: str | AuthBase | None = None,
        timeout: tuple[float, float] | float | None = DEFAULT_TIMEOUT,
        retries: int | None = 3,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        verify: bool | str | None = None,
        kerberos_principal: str | None = None,
        kerberos_keytab: str | None = None,
        kerberos_ccache: str | None = None,
        krb5_conf: str | None = None,
        proxy_user: str | None = None,
    ):
        super().__init__()
        self.yarn_conn_id = yarn_conn_id
        #: False when built from explicit ``rm_urls`` (CLI, tests): no Airflow connection is read.
        self.from_connection = rm_urls is None
        self._explicit: _ExplicitArgs = {
            "rm_urls": rm_urls,
            "user": user,
            "auth": auth,
            "timeout": timeout,
            "retries": retries,
            "verify": verify,
            "kerberos_principal": kerberos_principal,
            "proxy_user": proxy_user,
        }
        self._kerberos_explicit = {"keytab": kerberos_keytab, "ccache": kerberos_ccache, "krb5_conf": krb5_conf}
        self._kerberos_extras: dict[str, Any] = {}
        self._tickets: Any = None
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._configured = False
        self._lock = threading.RLock()
        self._session: requests.Session | None = None
        self.rm_urls: list[str] = []
        self.user: str | None = None
        self.auth_mode: str = "simple"
        self.timeout: tuple[float, float] = DEFAULT_TIMEOUT
        self.retries: int = 3
        self.verify: bool | str = True
        self.kerberos_principal: str | None = None
        self._active: str | None = None
        self.proxy_user: str | None = proxy_user
        if rm_urls is not None:
            self._configure(None)

    # ---------------------------------------------------------------- configuration

    def _configure(self, conn: Any | None) -> None:
        ex = self._explicit
        extras: dict[str, Any] = {}
        default_port, default_scheme = DEFAULT_RM_PORT, "http"
        urls: list[str] = []
        if conn is not None:
            extras = dict(conn.extra_dejson or {})
            default_port = int(conn.port) if conn.port else DEFAULT_RM_PORT
            if (conn.schema or "").lower() in ("http", "https"):
                default_scheme = conn.schema.lower()
            hosts = conn.host or extras.get("rm_urls") or ""
            urls = hosts.split(",") if isinstance(hosts, str) else list(hosts)
        if ex["rm_urls"] is not None:
            urls = ex["rm_urls"].split(",") if isinstance(ex["rm_urls"], str) else list(ex["rm_urls"])
        self.rm_urls = [_normalise_base_url(u, default_port, default_scheme) for u in urls if u and u.strip()]
        if not self.rm_urls:
            raise ValueError(f"No ResourceManager URL configured (connection {self.yarn_conn_id!r}: set host)")

        self.user = ex["user"] or (conn.login if conn is not None else None) or _default_user()
        auth = ex["auth"] if ex["auth"] is not None else (extras.get("auth") or "simple")
        self._auth_obj: AuthBase | None = None
        if isinstance(auth, str):
            self.auth_mode = auth.strip().lower() or "simple"
            if self.auth_mode not in ("simple", "kerberos"):
                raise ValueError(f"auth must be 'simple' or 'kerberos', not {auth!r}")
        else:
            self.auth_mode, self._auth_obj = "custom", auth
        self.kerberos_principal = ex["kerberos_principal"] or extras.get("kerberos_principal") or None
        if self.auth_mode == "kerberos" and not ex["user"]:
            # on Kerberos the cluster knows us by the principal, not by the connection's login or the OS user: the
            # HDFS user (staging folder, the app's owner) is the principal's short name, as Hadoop's default
            # auth_to_local rule maps it (airflow/host@REALM -> airflow)
            from airflow_provider_melon.hadoop.delegation import short_name
            from airflow_provider_melon.hooks.kerberos import airflow_kerberos

            self.user = short_name(self.kerberos_principal or airflow_kerberos("principal")) or self.user
        self._kerberos_extras = extras
        self.proxy_user = self.proxy_user or ex["proxy_user"] or extras.get("proxy_user") or None

        timeout = ex["timeout"]
        connect_t = extras.get("connect_timeout")
        read_t = extras.get("read_timeout")
        if (
            conn is not None
            and (connect_t not in (None, "") or read_t not in (None, ""))
            and timeout == DEFAULT_TIMEOUT
        ):
            timeout = (float(connect_t or DEFAULT_TIMEOUT[0]), float(read_t or DEFAULT_TIMEOUT[1]))
        if timeout is None:
            timeout = DEFAULT_TIMEOUT  # never call without a timeout
        if isinstance(timeout, (int, float)):
            timeout = (float(timeout), float(timeout))
        self.timeout = (float(timeout[0]), float(timeout[1]))

        retries = ex["retries"]
        if conn is not None and extras.get("retries") not in (None, "") and retries == 3:
            retries = int(extras["retries"])
        self.retries = max(0, int(retries if retries is not None else 3))
        verify = ex["verify"] if ex["verify"] is not None else extras.get("verify")
        self.verify = _parse_bool(verify, True)
        ui = extras.get("web_ui_url")
        self._web_ui_url = str(ui).strip().rstrip("/") if ui else None
        self._active = self.rm_urls[0]
        self._configured = True

    def _ensure_configured(self) -> None:
        if not self._configured:
            with self._lock:
                if not self._configured:
                    self._configure(self.get_connection(self.yarn_conn_id))

    def get_conn(self) -> requests.Session:
        """The ``requests.Session`` every call goes through (auth installed on it)."""
        self._ensure_configured()
        with self._lock:
            if self._session is None:
                session = requests.Session()
                session.verify = self.verify
                session.headers.update({"Accept": "application/json"})
                if self.auth_mode == "kerberos":
                    session.auth = self._kerberos_auth()
                elif self.auth_mode == "custom":
                    session.auth = self._auth_obj
                self._session = session
            return self._session

    def _kerberos_tickets(self) -> Any:
        """Under ``auth=kerberos``: the :class:`~airflow_provider_melon.hooks.kerberos.TicketKeeper` that keeps a ticket
        in the cache (from the keytab, or checks the one ``airflow kerberos`` renews); None otherwise. Built on
        first use; its checks of the settings raise :class:`~airflow_provider_melon.hooks.kerberos.KerberosError`."""
        self._ensure_configured()
        if self.auth_mode != "kerberos":
            return None
        with self._lock:
            if self._tickets is None:
                from airflow_provider_melon.hooks.kerberos import KerberosSettings, TicketKeeper

                settings = KerberosSettings.resolve(
                    self._kerberos_extras, principal=self.kerberos_principal, **self._kerberos_explicit
                )
                self._tickets = TicketKeeper(settings)
            return self._tickets

    def _kerberos_auth(self) -> AuthBase:
        """SPNEGO on this hook's own ticket cache (never the process's ``KRB5CCNAME``: see kerberos.py)."""
        return self._kerberos_tickets().auth()

    @property
    def active_rm(self) -> str:
        """The RM base URL calls start at (the last one seen active)."""
        self._ensure_configured()
        return self._active or self.rm_urls[0]

    @property
    def remote_user(self) -> str | None:
        """The user RM calls act as (simple auth's ``user.name``): the explicit one, else the connection's login,
        else ``HADOOP_USER_NAME``/the OS user. Reads the connection if it has not been read yet."""
        self._ensure_configured()
        return self.user

    @property
    def web_ui_url(self) -> str:
        """Base URL of the RM web UI for links shown to people (``web_ui_url`` extra, else the active RM)."""
        self._ensure_configured()
        return self._web_ui_url or self.active_rm

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    # ---------------------------------------------------------------- the one request path

    def _rm_order(self) -> list[str]:
        active = self.active_rm
        return [active] + [u for u in self.rm_urls if u != active]

    def _remember_active(self, base: str) -> None:
        with self._lock:
            if base != self._active:
                log.info("YARN RM %s is active", base)
            self._active = base
            if base not in self.rm_urls:
                self.rm_urls.append(base)

    def _params(self, params: dict[str, Any] | None) -> dict[str, Any]:
        out = {k: v for k, v in (params or {}).items() if v is not None}
        if self.auth_mode == "simple" and self.user:
            out["user.name"] = self.user
        if self.proxy_user and self.proxy_user != self.user:
            out["doAs"] = self.proxy_user
        return out

    def _send(self, method: str, url: str, params: dict[str, Any] | None, **kw: Any) -> requests.Response:
        session = self.get_conn()
        tickets = self._kerberos_tickets()
        if tickets is not None:  # a valid ticket before every call (renewed from the keytab when near its end)
            tickets.ensure()
        return session.request(method, url, params=params, timeout=self.timeout, allow_redirects=False, **kw)

    def _one_pass(self, method: str, path: str, params: dict[str, Any], **kw: Any) -> requests.Response:
        """Try each RM once, starting with the active one. Returns a 2xx (or non-307 3xx) response; raises
        YarnApiError for 4xx and _RetryableError when every RM failed with a connection error/timeout/standby,
        or on 5xx. Only 307 is the standby's HA redirect; other redirects (the web proxy's) are returned."""
        last: YarnApiError | None = None
        for base in self._rm_order():
            url, call_params = base + path, params
            try:
                for _ in range(MAX_REDIRECTS + 1):
                    resp = self._send(method, url, call_params, **kw)
                    if resp.status_code != 307:
                        break
                    location = resp.headers.get("Location")
                    if not location:
                        raise _StandbyNoActive(url, resp)
                    try:
                        location = urljoin(url, location)
                        loc = urlsplit(location)
                        loc.port  # noqa: B018 - raises ValueError on a port that is not a number
                    except ValueError as err:
                        raise YarnApiError(
                            f"unusable redirect Location {location!r}: {err}", status=307, url=url
                        ) from None
                    # keep the Location's path + query; re-add our params it lacks (e.g. user.name)
                    present = {k for k, _ in parse_qsl(loc.query, keep_blank_values=True)}
                    call_params = {k: v for k, v in params.items() if k not in present}
                    url = location
                    log.info("YARN RM %s redirected to %s", base, f"{loc.scheme}://{loc.netloc}")
                    base = f"{loc.scheme}://{loc.netloc}{_base_path(base)}"
                else:
                    raise YarnApiError(f"too many redirects (> {MAX_REDIRECTS})", status=resp.status_code, url=url)
            except _StandbyNoActive as standby:
                last = YarnApiError(
                    "standby ResourceManager and no active one known: " + extract_rm_message(standby.resp)[0],
                    status=307,
                    url=standby.url,
                )
                log.info("YARN RM %s is standby with no active known; trying the next RM", base)
                continue
            except _TRANSPORT_ERRORS as err:
                # requests.ConnectTimeout is both; ReadTimeout is a Timeout
                last = YarnApiError(f"{type(err).__name__}: {err}", status=None, url=url)
                log.info("YARN RM %s failed (%s); trying the next RM", base, type(err).__name__)
                continue
            except (
                requests.exceptions.InvalidURL,
                requests.exceptions.InvalidSchema,
                requests.exceptions.MissingSchema,
            ) as err:  # the configured RM address is not a URL
                raise YarnApiError(f"{type(err).__name__}: {err}", status=None, url=url) from None
            except (requests.RequestException, ValueError) as err:
                # e.g. a body that cannot be decoded, a bad header; ValueError: requests parses a 3xx's Location
                # even when not following it ("Invalid IPv6 URL")
                raise YarnApiError(f"{type(err).__name__}: {err}", status=None, url=url, unreadable=True) from None
            if resp.status_code >= 500:
                self._remember_active(base)
                raise _RetryableError(YarnApiError.from_response(resp))
            if resp.status_code >= 400:
                self._remember_active(base)
                raise YarnApiError.from_response(resp)
            self._remember_active(base)
            return resp
        assert last is not None
        raise _RetryableError(last)

    def _request(
        self, method: str, path: str, *, params: dict[str, Any] | None = None, retries: int | None = None, **kw: Any
    ) -> requests.Response:
        """Send ``method path`` (path relative to the RM base, e.g. ``/ws/v1/cluster/info``) with auth,
        timeout, HA failover and bounded retries (``retries`` overrides the hook's for this call).
        Returns the 2xx response or raises :class:`YarnApiError`."""
        self._ensure_configured()
        full_params = self._params(params)
        attempts = (self.retries if retries is None else max(0, retries)) + 1
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_exponential(multiplier=self.backoff, max=self.max_backoff),
            retry=tenacity.retry_if_exception_type(_RetryableError),
            reraise=True,
            before_sleep=lambda rs: log.warning(
                "YARN RM call %s %s failed (attempt %d/%d): %s; retrying",
                method,
                path,
                rs.attempt_number,
                attempts,
                rs.outcome.exception() if rs.outcome else "?",
            ),
        )
        try:
            return retrying(self._one_pass, method, path, full_params, **kw)
        except _RetryableError as err:
            raise err.error from None

    def get_url(self, url: str, params: dict[str, Any] | None = None, **kw: Any) -> requests.Response:
        """GET an absolute URL of another YARN daemon's web service (a NodeManager's ``/ws/v1/node/...``) with this
        hook's session, auth (``user.name`` under simple auth, SPNEGO under Kerberos) and timeout. No HA failover,
        no retries, redirects not followed: the response is returned whatever its status; transport errors raise
        ``requests.RequestException``."""
        self._ensure_configured()
        session, tickets = self.get_conn(), self._kerberos_tickets()
        if tickets is not None:
            tickets.ensure()
        return session.get(url, params=self._params(params), timeout=self.timeout, allow_redirects=False, **kw)

    def _get_json(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return _json_body(self._request("GET", path, params=params))

    # ---------------------------------------------------------------- cluster

    def cluster_info(self) -> dict[str, Any]:
        """``/ws/v1/cluster/info`` → ``clusterInfo`` (``state``, ``haState``, ``resourceManagerVersion``…).
        Never redirected by a standby RM."""
        body = self._get_json("/ws/v1/cluster/info")
        return as_dict(body.get("clusterInfo", body))

    def cluster_metrics(self) -> dict[str, Any]:
        body = self._get_json("/ws/v1/cluster/metrics")
        return as_dict(body.get("clusterMetrics", body))

    def scheduler(self) -> dict[str, Any]:
        """``/ws/v1/cluster/scheduler`` → the ``schedulerInfo`` object."""
        body = self._get_json("/ws/v1/cluster/scheduler")
        sched = as_dict(body.get("scheduler", body))
        return as_dict(sched.get("schedulerInfo", sched))

    def find_active_rm(self) -> str | None:
        """Probe each RM's ``/ws/v1/cluster/info`` (never redirected) for ``haState == ACTIVE``; remembers it.
        Returns None when none answers ACTIVE (a non-HA RM reports ``ACTIVE`` too)."""
        self._ensure_configured()
        for base in self._rm_order():
            try:
                resp = self._send("GET", base + "/ws/v1/cluster/info", self._params(None))
                if resp.ok and as_dict(_json_body(resp).get("clusterInfo")).get("haState") == "ACTIVE":
                    self._remember_active(base)
                    return base
            except (requests.RequestException, YarnApiError):
                continue
        return None

    def rm_jmx(self, query: str) -> list[dict[str, Any]]:
        """The active RM's ``/jmx`` beans that ``query`` names (``qry``: an object name, or a pattern)."""
        return [
            as_dict(b) for b in as_list(_json_body(self._request("GET", "/jmx", params={"qry": query})).get("beans"))
        ]

    def ha_states(self) -> dict[str, dict[str, Any] | str]:
        """Every configured RM's ``clusterInfo`` (``haState``, version, state), or why it could not be read."""
        self._ensure_configured()
        out: dict[str, dict[str, Any] | str] = {}
        for base in self.rm_urls:
            try:
                resp = self._send("GET", base + "/ws/v1/cluster/info", self._params(None))
                out[base] = as_dict(_json_body(resp).get("clusterInfo")) if resp.ok else f"HTTP {resp.status_code}"
            except (requests.RequestException, ValueError, YarnApiError) as exc:
                out[base] = f"unreachable ({type(exc).__name__})"
        return out

    def rm_conf(self, name: str) -> str | None:
        """One property of the RM's own configuration (its ``/conf`` servlet: core-site.xml, yarn-site.xml), or None
        if it has none. Not the CapacityScheduler's: that reads capacity-scheduler.xml after it."""
        try:
            body = _json_body(
                self._request("GET", "/conf", params={"name": name}, headers={"Accept": "application/json"})
            )
        except YarnApiError as exc:
            if exc.status == 404:
                return None
            raise
        value = as_dict(body.get("property")).get("value")
        return None if value is None else str(value)

    def nodes(self, states: Iterable[str] | str | None = None) -> list[dict[str, Any]]:
        """Nodes, each normalised so ``totalResource``/``usedResource``/``availableResource`` carry a flat
        ``resources`` dict (memory-mb, vcores, yarn.io/gpu, melon.io/gpu-memory in MiB, and any others)."""
        params = {"states": _csv(states)} if states else None
        body = self._get_json("/ws/v1/cluster/nodes", params)
        return [normalise_node(n) for n in as_list(body.get("nodes"), "node") if isinstance(n, dict)]

    def node_gpu_summary(self, states: Iterable[str] | str | None = ("RUNNING",)) -> dict[str, Any]:
        """GPU count and GPU memory (MiB) per node and in total: ``{"nodes": [...], "total": {...}}``."""
        return gpu_summary(self.nodes(states))

    # ---------------------------------------------------------------- applications

    def new_application(self) -> dict[str, Any]:
        """``POST /apps/new-application`` → ``{"application-id", "maximum-resource-capability": {...}}``;
        the capability also gets a flat ``resources`` dict."""
        body = _json_body(self._request("POST", "/ws/v1/cluster/apps/new-application"))
        if not body.get("application-id") or not isinstance(body["application-id"], str):
            raise YarnApiError(
                f"new-application returned no application-id: {_short(body)}",
                status=200,
                url=self.active_rm + "/ws/v1/cluster/apps/new-application",
            )
        body["maximum-resource-capability"] = parse_resource(body.get("maximum-resource-capability"))
        return body

    def submit_application(self, context: dict[str, Any]) -> str:
        """``POST /apps`` with an ApplicationSubmissionContext (JSON) → the application id.

        The RM answers 202 with a ``Location`` header (200/201 are accepted too). Resubmitting the same
        ``application-id`` is idempotent on the RM side, which makes a retried submit safe.
        """
        resp = self._request("POST", "/ws/v1/cluster/apps", json=context, headers={"Content-Type": "application/json"})
        app_id = context.get("application-id")
        if not app_id:
            location = resp.headers.get("Location", "")
            app_id = urlsplit(location).path.rstrip("/").rsplit("/", 1)[-1] if location else None
        if not app_id:
            raise YarnApiError("submit accepted but no application id known", status=resp.status_code, url=resp.url)
        log.info("Submitted YARN application %s", app_id)
        return str(app_id)

    def get_application(self, app_id: str) -> dict[str, Any]:
        """``/apps/{id}`` → the ``app`` object (``state``, ``finalStatus``, ``diagnostics``, ``trackingUrl``…).
        ``applicationTags`` is also given as a list under ``applicationTagList``."""
        body = self._get_json(f"/ws/v1/cluster/apps/{_q(app_id)}")
        app = _normalise_app(body.get("app", body))
        if not app.get("state") or not isinstance(app["state"], str):
            raise YarnApiError(
                f"no application state in the RM's answer: {_short(body)}",
                status=200,
                url=self.active_rm + f"/ws/v1/cluster/apps/{app_id}",
            )
        return app

    def get_state(self, app_id: str) -> str:
        """``/apps/{id}/state`` → ``NEW|NEW_SAVING|SUBMITTED|ACCEPTED|RUNNING|FINISHED|FAILED|KILLED``."""
        body = self._get_json(f"/ws/v1/cluster/apps/{_q(app_id)}/state")
        state = body.get("state")
        if not state or not isinstance(state, str):
            raise YarnApiError(
                f"no state in RM answer {_short(body)}",
                status=200,
                url=self.active_rm + f"/ws/v1/cluster/apps/{app_id}/state",
            )
        return str(state)

    def kill_application(self, app_id: str) -> dict[str, Any]:
        """``PUT /apps/{id}/state {"state": "KILLED"}``: 202 (kill in progress) or 200 (already done) are OK.
        Returns the RM's state answer (``{"state": ...}``; may be empty)."""
        resp = self._request(
            "PUT",
            f"/ws/v1/cluster/apps/{_q(app_id)}/state",
            json={"state": "KILLED"},
            headers={"Content-Type": "application/json"},
        )
        log.info("Asked YARN to kill %s (HTTP %s)", app_id, resp.status_code)
        body = _json_body(resp)
        return body

    def app_attempts(self, app_id: str) -> list[dict[str, Any]]:
        body = self._get_json(f"/ws/v1/cluster/apps/{_q(app_id)}/appattempts")
        attempts = body.get("appAttempts", body)
        return [a for a in as_list(attempts, "appAttempt") if isinstance(a, dict)]

    def app_containers(self, app_id: str, attempt_id: str) -> list[dict[str, Any]]:
        """Running containers of an attempt (``/apps/{id}/appattempts/{attempt}/containers``)."""
        body = self._get_json(f"/ws/v1/cluster/apps/{_q(app_id)}/appattempts/{_q(attempt_id)}/containers")
        containers = body.get("containers", body)
        return [c for c in as_list(containers, "container") if isinstance(c, dict)]

    def list_applications(self, **filters: Any) -> list[dict[str, Any]]:
        """``/apps`` with RM query filters (``states``, ``applicationTypes``, ``applicationTags``, ``user``,
        ``queue``, ``limit``, …); list values are sent comma-separated."""
        params = {
            k: (_csv(v) if isinstance(v, (list, tuple, set, frozenset)) else v)
            for k, v in filters.items()
            if v is not None
        }
        body = self._get_json("/ws/v1/cluster/apps", params)
        return [_normalise_app(a) for a in as_list(body.get("apps"), "app") if isinstance(a, dict)]

    def find_applications(
        self,
        tags: Iterable[str] | str,
        states: Iterable[str] | str | None = None,
        *,
        match_all: bool = False,
        application_type: str | None = None,
    ) -> list[dict[str, Any]]:
        """Applications carrying any (or, ``match_all``, every) of ``tags``.

        YARN lower-cases tags on submission, so tags are lower-cased here too; the RM filter is re-checked
        client-side. Newest first.
        """
        wanted = split_tags(tags if isinstance(tags, str) else ",".join(tags))
        if not wanted:
            raise ValueError("find_applications needs at least one tag")
        apps = self.list_applications(
            applicationTags=wanted, states=_csv(states) if states else None, applicationTypes=application_type
        )
        found = []
        for app in apps:
            have = set(app.get("applicationTagList", []))
            if have.issuperset(wanted) if match_all else have.intersection(wanted):
                found.append(app)
        found.sort(key=lambda a: to_number(a.get("startedTime")), reverse=True)
        return found

    def application_logs_url(self, app: dict[str, Any] | str) -> str:
        """The AM container logs URL (``amContainerLogs``) when the RM reports one, else the RM app page."""
        if isinstance(app, str):
            try:
                app = self.get_application(app)
            except YarnApiError:
                app = {"id": app}
        logs = app.get("amContainerLogs")
        if logs:
            return str(logs)
        return self.application_url(str(app.get("id")))

    def application_url(self, app_id: str) -> str:
        """The RM web UI page of an application (at :attr:`web_ui_url`)."""
        return f"{self.web_ui_url}/cluster/app/{app_id}"

    def am_status(self, app_id: str, path: str = "/status", *, retries: int = 0) -> dict[str, Any] | None:
        """JSON served by the application's AM at ``path``, fetched through the RM web proxy
        (``/proxy/{app_id}{path}``, not redirected by a standby RM). ``None`` when the AM is not serving it:
        not registered yet or gone (the proxy redirects to the RM app page), or an answer that is not JSON.
        4xx raise :class:`YarnApiError`; by default no retries (best-effort status for polling loops)."""
        try:
            resp = self._request("GET", f"/proxy/{_q(app_id)}/{path.lstrip('/')}", retries=retries)
        except YarnApiError as err:
            if err.status is not None and err.status >= 500:  # proxy could not reach the AM
                return None
            raise
        if resp.status_code != 200 or "json" not in resp.headers.get("Content-Type", "json"):
            return None
        try:
            body = resp.json()
        except (ValueError, RecursionError):
            return None
        return body if isinstance(body, dict) else {"value": body}

    # ---------------------------------------------------------------- NodeManagers (container logs)

    def node_base_url(self, node_http: str | None) -> str:
        """``http(s)://<node http address>``: the RM's ``nodeHTTPAddress`` carries no scheme; the NMs use the RM's.
        Raises :class:`NodeManagerError` when there is no address (a node the RM lists without one)."""
        base = nm_base_url(node_http, self.active_rm)
        if base is None:
            raise NodeManagerError(f"no NodeManager address (nodeHTTPAddress {node_http!r}) to reach")
        return base

    def container_log(
        self, node_http: str | None, container_id: str, filename: str = "stdout", size: int | None = None
    ) -> ContainerLogChunk:
        """Part of a container's log file, from its NodeManager (:func:`~airflow_provider_melon.hadoop.nodemanager.
        read_container_log`), through the hook's session (its auth), with a short timeout and no retries.
        Raises :class:`NodeManagerError` (status None: unreachable)."""
        self._ensure_configured()
        timeout = (min(self.timeout[0], 5.0), min(self.timeout[1], 15.0))
        return read_container_log(
            self.get_conn(),
            self.node_base_url(node_http),
            str(node_http),
            container_id,
            filename,
            size,
            params=self._params({"size": size}),
            timeout=timeout,
        )

    # ---------------------------------------------------------------- Airflow integration

    def test_connection(self) -> tuple[bool, str]:
        try:
            info = self.cluster_info()
        except Exception as err:  # noqa: BLE001 - reported to the UI
            return False, str(err)
        return True, (
            f"Connected to YARN RM {self.active_rm}: state {info.get('state')}, "
            f"haState {info.get('haState')}, version {info.get('resourceManagerVersion')}"
        )

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Custom field behaviour for the connection form (Airflow < 3.2; later: provider info)."""
        return {
            "hidden_fields": list(YARN_UI_FIELD_BEHAVIOUR["hidden-fields"]),
            "relabeling": dict(YARN_UI_FIELD_BEHAVIOUR["relabeling"]),
            "placeholders": dict(YARN_UI_FIELD_BEHAVIOUR["placeholders"]),
        }

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Extra connection form fields (Airflow < 3.2; from 3.2 on, ``CONN_FORM_FIELDS`` in provider info wins)."""
        return connection_form_widgets(CONN_FORM_FIELDS)


class _StandbyNoActive(Exception):
    def __init__(self, url: str, resp: requests.Response):
        super().__init__(url)
        self.url, self.resp = url, resp


class AsyncYarnHook:
    """Async twin of :class:`YarnHook` for triggers: the same methods, as coroutines.

    Design choice: every call runs the *sync* hook in a worker thread (``version_compat.run_in_thread``:
    ``asyncio.to_thread``, or asgiref's on Airflow 3.0/3.1). This gives
    one behaviour by construction — Kerberos SPNEGO (requests-kerberos has no async counterpart), HA
    failover with the remembered active RM, timeouts, retries and defensive parsing are the very same
    code. The Airflow connection is fetched lazily inside that thread on the first call, so the triggerer's
    event loop never blocks on it. RM calls are few and short (a poll every several seconds), so a thread
    per in-flight call is cheap.
    """

    conn_name_attr = YarnHook.conn_name_attr
    default_conn_name = YarnHook.default_conn_name
    conn_type = YarnHook.conn_type
    hook_name = YarnHook.hook_name

    def __init__(self, yarn_conn_id: str = YarnHook.default_conn_name, **kwargs: Any):
        self.yarn_conn_id = yarn_conn_id
        self._kwargs = kwargs
        self._hook: YarnHook | None = None
        self._hook_lock = threading.Lock()

    @property
    def sync_hook(self) -> YarnHook:
        """The wrapped sync hook (created on first use; its connection is looked up on its first call)."""
        with self._hook_lock:
            if self._hook is None:
                self._hook = YarnHook(self.yarn_conn_id, **self._kwargs)
            return self._hook

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        def run() -> Any:
            return getattr(self.sync_hook, name)(*args, **kwargs)

        return await run_in_thread(run)  # version_compat: a thread that may look up the connection

    async def cluster_info(self) -> dict[str, Any]:
        return await self._call("cluster_info")

    async def cluster_metrics(self) -> dict[str, Any]:
        return await self._call("cluster_metrics")

    async def scheduler(self) -> dict[str, Any]:
        return await self._call("scheduler")

    async def find_active_rm(self) -> str | None:
        return await self._call("find_active_rm")

    async def ha_states(self) -> dict[str, dict[str, Any] | str]:
        return await self._call("ha_states")

    async def rm_conf(self, name: str) -> str | None:
        return await self._call("rm_conf", name)

    async def rm_jmx(self, query: str) -> list[dict[str, Any]]:
        return await self._call("rm_jmx", query)

    async def nodes(self, states: Iterable[str] | str | None = None) -> list[dict[str, Any]]:
        return await self._call("nodes", states)

    async def node_gpu_summary(self, states: Iterable[str] | str | None = ("RUNNING",)) -> dict[str, Any]:
        return await self._call("node_gpu_summary", states)

    async def new_application(self) -> dict[str, Any]:
        return await self._call("new_application")

    async def submit_application(self, context: dict[str, Any]) -> str:
        return await self._call("submit_application", context)

    async def get_application(self, app_id: str) -> dict[str, Any]:
        return await self._call("get_application", app_id)

    async def get_state(self, app_id: str) -> str:
        return await self._call("get_state", app_id)

    async def kill_application(self, app_id: str) -> dict[str, Any]:
        return await self._call("kill_application", app_id)

    async def app_attempts(self, app_id: str) -> list[dict[str, Any]]:
        return await self._call("app_attempts", app_id)

    async def app_containers(self, app_id: str, attempt_id: str) -> list[dict[str, Any]]:
        return await self._call("app_containers", app_id, attempt_id)

    async def list_applications(self, **filters: Any) -> list[dict[str, Any]]:
        return await self._call("list_applications", **filters)

    async def find_applications(
        self,
        tags: Iterable[str] | str,
        states: Iterable[str] | str | None = None,
        *,
        match_all: bool = False,
        application_type: str | None = None,
    ) -> list[dict[str, Any]]:
        return await self._call(
            "find_applications", tags, states, match_all=match_all, application_type=application_type
        )

    async def application_logs_url(self, app: dict[str, Any] | str) -> str:
        return await self._call("application_logs_url", app)

    async def application_url(self, app_id: str) -> str:
        return await self._call("application_url", app_id)

    async def am_status(self, app_id: str, path: str = "/status", *, retries: int = 0) -> dict[str, Any] | None:
        return await self._call("am_status", app_id, path, retries=retries)

    async def get_url(self, url: str, params: dict[str, Any] | None = None, **kw: Any) -> requests.Response:
        return await self._call("get_url", url, params, **kw)

    async def node_base_url(self, node_http: str | None) -> str:
        return await self._call("node_base_url", node_http)

    async def container_log(
        self, node_http: str | None, container_id: str, filename: str = "stdout", size: int | None = None
    ) -> ContainerLogChunk:
        return await self._call("container_log", node_http, container_id, filename, size)

    async def test_connection(self) -> tuple[bool, str]:
        return await self._call("test_connection")

    def close(self) -> None:
        if self._hook is not None:
            self._hook.close()
