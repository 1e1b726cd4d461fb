"""The bot's port to Matrix (appservice/bot/bot.py: Matrix), over the appservice's
intent: send, join, a room's state, an event's body, an alias resolved, and which
failures are an outage."""

from __future__ import annotations

from mautrix.api import Method, Path
from mautrix.appservice import AppService
from mautrix.errors import MatrixError, MatrixRequestError
from mautrix.types import EventType, RoomAlias
from mautrix.types import RoomID as MxRoomID

from .rooms import Rooms
from .roomstate import is_outage


class MatrixPort:
    def __init__(self, az: AppService, rooms: Rooms) -> None:
        self._az, self._rooms = az, rooms

    async def send(self, room_id: str, content: dict) -> str:
        return await self._az.intent.send_message_event(
            MxRoomID(room_id), EventType.ROOM_MESSAGE, content
        )

    async def join(self, room_id: str) -> None:
        await self._rooms.join_invited(room_id)

    async def room_state(self, room_id: str) -> list:
        # Raw JSON: room version 12 creators are not in power_levels.
        state = await self._az.intent.api.request(Method.GET, Path.v3.rooms[room_id].state)
        return state if isinstance(state, list) else []

    @staticmethod
    def is_outage(exc: BaseException) -> bool:
        return is_outage(exc)

    async def event_body(self, room_id: str, event_id: str) -> str | None:
        """An event's body as the homeserver serves it (None: redacted, or no text)."""
        try:
            ev = await self._az.intent.api.request(
                Method.GET, Path.v3.rooms[room_id].event[event_id]
            )
        except MatrixRequestError:  # not found, or not visible to the bot any more
            return None
        body = ((ev or {}).get("content") or {}).get("body") if isinstance(ev, dict) else None
        return body if isinstance(body, str) else None

    async def resolve_alias(self, alias: str) -> str | None:
        try:
            return (await self._az.intent.resolve_room_alias(RoomAlias(alias))).room_id
        except MatrixError:
            return None
