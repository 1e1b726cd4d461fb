"""The event log: the durable record of every event that passed the gate, in SQLite
(the embedded default) or PostgreSQL (`store.database`; eventlog/db.py).

One writer per table (DESIGN.md): the transaction handler, import and backfill append
events and seen transaction ids; the pipeline assigns events to windows and advances
room cursors, in the same transaction, only after the store acknowledged the upsert.
SQLite runs `synchronous=FULL` and PostgreSQL commits durably, so that "appended" means
"on disk" before Synapse gets 200.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...clock import REAL, Clock
from ...config import Database as Location
from ...records import EventID, EventStatus, Message, RoomID, UserID, WindowID
from . import keywords
from .claims import ClaimTables
from .db import Database
from .derived import DerivedColumns
from .feedback import FeedbackTables, forget_room_in
from .history import Applied, Edit, HistoryTables, Redaction
from .keyword_reads import KeywordIndex
from .rows import BlockStart, EventState, Quarantined, RoomFigures, WindowMove
from .sqldialect import Cursor as SqlCursor
from .status import StatusReads
from .texts import TextReads, _chunks
from .timeline import TimelineReads


def _message(
    event_id: str,
    room_id: str,
    sender: str,
    ts: int,
    body: str,
    reply_to: str | None,
    mentions: str | None,
) -> Message:
    """A Message from its columns (mentions: user ids joined by spaces)."""
    return Message(
        EventID(event_id),
        RoomID(room_id),
        UserID(sender),
        ts,
        body,
        EventID(reply_to) if reply_to else None,
        tuple(UserID(u) for u in (mentions or "").split()),
    )


def backfill_key(room_id: str) -> str:
    """The meta key of backfill's progress through a room (ingest/backfill.py)."""
    return f"backfill_token:{room_id}"


@dataclass(frozen=True, slots=True)
class Tail:
    """What the pipeline re-chunks of one timeline (EventLog.room_tail)."""

    messages: list[Message]  # timeline order
    pending: set[EventID]
    held: dict[EventID, WindowID]  # the indexed ones, and the window each is in


def _unsplit(db: Any, room_id: RoomID, thread: str, start: tuple[int, int]) -> tuple[int, int]:
    """`start` moved back until no stored window of the timeline holds indexed events on
    both sides of it. A tail starting inside a window would re-point only the window's
    later events and delete it whole as stale, leaving its earlier events indexed in no
    window; history older than the open block (a backfill racing live events) moves the
    recorded start there, and windows follow conversations, so they interleave."""
    while True:
        row = db.execute(
            "SELECT ts, seq FROM events WHERE status = ? AND window_id IN ("
            "SELECT window_id FROM events WHERE room_id = ? AND status = ?"
            " AND COALESCE(thread_root, '') = ? AND (ts, seq) >= (?, ?)"
            " AND window_id IS NOT NULL) ORDER BY ts, seq LIMIT 1",
            (EventStatus.INDEXED.value, room_id, EventStatus.INDEXED.value, thread, *start),
        ).fetchone()
        if row is None or tuple(row) >= start:
            return start
        start = tuple(row)


@dataclass(frozen=True, slots=True)
class Cursor:
    room_id: RoomID
    event_id: EventID
    ts: int
    updated_at: int


class EventLog:
    """The core (appending, the pipeline's reads and writes, purges, meta), with its
    parts on one `Database`: `history` (edits, redactions, dirty windows), `texts`
    (what the store and search read), `timeline` (linkage's reads), `derived` (the
    derived-message columns), `claims` (embedding workers' claims on rooms), `status`
    (the backlog, and what is indexed where), `feedback` (the moderators' report)."""

    def __init__(
        self, where: Location | Path | str, read_only: bool = False, clock: Clock = REAL
    ) -> None:
        """`where`: store.database (config.Database), or an SQLite file's path, or a
        postgresql:// URL. `read_only`: a reader beside a running writer. `clock`: its
        wall clock stamps when an event was appended, indexed or queued again."""
        self.db = Database(where, read_only)
        self.clock = clock
        self.location = self.db.location
        self.path = self.db.path  # the SQLite file; None on PostgreSQL
        self.history = HistoryTables(self.db)
        self.texts = TextReads(self.db)
        self.timeline = TimelineReads(self.db)
        self.derived = DerivedColumns(self.db)
        self.claims = ClaimTables(self.db)
        self.status = StatusReads(self.db)
        self.feedback = FeedbackTables(self.db)
        self.keywords = KeywordIndex(self.db)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self, immediate: bool = True) -> Iterator[SqlCursor]:
        """Database.transaction: for the store's own tables (answers.py) and tests."""
        with self.db.transaction(immediate) as cur:
            yield cur

    # -- appending (transaction handler, import, backfill) --------------------------

    def has_txn(self, txn_key: str) -> bool:
        with self.db.locked() as db:
            row = db.execute("SELECT 1 FROM txns WHERE txn_key = ?", (txn_key,)).fetchone()
        return row is not None

    def append(
        self,
        messages: Iterable[tuple[Message, EventID | None]],
        txn_key: str | None = None,
        history: Sequence[Edit | Redaction] | None = None,
        applied: Applied | None = None,
    ) -> int:
        """Append messages (with their thread root) and, atomically with them, mark the
        transaction handled. Events already present are left as they are. Returns how
        many were new. With `history` (an empty one too), in the same SQLite
        transaction: the redactions and edits that arrived before their target are
        applied to the messages, then the batch's edits and redactions, in order
        (eventlog/history.py), what they changed noted in `applied`."""
        now = self.clock.now_ms()
        rows = [
            (
                m.event_id,
                m.room_id,
                m.sender,
                m.ts,
                m.body,
                EventStatus.PENDING.value,
                root,
                m.reply_to,
                " ".join(m.mentions) or None,
                now,
                now,
            )
            for m, root in messages
        ]
        with self.transaction() as cur:
            if history is not None:
                rows = self.history.filter_in(cur, rows)
            added = (
                cur.executemany(
                    "INSERT INTO events (event_id, room_id, sender, ts, body, status,"
                    " thread_root, reply_to, mentions, text_at, received_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING",
                    rows,
                ).rowcount
                if rows
                else 0
            )
            if history is not None:
                self.history.apply(cur, history, applied if applied is not None else Applied(), now)
            if txn_key is not None:
                cur.execute(
                    "INSERT INTO txns (txn_key, done_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    (txn_key, now),
                )
        return added

    # -- reading (pipeline, search, status) -----------------------------------------

    def rooms_with_pending(self) -> list[RoomID]:
        with self.db.locked() as db:
            rows = db.execute(
                "SELECT DISTINCT room_id FROM events WHERE status = ?", (EventStatus.PENDING.value,)
            ).fetchall()
        return [RoomID(r[0]) for r in rows]

    def pending_threads(self, room_id: RoomID) -> list[EventID | None]:
        """The room's timelines with pending events: None for the main one, else the
        thread roots (a thread is its own sequence of windows)."""
        with self.db.locked() as db:
            rows = db.execute(
                "SELECT DISTINCT thread_root FROM events WHERE room_id = ? AND status = ?",
                (room_id, EventStatus.PENDING.value),
            ).fetchall()
        return sorted(
            (EventID(r[0]) if r[0] else None for r in rows), key=lambda t: (t is not None, t or "")
        )

    def room_tail(self, room_id: RoomID, thread_root: EventID | None = None) -> Tail:
        """A timeline's last block (from the start the pipeline recorded) plus every
        pending message of it, in timeline order. The timeline is the room's main one,
        or the thread of `thread_root`. Re-chunking this tail gives the same windows as
        re-chunking the whole timeline (the chunker is greedy from a block start).
        Without a recorded start (an event log from before it was kept), the tail
        starts at the window of the timeline's latest indexed event."""
        thread = thread_root or ""
        with self.db.locked() as db:
            row = db.execute(
                "SELECT e.ts, e.seq FROM open_blocks b JOIN events e"
                " ON e.event_id = b.first_event_id"
                " WHERE b.room_id = ? AND b.thread_root = ?",
                (room_id, thread),
            ).fetchone()
            if row is None:
                row = db.execute(
                    "SELECT ts, seq FROM events WHERE window_id = ("
                    "SELECT window_id FROM events WHERE room_id = ? AND status = ?"
                    " AND COALESCE(thread_root, '') = ? ORDER BY ts DESC, seq DESC LIMIT 1)"
                    " ORDER BY ts, seq LIMIT 1",
                    (room_id, EventStatus.INDEXED.value, thread),
                ).fetchone()
            start = _unsplit(db, room_id, thread, tuple(row)) if row else (2**63 - 1, 0)
            rows = db.execute(
                "SELECT event_id, room_id, sender, ts, body, status, reply_to, mentions,"
                " window_id FROM events"
                " WHERE room_id = ? AND COALESCE(thread_root, '') = ?"
                " AND (status = ? OR (status = ? AND (ts, seq) >= (?, ?)))"
                " ORDER BY ts, seq",
                (room_id, thread, EventStatus.PENDING.value, EventStatus.INDEXED.value, *start),
            ).fetchall()
        messages: list[Message] = []
        pending: set[EventID] = set()
        held: dict[EventID, WindowID] = {}
        for event_id, room, sender, ts, body, status, reply_to, mentions, window_id in rows:
            messages.append(_message(event_id, room, sender, ts, body, reply_to, mentions))
            if status == EventStatus.PENDING.value:
                pending.add(EventID(event_id))
            elif status == EventStatus.INDEXED.value and window_id:
                held[EventID(event_id)] = WindowID(window_id)
        return Tail(messages, pending, held)

    def mark_indexed(
        self,
        room_id: RoomID,
        assignments: dict[EventID, WindowID],
        last: Message,
        block_start: BlockStart | None = None,
    ) -> None:
        """Record what the store now holds and advance the room's cursor, atomically.
        Called only after the store acknowledged the upsert. `block_start`: where the
        timeline's last block starts, and so its next re-chunk (room_tail)."""
        now = self.clock.now_ms()
        live = (EventStatus.PENDING.value, EventStatus.INDEXED.value)
        with self.transaction() as cur:
            before = self._windows_of(cur, list(assignments))
            cur.executemany(
                "UPDATE events SET status = ?, window_id = ? WHERE event_id = ?"
                " AND status IN (?, ?)",
                [(EventStatus.INDEXED.value, w, e, *live) for e, w in assignments.items()],
            )
            self._withdrawn_meanwhile(cur, assignments)
            # The keyword index holds what the windows hold now, from this transaction.
            keywords.refresh(cur, before | set(assignments.values()))
            cur.execute(
                "INSERT INTO cursors (room_id, event_id, ts, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(room_id) DO UPDATE SET event_id = excluded.event_id,"
                " ts = excluded.ts, updated_at = excluded.updated_at"
                " WHERE excluded.ts >= cursors.ts",
                (room_id, last.event_id, last.ts, now),
            )
            if block_start is not None:
                cur.execute(
                    "INSERT INTO open_blocks (room_id, thread_root, first_event_id)"
                    " VALUES (?, ?, ?) ON CONFLICT (room_id, thread_root) DO UPDATE"
                    " SET first_event_id = excluded.first_event_id",
                    (room_id, block_start.thread_root or "", block_start.first_event),
                )

    @staticmethod
    def _windows_of(cur: SqlCursor, event_ids: list[EventID]) -> set[str]:
        out: set[str] = set()
        for part in _chunks(event_ids):
            out.update(
                r[0]
                for r in cur.execute(
                    "SELECT DISTINCT window_id FROM events WHERE window_id IS NOT NULL"
                    f" AND event_id IN ({','.join('?' * len(part))})",
                    part,
                )
            )
        return out

    def _withdrawn_meanwhile(self, cur: SqlCursor, assignments: dict[EventID, WindowID]) -> None:
        """Events redacted (or forgotten, or expired) while their window was embedded:
        the window just stored was made from their text. It is marked dirty as a
        redaction marks it, so it is re-chunked without them and its old vector
        scrubbed (eventlog/history.py)."""
        ids = list(assignments)
        for part in _chunks(ids):
            rows = cur.execute(
                f"SELECT event_id, room_id FROM events WHERE event_id IN"
                f" ({','.join('?' * len(part))}) AND status = ?",
                (*part, EventStatus.REDACTED.value),
            ).fetchall()
            for event_id, room in rows:
                self.history.mark_dirty(cur, assignments[EventID(event_id)], room, redacted=True)

    def windows_emptied_by(self, assignments: dict[EventID, WindowID]) -> list[WindowID]:
        """The windows that would hold no event once `assignments` re-points its events:
        a re-cut took every one of their events elsewhere. The pipeline deletes them
        with the re-chunk's stale windows, before the re-point."""
        new = set(assignments.values())
        moving: dict[str, int] = {}
        with self.db.locked() as db:
            ids = list(assignments)
            for part in _chunks(ids):
                rows = db.execute(
                    "SELECT event_id, window_id FROM events WHERE window_id IS NOT NULL"
                    f" AND window_id != '' AND event_id IN ({','.join('?' * len(part))})",
                    part,
                ).fetchall()
                for e, w in rows:
                    if w != assignments[EventID(e)] and w not in new:
                        moving[w] = moving.get(w, 0) + 1
            return sorted(
                WindowID(w)
                for w, n in moving.items()
                if db.execute("SELECT COUNT(*) FROM events WHERE window_id = ?", (w,)).fetchone()[0]
                == n
            )

    def requeue_all(self) -> int:
        """A rebuild: every indexed event back to pending, cursors and dirty marks gone."""
        with self.transaction() as cur:
            # Waiting since now (eventlog_status.Backlog), not since first appended.
            cur.execute(
                "UPDATE events SET status = ?, window_id = NULL, received_at = ? WHERE status = ?",
                (EventStatus.PENDING.value, self.clock.now_ms(), EventStatus.INDEXED.value),
            )
            n = cur.rowcount
            keywords.drop_chat(cur)
            cur.execute("DELETE FROM cursors")
            cur.execute("DELETE FROM open_blocks")
            cur.execute("DELETE FROM dirty_windows")
        return n

    def requeue_windows(self, window_ids: list[WindowID]) -> int:
        """Windows the store lost: their events go back to pending, to be rebuilt."""
        with self.transaction() as cur:
            n = 0
            for w in window_ids:
                cur.execute(
                    "UPDATE events SET status = ?, window_id = NULL, received_at = ?"
                    " WHERE window_id = ? AND status = ?",
                    (EventStatus.PENDING.value, self.clock.now_ms(), w, EventStatus.INDEXED.value),
                )
                n += cur.rowcount
            keywords.drop(cur, window_ids)
        return n

    def rewindow_many(self, moves: list[WindowMove]) -> None:
        """Dirty windows were re-chunked (eventlog/history.py): each old window's events
        now sit in its new one; in one transaction."""
        if not moves:
            return
        with self.transaction() as cur:
            for move in moves:
                if move.new is not None and move.new != move.old:
                    cur.execute(
                        "UPDATE events SET window_id = ? WHERE window_id = ? AND status = ?",
                        (move.new, move.old, EventStatus.INDEXED.value),
                    )
                cur.execute("DELETE FROM dirty_windows WHERE window_id = ?", (move.old,))
            keywords.refresh(cur, [w for m in moves for w in (m.old, m.new)])

    def cursor(self, room_id: RoomID) -> Cursor | None:
        with self.db.locked() as db:
            row = db.execute(
                "SELECT room_id, event_id, ts, updated_at FROM cursors WHERE room_id = ?",
                (room_id,),
            ).fetchone()
        return Cursor(RoomID(row[0]), EventID(row[1]), row[2], row[3]) if row else None

    def counts(self, room_id: RoomID | None = None) -> dict[str, int]:
        sql = "SELECT status, COUNT(*) FROM events"
        args: tuple[Any, ...] = ()
        if room_id is not None:
            sql += " WHERE room_id = ?"
            args = (room_id,)
        with self.db.locked() as db:
            rows = db.execute(sql + " GROUP BY status", args).fetchall()
        return {status: n for status, n in rows}

    def window_ids(self) -> set[WindowID]:
        with self.db.locked() as db:
            rows = db.execute(
                "SELECT DISTINCT window_id FROM events WHERE window_id IS NOT NULL AND status = ?",
                (EventStatus.INDEXED.value,),
            ).fetchall()
        return {WindowID(r[0]) for r in rows}

    def room_figures(self, room_id: RoomID) -> RoomFigures:
        """One room's messages indexed, windows holding them, and messages pending."""
        with self.db.locked() as db:
            indexed, windows = db.execute(
                "SELECT COUNT(*), COUNT(DISTINCT window_id) FROM events"
                " WHERE room_id = ? AND status = ?",
                (room_id, EventStatus.INDEXED.value),
            ).fetchone()
            pending = db.execute(
                "SELECT COUNT(*) FROM events WHERE room_id = ? AND status = ?",
                (room_id, EventStatus.PENDING.value),
            ).fetchone()[0]
        return RoomFigures(indexed, windows, pending)

    def status_of(self, event_id: EventID) -> EventState | None:
        with self.db.locked() as db:
            row = db.execute(
                "SELECT status, window_id FROM events WHERE event_id = ?", (event_id,)
            ).fetchone()
        return EventState(row[0], row[1]) if row else None

    def quarantine_timestamps(self, max_ts: int) -> list[Quarantined]:
        """Pending events whose timestamp no calendar prints (stored before the parse
        checked it): their text dropped (status purged), so they stall no run. Returns
        each of them, for the journal."""
        with self.transaction() as cur:
            rows = cur.execute(
                "SELECT event_id, room_id FROM events WHERE status = ? AND (ts > ? OR ts < 0)",
                (EventStatus.PENDING.value, max_ts),
            ).fetchall()
            cur.executemany(
                "UPDATE events SET body = NULL, status = ? WHERE event_id = ?",
                [(EventStatus.PURGED.value, r[0]) for r in rows],
            )
        return [Quarantined(EventID(e), RoomID(r)) for e, r in rows]

    # -- purging (a room refused after the fact; see purge.py) -----------------------

    def has_text(self, room_id: RoomID) -> bool:
        """Whether any event of the room still holds its text (pending or indexed)."""
        with self.db.locked() as db:
            row = db.execute(
                "SELECT 1 FROM events WHERE room_id = ? AND status != ? LIMIT 1",
                (room_id, EventStatus.PURGED.value),
            ).fetchone()
        return row is not None

    def rooms_with_text(self) -> list[RoomID]:
        with self.db.locked() as db:
            rows = db.execute(
                "SELECT DISTINCT room_id FROM events WHERE status != ?", (EventStatus.PURGED.value,)
            ).fetchall()
        return [RoomID(r[0]) for r in rows]

    def purge_room(self, room_id: RoomID) -> int:
        """Drop the text of every event of the room (status `purged`, so the pipeline
        never looks at them again) and its cursor, in one transaction; then empty the
        WAL, which still holds page images with the old bodies. Returns how many events
        lost their text."""
        with self.db.locked():  # the WAL emptied before anything else writes
            with self.transaction() as cur:
                # A worker's batch of the room in flight lands before this, or never.
                self.claims.revoke(cur, room_id)
                cur.execute(
                    "UPDATE events SET body = NULL, window_id = NULL, status = ?"
                    " WHERE room_id = ? AND status != ?",
                    (EventStatus.PURGED.value, room_id, EventStatus.PURGED.value),
                )
                purged = cur.rowcount
                keywords.drop_room(cur, room_id)
                cur.execute("DELETE FROM cursors WHERE room_id = ?", (room_id,))
                cur.execute("DELETE FROM open_blocks WHERE room_id = ?", (room_id,))
                # Edits hold message text too; dirty windows are gone with the room.
                cur.execute("DELETE FROM edits WHERE room_id = ?", (room_id,))
                cur.execute("DELETE FROM dirty_windows WHERE room_id = ?", (room_id,))
                forget_room_in(cur, room_id)  # its unanswered questions' text too
            self.truncate_wal()
        return purged

    def read_again(self, room_id: RoomID) -> int:
        """A purged room admitted again (the bot invited back): its purged rows and
        backfill's progress dropped, so backfill reads it from its start and stores its
        messages anew. Returns how many rows went."""
        with self.transaction() as cur:
            cur.execute(
                "DELETE FROM events WHERE room_id = ? AND status = ?",
                (room_id, EventStatus.PURGED.value),
            )
            dropped = cur.rowcount
            cur.execute("DELETE FROM meta WHERE key = ?", (backfill_key(room_id),))
        return dropped

    def truncate_wal(self) -> bool:
        """Database.truncate_wal: after the store dropped text too (compaction)."""
        return self.db.truncate_wal()

    def get_meta(self, key: str) -> str | None:
        with self.db.locked() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self.db.locked() as db:
            db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key)"
                " DO UPDATE SET value = excluded.value",
                (key, value),
            )
