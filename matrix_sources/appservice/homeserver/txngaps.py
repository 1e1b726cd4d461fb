"""A numbered transaction that never comes: its events are looked for in the rooms.

Synapse numbers an appservice's transactions 1, 2, 3... and retries a failed one until
it is answered. But its scheduler can leave one stored and never sent: a transaction
made while the service is marked down, just as the recoverer finds nothing left to send
and marks it up again, is sent by neither (synapse/appservice/scheduler.py,
`_TransactionController.send`). Seen here: after the service was killed and restarted
under load, transactions 1571 and 1573 came, 1572 never did, and its message was lost
until a later failure.

So when a numbered transaction is still missing GAP_GRACE_S after a later one arrived,
the service backfills every room from where its index stands (`on_gap`): whatever the
missing transaction held comes back through /messages and the gate like any history.

    gap seen --(no new gap for GAP_GRACE_S, or MAX_WAIT_S since the first)-->
        one backfill of every room (on_gap), at most one per COOLDOWN_S
            | a gap going overdue while it runs: one more right after it

One backfill covers every gap whose transaction was made before it started, so gaps
are merged: a burst of gapped transactions (a confused or hostile sender with the
hs_token) costs one backfill, not one each. Gaps are kept as ranges, at most MAX_RANGES
of them (the oldest merged), so no burst of numbers grows the state. Ids that are not
plain numbers (the spec makes them opaque) are left alone, and a jump of more than
MAX_GAP (another counter) is not taken for a gap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from matrix_sources.indexer.clock import REAL, Clock

log = logging.getLogger(__name__)

GAP_GRACE_S = 10.0  # Synapse sends one transaction at a time, retries within seconds
MAX_GAP = 1000
MAX_RANGES = 32
MAX_WAIT_S = 60.0  # a steady stream of gaps still gets its backfill
COOLDOWN_S = 60.0  # between the starts of two backfills


class TransactionGaps:
    def __init__(
        self, on_gap: Callable[[], Awaitable[None]], grace: float = GAP_GRACE_S, clock: Clock = REAL
    ) -> None:
        self._on_gap, self._grace, self._clock = on_gap, grace, clock
        self._top: int | None = None
        self._ranges: list[list[float]] = []  # [first, last, since]: numbers still missing
        self._timer: asyncio.Task | None = None
        self._backfill: asyncio.Task | None = None
        self._again = False  # a gap went overdue while a backfill ran
        self._last_start: float | None = None
        self.backfills = 0

    @property
    def missing(self) -> list[int]:
        return [n for lo, hi, _ in self._ranges for n in range(int(lo), int(hi) + 1)]

    @property
    def open_ranges(self) -> int:
        return len(self._ranges)

    def answered(self, txn_id: str) -> None:
        """A transaction was answered 200 (stored, or a replay of one stored)."""
        if not (txn_id.isascii() and txn_id.isdigit()):
            return
        n = int(txn_id)
        if self._top is None or n - self._top > MAX_GAP:
            self._top = n
            return
        if n <= self._top:
            self._close(n)
            return
        if n - self._top > 1:
            self._ranges.append([self._top + 1, n - 1, self._clock.now()])
            if len(self._ranges) > MAX_RANGES:  # the two oldest become one
                a, b = self._ranges[0], self._ranges.pop(1)
                a[1] = b[1]
            self._schedule(self._grace)
        self._top = n

    def _close(self, n: int) -> None:
        for i, (lo, hi, since) in enumerate(self._ranges):
            if lo <= n <= hi:
                parts = [[lo, n - 1, since]] if lo < n else []
                parts += [[n + 1, hi, since]] if n < hi else []
                self._ranges[i : i + 1] = parts
                return

    def _schedule(self, delay: float) -> None:
        if self._timer is None or self._timer.done():
            try:
                self._timer = self._clock.later(delay, self.check, "transaction-gap-check")
            except RuntimeError:  # no loop (a unit test): check() is called by hand
                self._timer = None

    def _due(self) -> float:
        first = min(r[2] for r in self._ranges)
        last = max(r[2] for r in self._ranges)
        due = min(last + self._grace, first + max(MAX_WAIT_S, self._grace))
        if self._last_start is not None:
            due = max(due, self._last_start + COOLDOWN_S)
        return due

    def check(self) -> None:
        """Backfill once for every gap, when it is due (see the module's diagram)."""
        self._timer = None
        if not self._ranges:
            return
        now = self._clock.now()
        due = self._due()
        if now < due:
            self._schedule(due - now)
            return
        log.warning(
            "transaction_gap",
            extra={
                "ranges": [(int(lo), int(hi)) for lo, hi, _ in self._ranges[:20]],
                "count": sum(int(hi - lo) + 1 for lo, hi, _ in self._ranges),
            },
        )
        self._ranges = []
        self._last_start = now
        if self._backfill is not None and not self._backfill.done():
            self._again = True  # the running one may have passed some rooms already
            return
        try:
            self._backfill = asyncio.get_running_loop().create_task(
                self._run(), name="gap-backfill"
            )
        except RuntimeError:  # no loop: nothing can run it
            self.backfills += 1

    async def _run(self) -> None:
        while True:
            self._again = False
            self.backfills += 1
            try:
                await self._on_gap()
            except Exception:
                log.exception("gap_backfill_failed")
            if not self._again:
                return

    async def stop(self) -> None:
        for task in (self._timer, self._backfill):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
