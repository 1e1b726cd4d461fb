"""The service's own outgoing HTTP: one small client for every call it makes itself
(an alias resolved, Synapse's admin API asked about an erasure, `doctor`, `allowlist
add`'s check at the door, the commands asking the running service's search API, the
local Synapse of the tools). Matrix itself goes through mautrix's client.

    client = HttpClient(base_url, token=..., timeout=...)
    client.call(method, path, body)              blocking: a command, no event loop
    await client.call_async(method, path, body)  the service: on its event loop
        -> Response(status, data, ...) whatever the status (a 404 is an answer)
        -> Unreachable (an OSError) when no answer came: nothing listens, the name does
           not resolve, the connection broke or timed out; it names the URL and why

JSON in and out, the token as `Authorization: Bearer` (never in the query string), a
timeout on every call. Proxies named by the environment are not used, as aiohttp (and
so mautrix) does not use them: a command reaches the homeserver the way the service
does, and the loopback search API directly. The blocking side is urllib, the async
side aiohttp, imported only when used: a command that never goes async never pays for
it. No other module opens a connection of its own (tests/test_architecture.py).
"""

from __future__ import annotations

import errno
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from http.client import HTTPException
from typing import Any

DEFAULT_TIMEOUT_S = 10.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxies


class Unreachable(OSError):
    """No answer from `url`; `reason` is why (the underlying error)."""

    def __init__(self, url: str, reason: BaseException | str) -> None:
        self.url = url
        self.reason = reason.reason if isinstance(reason, urllib.error.URLError) else reason
        super().__init__(f"no answer from {url} ({self.reason})")

    @property
    def refused(self) -> bool:
        """Nothing listens there (the connection was refused), as opposed to one taken
        and then dropped or left unanswered."""
        return (
            isinstance(self.reason, ConnectionRefusedError)
            or getattr(self.reason, "errno", None) == errno.ECONNREFUSED
        )


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def is_json(self) -> bool:
        return self._parsed[0]

    @property
    def data(self) -> Any:
        """The body as JSON; None when it is empty or not JSON."""
        return self._parsed[1]

    @cached_property
    def _parsed(self) -> tuple[bool, Any]:
        try:
            return True, json.loads(self.body)
        except ValueError:  # UnicodeDecodeError too
            return False, None

    @property
    def errcode(self) -> str:
        """A Matrix error's `errcode` (M_FORBIDDEN, ...); "" when the body has none."""
        data = self.data
        return str(data.get("errcode", "")) if isinstance(data, dict) else ""

    @property
    def error(self) -> str:
        """A Matrix error's `error` (its words); "" when the body has none."""
        data = self.data
        return str(data.get("error", "")) if isinstance(data, dict) else ""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def _headers(items) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in items}


class HttpClient:
    """Calls to one server: `base_url` (no trailing slash needed), and the bearer token
    every call carries (none when None)."""

    def __init__(
        self, base_url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._token = token

    def url(self, path: str) -> str:
        return self.base_url + path

    def _request(self, body: Any) -> tuple[bytes | None, dict[str, str]]:
        headers = {} if self._token is None else {"Authorization": f"Bearer {self._token}"}
        if body is None:
            return None, headers
        return json.dumps(body).encode(), {**headers, "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: Any = None) -> Response:
        """One request, blocking: `body` sent as JSON when not None."""
        url = self.url(path)
        data, headers = self._request(body)
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with _OPENER.open(req, timeout=self.timeout) as r:
                return Response(r.status, r.read(), _headers(r.headers.items()))
        except urllib.error.HTTPError as e:  # an answer all the same
            try:
                raw = e.read()
            except (OSError, HTTPException):
                raw = b""
            return Response(e.code, raw, _headers(e.headers.items() if e.headers else ()))
        except (OSError, HTTPException) as e:  # URLError, timeouts, a dropped connection
            raise Unreachable(url, e) from None

    async def call_async(self, method: str, path: str, body: Any = None) -> Response:
        """One request on the running event loop: `body` sent as JSON when not None."""
        import aiohttp

        url = self.url(path)
        data, headers = self._request(body)
        try:
            async with aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout)
            ) as session:
                async with session.request(method, url, data=data, headers=headers) as r:
                    return Response(r.status, await r.read(), _headers(r.headers.items()))
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise Unreachable(url, e) from None
