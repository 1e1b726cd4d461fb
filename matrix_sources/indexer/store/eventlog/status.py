"""What the status column says: how far indexing is behind (the backlog of pending
events, and since when the oldest of them waits), and which indexed event the event log
puts in which window (the start-up check and doctor compare it with the collection).
`EventLog.status`."""

from __future__ import annotations

from dataclasses import dataclass

from ...records import EventID, EventStatus, WindowID
from .db import Database
from .texts import _chunks


@dataclass(frozen=True, slots=True)
class Backlog:
    pending: int  # events appended, not indexed yet (derived or refused ones are not)
    oldest_received_ms: int | None  # when the oldest of them was appended (wall clock)

    def oldest_age(self, now_ms: int) -> float:
        """Seconds the oldest pending event has waited; 0 with none waiting."""
        if not self.pending or self.oldest_received_ms is None:
            return 0.0
        return max(0.0, (now_ms - self.oldest_received_ms) / 1000)


class StatusReads:
    def __init__(self, db: Database) -> None:
        self.db = db

    def has_indexed(self) -> bool:
        """Whether any event is indexed (one row read, however large the log)."""
        with self.db.locked() as db:
            row = db.execute(
                "SELECT 1 FROM events WHERE window_id IS NOT NULL AND status = ? LIMIT 1",
                (EventStatus.INDEXED.value,),
            ).fetchone()
        return row is not None

    def backlog(self) -> Backlog:
        """Over the partial index of pending events (schema migration 9): a count of the
        backlog, not of the log."""
        with self.db.locked() as db:
            n, oldest = db.execute(
                "SELECT COUNT(*), MIN(received_at) FROM events WHERE status = ?",
                (EventStatus.PENDING.value,),
            ).fetchone()
        return Backlog(n, oldest)

    def indexed_events(self) -> dict[EventID, WindowID]:
        """Every indexed event and the window the event log says holds it."""
        with self.db.locked() as db:
            rows = db.execute(
                "SELECT event_id, window_id FROM events WHERE status = ? AND window_id IS NOT NULL",
                (EventStatus.INDEXED.value,),
            )
            return {EventID(e): WindowID(w) for e, w in rows}

    def windows_of(self, event_ids: list[EventID]) -> set[WindowID]:
        """The windows the given indexed events are in."""
        found: set[WindowID] = set()
        with self.db.locked() as db:
            for part in _chunks(list(event_ids)):
                found |= {
                    WindowID(r[0])
                    for r in db.execute(
                        "SELECT DISTINCT window_id FROM events WHERE status = ? AND window_id"
                        f" IS NOT NULL AND event_id IN ({','.join('?' * len(part))})",
                        (EventStatus.INDEXED.value, *part),
                    )
                }
        return found
