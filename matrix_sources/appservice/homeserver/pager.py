"""The homeserver side of backfill: `/messages` and `/context` as the bot."""

from __future__ import annotations

from mautrix.api import HTTPAPI, Method, Path

REACH_BACK_PAGE = 100
REACH_BACK_PAGES = 2000  # 200,000 events: a bound, not a goal (backfill_days is the goal)


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

    async def reach_back(self, room_id: str, horizon_ts: int | None) -> tuple[str | None, int]:
        """`/messages` backwards from now until the room's creation, `horizon_ts`, or the
        end of what the room's servers give: Synapse fetches what it lacks from them as
        it goes (it backfills over federation only when paginating backwards). Returns
        the token before the oldest event reached (reading forward from there gives what
        was fetched; from no token, Synapse starts at its own join) and the events paged."""
        token: str | None = None
        paged = 0
        for _ in range(REACH_BACK_PAGES):
            params = {"dir": "b", "limit": str(REACH_BACK_PAGE)}
            if token:
                params["from"] = token
            resp = await self.api.request(
                Method.GET, Path.v3.rooms[room_id].messages, query_params=params
            )
            chunk = resp.get("chunk") if isinstance(resp, dict) else None
            if not isinstance(chunk, list) or not chunk:
                break
            paged += len(chunk)
            end = resp.get("end")
            if not isinstance(end, str) or end == token:
                break
            token = end
            evs = [e for e in chunk if isinstance(e, dict)]
            if any(e.get("type") == "m.room.create" for e in evs):
                break
            ts = [e["origin_server_ts"] for e in evs if isinstance(e.get("origin_server_ts"), int)]
            if horizon_ts is not None and ts and min(ts) < horizon_ts:
                break
        return token, paged
