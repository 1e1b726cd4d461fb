"""The event log: SQLite, the durable record of every event that passed the gate.

One writer per table (DESIGN.md): the transaction handler, import and backfill append
events and seen transaction ids; the pipeline assigns events to windows and advances
room cursors, in the same SQLite transaction, only after the store acknowledged the
upsert. `synchronous=FULL` so that "appended" means "on disk" before Synapse gets 200.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .eventlog_derived import DerivedColumns
from .eventlog_schema import atomic, migrate
from .eventlog_texts import TextReads, _chunks
from .eventlog_timeline import TimelineReads
from ..records import EventID, EventStatus, Message, RoomID, UserID, WindowID



def _message(r: tuple) -> Message:
    """A Message from (event_id, room_id, sender, ts, body, reply_to, mentions)."""
    return Message(EventID(r[0]), RoomID(r[1]), UserID(r[2]), r[3], r[4],
                   EventID(r[5]) if r[5] else None,
                   tuple(UserID(u) for u in (r[6] or "").split()))


@dataclass(frozen=True, slots=True)
class Tail:
    """What the pipeline re-chunks of one timeline (EventLog.room_tail)."""

    messages: list[Message]  # timeline order
    pending: set[EventID]
    held: dict[EventID, WindowID]  # the indexed ones, and the window each is in


@dataclass(frozen=True, slots=True)
class Cursor:
    room_id: RoomID
    event_id: EventID
    ts: int
    updated_at: int


class EventLog(DerivedColumns, TimelineReads, TextReads):
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared across threads (the pipeline runs in a worker thread),
        # serialised by a lock: SQLite writes are serial anyway.
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.RLock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            # Freed space is zeroed, so a purged body leaves no bytes in the file's pages.
            self._db.execute("PRAGMA secure_delete=ON")
            # The schema, and an event log of an earlier release brought up to it.
            migrate(self._db)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self, immediate: bool = True) -> Iterator[sqlite3.Cursor]:
        """One SQLite transaction, under the log's lock: its cursor. Committed when the
        block ends, rolled back if it raised. `immediate=False` for a consistent read
        that takes no write lock."""
        with self._lock, atomic(self._db, immediate) as cur:
            yield cur

    # -- appending (transaction handler, import, backfill) --------------------------

    def has_txn(self, txn_key: str) -> bool:
        with self._lock:
            row = self._db.execute("SELECT 1 FROM txns WHERE txn_key = ?", (txn_key,)).fetchone()
        return row is not None

    def append(self, messages: Iterable[tuple[Message, EventID | None]],
               txn_key: str | None = None,
               before_insert: Callable[[sqlite3.Cursor, list[tuple]], list[tuple]] | None = None,
               after_insert: Callable[[sqlite3.Cursor], None] | None = None) -> int:
        """Append messages (with their thread root) and, atomically with them, mark the
        transaction handled. Events already present are left as they are. Returns how
        many were new. The hooks run inside the same SQLite transaction (history.py:
        redactions and edits that arrived first, then this batch's edits/redactions)."""
        rows = [(m.event_id, m.room_id, m.sender, m.ts, m.body, EventStatus.PENDING.value,
                 root, m.reply_to, " ".join(m.mentions) or None) for m, root in messages]
        with self.transaction() as cur:
            if before_insert is not None:
                rows = before_insert(cur, rows)
            before = cur.connection.total_changes
            cur.executemany(
                "INSERT OR IGNORE INTO events (event_id, room_id, sender, ts, body, status,"
                " thread_root, reply_to, mentions) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            added = cur.connection.total_changes - before
            if after_insert is not None:
                after_insert(cur)
            if txn_key is not None:
                cur.execute("INSERT OR IGNORE INTO txns (txn_key, done_at) VALUES (?, ?)",
                            (txn_key, int(time.time() * 1000)))
        return added

    # -- reading (pipeline, search, status) -----------------------------------------

    def rooms_with_pending(self) -> list[RoomID]:
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT room_id FROM events WHERE status = ?",
                (EventStatus.PENDING.value,)).fetchall()
        return [RoomID(r[0]) for r in rows]

    def pending_threads(self, room_id: RoomID) -> list[EventID | None]:
        """The room's timelines with pending events: None for the main one, else the
        thread roots (a thread is its own sequence of windows)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT thread_root FROM events WHERE room_id = ? AND status = ?",
                (room_id, EventStatus.PENDING.value)).fetchall()
        return sorted((EventID(r[0]) if r[0] else None for r in rows),
                      key=lambda t: (t is not None, t or ""))

    def room_tail(self, room_id: RoomID, thread_root: EventID | None = None) -> Tail:
        """A timeline's last block (from the start the pipeline recorded) plus every
        pending message of it, in timeline order. The timeline is the room's main one,
        or the thread of `thread_root`. Re-chunking this tail gives the same windows as
        re-chunking the whole timeline (the chunker is greedy from a block start).
        Without a recorded start (an event log from before it was kept), the tail
        starts at the window of the timeline's latest indexed event."""
        thread = thread_root or ""
        with self._lock:
            row = self._db.execute(
                "SELECT e.ts, e.seq FROM open_blocks b JOIN events e"
                " ON e.event_id = b.first_event_id"
                " WHERE b.room_id = ? AND b.thread_root = ?", (room_id, thread)).fetchone()
            if row is None:
                row = self._db.execute(
                    "SELECT ts, seq FROM events WHERE window_id = ("
                    "SELECT window_id FROM events WHERE room_id = ? AND status = ?"
                    " AND COALESCE(thread_root, '') = ? ORDER BY ts DESC, seq DESC LIMIT 1)"
                    " ORDER BY ts, seq LIMIT 1",
                    (room_id, EventStatus.INDEXED.value, thread)).fetchone()
            start = tuple(row) if row else (2 ** 63 - 1, 0)
            rows = self._db.execute(
                "SELECT event_id, room_id, sender, ts, body, status, reply_to, mentions,"
                " window_id FROM events"
                " WHERE room_id = ? AND COALESCE(thread_root, '') = ?"
                " AND (status = ? OR (status = ? AND (ts, seq) >= (?, ?)))"
                " ORDER BY ts, seq",
                (room_id, thread, EventStatus.PENDING.value, EventStatus.INDEXED.value,
                 *start)).fetchall()
        pending = {EventID(r[0]) for r in rows if r[5] == EventStatus.PENDING.value}
        held = {EventID(r[0]): WindowID(r[8]) for r in rows
                if r[5] == EventStatus.INDEXED.value and r[8]}
        return Tail([_message(r[:5] + r[6:8]) for r in rows], pending, held)

    def mark_indexed(self, room_id: RoomID, assignments: dict[EventID, WindowID],
                     last: Message, block_start: tuple[EventID | None, EventID] | None = None
                     ) -> None:
        """Record what the store now holds and advance the room's cursor, atomically.
        Called only after the store acknowledged the upsert. `block_start`: (thread
        root, first event) of the timeline's last block, where its next re-chunk
        starts (room_tail)."""
        now = int(time.time() * 1000)
        with self.transaction() as cur:
            cur.executemany(
                "UPDATE events SET status = ?, window_id = ? WHERE event_id = ?",
                [(EventStatus.INDEXED.value, w, e) for e, w in assignments.items()])
            cur.execute(
                "INSERT INTO cursors (room_id, event_id, ts, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(room_id) DO UPDATE SET event_id = excluded.event_id,"
                " ts = excluded.ts, updated_at = excluded.updated_at"
                " WHERE excluded.ts >= cursors.ts",
                (room_id, last.event_id, last.ts, now))
            if block_start is not None:
                cur.execute("INSERT OR REPLACE INTO open_blocks VALUES (?, ?, ?)",
                            (room_id, block_start[0] or "", block_start[1]))

    def windows_emptied_by(self, assignments: dict[EventID, WindowID]) -> list[WindowID]:
        """The windows that would hold no event once `assignments` re-points its events:
        a re-cut took every one of their events elsewhere. The pipeline deletes them
        with the re-chunk's stale windows, before the re-point."""
        new = set(assignments.values())
        moving: dict[str, int] = {}
        with self._lock:
            ids = list(assignments)
            for part in _chunks(ids):
                rows = self._db.execute(
                    "SELECT event_id, window_id FROM events WHERE window_id IS NOT NULL"
                    f" AND window_id != '' AND event_id IN ({','.join('?' * len(part))})",
                    part).fetchall()
                for e, w in rows:
                    if w != assignments[EventID(e)] and w not in new:
                        moving[w] = moving.get(w, 0) + 1
            return sorted(WindowID(w) for w, n in moving.items() if self._db.execute(
                "SELECT COUNT(*) FROM events WHERE window_id = ?", (w,)).fetchone()[0] == n)

    def window_messages(self, window_id: WindowID) -> list[Message]:
        """The messages a stored window holds now (edits applied, redactions gone)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT event_id, room_id, sender, ts, body, reply_to, mentions FROM events"
                " WHERE window_id = ? AND status = ? ORDER BY ts, seq",
                (window_id, EventStatus.INDEXED.value)).fetchall()
        return [_message(r) for r in rows]

    def requeue_all(self) -> int:
        """A rebuild: every indexed event back to pending, cursors and dirty marks gone."""
        with self.transaction() as cur:
            cur.execute("UPDATE events SET status = ?, window_id = NULL WHERE status = ?",
                        (EventStatus.PENDING.value, EventStatus.INDEXED.value))
            n = cur.rowcount
            cur.execute("DELETE FROM cursors")
            cur.execute("DELETE FROM open_blocks")
            cur.execute("DELETE FROM dirty_windows")
        return n

    def requeue_windows(self, window_ids: list[WindowID]) -> int:
        """Windows the store lost: their events go back to pending, to be rebuilt."""
        with self.transaction() as cur:
            n = 0
            for w in window_ids:
                cur.execute("UPDATE events SET status = ?, window_id = NULL"
                            " WHERE window_id = ? AND status = ?",
                            (EventStatus.PENDING.value, w, EventStatus.INDEXED.value))
                n += cur.rowcount
        return n

    def rewindow(self, old: WindowID, new: WindowID | None) -> None:
        """A dirty window was re-chunked (history.py): its events now sit in `new`."""
        self.rewindow_many([(old, new)])

    def rewindow_many(self, pairs: list[tuple[WindowID, WindowID | None]]) -> None:
        """rewindow for many windows, in one transaction."""
        if not pairs:
            return
        with self.transaction() as cur:
            for old, new in pairs:
                if new is not None and new != old:
                    cur.execute("UPDATE events SET window_id = ? WHERE window_id = ?"
                                " AND status = ?", (new, old, EventStatus.INDEXED.value))
                cur.execute("DELETE FROM dirty_windows WHERE window_id = ?", (old,))

    def cursor(self, room_id: RoomID) -> Cursor | None:
        with self._lock:
            row = self._db.execute("SELECT room_id, event_id, ts, updated_at FROM cursors"
                                   " WHERE room_id = ?", (room_id,)).fetchone()
        return Cursor(RoomID(row[0]), EventID(row[1]), row[2], row[3]) if row else None

    def counts(self, room_id: RoomID | None = None) -> dict[str, int]:
        sql = "SELECT status, COUNT(*) FROM events"
        args: tuple = ()
        if room_id is not None:
            sql += " WHERE room_id = ?"
            args = (room_id,)
        with self._lock:
            rows = self._db.execute(sql + " GROUP BY status", args).fetchall()
        return {status: n for status, n in rows}

    def window_ids(self) -> set[WindowID]:
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT window_id FROM events"
                                    " WHERE window_id IS NOT NULL AND status = ?",
                                    (EventStatus.INDEXED.value,)).fetchall()
        return {WindowID(r[0]) for r in rows}

    def texts(self, event_ids: Iterable[EventID]) -> dict[EventID, tuple[UserID, int, str]]:
        """event id -> (sender, ts, body) of those events whose text is still there (not
        redacted nor purged)."""
        ids = sorted(set(event_ids))
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        with self._lock:
            rows = self._db.execute(
                f"SELECT event_id, sender, ts, body FROM events WHERE event_id IN ({marks})"
                " AND body IS NOT NULL AND status NOT IN (?, ?)",
                [*ids, EventStatus.REDACTED.value, EventStatus.PURGED.value]).fetchall()
        return {EventID(r[0]): (UserID(r[1]), r[2], r[3]) for r in rows}

    def room_figures(self, room_id: RoomID) -> tuple[int, int, int]:
        """(messages indexed, windows holding them, messages pending) of one room."""
        with self._lock:
            indexed, windows = self._db.execute(
                "SELECT COUNT(*), COUNT(DISTINCT window_id) FROM events"
                " WHERE room_id = ? AND status = ?", (room_id, EventStatus.INDEXED.value)
            ).fetchone()
            pending = self._db.execute(
                "SELECT COUNT(*) FROM events WHERE room_id = ? AND status = ?",
                (room_id, EventStatus.PENDING.value)).fetchone()[0]
        return indexed, windows, pending

    def status_of(self, event_id: EventID) -> tuple[str, WindowID | None] | None:
        with self._lock:
            row = self._db.execute("SELECT status, window_id FROM events WHERE event_id = ?",
                                   (event_id,)).fetchone()
        return (row[0], row[1]) if row else None

    def quarantine_timestamps(self, max_ts: int) -> list[tuple[EventID, RoomID]]:
        """Pending events whose timestamp no calendar prints (stored before the parse
        checked it): their text dropped (status purged), so they stall no run. Returns
        (event id, room id) of each, for the journal."""
        with self.transaction() as cur:
            rows = cur.execute("SELECT event_id, room_id FROM events WHERE status = ?"
                               " AND (ts > ? OR ts < 0)",
                               (EventStatus.PENDING.value, max_ts)).fetchall()
            cur.executemany("UPDATE events SET body = NULL, status = ? WHERE event_id = ?",
                            [(EventStatus.PURGED.value, r[0]) for r in rows])
        return [(EventID(e), RoomID(r)) for e, r in rows]

    # -- purging (a room refused after the fact; see purge.py) -----------------------

    def has_text(self, room_id: RoomID) -> bool:
        """Whether any event of the room still holds its text (pending or indexed)."""
        with self._lock:
            row = self._db.execute("SELECT 1 FROM events WHERE room_id = ? AND status != ?"
                                   " LIMIT 1", (room_id, EventStatus.PURGED.value)).fetchone()
        return row is not None

    def rooms_with_text(self) -> list[RoomID]:
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT room_id FROM events WHERE status != ?",
                                    (EventStatus.PURGED.value,)).fetchall()
        return [RoomID(r[0]) for r in rows]

    def purge_room(self, room_id: RoomID) -> int:
        """Drop the text of every event of the room (status `purged`, so the pipeline
        never looks at them again) and its cursor, in one transaction; then empty the
        WAL, which still holds page images with the old bodies. Returns how many events
        lost their text."""
        with self._lock:  # the WAL emptied before anything else writes
            with self.transaction() as cur:
                cur.execute("UPDATE events SET body = NULL, window_id = NULL, status = ?"
                            " WHERE room_id = ? AND status != ?",
                            (EventStatus.PURGED.value, room_id, EventStatus.PURGED.value))
                purged = cur.rowcount
                cur.execute("DELETE FROM cursors WHERE room_id = ?", (room_id,))
                cur.execute("DELETE FROM open_blocks WHERE room_id = ?", (room_id,))
                # Edits hold message text too; dirty windows are gone with the room.
                cur.execute("DELETE FROM edits WHERE room_id = ?", (room_id,))
                cur.execute("DELETE FROM dirty_windows WHERE room_id = ?", (room_id,))
            self.truncate_wal()
        return purged

    # -- forgetting a user (ingest/forget.py): the redaction path, by sender ---------

    def forget_sender(self, user_id: UserID, now_ms: int, source: str
                      ) -> tuple[list[EventID], int]:
        """Drop the text of every stored message of `user_id` as a redaction does
        (status `redacted`, their windows marked dirty to be re-chunked and scrubbed),
        drop their edits' text, and record them forgotten; then empty the WAL. Returns
        (the event ids whose text went, how many windows were marked)."""
        with self._lock:
            with self.transaction() as cur:
                rows, windows = self._withdraw(cur, "sender = ?", (user_id,))
                cur.execute("UPDATE edits SET body = NULL WHERE sender = ?", (user_id,))
                cur.execute("INSERT INTO forgotten_users (user_id, forgotten_at, readmit_from,"
                            " source) VALUES (?, ?, NULL, ?) ON CONFLICT(user_id) DO UPDATE"
                            " SET forgotten_at = excluded.forgotten_at, readmit_from = NULL,"
                            " source = excluded.source", (user_id, now_ms, source))
            self.truncate_wal()
        return [EventID(r[0]) for r in rows], windows

    def expire_before(self, room_id: RoomID, cutoff_ts: int) -> tuple[list[EventID], int]:
        """Room retention (ingest/retention.py): drop the text of the room's messages
        sent before `cutoff_ts` (ms) as a redaction does, and their edits' text; then
        empty the WAL. Returns (the event ids whose text went, windows marked)."""
        with self._lock:
            with self.transaction() as cur:
                rows, windows = self._withdraw(cur, "room_id = ? AND ts < ?",
                                               (room_id, cutoff_ts))
                cur.executemany("UPDATE edits SET body = NULL WHERE target = ?",
                                [(r[0],) for r in rows])
            if rows:
                self.truncate_wal()
        return [EventID(r[0]) for r in rows], windows

    @staticmethod
    def _withdraw(cur: sqlite3.Cursor, where: str, args: tuple) -> tuple[list[tuple], int]:
        """The redaction path for the events `where` selects (text NULL, status
        `redacted`, their windows dirty with `redacted`); rows and windows marked."""
        gone = (EventStatus.REDACTED.value, EventStatus.PURGED.value)
        rows = cur.execute(f"SELECT event_id, room_id, window_id FROM events WHERE {where}"
                           " AND status NOT IN (?, ?)", (*args, *gone)).fetchall()
        cur.execute(f"UPDATE events SET body = NULL, window_id = NULL, status = ? WHERE {where}"
                    " AND status NOT IN (?, ?)", (EventStatus.REDACTED.value, *args, *gone))
        windows = {(w, r) for _, r, w in rows if w is not None}
        cur.executemany("INSERT INTO dirty_windows (window_id, room_id, redacted)"
                        " VALUES (?, ?, 1) ON CONFLICT(window_id) DO UPDATE SET"
                        " redacted = 1", sorted(windows))
        return rows, len(windows)

    def readmit_sender(self, user_id: UserID, now_ms: int) -> bool:
        """`forget --undo`: messages of `user_id` sent from `now_ms` on are admitted
        again (older ones stay out). False if they were not forgotten."""
        with self.transaction() as cur:
            cur.execute("UPDATE forgotten_users SET readmit_from = ? WHERE user_id = ?"
                        " AND readmit_from IS NULL", (now_ms, user_id))
            return cur.rowcount > 0

    def forgotten_users(self) -> dict[UserID, int | None]:
        """Every user ever forgotten: the time from which their messages are admitted
        again (None: still forgotten)."""
        with self._lock:
            rows = self._db.execute("SELECT user_id, readmit_from FROM forgotten_users"
                                    " ORDER BY user_id").fetchall()
        return {UserID(u): r for u, r in rows}

    def truncate_wal(self) -> bool:
        """Checkpoint every WAL frame into the database and truncate the WAL to zero
        bytes. False if a reader in another process kept it from completing (the frames
        then go at the next successful checkpoint)."""
        with self._lock:
            busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return busy == 0

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key)"
                             " DO UPDATE SET value = excluded.value", (key, value))
