"""Purging a room after the fact: it was indexed, and now the gate refuses it.

    state event (join rule, encryption, bridge, puppet member), a puppet sender, the
    room's facts learned anew, or the room gone from the allowlist
        -> Ingest sees the gate refuse a room whose text is still stored
        -> Purger.purge, under the lock it shares with the pipeline (writeguard.py):
             event log: the room marked pending (PENDING_KEY), bodies NULL (zeroed:
                        secure_delete), status `purged`, cursor removed, WAL emptied
             Chroma:    delete the room's windows, then (outside the lock) a compaction
                        copies the live points into a fresh collection and drops the
                        old one, so no vector of the room stays in any file
                        (compaction.py, the schedule shared with the pipeline)
             event log: the room no longer pending
        -> journal: one `purge` line (room id and label, rule, triggering event id,
           counts; never text); log `room_purged` with the same ids and counts

The text goes first: it is the only copy. A crash after it leaves the room pending,
and the writer finishes the purge when it next starts (`finish_pending`, from
rebuild.ensure_meta): its windows deleted, the collection compacted.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..records import Refusal, RoomID
from ..store.compaction import Compaction
from ..store.eventlog.log import EventLog
from ..store.journal import Journal
from ..store.writeguard import WriteGuard

if TYPE_CHECKING:
    from ..store.vectors.chroma import ChromaStore

log = logging.getLogger(__name__)
PENDING_KEY = "purges_pending"  # event log meta: JSON list of rooms whose points may remain


def _pending(eventlog: EventLog) -> list[str]:
    return json.loads(eventlog.get_meta(PENDING_KEY) or "[]")


def _set_pending(eventlog: EventLog, rooms: list[str]) -> None:
    eventlog.set_meta(PENDING_KEY, json.dumps(sorted(set(rooms))))


@dataclass(frozen=True, slots=True)
class PurgeReport:
    room_id: RoomID
    rule: str
    windows: int  # deleted from the collection
    messages: int  # events whose text was dropped from the event log
    compacted: bool | None  # the store was compacted (no vector left); None: no store


@dataclass
class Purger:
    eventlog: EventLog
    journal: Journal
    # The collection; None where nothing was ever embedded (then only the event log
    # is purged).
    store: ChromaStore | None = None
    # Shared with the pipeline that writes `store` (writeguard.py).
    guard: WriteGuard = field(default_factory=WriteGuard)
    # The compaction schedule, shared with the pipeline (compaction.py); with a store
    # and none given, the purger's own.
    compaction: Compaction | None = None

    def __post_init__(self) -> None:
        if self.store is not None and self.compaction is None:
            self.compaction = Compaction(self.eventlog, self.store, self.guard)

    def purge(self, refusal: Refusal, source: str = "push") -> PurgeReport:
        room_id = refusal.room_id
        with self.guard.lock:
            windows, compacted = [], None
            if self.store is not None:
                _set_pending(self.eventlog, _pending(self.eventlog) + [room_id])
            messages = self.eventlog.purge_room(room_id)
            if self.store is not None:
                self.guard.purges[room_id] += 1  # a batch of this room in flight drops itself
                windows = self.store.delete_room(room_id)
        if self.compaction is not None:  # outside the lock: the compaction takes it to swap
            compacted = self.compaction.now("purge") if windows else True
            _set_pending(self.eventlog, [r for r in _pending(self.eventlog) if r != room_id])
        report = PurgeReport(room_id, refusal.rule, len(windows), messages, compacted)
        self.journal.purge(refusal, report.windows, report.messages, source, compacted)
        log.warning(
            "room_purged",
            extra={
                "room_id": room_id,
                "rule": refusal.rule,
                "event_id": refusal.event_id,
                "windows": report.windows,
                "messages": report.messages,
                "compacted": compacted,
                "source": source,
            },
        )
        return report


def finish_pending(
    eventlog: EventLog, store: ChromaStore, guard: WriteGuard, compaction: Compaction
) -> list[str]:
    """The writer, at start: finish purges a crash interrupted (their text is gone from
    the event log; their points may not be): delete their windows under the writers'
    lock, compact."""
    rooms = _pending(eventlog)
    if not rooms:
        return []
    with guard.lock:
        for room_id in rooms:
            store.delete_room(RoomID(room_id))
    compaction.now("purge")
    _set_pending(eventlog, [])
    log.warning("purges_finished", extra={"rooms": len(rooms)})
    return rooms
