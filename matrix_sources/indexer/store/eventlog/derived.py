"""The derived-message columns of the event log (DESIGN.md "Derived filter"): `EventLog.derived`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...records import EventID, EventStatus, RoomID, WindowID
from . import keywords
from .db import Database
from .rows import DerivedMark
from .sqldialect import Cursor


class DerivedColumns:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- derived messages (DESIGN.md "Derived filter"; the pipeline tags them) -------

    def mark_derived(self, rows: Iterable[DerivedMark]) -> int:
        """Tag pending events derived, as judged. Their text stays; they never reach a
        window. Returns how many."""
        rows = list(rows)
        with self.db.transaction() as cur:
            return self._mark(cur, EventStatus.PENDING, rows)

    def withdraw_derived(self, rows: Iterable[DerivedMark]) -> list[WindowID]:
        """Tag indexed events derived (an edit made them so), as mark_derived does, and
        take them out of their windows the way a redaction does: each window marked
        dirty, its old vector to be scrubbed from the store's files by a compaction
        (eventlog/history.py). Returns those windows."""
        rows = list(rows)
        with self.db.transaction() as cur:
            windows = {}
            for mark in rows:
                row = cur.execute(
                    "SELECT window_id, room_id FROM events WHERE event_id = ? AND status = ?",
                    (mark.event_id, EventStatus.INDEXED.value),
                ).fetchone()
                if row is not None and row[0]:
                    windows[row[0]] = row[1]
            self._mark(cur, EventStatus.INDEXED, rows)
            keywords.refresh(cur, windows)  # their words leave with them
            cur.executemany(
                "INSERT INTO dirty_windows (window_id, room_id, redacted)"
                " VALUES (?, ?, 1) ON CONFLICT(window_id) DO UPDATE SET"
                " redacted = 1",
                sorted(windows.items()),
            )
        return [WindowID(w) for w in sorted(windows)]

    @staticmethod
    def _mark(cur: Cursor, status: EventStatus, rows: Iterable[DerivedMark]) -> int:
        rows = list(rows)
        if not rows:
            return 0
        return cur.executemany(
            "UPDATE events SET status = ?, window_id = NULL, derived_artifact = ?,"
            " derived_kind = ?, derived_score = ?, derived_threshold = ?"
            " WHERE event_id = ? AND status = ?",
            [
                (
                    EventStatus.DERIVED.value,
                    r.artifact,
                    r.kind,
                    r.score,
                    r.threshold,
                    r.event_id,
                    status.value,
                )
                for r in rows
            ],
        ).rowcount

    def text_times(self, event_ids: Iterable[EventID]) -> dict[EventID, int]:
        """Event id -> when its text as it reads now arrived (ms, this service's clock:
        appended, or its newest edit applied); its ts for a row from before that was kept."""
        ids = sorted(set(event_ids))
        out: dict[EventID, int] = {}
        with self.db.locked() as db:
            for part in (ids[i : i + 500] for i in range(0, len(ids), 500)):
                out.update(
                    (EventID(e), t)
                    for e, t in db.execute(
                        "SELECT event_id, COALESCE(text_at, ts) FROM events WHERE event_id IN"
                        f" ({','.join('?' * len(part))})",
                        part,
                    )
                )
        return out

    def derived_events(self, room_id: RoomID | None = None) -> list[DerivedEvent]:
        sql = (
            "SELECT event_id, room_id, ts, derived_artifact, derived_kind, derived_score,"
            " derived_threshold FROM events WHERE status = ?"
        )
        args: tuple[Any, ...] = (EventStatus.DERIVED.value,)
        if room_id is not None:
            sql += " AND room_id = ?"
            args += (room_id,)
        with self.db.locked() as db:
            rows = db.execute(sql + " ORDER BY ts, seq", args).fetchall()
        return [
            DerivedEvent(EventID(r[0]), RoomID(r[1]), r[2], r[3], r[4], r[5], r[6]) for r in rows
        ]


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
