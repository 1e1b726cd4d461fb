"""Whether a room being added is a space, asked of the homeserver as the bot: its
m.room.create `type` (from its state when the bot can read it, else from the room's
summary in `GET /_matrix/client/v1/rooms/{id}/hierarchy`, which a public space shows
to anyone). Blocking HTTP (appservice/httpclient.py), like alias resolution."""

from __future__ import annotations

from urllib.parse import quote

from matrix_sources.indexer.ingest.roomlinks import SPACE_TYPE

from ..httpclient import HttpClient

TIMEOUT_S = 10.0


def space_size(
    homeserver_url: str, token: str, room_id: str, timeout: float = TIMEOUT_S
) -> int | None:
    """How many rooms the space lists at its first level; None if the room is no space
    or the homeserver cannot tell. Raises Unreachable."""
    client = HttpClient(homeserver_url, token, timeout)
    room = quote(room_id, safe="")
    resp = client.call("GET", f"/_matrix/client/v1/rooms/{room}/hierarchy?max_depth=1&limit=100")
    body = resp.data if resp.ok and resp.is_json else None
    rooms = body.get("rooms") if isinstance(body, dict) else None
    if not isinstance(rooms, list):
        return None
    top = next((r for r in rooms if isinstance(r, dict) and r.get("room_id") == room_id), None)
    if top is None or top.get("room_type") != SPACE_TYPE:
        return None
    children = {
        ev.get("state_key")
        for ev in top.get("children_state") or ()
        if isinstance(ev, dict) and ev.get("type") == "m.space.child"
    }
    return len(children - {room_id})
