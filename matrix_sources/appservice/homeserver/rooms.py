"""The bot's rooms: the allowlisted rooms joined, each one's state learnt, then what it
said before the bot was there (or while the service was down) backfilled. Which rooms
those are, as the allowlist file changes, is allowlistwatch.py's.

    allowlisted room --join--> learn its state --> backfill it (one room at a time)
                          \\-refused: one log line      \\-state unavailable: StateRetry
                                                          learns it later, then backfills

A room whose moderators sent the bot away (kick, ban) is not joined again until they
invite it back (indexer/ingest/sentaway.py). A room on another homeserver is joined
through the servers the allowlist keeps for it, and others that were in it (joining.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine

from mautrix.appservice import AppService
from mautrix.errors import MatrixError
from mautrix.types import RoomID as MxRoomID

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.config import Config, ConfigError
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.allowlist import load_listed
from matrix_sources.indexer.ingest.backfill import backfill_room, horizon
from matrix_sources.indexer.pipeline.worker import PipelineWorker
from matrix_sources.indexer.records import RoomID
from matrix_sources.indexer.store.eventlog.reports import sender_servers

from .joinbackoff import JoinBackoff
from .joining import join, join_failed, join_servers
from .pager import MatrixPager
from .roomstate import RoomStateHidden, StateRetry, fetch_room_facts

log = logging.getLogger(__name__)
JOINS_AT_ONCE = 4  # allowlisted rooms joined (and their state learnt) at once at start

Spawn = Callable[[Coroutine, str], None]


class Rooms:
    """Joins, room state and backfill for the service. `spawn(coro, name)` runs a task
    the service owns (and cancels at stop)."""

    def __init__(
        self,
        cfg: Config,
        az: AppService,
        ingest: Ingest,
        worker: PipelineWorker,
        spawn: Spawn,
        clock: Clock = REAL,
        on_withdrawn: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.cfg, self.az, self.ingest, self.worker = cfg, az, ingest, worker
        self._on_withdrawn = on_withdrawn  # the bot edits answers that quoted them
        self._clock = clock
        self.gate = ingest.gate
        self._spawn = spawn
        self.state_retry = StateRetry(self._learn_shown, self._state_known, clock=clock)
        self.backoff = JoinBackoff(cfg.data_dir, clock)
        self._backfill_lock = asyncio.Lock()
        # Told each time a room's state is learned: a tombstone pushed before the room's
        # state was known is only seen then (the service follows the upgrade).
        self.on_learned: Callable[[str], None] | None = None
        # The allowlist's, by room: the first servers a join asks (allowlistwatch.py
        # keeps them as the file changes).
        self.via: dict[RoomID, tuple[str, ...]] = {}
        try:
            self.via = {r.room_id: r.via for r in load_listed(cfg.allowlist_path)}
        except (ConfigError, OSError):
            pass  # the service has loaded the same file already: nothing new to say

    async def join(self, room_id: str) -> bool:
        """Join a room through its via servers and others that were in it; False (and
        one log line with the fix) if the homeserver could not."""
        rid = RoomID(room_id)
        seen = await asyncio.to_thread(sender_servers, self.ingest.eventlog, rid)
        facts = self.ingest.facts.get(rid)
        if facts is not None:  # members it has seen, beside the senders it indexed
            seen += [m.partition(":")[2] for m in sorted(facts.members)]
        servers = join_servers(room_id, self.via.get(rid, ()), seen, self.cfg.homeserver.domain)
        try:
            await join(self.az.intent, room_id, servers)
        except Exception as e:
            join_failed(room_id, e, str(self.gate.bot_user), servers)
            self.backoff.record(room_id, self.via.get(rid, ()), joined=False)
            return False
        self.backoff.record(room_id, self.via.get(rid, ()), joined=True)
        return True

    async def join_allowlisted(self) -> None:
        """Join every allowlisted room the bot is not in, and learn each one's state,
        JOINS_AT_ONCE rooms at a time; a room whose last join failed waits for its next
        try (joinbackoff.py)."""
        gate = asyncio.Semaphore(JOINS_AT_ONCE)
        try:  # one request instead of a join per room the bot is in already
            joined = set(await self.az.intent.get_joined_rooms())
        except MatrixError:
            joined = set()
        listed = [r for r in sorted(self.gate.allowlist) if not self.sent_away(r)]
        waiting = {
            r
            for r in self.backoff.waiting(r for r in listed if r not in joined)
            if not self.backoff.due(r, self.via.get(RoomID(r), ()))
        }
        if waiting:
            log.info("joins_deferred", extra={"rooms": len(waiting)})

        async def join(room_id: str) -> None:
            async with gate:
                if room_id not in joined and not await self.join(room_id):
                    return
                await self.learn_or_retry(room_id)

        await asyncio.gather(*(join(r) for r in listed if r not in waiting))
        for r in joined:
            self.backoff.record(r, (), joined=True)
        await asyncio.to_thread(self.backoff.save, self.gate.allowlist)

    async def retry_joins(self) -> None:
        """The listed rooms whose next join try has come (each chores poll)."""
        due = [
            r
            for r in sorted(self.backoff.failed)
            if r in self.gate.allowlist
            and self.backoff.due(r, self.via.get(RoomID(r), ()))
            and self.ingest.sent_away.get(RoomID(r)) is None
        ]
        for room_id in due[:JOINS_AT_ONCE]:
            if await self.join(room_id):
                await self.learn_or_retry(room_id)
        if due:
            await asyncio.to_thread(self.backoff.save, self.gate.allowlist)

    async def join_invited(self, room_id: str) -> None:
        """Join where invited; an allowlisted room is then read from where its index
        stands: from its start for one the bot was invited back to after being sent
        away (the invite dropped what the purge left: sentaway.py)."""
        await self.az.intent.join_room_by_id(MxRoomID(room_id))
        if room_id in self.gate.allowlist:
            await self.learn_or_retry(room_id)

    def sent_away(self, room_id: str) -> bool:
        """Its moderators kicked or banned the bot: not joined until invited back."""
        away = self.ingest.sent_away.get(RoomID(room_id))
        if away is not None:
            log.info(
                "room_not_joined", extra={"room_id": room_id, "rule": "bot_removed", "by": away.by}
            )
        return away is not None

    async def backfill(self, room_id: RoomID) -> None:
        """Fetch what the room said before the bot was there (or while the service was
        down), one room at a time, through the gate and the pipeline."""
        async with self._backfill_lock:
            if not self.ingest.admits(room_id):
                return  # refused rooms are never read, not even their history
            since = horizon(self.cfg.index.backfill_days, self._clock)
            try:
                result = await backfill_room(
                    room_id, MatrixPager(self.az.intent.api), self.ingest, since
                )
            except Exception:
                log.error("backfill_failed", exc_info=True, extra={"room_id": room_id})
                return
            if result.admitted and (result.admitted.appended or result.admitted.history.rooms):
                self.worker.notify()

    async def backfill_all(self) -> None:
        """Every allowlisted room read again from its cursor (a transaction never came)."""
        for room_id in sorted(self.gate.allowlist):
            await self.backfill(RoomID(room_id))

    async def learn_or_retry(self, room_id: str) -> None:
        """Learn a joined room's state, then backfill it; if its state cannot be had
        now, StateRetry fetches it again later and backfills then."""
        try:
            await self._learn_shown(room_id)
        except Exception:
            log.error("room_state_unavailable", exc_info=True, extra={"room_id": room_id})
            self.state_retry.add(room_id)
            return
        self._state_known(room_id)

    def _state_known(self, room_id: str) -> None:
        self._spawn(self.backfill(RoomID(room_id)), "backfill")

    async def _learn_shown(self, room_id: str) -> None:
        """`learn`, failing while the homeserver does not show the bot the room (the
        retry goes on: the messages held meanwhile come back by the backfill after)."""
        await self.learn(room_id)
        if not self.ingest.settled(RoomID(room_id)):
            raise RoomStateHidden(room_id)

    async def learn(self, room_id: str) -> None:
        """The room's state fetched and handed to ingest (which purges a room found
        refused with its text stored, and withdraws what a new server ACL denies)."""
        facts = await fetch_room_facts(self.az.intent.api, room_id)
        if facts is not None:
            applied = await asyncio.to_thread(self.ingest.learn, RoomID(room_id), facts)
            if applied.redacted:
                self.worker.notify()
                if self._on_withdrawn is not None:
                    self._on_withdrawn(sorted(applied.redacted))
            if self.on_learned is not None:
                self.on_learned(room_id)
