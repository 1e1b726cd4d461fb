"""The allowlist followed while the service runs: allowlist.yaml looked at each chores
poll, and the rooms to read worked out again when it changed, or when a space read again
or an upgrade followed changed them (spaces.py, upgrades.py):

    the rooms listed directly + the listed spaces + the rooms those spaces bring
        -> rooms taken off: purged (unless listed another way)
        -> rooms put on, or given new via servers: joined, learnt, backfilled (rooms.py)

An invalid file is logged and the rooms stay as they were.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Protocol

from matrix_sources.indexer.config import Config, ConfigError
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.allowlist import load_listed, load_spaces
from matrix_sources.indexer.ingest.followed import load_followed

from .rooms import Rooms

log = logging.getLogger(__name__)


class SpacesPort(Protocol):
    async def refresh(self, spaces: Iterable[str], apply: bool = True) -> bool: ...


class AllowlistWatch:
    def __init__(self, cfg: Config, rooms: Rooms, ingest: Ingest) -> None:
        self.cfg, self.rooms, self.ingest = cfg, rooms, ingest
        self.gate = ingest.gate
        # What the service follows on its own (spaces' rooms, upgrades), shared with
        # spaces.py and upgrades.py, which the service wires in.
        self.followed = load_followed(cfg.data_dir)
        self.spaces: SpacesPort | None = None
        self._mtime_seen = self._mtime()

    def _mtime(self) -> float:
        try:
            return self.cfg.allowlist_path.stat().st_mtime
        except FileNotFoundError:
            return 0.0

    async def look(self) -> None:
        """Reload the allowlist if its file changed since the last look."""
        mtime = self._mtime()
        if mtime != self._mtime_seen:
            self._mtime_seen = mtime
            await self.reload()

    async def reload(self) -> None:
        """Rooms taken off are purged; rooms put on are joined and read; a space put on
        is read first, and stands for the rooms it brings. An invalid file is logged and
        the rooms stay as they were."""
        try:
            listed = load_listed(self.cfg.allowlist_path)
            spaces = set(load_spaces(self.cfg.allowlist_path))
        except ConfigError as e:
            log.error("allowlist_invalid", extra={"error": str(e)})
            return
        new = spaces - set(self.followed.spaces)
        if self.spaces is not None and (new or set(self.followed.spaces) - spaces):
            await self.spaces.refresh(new, apply=False)
        direct = {r.room_id for r in listed}
        rooms = frozenset(direct | spaces | self.followed.space_rooms(spaces))
        via = {r.room_id: r.via for r in listed}
        # A listed room given new via servers (the bot could not join it before) is
        # tried again through them.
        rejoin = {
            r for r in rooms & self.gate.allowlist if via.get(r, ()) != self.rooms.via.get(r, ())
        }
        self.rooms.via = via
        added, removed = rooms - self.gate.allowlist, self.gate.allowlist - rooms
        self.gate.allowlist = rooms  # the Gate object is shared with ingest
        log.info(
            "allowlist_reloaded",
            extra={"rooms": len(rooms), "added": len(added), "removed": len(removed)},
        )
        if removed:
            # Purge what the removed rooms left (windows, texts, cursors), off the loop;
            # a failure is logged, and swept again at the next removal or start.
            try:
                await asyncio.to_thread(self.ingest.purge_unlisted)
            except Exception:
                log.exception("purge_failed", extra={"rooms": len(removed)})
        for room_id in sorted(added | rejoin):
            if self.rooms.sent_away(room_id) or not await self.rooms.join(room_id):
                continue
            await self.rooms.learn_or_retry(room_id)
