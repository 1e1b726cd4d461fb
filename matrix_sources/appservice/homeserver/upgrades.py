"""Room upgrades followed: an allowlisted room's tombstone brings its successor into the
corpus with no admin action, if the successor says it is the upgrade and passes the gate
on its own (indexer/ingest/roomlinks.py).

    tombstone in A names B (pushed, or in A's state at start)
      B already A's successor, or handled this run          -> nothing
      B is A or one of A's predecessors                      -> journal upgrade_loop
      join B (via the tombstone sender's and A's servers)   -> fails: journal upgrade_refused
      B's m.room.create does not name A as predecessor      -> journal upgrade_unverified, leave B
      the gate refuses B on its own (not public, encrypted)  -> journal upgrade_refused, leave B
      otherwise: allowlist.yaml gains B ("# upgraded from A", with the servers joined
                 through when they are not the bot's own), the chain is recorded
                 (followed.json), and B is joined, learnt and backfilled like any room added

A's windows stay as they are, cited by A's own ids; `--room here` in B covers the chain.
Each verdict is also kept in followed.json, where `doctor` and `allowlist list` read it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from mautrix.api import Method, Path
from mautrix.appservice import IntentAPI
from mautrix.errors import MatrixError, MatrixRequestError
from mautrix.types import RoomID as MxRoomID

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.allowlist import add_room
from matrix_sources.indexer.ingest.followed import Followed, Upgrade, dump_followed, save_followed
from matrix_sources.indexer.ingest.gate import server_of
from matrix_sources.indexer.ingest.roomlinks import (
    UPGRADE_LOOP,
    UPGRADE_REFUSED,
    UPGRADE_UNVERIFIED,
    verified,
)
from matrix_sources.indexer.records import RoomID

from .joining import join_servers
from .roomstate import fetch_room_facts

log = logging.getLogger(__name__)


class Upgrades:
    def __init__(
        self,
        cfg: Config,
        intent: Callable[[], IntentAPI],
        ingest: Ingest,
        followed: Followed,
        on_listed: Callable[[], Awaitable[None]],
        clock: Clock = REAL,
    ) -> None:
        """`on_listed`: the allowlist re-read (allowlistwatch.py; rooms.py joins, learns
        and backfills the successor added)."""
        self.cfg, self.intent, self.ingest, self.followed = cfg, intent, ingest, followed
        self._on_listed = on_listed
        self._clock = clock
        self._seen: set[tuple[str, str]] = set()  # (A, B) judged this run
        self._lock = asyncio.Lock()

    def tombstones(self, events: Iterable[object]) -> list[tuple[str, str | None]]:
        """(room, sender) of each tombstone pushed in an allowlisted room."""
        out = []
        for raw in events:
            if not isinstance(raw, dict) or raw.get("type") != "m.room.tombstone":
                continue
            room, sender = raw.get("room_id"), raw.get("sender")
            if isinstance(room, str) and room in self.ingest.gate.allowlist:
                out.append((room, sender if isinstance(sender, str) else None))
        return out

    def upgraded(self) -> list[str]:
        """The allowlisted rooms whose state names a successor not yet followed."""
        return sorted(
            r
            for r, f in list(self.ingest.facts.items())
            if f.successor is not None
            and r in self.ingest.gate.allowlist
            and self.ingest.lineage.successor(r) != f.successor
        )

    async def check(self, room_id: str, tombstone_sender: str | None = None) -> None:
        """The allowlisted room's facts name a successor: follow it (once per run)."""
        facts = self.ingest.facts.get(RoomID(room_id))
        succ = facts.successor if facts is not None else None
        if succ is None or self.ingest.lineage.successor(room_id) == succ:
            return
        async with self._lock:
            if (room_id, succ) in self._seen:
                return
            self._seen.add((room_id, succ))
            try:
                await self._follow(RoomID(room_id), succ, tombstone_sender)
            except Exception:
                log.exception("upgrade_failed", extra={"room_id": room_id, "successor": succ})

    async def _follow(self, pred: RoomID, succ: RoomID, sender: str | None) -> None:
        if succ in self.ingest.lineage.whole_chain(pred):
            return await self._verdict(
                pred, succ, UPGRADE_LOOP, f"the tombstone names {succ}, already in its chain"
            )
        # The tombstone sender's server is in B (it made B): for a room on another
        # homeserver it is the way in, a version 12 room id naming no server.
        via = (server_of(sender or ""), server_of(pred))
        servers = join_servers(succ, [s for s in via if s], own=self.cfg.homeserver.domain)
        try:
            await self.intent().join_room(MxRoomID(succ), servers=servers or None, max_retries=0)
        except MatrixError as e:
            code = e.errcode if isinstance(e, MatrixRequestError) else type(e).__name__
            return await self._verdict(pred, succ, UPGRADE_REFUSED, f"could not join ({code})")
        try:
            create = await self.intent().api.request(
                Method.GET, Path.v3.rooms[succ].state["m.room.create"]
            )
            facts = await fetch_room_facts(self.intent().api, succ)
        except MatrixError as e:
            await self._leave(succ)
            return await self._verdict(pred, succ, UPGRADE_REFUSED, f"state unreadable ({e})")
        if not isinstance(create, dict) or not verified(pred, create):
            await self._leave(succ)
            return await self._verdict(
                pred, succ, UPGRADE_UNVERIFIED, f"its m.room.create does not name {pred}"
            )
        gate = self.ingest.gate.with_allowlist(self.ingest.gate.allowlist | {succ})
        refusal = gate.judge_room(succ, facts)
        if refusal is not None:
            await self._leave(succ)
            detail = f"{refusal.rule}" + (f": {refusal.detail}" if refusal.detail else "")
            return await self._verdict(pred, succ, UPGRADE_REFUSED, detail)
        self.ingest.lineage.link(pred, succ)
        label = facts.label if facts is not None else ""
        comment = f"upgraded from {pred}" + (f" {label}" if label else "")
        # Listed with the servers it was joined through, as `allowlist add` lists a
        # remote room: a later join (the bot removed, a new homeserver) needs them.
        await asyncio.to_thread(add_room, self.cfg.allowlist_path, succ, comment, tuple(servers))
        await self._verdict(pred, succ, None, None)
        await self._on_listed()

    async def _verdict(
        self, pred: RoomID, succ: RoomID, rule: str | None, detail: str | None
    ) -> None:
        """Journalled and kept in followed.json (ids and rules, never text)."""
        self.ingest.journal.write(
            "upgrade",
            rule=rule,
            room_id=succ,
            predecessor=pred,
            detail=detail,
            accepted=rule is None,
        )
        log.info(
            "room_upgrade",
            extra={"room_id": pred, "successor": succ, "rule": rule, "detail": detail},
        )
        self.followed.note_upgrade(
            Upgrade(pred, succ, rule is None, rule, detail, self._clock.now_ms())
        )
        await asyncio.to_thread(save_followed, self.cfg.data_dir, dump_followed(self.followed))

    async def _leave(self, room_id: str) -> None:
        try:
            await self.intent().leave_room(MxRoomID(room_id))
        except MatrixError:
            pass  # not there to begin with: nothing to leave
