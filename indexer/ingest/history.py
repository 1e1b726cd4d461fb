"""Edits and redactions: the event log stays a faithful copy of the public history.

    m.replace by the original sender  -> the body is replaced, by target event id;
                                         the newest edit (origin_server_ts) wins
    m.replace by anyone else          -> ignored
    m.room.redaction                  -> the body is dropped, status `redacted`
    either one before its target      -> remembered; applied when the target arrives
                                         (a redacted event is then never stored)

A changed event that sits in a stored window marks the window dirty; the pipeline
re-chunks dirty windows without it and re-upserts them (Pipeline.process_dirty). All of
it runs inside the event log's append transaction, so a crash never keeps half of it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Sequence

from ..store.eventlog import EventLog
from .events import EditEvent, RedactionEvent
from ..records import EventID, EventStatus, RoomID

GONE = (EventStatus.REDACTED.value, EventStatus.PURGED.value)


@dataclass
class Applied:
    rooms: set[RoomID] = field(default_factory=set)  # rooms whose stored text changed
    redacted: set[EventID] = field(default_factory=set)
    edited: set[EventID] = field(default_factory=set)


class History:
    """Its tables (edits, redactions, dirty_windows; made by eventlog_schema.py) are
    read and written through the event log's transactions."""

    def __init__(self, eventlog: EventLog) -> None:
        self.eventlog = eventlog

    def apply(self, ops: Sequence[EditEvent | RedactionEvent]) -> Applied:
        """Apply edits and redactions in their own transaction (tests, tools); ingest
        passes them to `EventLog.append` through `hooks`, atomic with the append."""
        applied = Applied()
        _, after = self.hooks(ops, applied)
        self.eventlog.append([], after_insert=after)
        return applied

    def hooks(self, ops: Sequence[EditEvent | RedactionEvent], applied: Applied):
        """(before_insert, after_insert) for EventLog.append."""
        def after(cur: sqlite3.Cursor) -> None:
            for op in ops:
                if isinstance(op, RedactionEvent):
                    if self._redact(cur, op):
                        applied.rooms.add(op.room_id)
                        applied.redacted.add(op.target)
                elif self._edit(cur, op):
                    applied.rooms.add(op.room_id)
                    applied.edited.add(op.target)
        return self.filter_in, after

    # -- inside an open transaction ------------------------------------------------

    def filter_in(self, cur: sqlite3.Cursor, rows: list[tuple]) -> list[tuple]:
        """Rows about to be appended: drop those already redacted; give those already
        edited (by their own sender) their newest text."""
        out = []
        for row in rows:
            event_id, sender = row[0], row[2]
            if cur.execute("SELECT 1 FROM redactions WHERE target = ?", (event_id,)).fetchone():
                continue
            edit = cur.execute("SELECT sender, body FROM edits WHERE target = ?",
                               (event_id,)).fetchone()
            if edit is not None and edit[0] == sender:
                row = (row[0], row[1], row[2], row[3], edit[1], *row[5:])
            out.append(row)
        return out

    def _target(self, cur: sqlite3.Cursor, event_id: str):
        return cur.execute("SELECT room_id, sender, status, window_id FROM events"
                           " WHERE event_id = ?", (event_id,)).fetchone()

    def _redact(self, cur: sqlite3.Cursor, op: RedactionEvent) -> bool:
        cur.execute("INSERT OR IGNORE INTO redactions (target, room_id, ts, redaction_event_id)"
                    " VALUES (?, ?, ?, ?)", (op.target, op.room_id, op.ts, op.event_id))
        cur.execute("UPDATE edits SET body = NULL WHERE target = ?", (op.target,))
        row = self._target(cur, op.target)
        if row is None or row[0] != op.room_id or row[2] in GONE:
            return False
        cur.execute("UPDATE events SET body = NULL, status = ?, window_id = NULL"
                    " WHERE event_id = ?", (EventStatus.REDACTED.value, op.target))
        if row[3] is not None:
            self._dirty(cur, row[3], op.room_id, redacted=True)
        return True

    def _edit(self, cur: sqlite3.Cursor, op: EditEvent) -> bool:
        if cur.execute("SELECT 1 FROM redactions WHERE target = ?", (op.target,)).fetchone():
            return False
        newest = cur.execute("SELECT ts FROM edits WHERE target = ?", (op.target,)).fetchone()
        if newest is not None and newest[0] > op.ts:
            return False  # an edit we already applied is newer
        row = self._target(cur, op.target)
        if row is not None and (row[0] != op.room_id or row[1] != op.sender or row[2] in GONE):
            return False  # edits by anyone but the original sender are ignored
        cur.execute("INSERT OR REPLACE INTO edits (target, room_id, sender, body, ts,"
                    " edit_event_id) VALUES (?, ?, ?, ?, ?, ?)",
                    (op.target, op.room_id, op.sender, op.body, op.ts, op.event_id))
        if row is None:
            return False  # remembered until the target arrives
        cur.execute("UPDATE events SET body = ? WHERE event_id = ?", (op.body, op.target))
        if row[2] == EventStatus.INDEXED.value and row[3] is not None:
            self._dirty(cur, row[3], op.room_id)
        return True

    @staticmethod
    def _dirty(cur: sqlite3.Cursor, window_id: str, room_id: str,
               redacted: bool = False) -> None:
        """Mark a stored window for re-chunking; `redacted`: its old text must also be
        scrubbed from the store's files (an edit's need not: Matrix shows the original
        of an edited message to anyone in the room anyway)."""
        cur.execute("INSERT INTO dirty_windows (window_id, room_id, redacted) VALUES (?, ?, ?)"
                    " ON CONFLICT(window_id) DO UPDATE SET"
                    " redacted = MAX(redacted, excluded.redacted)",
                    (window_id, room_id, int(redacted)))

    # -- for the pipeline ------------------------------------------------------------

    def dirty(self, room_id: RoomID | None = None) -> list[tuple[str, str, bool]]:
        """(window id, room id, whether a redaction made it dirty) of dirty windows."""
        sql, args = "SELECT window_id, room_id, redacted != 0 FROM dirty_windows", ()
        if room_id is not None:
            sql, args = sql + " WHERE room_id = ?", (room_id,)
        with self.eventlog.transaction(immediate=False) as cur:
            return cur.execute(sql + " ORDER BY window_id", args).fetchall()
