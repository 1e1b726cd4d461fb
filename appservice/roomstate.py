"""Room facts from the homeserver: the state of a room, fetched as the bot."""

from __future__ import annotations

from mautrix.api import Method, Path
from mautrix.api import HTTPAPI
from mautrix.errors import MForbidden, MNotFound

from indexer.events import StateEvent, parse_event
from indexer.roomfacts import RoomFacts, facts_from_state


async def fetch_room_facts(api: HTTPAPI, room_id: str) -> RoomFacts | None:
    """The room's current facts, or None if the bot cannot see the room (not joined,
    no such room). Network errors propagate: the caller answers 5xx and Synapse retries."""
    try:
        raw = await api.request(Method.GET, Path.v3.rooms[room_id].state)
    except (MForbidden, MNotFound):
        return None
    events = [ev for ev in map(parse_event, raw if isinstance(raw, list) else [])
              if isinstance(ev, StateEvent)]
    return facts_from_state(events)
