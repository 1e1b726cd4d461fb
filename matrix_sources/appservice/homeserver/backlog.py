"""How far indexing is behind, and a bound on it: Synapse keeps what we cannot take yet.

    every REFRESH_S (a quarter of it while refusing): the event log's backlog (pending
        events, the oldest one's wait) read in a worker thread --> /health, /metrics,
        the bound
    a transaction while pending >= index.max_pending --> 503, Synapse keeps its events
        and sends the transaction again (backoff: 2 s doubling, up to minutes)
    the backlog below the bound again, after a refusal --> `on_drained`: the service
        pings the homeserver, which then retries at once

Between two reads the count moves by what was appended (`appended`), so a burst of
transactions cannot overshoot the bound by more than one transaction. Nothing the
transaction held is lost: Synapse has it, and its `!sources` commands are taken anyway
(transactions.py). The age is from when an event was appended (or set pending again),
not its own timestamp: backfilled history is old and waits no longer for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.store.eventlog.status import Backlog

log = logging.getLogger(__name__)

REFRESH_S = 1.0


class BacklogBound:
    def __init__(
        self,
        read: Callable[[], Backlog],
        limit: int,
        on_drained: Callable[[], None] = lambda: None,
        clock: Clock = REAL,
    ) -> None:
        """`read`: the event log's backlog (blocking: run in a thread); `clock`: its
        refreshes, and its wall clock the one appends are stamped with (received_at),
        for the oldest one's age."""
        self._read, self.limit, self._on_drained = read, limit, on_drained
        self._clock = clock
        self.latest = Backlog(0, None)
        self.refused = 0  # transactions answered 503 for the backlog
        self._refusing = False  # refused since the backlog was last below the bound
        self._task: asyncio.Task | None = None

    @property
    def full(self) -> bool:
        return self.latest.pending >= self.limit

    @property
    def oldest_seconds(self) -> float:
        return self.latest.oldest_age(self._clock.now_ms())

    def appended(self, n: int) -> None:
        """A transaction appended `n` events: counted until the next read."""
        if n:
            oldest = self.latest.oldest_received_ms
            self.latest = Backlog(
                self.latest.pending + n, oldest if oldest is not None else self._clock.now_ms()
            )

    def refuse(self) -> None:
        self.refused += 1
        if not self._refusing:
            log.warning(
                "backlog_full",
                extra={
                    "pending": self.latest.pending,
                    "max_pending": self.limit,
                    "oldest_seconds": round(self.oldest_seconds),
                },
            )
        self._refusing = True

    async def refresh(self) -> None:
        """Read the backlog again (in a thread); after refusals, `on_drained` once it is
        below the bound."""
        self.latest = await asyncio.to_thread(self._read)
        if self._refusing and not self.full:
            self._refusing = False
            log.info(
                "backlog_drained", extra={"pending": self.latest.pending, "refused": self.refused}
            )
            self._on_drained()

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="backlog")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # the event log failing is /health's to report
                log.error("backlog_read_failed", exc_info=True)
            # Refusing: read four times as often, so Synapse is asked back sooner.
            await self._clock.sleep(REFRESH_S / 4 if self._refusing else REFRESH_S)

    def report(self) -> dict:
        """What /health says of it."""
        return {
            "pending": self.latest.pending,
            "max_pending": self.limit,
            "oldest_pending_seconds": round(self.oldest_seconds, 1),
            "full": self.full,
        }
