"""The executor's client of the ApplicationMaster's JSON API (``docs/protocol.md`` section 2; stdlib only); what it
sends is declared in :mod:`airflow_provider_melon.runtime.protocol`."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Optional, Tuple, Union

from airflow_provider_melon.runtime.protocol import HeartbeatBody, RegisterBody


class AmClient:
    """Tiny JSON-over-HTTP client for the AM (``http.client``: no proxy, as the AM is inside the cluster; not
    ``urllib.request``, whose imports cost every executor's start more than the rest of its HTTP)."""

    def __init__(self, base_url: str, secret: str, timeout: float = 10.0):
        self.base_url = base_url
        self.secret = secret
        self.timeout = timeout
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"MELON_AM_URL must be http(s)://host:port, got {base_url!r}")
        self._https = url.scheme == "https"
        self._netloc = url.netloc
        self._prefix = url.path.rstrip("/")

    def post(self, path: str, body: Union[RegisterBody, HeartbeatBody]) -> Tuple[Optional[int], object]:
        """``(status, parsed JSON or text)``; status None when the AM could not be reached."""
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._netloc, timeout=self.timeout)
        try:
            conn.request(
                "POST",
                self._prefix + path,
                body=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", "X-Melon-Secret": self.secret},
            )
            resp = conn.getresponse()
            return resp.status, _parse(resp.read())
        except (http.client.HTTPException, OSError) as exc:
            return None, str(exc) or type(exc).__name__
        finally:
            conn.close()


def _parse(raw: bytes) -> object:
    text = raw.decode(errors="replace")
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text
