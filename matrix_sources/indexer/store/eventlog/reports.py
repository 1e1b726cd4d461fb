"""Figures read off the event log for metrics (/metrics) and `!sources status`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from ...config import Database as Location
from ...records import EventStatus, RoomID
from .db import reader
from .log import EventLog


class LagReport(NamedTuple):
    """The event log's figures for /metrics (lag_figures)."""

    pending: int  # events waiting for the pipeline
    oldest_ms: int | None  # when the oldest of them was appended (ms); None: none waits
    lags: dict[str, int]  # room id -> ms between its newest event and its cursor


def lag_figures(db: Any) -> LagReport:
    """Pending events, when the oldest of them was appended, and each room's lag behind
    the newest event in the log (LagReport). The first over the partial index of pending
    events; the second scans the events table: about 350 ms at 1M events, so never on
    the event loop nor under the log's lock."""
    pending, oldest = db.execute(
        "SELECT COUNT(*), MIN(received_at) FROM events WHERE status = ?",
        (EventStatus.PENDING.value,),
    ).fetchone()
    rows = db.execute(
        "SELECT e.room_id, MAX(e.ts) - COALESCE(c.ts, MIN(e.ts)) FROM events e"
        " LEFT JOIN cursors c ON c.room_id = e.room_id"
        " WHERE e.status IN (?, ?) GROUP BY e.room_id, c.ts",
        (EventStatus.PENDING.value, EventStatus.INDEXED.value),
    ).fetchall()
    return LagReport(pending, oldest, {room: max(0, lag or 0) for room, lag in rows})


def lag_report_at(where: Location | Path | str) -> LagReport:
    """lag_figures on a read-only connection of its own (eventlog_db.reader)."""
    with reader(where) as db:
        return lag_figures(db)


def room_report(log: EventLog, room_id: str) -> dict[str, Any]:
    """Per-room figures for `!sources status`: messages and windows indexed, pending,
    and the cursor's event and time."""
    indexed, windows, pending = log.room_figures(RoomID(room_id))
    cursor = log.cursor(RoomID(room_id))
    return {
        "messages": indexed,
        "windows": windows,
        "pending": pending,
        "cursor_ts": cursor.ts if cursor else None,
        "cursor_event_id": cursor.event_id if cursor else None,
    }


def meta_at(where: Location | Path | str, key: str) -> str | None:
    """One event log meta value, read-only (doctor, beside a running service); None
    where there is no event log, or none this can read (doctor says why apart)."""
    try:
        with reader(where) as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return row[0] if row else None
    except FileNotFoundError:
        return None
    except Exception:  # too old to have the table, damaged, unreachable
        return None


def sender_servers(log: EventLog, room_id: RoomID, limit: int = 10) -> list[str]:
    """The servers of the people whose messages the log holds for the room, the most
    heard first: servers that were in the room, to join it through again."""
    with log.db.locked() as db:
        rows = db.execute(
            "SELECT sender, COUNT(*) AS n FROM events WHERE room_id = ?"
            " GROUP BY sender ORDER BY n DESC",
            (room_id,),
        ).fetchall()
    servers = [sender.partition(":")[2] for sender, _ in rows]
    return [s for s in dict.fromkeys(servers) if s][:limit]
