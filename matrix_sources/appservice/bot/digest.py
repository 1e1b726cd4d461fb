"""The digest: the report for every room (indexer/moderation/report.py), posted to
`moderation.digest_room` every `moderation.digest_interval`, on the service's clock.
And the chore that keeps the report's data no longer than `moderation.keep_days`.

    start    the room resolved (an alias through the homeserver); an allowlisted room
             refused: the service does not start, as the report quotes what people
             asked and a digest must never land in a public indexed room
    loop     due: the event log's meta `digest_due_at` (the first run: now + interval,
             kept there, so a restart neither skips nor repeats one)
             -> sleep until due -> the room allowlisted since? not posted (logged)
             -> the report of the last interval posted (an outage: retried, backoff)
             -> due moves on by whole intervals past now (after a long stop: one
                digest, not a backlog of them)
    failure  the bot left or was removed from the room (M_FORBIDDEN...): logged
             `digest_not_posted`, kept in meta `digest_problem` for `doctor`; the next
             one is tried when due. Never a crash.
    expiry   every EXPIRE_EVERY_S, the feedback older than keep_days deleted
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from mautrix.errors import MatrixStandardRequestError

from matrix_sources.indexer.clock import Clock, retrying
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.moderation.report import DAY_MS, Report, report_rooms
from matrix_sources.indexer.records import RoomID

from .report import render_notice

log = logging.getLogger(__name__)

DUE_KEY, PROBLEM_KEY = "digest_due_at", "digest_problem"  # event log meta
EXPIRE_EVERY_S = 3600.0
SEND_RETRY_FOR = 3600.0  # an unreachable homeserver: the digest waits this long for it


class Digest:
    def __init__(
        self,
        cfg: Config,
        index: Any,
        matrix: Any,
        clock: Clock,
        build: Callable[[Sequence[tuple[RoomID, str]], float], Report],
    ) -> None:
        """`build(rooms, days)`: the report (blocking; Bot.report); `matrix`: the bot's
        port (send, resolve_alias, is_outage); `clock`: wall seconds and their sleep."""
        self.cfg, self.index, self.matrix, self.clock = cfg, index, matrix, clock
        self._build = build
        self.room: str | None = None  # resolved at prepare()
        self.posted = 0

    @property
    def interval(self) -> float:
        return self.cfg.moderation.digest_seconds

    async def prepare(self) -> str:
        """Why the service must not start ('' if it may): the digest room is allowlisted,
        or its alias resolves to nothing."""
        wanted = self.cfg.moderation.digest_room
        if wanted is None:
            return ""
        room = wanted
        if wanted.startswith("#"):
            room = await self.matrix.resolve_alias(wanted)
            if room is None:
                return (
                    f"moderation.digest_room {wanted} does not resolve to a room: check "
                    f"the alias in {self.cfg.file}, or give the room id (!...)"
                )
        if room in self.index.gate.allowlist:
            return (
                f"moderation.digest_room {wanted} is an allowlisted room: the digest "
                "quotes what people asked and is never posted into an indexed room. "
                f"Name the moderators' private room instead in {self.cfg.file}, or "
                f"take {room} off the allowlist"
            )
        self.room = room
        return ""

    async def run(self) -> None:
        """Post each digest when due, for ever (cancelled at stop)."""
        if self.room is None:
            return
        due = await asyncio.to_thread(self._due)
        while True:
            await self.clock.sleep(max(0.0, due - self.clock.wall()))
            await self.post()
            due = _next(due, self.interval, self.clock.wall())
            await asyncio.to_thread(self.index.eventlog.set_meta, DUE_KEY, str(int(due)))

    def _due(self) -> float:
        kept = self.index.eventlog.get_meta(DUE_KEY)
        if kept is not None:
            return float(kept)
        due = self.clock.wall() + self.interval
        self.index.eventlog.set_meta(DUE_KEY, str(int(due)))
        return due

    async def post(self) -> bool:
        """The report of the last interval, posted now; False (logged) if it was not."""
        room = self.room
        assert room is not None
        if room in self.index.gate.allowlist:  # listed since the start: never posted there
            log.error("digest_refused", extra={"room_id": room, "rule": "allowlisted"})
            return False
        days = min(self.interval * 1000 / DAY_MS, self.cfg.moderation.keep_days)
        report = await asyncio.to_thread(self._report, days)
        content = render_notice(
            report, self.cfg.homeserver.domain, "Questions to the bot"
        ).content()
        try:
            await retrying(
                lambda: self.matrix.send(room, content),
                retry_if=self.matrix.is_outage,
                initial=1.0,
                maximum=60.0,
                give_up_after=SEND_RETRY_FOR,
                clock=self.clock,
            )
        except Exception as e:
            code = (e.errcode if isinstance(e, MatrixStandardRequestError) else None) or type(
                e
            ).__name__
            log.warning("digest_not_posted", extra={"room_id": room, "errcode": code})
            await asyncio.to_thread(
                self.index.eventlog.set_meta,
                PROBLEM_KEY,
                json.dumps({"room_id": room, "errcode": code, "at": int(self.clock.wall() * 1000)}),
            )
            return False
        self.posted += 1
        log.info("digest_posted", extra={"room_id": room, "rooms": len(report.rooms)})
        await asyncio.to_thread(self.index.eventlog.set_meta, PROBLEM_KEY, "")
        return True

    def _report(self, days: float) -> Report:
        since = int((self.clock.wall() - days * DAY_MS / 1000) * 1000)
        ingest = self.index.ingest
        rooms = report_rooms(
            self.index.eventlog.feedback,
            sorted(self.index.gate.allowlist),
            since,
            {r: ingest.label(r) for r in self.index.gate.allowlist},
        )
        return self._build(rooms, days)


async def expire_feedback(
    cfg: Config, feedback: Any, clock: Clock, every: float = EXPIRE_EVERY_S
) -> None:
    """moderation.keep_days: what is older leaves the event log, once per `every`."""
    keep_ms = cfg.moderation.keep_days * DAY_MS
    while True:
        cutoff = clock.now_ms() - keep_ms
        try:
            gone = await asyncio.to_thread(feedback.expire, cutoff)
            if gone:
                log.info("feedback_expired", extra={"rows": gone})
        except Exception:
            log.error("feedback_expiry_failed", exc_info=True)
        await clock.sleep(every)


def _next(due: float, interval: float, now: float) -> float:
    """The first due time after `now` on the schedule `due + k * interval`."""
    if due > now:
        return due
    return due + (math.floor((now - due) / interval) + 1) * interval
