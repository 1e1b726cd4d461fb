"""The derived-message columns of the event log (DESIGN.md "Derived filter"): `EventLog.derived`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .eventlog_db import Database
from ..records import EventID, EventStatus, RoomID


class DerivedColumns:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- derived messages (DESIGN.md "Derived filter"; the pipeline tags them) -------

    def mark_derived(self, rows: Iterable[tuple[EventID, str, str, float, float]]) -> int:
        """Tag pending events derived, with (event id, artifact, kind, score, threshold)
        as judged. Their text stays; they never reach a window. Returns how many."""
        rows = list(rows)
        with self.db.transaction() as cur:
            changed = cur.executemany(
                "UPDATE events SET status = ?, derived_artifact = ?, derived_kind = ?,"
                " derived_score = ?, derived_threshold = ? WHERE event_id = ? AND status = ?",
                [(EventStatus.DERIVED.value, artifact, kind, score, threshold, event_id,
                  EventStatus.PENDING.value)
                 for event_id, artifact, kind, score, threshold in rows]).rowcount if rows else 0
        return changed

    def derived_events(self, room_id: RoomID | None = None) -> list[DerivedEvent]:
        sql = ("SELECT event_id, room_id, ts, derived_artifact, derived_kind, derived_score,"
               " derived_threshold FROM events WHERE status = ?")
        args: tuple = (EventStatus.DERIVED.value,)
        if room_id is not None:
            sql += " AND room_id = ?"
            args += (room_id,)
        with self.db.locked() as db:
            rows = db.execute(sql + " ORDER BY ts, seq", args).fetchall()
        return [DerivedEvent(EventID(r[0]), RoomID(r[1]), r[2], r[3], r[4], r[5], r[6])
                for r in rows]


@dataclass(frozen=True, slots=True)
class DerivedEvent:
    """A message kept in the log but not indexed: it quotes an artifact."""

    event_id: EventID
    room_id: RoomID
    ts: int
    artifact: str
    kind: str
    score: float
    threshold: float
