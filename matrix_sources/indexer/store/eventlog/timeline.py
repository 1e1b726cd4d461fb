"""Reading a stretch of a timeline after a message: what question -> answer linkage
(linkage.py) looks through. `EventLog.timeline`."""

from __future__ import annotations

from ...records import EventID, EventStatus, Message, RoomID, UserID
from .db import Database
from .rows import MESSAGE_COLUMNS, message_of


class TimelineReads:
    def __init__(self, db: Database) -> None:
        self.db = db

    def timeline_after(
        self,
        room_id: RoomID,
        thread_root: EventID | None,
        since_ts: int,
        until_ts: int,
        limit: int,
        roots: tuple[EventID, ...] = (),
    ) -> list[tuple[Message, EventID | None]]:
        """Indexed messages of a timeline (the room's main one, or the thread of
        `thread_root`) from `since_ts` to `until_ts`, with the threads started by
        `roots`, in timeline order, as (message, its thread root); at most `limit`.
        Redacted, purged and derived messages are not there: only what is indexed now,
        with its edits applied."""
        marks = ",".join("?" * len(roots))
        threads = f" OR thread_root IN ({marks})" if roots else ""
        with self.db.locked() as db:
            rows = db.execute(
                f"SELECT {MESSAGE_COLUMNS}, thread_root"
                " FROM events WHERE room_id = ? AND status = ? AND ts >= ? AND ts <= ?"
                f" AND (COALESCE(thread_root, '') = ?{threads}) ORDER BY ts, seq LIMIT ?",
                (
                    room_id,
                    EventStatus.INDEXED.value,
                    since_ts,
                    until_ts,
                    thread_root or "",
                    *roots,
                    limit,
                ),
            ).fetchall()
        return [(message_of(r), EventID(r[7]) if r[7] else None) for r in rows]

    def said_by(
        self,
        room_id: RoomID,
        thread_root: EventID | None,
        sender: UserID,
        since_ts: int,
        until_ts: int,
        limit: int,
    ) -> list[Message]:
        """What one person said in a timeline (as timeline_after, without the threads
        of `roots`) after `since_ts` up to `until_ts`, in order; at most `limit`."""
        with self.db.locked() as db:
            rows = db.execute(
                f"SELECT {MESSAGE_COLUMNS}"
                " FROM events WHERE room_id = ? AND status = ? AND ts > ? AND ts <= ?"
                " AND sender = ? AND COALESCE(thread_root, '') = ? ORDER BY ts, seq LIMIT ?",
                (
                    room_id,
                    EventStatus.INDEXED.value,
                    since_ts,
                    until_ts,
                    sender,
                    thread_root or "",
                    limit,
                ),
            ).fetchall()
        return [message_of(r) for r in rows]

    def senders_before(
        self,
        room_id: RoomID,
        thread_root: EventID | None,
        since_ts: int,
        before_ts: int,
        limit: int,
    ) -> frozenset[UserID]:
        """Who sent the last `limit` indexed messages of a timeline from `since_ts` up
        to (not at) `before_ts`."""
        with self.db.locked() as db:
            rows = db.execute(
                "SELECT DISTINCT sender FROM (SELECT sender FROM events"
                " WHERE room_id = ? AND status = ? AND ts >= ? AND ts < ?"
                " AND COALESCE(thread_root, '') = ? ORDER BY ts DESC, seq DESC LIMIT ?) AS recent",
                (room_id, EventStatus.INDEXED.value, since_ts, before_ts, thread_root or "", limit),
            ).fetchall()
        return frozenset(UserID(r[0]) for r in rows)

    def thread_root_of(self, event_id: EventID) -> EventID | None:
        with self.db.locked() as db:
            row = db.execute(
                "SELECT thread_root FROM events WHERE event_id = ?", (event_id,)
            ).fetchone()
        return EventID(row[0]) if row and row[0] else None
