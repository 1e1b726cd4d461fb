"""Figures read off the event log for metrics (/metrics) and `!sources status`."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .eventlog import EventLog
from ..records import EventStatus, RoomID

LagReport = tuple[int, "int | None", dict[str, int]]


def lag_figures(db: sqlite3.Connection) -> LagReport:
    """(pending events, when the oldest pending event was appended (ms), per-room lag in
    ms between the newest event in the log and the room's cursor). The first over the
    partial index of pending events; the second scans the events table: about 350 ms at
    1M events, so never on the event loop nor under the log's lock."""
    pending, oldest = db.execute(
        "SELECT COUNT(*), MIN(received_at) FROM events WHERE status = ?",
        (EventStatus.PENDING.value,)).fetchone()
    rows = db.execute(
        "SELECT e.room_id, MAX(e.ts) - COALESCE(c.ts, MIN(e.ts)) FROM events e"
        " LEFT JOIN cursors c ON c.room_id = e.room_id"
        " WHERE e.status IN (?, ?) GROUP BY e.room_id",
        (EventStatus.PENDING.value, EventStatus.INDEXED.value)).fetchall()
    return pending, oldest, {room: max(0, lag or 0) for room, lag in rows}


def lag_report_at(path: Path) -> LagReport:
    """lag_figures on a read-only connection of its own (WAL: it waits for no writer and
    holds up none), opened and closed in the calling thread."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return lag_figures(db)
    finally:
        db.close()


def room_report(log: EventLog, room_id: str) -> dict:
    """Per-room figures for `!sources status`: messages and windows indexed, pending,
    and the cursor's event and time."""
    indexed, windows, pending = log.room_figures(RoomID(room_id))
    cursor = log.cursor(RoomID(room_id))
    return {"messages": indexed, "windows": windows, "pending": pending,
            "cursor_ts": cursor.ts if cursor else None,
            "cursor_event_id": cursor.event_id if cursor else None}


def meta_at(path: Path, key: str) -> str | None:
    """One event log meta value, read-only (doctor, beside a running service)."""
    if not path.exists():
        return None
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None
    except sqlite3.DatabaseError:  # too old to have the table, or damaged (doctor says so)
        return None
    finally:
        db.close()
