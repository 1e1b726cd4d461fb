"""A numbered transaction that never comes: its events are looked for in the rooms.

Synapse numbers an appservice's transactions 1, 2, 3... and retries a failed one until
it is answered. But its scheduler can leave one stored and never sent: a transaction
made while the service is marked down, just as the recoverer finds nothing left to send
and marks it up again, is sent by neither (synapse/appservice/scheduler.py,
`_TransactionController.send`). Seen here: after the service was killed and restarted
under load, transactions 1571 and 1573 came, 1572 never did, and its message was lost
until a later failure (the crash end-to-end test waited 10 minutes for it).

So when a numbered transaction is still missing GAP_GRACE_S after a later one arrived,
the service backfills every room from where its index stands (`on_gap`): whatever the
missing transaction held comes back through /messages and the gate like any history.
Ids that are not plain numbers (the spec makes them opaque) are left alone, and a jump
of more than MAX_GAP (another counter) is not taken for a gap.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

log = logging.getLogger(f"matrix_sources.{__name__}")

GAP_GRACE_S = 10.0  # Synapse sends one transaction at a time, retries within seconds
MAX_GAP = 1000


class TransactionGaps:
    def __init__(self, on_gap: Callable[[], None], grace: float = GAP_GRACE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._on_gap, self._grace, self._clock = on_gap, grace, clock
        self._top: int | None = None
        self._missing: dict[int, float] = {}  # txn number -> when a later one came

    @property
    def missing(self) -> list[int]:
        return sorted(self._missing)

    def answered(self, txn_id: str) -> None:
        """A transaction was answered 200 (stored, or a replay of one stored)."""
        if not (txn_id.isascii() and txn_id.isdigit()):
            return
        n = int(txn_id)
        if self._top is None or n - self._top > MAX_GAP:
            self._top = n
            return
        if n <= self._top:
            self._missing.pop(n, None)
            return
        now = self._clock()
        self._missing.update((m, now) for m in range(self._top + 1, n))
        self._top = n
        if n - 1 in self._missing:
            try:
                asyncio.get_running_loop().call_later(self._grace, self.check)
            except RuntimeError:  # no loop (a unit test): check() is called by hand
                pass

    def check(self) -> None:
        """Backfill once for every gap open GAP_GRACE_S or longer."""
        now = self._clock()
        overdue = sorted(m for m, t in self._missing.items() if now - t >= self._grace)
        if not overdue:
            return
        for m in overdue:
            del self._missing[m]
        log.warning("transaction_gap", extra={"missing": overdue[:20], "count": len(overdue)})
        self._on_gap()
