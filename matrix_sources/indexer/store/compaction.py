"""When the collection is compacted, and who asks: the one schedule the pipeline and the
purger share (built in components.writers, handed to both, so neither holds the other).

A redaction (the pipeline re-chunks the window) or a purge (purge.py) deleted points
whose vectors Chroma still keeps in its files (a deleted id's slot in the HNSW segment,
its queue, free pages). A compaction (store.compact) copies each segment that holds a
deleted or overwritten point into a fresh collection and drops the old one.

    redaction  -> request(ids): due; run by the worker at most once per `every` seconds
    purge      -> now(): due, and run at once (the interval does not apply)
    merge      -> small sealed segments copied into one (segments.plan_merge), run by
                  the worker when no compaction is ready to run, one run at a time

Due is recorded in the event log (COMPACTION_DUE_KEY), so a restart still compacts. A
compaction asked for while one copies stays due after it. Edits ask for none: Matrix
keeps showing an edited message's original to the room.

With embedding workers (`index.pipeline: external`) the service alone compacts: the
workers' redactions ask through the event log (`refresh_due` reads it), and a
compaction runs `fenced`, in the event log's exclusive transaction (eventlog/claims.py),
so no worker's commit writes the collection while it is copied and swapped; each
worker's next commit opens the new generation (ChromaStore.follow_live).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..clock import REAL, Clock
from .writeguard import WriteGuard

if TYPE_CHECKING:
    from .eventlog.log import EventLog
    from .vectors.chroma import ChromaStore

log = logging.getLogger(__name__)
COMPACTION_DUE_KEY = "compaction_due"  # event log meta: "1" while a compaction is due


@dataclass
class Compaction:
    eventlog: EventLog
    store: ChromaStore
    # The writers' lock (writeguard.py): the copy runs without it, the swap under it.
    guard: WriteGuard = field(default_factory=WriteGuard)
    every: float = 60.0  # seconds between compactions asked for by redactions
    clock: Clock = REAL  # its wall clock times the intervals
    due: set[str] = field(default_factory=set)  # what asked since the last compaction
    last: float = float("-inf")  # when the last compaction ended
    merge_failed: float = float("-inf")  # when a merge last failed
    _requests: int = 0  # compactions asked for so far (one asked during a copy: due again)
    # Other processes write the collection (embedding workers): see the module docstring.
    fenced: bool = False

    def __post_init__(self) -> None:
        if self.eventlog.get_meta(COMPACTION_DUE_KEY):
            self.due.add(COMPACTION_DUE_KEY)

    def request(self, what: set[str] | list[str]) -> None:
        """Points were deleted for a redaction or a purge: compact within the interval."""
        if what:
            self.eventlog.set_meta(COMPACTION_DUE_KEY, "1")
            self._requests += 1
            self.due.update(what)

    def _merge_due(self) -> bool:
        return self.clock.wall() >= self.merge_failed + self.every and self.store.merge_due()

    def wait(self) -> float | None:
        """Seconds until the due compaction, or a merge, may run (0: now); None if
        neither is due."""
        if self.due:
            left = max(0.0, self.last + self.every - self.clock.wall())
            return 0.0 if left and self._merge_due() else left
        return 0.0 if self._merge_due() else None

    def run(self) -> bool | None:
        """Compact if something asked for it, unless one ran less than `every` seconds
        ago; else merge small segments if a merge is due. None if nothing was done;
        else True once compacted (or merged). A merge that failed is tried again after
        `every` seconds, not at once."""
        if self.due and not max(0.0, self.last + self.every - self.clock.wall()):
            return self._compact()
        if not self._merge_due():
            return None
        try:
            self.store.merge(lock=self.guard.lock)
        except Exception:
            self.merge_failed = self.clock.wall()
            raise
        return True

    def _compact(self) -> bool:
        due, asked = set(self.due), self._requests
        with self.eventlog.claims.exclusive() if self.fenced else nullcontext():
            # The copy goes on beside the pipeline's runs; the swap takes the lock.
            # Fenced, each process's map of ids misses the others' points: every
            # segment is copied, not only those this process saw written.
            self.store.compact(lock=self.guard.lock, everything=self.fenced)
            with self.guard.lock:
                self.eventlog.truncate_wal()
                self.last = self.clock.wall()
                if self._requests == asked:  # else a redaction during the copy: due again
                    self.due.difference_update(due)
                if not self.due:
                    self.eventlog.set_meta(COMPACTION_DUE_KEY, "")
        if self.fenced:  # SQLite checkpoints only outside the transaction that just ended
            self.eventlog.truncate_wal()
        return True

    def refresh_due(self) -> bool:
        """Another process (a worker) asked for a compaction through the event log."""
        if self.eventlog.get_meta(COMPACTION_DUE_KEY):
            self.due.add(COMPACTION_DUE_KEY)
        return bool(self.due)

    def now(self, what: str = "purge") -> bool:
        """Compact at once, whatever the interval (a purge), not holding the writers'
        lock (the compaction takes it to swap). False if it failed, logged: the
        compaction stays due and the worker retries it."""
        self.request({what})
        self.last = float("-inf")  # a purge does not wait for the interval
        try:
            return bool(self.run())
        except Exception as e:  # noqa: BLE001 - the points are deleted; compaction retried
            log.error("compaction_failed", extra={"error": f"{type(e).__name__}: {e}"[:300]})
            return False
