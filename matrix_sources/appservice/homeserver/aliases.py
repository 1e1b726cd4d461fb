"""Room aliases to room ids through the homeserver's client-server API, as the bot.

Used by `matrix-sources allowlist add '#alias:server'`, a short-lived command: the
blocking side of appservice/httpclient.py, no event loop, no mautrix client. The
request carries the appservice's as_token, so it works before any user account exists.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from matrix_sources.indexer.ingest.allowlist import MAX_VIA, ROOM_ID, SERVER_NAME
from matrix_sources.indexer.records import RoomID

from ..httpclient import HttpClient, Unreachable

ALIAS = re.compile(r"^#[^\s:]+:\S+$")
TIMEOUT_S = 10.0


class AliasError(RuntimeError):
    """An alias that could not be resolved; the message says why and what to check."""


def resolve_alias(
    homeserver_url: str, as_token: str, alias: str, timeout: float = TIMEOUT_S
) -> RoomID:
    """GET /_matrix/client/v3/directory/room/{alias} -> the room id it points to."""
    return resolve_alias_via(homeserver_url, as_token, alias, timeout)[0]


def resolve_alias_via(
    homeserver_url: str, as_token: str, alias: str, timeout: float = TIMEOUT_S
) -> tuple[RoomID, tuple[str, ...]]:
    """The room id and the servers in the room that the directory answered with (the
    ones a homeserver not in the room yet joins it through)."""
    if not ALIAS.match(alias):
        raise AliasError(f"{alias!r} is not a room alias like '#room:example.org'")
    client = HttpClient(homeserver_url, as_token, timeout)
    try:
        resp = client.call("GET", f"/_matrix/client/v3/directory/room/{quote(alias, safe='')}")
    except Unreachable as e:
        raise AliasError(
            f"cannot reach the homeserver at {homeserver_url} ({e.reason}): is "
            "it running, and is homeserver.url in the config right?"
        ) from None
    if resp.status == 404:
        raise AliasError(f"{alias}: no room has this alias on {homeserver_url}")
    if resp.status in (401, 403):
        raise AliasError(
            f"{alias}: the homeserver at {homeserver_url} rejected the "
            f"as_token ({resp.status} {resp.errcode}): is the registration "
            "listed in app_service_config_files of homeserver.yaml?"
        )
    if not resp.ok:
        raise AliasError(
            f"{alias}: the homeserver at {homeserver_url} answered "
            f"{resp.status} {resp.errcode}".rstrip()
        )
    if not resp.is_json:
        raise AliasError(f"{alias}: the homeserver at {homeserver_url} did not answer with JSON")
    body = resp.data
    room_id = body.get("room_id") if isinstance(body, dict) else None
    if not isinstance(room_id, str) or not ROOM_ID.match(room_id):
        raise AliasError(f"{alias}: the homeserver answered without a room id")
    servers = body.get("servers")
    via = (
        [v for v in servers if isinstance(v, str) and SERVER_NAME.match(v)]
        if isinstance(servers, list)
        else []
    )
    return RoomID(room_id), tuple(dict.fromkeys(via))[:MAX_VIA]
