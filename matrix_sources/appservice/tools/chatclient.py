"""A person at a Matrix client, played by matrix-nio: for the demo and end-to-end tests.

Creates rooms, sends messages, asks `!sources` and waits for the bot's reply, all
through the client-server API of a real homeserver, as any Matrix client would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from matrix_sources.indexer.clock import REAL


class ChatError(RuntimeError):
    pass


def _ok(resp, what: str):
    import nio

    if isinstance(resp, nio.responses.ErrorResponse):
        raise ChatError(f"{what} failed: {resp.status_code} {resp.message}")
    return resp


@dataclass
class ChatClient:
    homeserver_url: str
    user_id: str
    access_token: str
    _client: Any = field(default=None, init=False, repr=False)  # nio.AsyncClient
    _since: str | None = field(default=None, init=False, repr=False)
    timeline: list[dict] = field(default_factory=list, init=False, repr=False)

    async def __aenter__(self) -> ChatClient:
        import nio

        self._client = nio.AsyncClient(self.homeserver_url, self.user_id)
        self._client.access_token = self.access_token
        self._client.user_id = self.user_id
        resp = _ok(await self._client.sync(timeout=0), "initial sync")
        self._since = resp.next_batch
        return self

    async def __aexit__(self, *exc) -> None:
        await self._client.close()

    async def create_room(
        self,
        name: str,
        public: bool = True,
        invite: tuple[str, ...] = (),
        is_direct: bool = False,
        initial_state: tuple[dict, ...] = (),
        alias: str | None = None,
    ) -> str:
        import nio

        resp = _ok(
            await self._client.room_create(
                visibility=nio.RoomVisibility.public if public else nio.RoomVisibility.private,
                name=name,
                preset=nio.RoomPreset.public_chat if public else nio.RoomPreset.private_chat,
                invite=list(invite),
                is_direct=is_direct,
                initial_state=list(initial_state),
                alias=alias,
            ),
            f"create room {name}",
        )
        return resp.room_id

    async def send(self, room_id: str, body: str, content: dict | None = None) -> str:
        content = content or {"msgtype": "m.text", "body": body}
        resp = _ok(
            await self._client.room_send(room_id, "m.room.message", content), f"send to {room_id}"
        )
        return resp.event_id

    async def send_event(self, room_id: str, event_type: str, content: dict) -> str:
        """Any room event, sent as given (no client-side encryption)."""
        resp = _ok(
            await self._client.room_send(room_id, event_type, content),
            f"send {event_type} to {room_id}",
        )
        return resp.event_id

    async def set_displayname(self, name: str) -> None:
        _ok(await self._client.set_displayname(name), f"display name {name}")

    async def join(self, room_id: str) -> None:
        _ok(await self._client.join(room_id), f"join {room_id}")

    async def leave(self, room_id: str) -> None:
        _ok(await self._client.room_leave(room_id), f"leave {room_id}")

    async def send_state(
        self, room_id: str, event_type: str, content: dict, state_key: str = ""
    ) -> str:
        resp = _ok(
            await self._client.room_put_state(room_id, event_type, content, state_key),
            f"state {event_type} in {room_id}",
        )
        return resp.event_id

    async def invite(self, room_id: str, user_id: str) -> None:
        _ok(await self._client.room_invite(room_id, user_id), f"invite {user_id}")

    async def members(self, room_id: str) -> set[str]:
        resp = _ok(await self._client.joined_members(room_id), f"members of {room_id}")
        return {m.user_id for m in resp.members}

    async def wait_for_member(self, room_id: str, user_id: str, timeout: float = 30) -> None:
        deadline = REAL.now() + timeout
        while REAL.now() < deadline:
            if user_id in await self.members(room_id):
                return
            await REAL.sleep(0.2)
        raise ChatError(f"{user_id} did not join {room_id} within {timeout:.0f} s")

    async def sync_once(self, timeout_ms: int = 1000) -> list[dict]:
        """New timeline events of every joined room since the last sync (raw dicts)."""
        resp = _ok(await self._client.sync(timeout=timeout_ms, since=self._since), "sync")
        self._since = resp.next_batch
        new = []
        for room_id, room in resp.rooms.join.items():
            for ev in room.timeline.events:
                raw = dict(ev.source)
                raw.setdefault("room_id", room_id)
                new.append(raw)
        self.timeline.extend(new)
        return new

    async def wait_for_reply(
        self, room_id: str, to_event: str, sender: str, timeout: float = 60
    ) -> dict:
        """The first message from `sender` in `room_id` replying to `to_event`."""
        deadline = REAL.now() + timeout
        seen = list(self.timeline)
        while True:
            for ev in seen:
                rel = (ev.get("content") or {}).get("m.relates_to") or {}
                if (
                    ev.get("room_id") == room_id
                    and ev.get("sender") == sender
                    and (rel.get("m.in_reply_to") or {}).get("event_id") == to_event
                ):
                    return ev
            if REAL.now() > deadline:
                raise ChatError(f"no reply from {sender} to {to_event} within {timeout:.0f} s")
            seen = await self.sync_once()

    async def ask(self, room_id: str, command: str, bot: str, timeout: float = 60) -> dict:
        event_id = await self.send(room_id, command)
        return await self.wait_for_reply(room_id, event_id, bot, timeout)
