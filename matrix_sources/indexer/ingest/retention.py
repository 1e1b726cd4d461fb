"""Room retention: a room's `m.room.retention` `max_lifetime` is obeyed by the index.

    every index.compaction_interval_seconds (the service; an injected clock in tests)
        -> for each admitted room whose facts carry max_lifetime: the messages sent
           before now - max_lifetime lose their text as a redaction does
           (EventLog.history.expire_before), their windows are re-chunked and the collection
           compacted by the pipeline, answers that quoted them edited (event_ids)
        -> journal: one `retention` line per room with expired messages (ids, counts)

The lifetime in force at each compaction interval is the room's current one: a later change of the
state event applies from then on (nothing expired comes back).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..clock import REAL, Clock
from ..records import EventID, RoomID
from .admit import Ingest

log = logging.getLogger(__name__)
RETENTION_EXPIRED = "retention_expired"


@dataclass
class RetentionReport:
    rooms: dict[RoomID, int] = field(default_factory=dict)  # messages expired, by room
    windows: int = 0
    event_ids: set[EventID] = field(default_factory=set)


@dataclass
class Retention:
    ingest: Ingest
    clock: Clock = REAL  # its wall clock says what has expired

    def expire(self, source: str = "retention") -> RetentionReport:
        now_ms = self.clock.now_ms()
        report = RetentionReport()
        for room_id, facts in sorted(self.ingest.facts.items()):
            if facts.max_lifetime_ms is None:
                continue
            event_ids, windows = self.ingest.eventlog.history.expire_before(
                room_id, now_ms - facts.max_lifetime_ms
            )
            if not event_ids:
                continue
            report.rooms[room_id] = len(event_ids)
            report.windows += windows
            report.event_ids |= set(event_ids)
            self.ingest.journal.write(
                "retention",
                rule=RETENTION_EXPIRED,
                room_id=room_id,
                messages=len(event_ids),
                windows=windows,
                max_lifetime_ms=facts.max_lifetime_ms,
                source=source,
            )
            log.info(
                "retention_expired",
                extra={"room_id": room_id, "messages": len(event_ids), "windows": windows},
            )
        return report
