"""Spaces followed: a space in allowlist.yaml stands for its public rooms as they come
and go (indexer/ingest/spacetree.py says which).

    listed space --join--> read its hierarchy (paged, bounded) --> followed.json
        -> the rooms it brings join the gate's allowlist (rooms.py joins, learns and
           backfills each; the gate still judges each on its own); a room it no longer
           brings is purged, unless allowlist.yaml names it directly
    read again: at once when an m.space.child of it or of a sub-space is pushed (the
    next chores poll, within seconds), and every index.space_reread_seconds (its Clock)

A read that fails keeps what the last one found: an outage purges nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from mautrix.api import Method, Path
from mautrix.appservice import IntentAPI
from mautrix.errors import MatrixError
from mautrix.types import RoomID as MxRoomID

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.config import Config, ConfigError
from matrix_sources.indexer.ingest.allowlist import load_spaces
from matrix_sources.indexer.ingest.followed import Followed, dump_followed, save_followed
from matrix_sources.indexer.ingest.roomlinks import SPACE_LOOP, SPACE_TRUNCATED
from matrix_sources.indexer.ingest.spacetree import read_space
from matrix_sources.indexer.store.journal import Journal

log = logging.getLogger(__name__)
PAGE = 100  # rooms asked per hierarchy page (Synapse's own cap is 50 to 100)


class Spaces:
    def __init__(
        self,
        cfg: Config,
        intent: Callable[[], IntentAPI],
        journal: Journal,
        followed: Followed,
        on_changed: Callable[[], Awaitable[None]],
        clock: Clock = REAL,
    ) -> None:
        """`on_changed`: the corpus recomputed (allowlistwatch.py)."""
        self.cfg, self.intent, self.journal, self.followed = cfg, intent, journal, followed
        self._on_changed = on_changed
        self._clock = clock
        self._dirty: set[str] = set()
        self._last_read = float("-inf")
        self._lock = asyncio.Lock()

    def unread(self) -> set[str]:
        """Listed spaces not read yet (put on while the service was down): which rooms
        they bring is not known until they are."""
        return set(self.listed()) - set(self.followed.spaces)

    def listed(self) -> list[str]:
        try:
            return list(load_spaces(self.cfg.allowlist_path))
        except ConfigError:
            return list(self.followed.spaces)  # an invalid file: as they were

    def space_of(self, room_id: str) -> list[str]:
        """The listed spaces that are, or hold as a sub-space, this room."""
        return [
            s for s, r in self.followed.spaces.items() if s == room_id or room_id in r.subspaces
        ]

    def saw(self, events: Iterable[object]) -> None:
        """Pushed events: an m.space.child in a followed space marks it to read again."""
        for raw in events:
            if not isinstance(raw, dict) or raw.get("type") != "m.space.child":
                continue
            if isinstance(raw.get("room_id"), str):
                self._dirty.update(self.space_of(raw["room_id"]))

    async def due(self) -> None:
        """Once a chores poll: the spaces marked read again, or all of them each
        index.space_reread_seconds."""
        now = self._clock.now()
        if now - self._last_read >= self.cfg.index.space_reread_seconds:
            self._last_read = now
            await self.refresh(self.listed())
        elif self._dirty:
            dirty, self._dirty = sorted(self._dirty), set()
            await self.refresh(dirty)

    async def refresh(self, spaces: Iterable[str], apply: bool = True) -> bool:
        """Read these spaces again; forget the ones no longer listed. True if what the
        spaces bring changed (then, with `apply`, the corpus is recomputed)."""
        async with self._lock:
            listed = set(self.listed())
            changed = False
            for gone in sorted(set(self.followed.spaces) - listed):
                del self.followed.spaces[gone]
                changed = True
            for space in sorted(set(spaces) & listed):
                changed |= await self._read(space)
            if changed:
                text = dump_followed(self.followed)
                await asyncio.to_thread(save_followed, self.cfg.data_dir, text)
        if changed and apply:
            await self._on_changed()
        return changed

    async def _read(self, space: str) -> bool:
        try:
            await self.intent().join_room(MxRoomID(space), max_retries=0)
            pages = await self._pages(space)
        except MatrixError as e:
            log.warning("space_unreadable", extra={"room_id": space, "error": str(e)})
            return False
        depth, most = self.cfg.index.space_depth, self.cfg.index.space_max_rooms
        reading, truncated = read_space(space, pages, depth, most)
        reading.read_ms = self._clock.now_ms()
        before = self.followed.spaces.get(space)
        if truncated and not (before and before.truncated):
            self.journal.write(
                "space",
                rule=SPACE_TRUNCATED,
                room_id=space,
                detail=f"more than {most} rooms: the first {most} are followed",
                fix="raise index.space_max_rooms, or list the sub-spaces you want",
            )
        old_loops = {
            r for r, why in (before.refused if before else {}).items() if why == SPACE_LOOP
        }
        for room in sorted(r for r, why in reading.refused.items() if why == SPACE_LOOP):
            if room not in old_loops:
                self.journal.write(
                    "space",
                    rule=SPACE_LOOP,
                    room_id=space,
                    child=room,
                    detail="the space lists itself or a space above it; that link is skipped",
                )
        self.followed.spaces[space] = reading
        same = before is not None and (before.rooms, before.subspaces, before.refused) == (
            reading.rooms,
            reading.subspaces,
            reading.refused,
        )
        if not same:
            log.info(
                "space_read",
                extra={
                    "room_id": space,
                    "rooms": len(reading.rooms),
                    "subspaces": len(reading.subspaces),
                    "refused": len(reading.refused),
                    "truncated": truncated,
                },
            )
        return not same

    async def _pages(self, space: str) -> list[dict]:
        """The hierarchy, page after page, up to what space_max_rooms needs; a
        `next_batch` seen before ends it (a homeserver looping never stalls us)."""
        pages: list[dict] = []
        token: str | None = None
        seen: set[str] = set()
        budget = self.cfg.index.space_max_rooms + 1
        most_pages = budget // 10 + 10  # pages of few rooms each end too
        while budget > 0 and len(pages) < most_pages:
            params = {"limit": str(PAGE), "max_depth": str(self.cfg.index.space_depth + 1)}
            if token:
                params["from"] = token
            page = await self.intent().api.request(
                Method.GET, Path.v1.rooms[space].hierarchy, query_params=params
            )
            if not isinstance(page, dict):
                break
            pages.append(page)
            budget -= len(page.get("rooms") or ())
            token = page.get("next_batch")
            if not isinstance(token, str) or not token or token in seen:
                break
            seen.add(token)
        return pages
