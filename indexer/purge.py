"""Purging a room after the fact: it was indexed, and now the gate refuses it.

    state event (join rule, encryption, bridge, puppet member), a puppet sender, the
    room's facts learned anew, or the room gone from the allowlist
        -> Ingest sees the gate refuse a room whose text is still stored
        -> Purger.purge, under the lock it shares with the pipeline (writeguard.py):
             Chroma: delete the room's windows, scrub their text from its files
             event log: bodies NULL, status `purged`, cursor removed, WAL emptied
        -> journal: one `purge` line (room id and label, rule, triggering event id,
           counts; never text); log `room_purged` with the same ids and counts

The store goes first: a crash after it leaves the event log's text in place, so the
next refusal of the room purges again (deleting nothing twice); the other order could
leave windows in Chroma that nothing would ever find again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .eventlog import EventLog
from .journal import Journal
from .records import Refusal, RoomID
from .writeguard import WriteGuard

if TYPE_CHECKING:
    from .store import ChromaStore

log = logging.getLogger(f"matrix_sources.{__name__}")


@dataclass(frozen=True, slots=True)
class PurgeReport:
    room_id: RoomID
    rule: str
    windows: int  # deleted from the collection
    messages: int  # events whose text was dropped from the event log
    scrubbed: bool | None  # the store's files were scrubbed too; None: no store


@dataclass
class Purger:
    eventlog: EventLog
    journal: Journal
    # The collection; None where nothing was ever embedded (then only the event log
    # is purged).
    store: ChromaStore | None = None
    # Shared with the pipeline that writes `store` (writeguard.py).
    guard: WriteGuard = field(default_factory=WriteGuard)

    def purge(self, refusal: Refusal, source: str = "push") -> PurgeReport:
        room_id = refusal.room_id
        with self.guard.lock:
            windows, scrubbed = [], None
            if self.store is not None:
                self.guard.purges[room_id] += 1  # a batch of this room in flight drops itself
                windows = self.store.delete_room(room_id)
                scrubbed = self.store.scrub_room(room_id)
            messages = self.eventlog.purge_room(room_id)
        report = PurgeReport(room_id, refusal.rule, len(windows), messages, scrubbed)
        self.journal.purge(refusal, report.windows, report.messages, source, scrubbed)
        log.warning("room_purged", extra={"room_id": room_id, "rule": refusal.rule,
                                          "event_id": refusal.event_id,
                                          "windows": report.windows,
                                          "messages": report.messages,
                                          "scrubbed": scrubbed, "source": source})
        return report
