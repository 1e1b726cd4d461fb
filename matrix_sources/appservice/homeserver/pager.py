"""The homeserver side of backfill: `/messages` and `/context` as the bot."""

from __future__ import annotations

from mautrix.api import HTTPAPI, Method, Path


class MatrixPager:
    def __init__(self, api: HTTPAPI) -> None:
        self.api = api

    async def token_after(self, room_id: str, event_id: str) -> str | None:
        """A pagination token just after `event_id` (None if the event is unknown)."""
        try:
            ctx = await self.api.request(
                Method.GET, Path.v3.rooms[room_id].context[event_id], query_params={"limit": "0"}
            )
        except Exception:
            return None
        return ctx.get("end") if isinstance(ctx, dict) else None

    async def page(
        self, room_id: str, from_token: str | None, limit: int
    ) -> tuple[list[dict], str | None]:
        params = {"dir": "f", "limit": str(limit)}
        if from_token:
            params["from"] = from_token
        resp = await self.api.request(
            Method.GET, Path.v3.rooms[room_id].messages, query_params=params
        )
        if not isinstance(resp, dict):
            return [], None
        chunk = resp.get("chunk") if isinstance(resp.get("chunk"), list) else []
        for ev in chunk:  # /messages omits room_id on some servers; the gate needs it
            if isinstance(ev, dict):
                ev.setdefault("room_id", room_id)
        return chunk, resp.get("end")
