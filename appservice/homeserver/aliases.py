"""Room aliases to room ids through the homeserver's client-server API, as the bot.

Used by `matrix-sources allowlist add '#alias:server'`, a short-lived command: plain
urllib, no event loop, no mautrix client. The request carries the appservice's
as_token, so it works before any user account exists.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from urllib.parse import quote

from indexer.ingest.allowlist import ROOM_ID
from indexer.records import RoomID

ALIAS = re.compile(r"^#[^\s:]+:\S+$")
TIMEOUT_S = 10.0


class AliasError(RuntimeError):
    """An alias that could not be resolved; the message says why and what to check."""


def _errcode(err: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(err.read() or b"{}")
    except (ValueError, OSError):
        return ""
    return str(body.get("errcode", "")) if isinstance(body, dict) else ""


def resolve_alias(homeserver_url: str, as_token: str, alias: str,
                  timeout: float = TIMEOUT_S) -> RoomID:
    """GET /_matrix/client/v3/directory/room/{alias} -> the room id it points to."""
    if not ALIAS.match(alias):
        raise AliasError(f"{alias!r} is not a room alias like '#room:example.org'")
    url = f"{homeserver_url.rstrip('/')}/_matrix/client/v3/directory/room/{quote(alias, safe='')}"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {as_token}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        code = _errcode(e)
        if e.code == 404:
            raise AliasError(f"{alias}: no room has this alias on {homeserver_url}") from None
        if e.code in (401, 403):
            raise AliasError(f"{alias}: the homeserver at {homeserver_url} rejected the "
                             f"as_token ({e.code} {code}): is the registration listed in "
                             "app_service_config_files of homeserver.yaml?") from None
        raise AliasError(f"{alias}: the homeserver at {homeserver_url} answered "
                         f"{e.code} {code}".rstrip()) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise AliasError(f"cannot reach the homeserver at {homeserver_url} ({reason}): is it "
                         "running, and is homeserver.url in the config right?") from None
    except ValueError:
        raise AliasError(f"{alias}: the homeserver at {homeserver_url} did not answer "
                         "with JSON") from None
    room_id = body.get("room_id") if isinstance(body, dict) else None
    if not isinstance(room_id, str) or not ROOM_ID.match(room_id):
        raise AliasError(f"{alias}: the homeserver answered without a room id")
    return RoomID(room_id)
