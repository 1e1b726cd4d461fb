"""Backfill: a room's history fetched page by page, through the same gate and pipeline.

Messages sent before the bot joined are never pushed by the homeserver; backfill reads
them with `/messages`, forward in time, from where the index stands: the token saved
after the previous page (a crash resumes there), else the room's cursor, else the
room's start. Each page is admitted (gate, event log) before its token is saved, so a
page is never skipped; admitting it twice is harmless (event ids are unique in the log).

A room on another homeserver starts, on the bot's, at the bot's join: what was said
before is on the other servers, and the homeserver fetches it over federation only when
asked for older events (`/messages` backwards). So a room read from its start whose
first page does not begin with the room's creation is first paged back to the horizon
(`reach_back`), then read forward from the oldest point reached.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ..clock import REAL, Clock
from ..records import RoomID
from ..store.eventlog.log import backfill_key
from .admit import AdmitResult, Ingest

log = logging.getLogger(__name__)

PAGE_SIZE = 100
HISTORY_VISIBILITY = "m.room.history_visibility"
CREATE = "m.room.create"


class Pager(Protocol):
    """Reads a room's timeline from the homeserver (implemented in appservice/)."""

    async def token_after(self, room_id: str, event_id: str) -> str | None: ...

    async def page(
        self, room_id: str, from_token: str | None, limit: int
    ) -> tuple[list[dict], str | None]: ...

    async def reach_back(self, room_id: str, horizon_ts: int | None) -> tuple[str | None, int]:
        """Page backwards to the room's creation (or `horizon_ts`), so the homeserver
        holds the history other servers have: the token to read it forward from, and
        the events paged."""
        ...


@dataclass
class BackfillResult:
    room_id: RoomID
    pages: int = 0
    events: int = 0
    admitted: AdmitResult = field(default_factory=AdmitResult)


def horizon(backfill_days: float | None, clock: Clock = REAL) -> int | None:
    """The oldest timestamp (ms) a backfill reads back to: `backfill_days` before now on
    `clock`'s wall clock; None (no limit) when 0 or unset (index.backfill_days)."""
    return int((clock.wall() - backfill_days * 86400) * 1000) if backfill_days else None


async def backfill_room(
    room_id: RoomID,
    pager: Pager,
    ingest: Ingest,
    horizon_ts: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> BackfillResult:
    eventlog = ingest.eventlog
    result = BackfillResult(room_id, admitted=AdmitResult())
    # Every event log call in a worker thread: the service runs this on its event loop.
    token = await asyncio.to_thread(eventlog.get_meta, backfill_key(room_id))
    if token is None:
        cursor = await asyncio.to_thread(eventlog.cursor, room_id)
        if cursor is not None:
            token = await pager.token_after(room_id, cursor.event_id)
    reached = token is not None  # read from where it stands: nothing to fetch before
    while True:
        events, next_token = await pager.page(room_id, token, PAGE_SIZE)
        if not reached and events and events[0].get("type") != CREATE:
            reached = True  # the homeserver joined the room later than it began
            back, paged = await pager.reach_back(room_id, horizon_ts)
            log.info("backfill_reached_back", extra={"room_id": room_id, "events": paged})
            if back is not None:
                token = back
                continue
        reached = True
        # The room is judged on its current state (fetched when it was joined); replaying
        # old state would judge, and purge, it as it was years ago. History visibility is
        # the exception: each old message is judged by the visibility in force when it was
        # sent, so its changes are folded in timeline order with the messages (admit.py).
        events = [
            e
            for e in events
            if isinstance(e, dict)
            and ("state_key" not in e or e.get("type") == HISTORY_VISIBILITY)
            and (
                horizon_ts is None
                or not isinstance(e.get("origin_server_ts"), int)
                or e["origin_server_ts"] >= horizon_ts
            )
        ]
        if events:
            admitted = await asyncio.to_thread(ingest.admit, events, None, "backfill")
            result.admitted.merge(admitted)
            result.events += len(events)
            if progress:
                progress(len(events))
        result.pages += 1
        if next_token is None or next_token == token:
            break  # the live edge
        token = next_token
        await asyncio.to_thread(eventlog.set_meta, backfill_key(room_id), token)
        log.info(
            "backfill_page",
            extra={"room_id": room_id, "page": result.pages, "events": result.events},
        )
        if not events:
            break
    log.info(
        "backfill_done",
        extra={
            "room_id": room_id,
            "pages": result.pages,
            "events": result.events,
            "appended": result.admitted.appended,
        },
    )
    return result
