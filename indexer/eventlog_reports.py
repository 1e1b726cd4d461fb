"""Figures read off the event log for metrics (/metrics) and `!sources status`."""

from __future__ import annotations

from .eventlog import EventLog
from .records import EventStatus, RoomID


def lag_report(log: EventLog) -> tuple[int, int | None, dict[str, int]]:
    """(pending events, ts of the oldest pending event, per-room lag in ms between the
    newest event in the log and the room's cursor) for metrics and status."""
    with log._lock:
        pending, oldest = log._db.execute(
            "SELECT COUNT(*), MIN(ts) FROM events WHERE status = ?",
            (EventStatus.PENDING.value,)).fetchone()
        rows = log._db.execute(
            "SELECT e.room_id, MAX(e.ts) - COALESCE(c.ts, MIN(e.ts)) FROM events e"
            " LEFT JOIN cursors c ON c.room_id = e.room_id"
            " WHERE e.status IN (?, ?) GROUP BY e.room_id",
            (EventStatus.PENDING.value, EventStatus.INDEXED.value)).fetchall()
    return pending, oldest, {room: max(0, lag or 0) for room, lag in rows}


def room_report(log: EventLog, room_id: str) -> dict:
    """Per-room figures for `!sources status`: messages and windows indexed, pending,
    and the cursor's event and time."""
    with log._lock:
        indexed, windows = log._db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT window_id) FROM events"
            " WHERE room_id = ? AND status = ?", (room_id, EventStatus.INDEXED.value)).fetchone()
        pending = log._db.execute("SELECT COUNT(*) FROM events WHERE room_id = ? AND status = ?",
                                  (room_id, EventStatus.PENDING.value)).fetchone()[0]
    cursor = log.cursor(RoomID(room_id))
    return {"messages": indexed, "windows": windows, "pending": pending,
            "cursor_ts": cursor.ts if cursor else None,
            "cursor_event_id": cursor.event_id if cursor else None}
