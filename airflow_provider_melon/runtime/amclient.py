"""The executor's client of the ApplicationMaster's JSON API (``docs/protocol.md`` section 2; stdlib only)."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Optional, Tuple


class AmClient:
    """Tiny JSON-over-HTTP client for the AM (urllib; ignores http_proxy: the AM is inside the cluster)."""

    def __init__(self, base_url: str, secret: str, timeout: float = 10.0):
        self.base_url = base_url
        self.secret = secret
        self.timeout = timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(self, path: str, body: dict) -> Tuple[Optional[int], object]:
        """``(status, parsed JSON or text)``; status None when the AM could not be reached."""
        req = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "X-Melon-Secret": self.secret},
            method="POST",
        )
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                return resp.status, _parse(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _parse(exc.read())
        except (urllib.error.URLError, OSError) as exc:
            return None, str(getattr(exc, "reason", exc))


def _parse(raw: bytes):
    text = raw.decode(errors="replace")
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text
