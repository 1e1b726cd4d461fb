"""A recording stand-in for the bot's Matrix port (appservice/bot/bot.py): what the bot
sent, and an event id for each. For fast tests of the bot without a homeserver."""

from __future__ import annotations


class RecordingMatrix:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []
        self.bodies: dict[str, str] = {}  # event id -> body, what event_body reads

    async def send(self, room_id, content):
        self.sent.append((room_id, content))
        return f"$reply{len(self.sent)}"

    async def join(self, room_id): ...
    async def room_state(self, room_id):
        return []

    async def resolve_alias(self, alias):
        return None

    async def event_body(self, room_id, event_id):
        return self.bodies.get(event_id)

    def is_outage(self, exc):
        return False
