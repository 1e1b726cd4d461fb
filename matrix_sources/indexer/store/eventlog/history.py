"""Edits and redactions: the event log stays a faithful copy of the public history.

    m.replace by the original sender  -> the body is replaced, by target event id;
                                         the newest edit (origin_server_ts) wins; the
                                         derived filter judges the new text (an indexed
                                         message's window is re-cut, a derived message
                                         is pending again)
    m.replace by anyone else          -> ignored
    m.room.redaction                  -> the body is dropped, status `redacted`
    either one before its target      -> remembered; applied when the target arrives
                                         (a redacted event is then never stored)

A changed event that sits in a stored window marks the window dirty; the pipeline
re-chunks dirty windows without it and re-upserts them (Pipeline.process_all, first
thing: rechunk_windows of HistoryTables.dirty). `EventLog.append` applies all of it inside its own
transaction, so a crash never keeps half of it. The tables (edits, redactions,
dirty_windows) are made by eventlog/schema.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...records import EventID, EventStatus, RoomID, UserID, WindowID
from . import keywords
from .db import Database
from .feedback import expire_room_in, forget_user_in, forget_user_in_room
from .rows import DirtyWindow, Forgotten, Withdrawn
from .sqldialect import Cursor

GONE = (EventStatus.REDACTED.value, EventStatus.PURGED.value)


@dataclass(frozen=True, slots=True)
class Edit:
    """An `m.replace`: `target`'s new text, by `sender`, at `ts`."""

    target: EventID
    room_id: RoomID
    sender: UserID
    body: str
    ts: int
    event_id: EventID  # the edit's own


@dataclass(frozen=True, slots=True)
class Redaction:
    target: EventID
    room_id: RoomID
    ts: int
    event_id: EventID  # the redaction's own


@dataclass
class Applied:
    rooms: set[RoomID] = field(default_factory=set)  # rooms whose stored text changed
    redacted: set[EventID] = field(default_factory=set)
    edited: set[EventID] = field(default_factory=set)


class HistoryTables:
    """The edits, redactions and dirty_windows tables. The writes run on a cursor of a
    transaction that `EventLog.append` holds open."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def dirty(self, room_id: RoomID | None = None) -> list[DirtyWindow]:
        """The dirty windows, by id."""
        args: tuple[Any, ...]
        sql, args = "SELECT window_id, room_id, redacted != 0 FROM dirty_windows", ()
        if room_id is not None:
            sql, args = sql + " WHERE room_id = ?", (room_id,)
        with self.db.transaction(immediate=False) as cur:
            rows = cur.execute(sql + " ORDER BY window_id", args).fetchall()
        return [DirtyWindow(WindowID(w), RoomID(r), bool(red)) for w, r, red in rows]

    # -- forgetting a user (ingest/forget.py): the redaction path, by sender ---------

    def forget_sender(self, user_id: UserID, now_ms: int, source: str) -> Forgotten:
        """Drop the text of every stored message of `user_id` as a redaction does
        (status `redacted`, their windows marked dirty to be re-chunked and compacted away),
        drop their edits' text and their feedback (questions, votes), and record them
        forgotten; then empty the WAL. Returns (the event ids whose text went, how many
        windows were marked, how many messages the whole forget removed: this run and the
        earlier ones since the user was last forgotten anew, such as a run a crash cut off
        before its answer)."""
        with self.db.locked():  # the WAL emptied before anything else writes
            with self.db.transaction() as cur:
                rows, windows = self._withdraw(cur, "sender = ?", (user_id,))
                cur.execute("UPDATE edits SET body = NULL WHERE sender = ?", (user_id,))
                forget_user_in(cur, user_id)  # their questions and votes (feedback.py)
                before = cur.execute(
                    "SELECT messages FROM forgotten_users WHERE user_id = ?"
                    " AND readmit_from IS NULL",
                    (user_id,),
                ).fetchone()
                total = (before[0] if before else 0) + len(rows)
                cur.execute(
                    "INSERT INTO forgotten_users (user_id, forgotten_at, readmit_from,"
                    " source, messages) VALUES (?, ?, NULL, ?, ?)"
                    " ON CONFLICT(user_id) DO UPDATE"
                    " SET forgotten_at = excluded.forgotten_at, readmit_from = NULL,"
                    " source = excluded.source, messages = excluded.messages",
                    (user_id, now_ms, source, total),
                )
            self.db.truncate_wal()
        return Forgotten([EventID(r[0]) for r in rows], windows, total)

    def expire_before(self, room_id: RoomID, cutoff_ts: int) -> Withdrawn:
        """Room retention (ingest/retention.py): drop the text of the room's messages
        sent before `cutoff_ts` (ms) as a redaction does, their edits' text and the
        questions asked there before then (feedback.py); then empty the WAL. Returns
        (the event ids whose text went, windows marked)."""
        with self.db.locked():  # the WAL emptied before anything else writes
            with self.db.transaction() as cur:
                rows, windows = self._withdraw(cur, "room_id = ? AND ts < ?", (room_id, cutoff_ts))
                cur.executemany(
                    "UPDATE edits SET body = NULL WHERE target = ?", [(r[0],) for r in rows]
                )
                questions = expire_room_in(cur, room_id, cutoff_ts)
            if rows or questions:
                self.db.truncate_wal()
        return Withdrawn([EventID(r[0]) for r in rows], windows)

    def withdraw_senders(self, room_id: RoomID, denied: Callable[[str], bool]) -> Withdrawn:
        """Server ACLs (ingest/serveracl.py): drop the text of the room's messages whose
        sender `denied` names, and their edits' text, as a redaction does, and their
        questions and votes there (feedback.py); then empty the WAL. Returns (the event
        ids whose text went, windows marked)."""
        with self.db.locked():  # the WAL emptied before anything else writes
            with self.db.transaction() as cur:
                senders = [  # who said something there, asked the bot or voted
                    s
                    for (s,) in cur.execute(
                        "SELECT sender FROM events WHERE room_id = ? AND status NOT IN (?, ?)"
                        " UNION SELECT asker FROM feedback_questions WHERE room_id = ?"
                        " UNION SELECT sender FROM feedback_votes WHERE room_id = ?",
                        (room_id, *GONE, room_id, room_id),
                    ).fetchall()
                    if denied(s)
                ]
                rows: list[tuple[Any, ...]] = []
                windows = 0
                for sender in senders:
                    some, marked = self._withdraw(
                        cur, "room_id = ? AND sender = ?", (room_id, sender)
                    )
                    rows += some
                    windows += marked
                    cur.execute(
                        "UPDATE edits SET body = NULL WHERE room_id = ? AND sender = ?",
                        (room_id, sender),
                    )
                    forget_user_in_room(cur, UserID(sender), room_id)
            if senders:
                self.db.truncate_wal()
        return Withdrawn([EventID(r[0]) for r in rows], windows)

    @staticmethod
    def _withdraw(
        cur: Cursor, where: str, args: tuple[Any, ...]
    ) -> tuple[list[tuple[Any, ...]], int]:
        """The redaction path for the events `where` selects (text NULL, status
        `redacted`, their windows dirty with `redacted`); rows and windows marked."""
        gone = (EventStatus.REDACTED.value, EventStatus.PURGED.value)
        rows = cur.execute(
            f"SELECT event_id, room_id, window_id FROM events WHERE {where}"
            " AND status NOT IN (?, ?)",
            (*args, *gone),
        ).fetchall()
        cur.execute(
            f"UPDATE events SET body = NULL, window_id = NULL, status = ? WHERE {where}"
            " AND status NOT IN (?, ?)",
            (EventStatus.REDACTED.value, *args, *gone),
        )
        windows = {(w, r) for _, r, w in rows if w is not None}
        keywords.refresh(cur, [w for w, _ in windows])  # the words go with the text
        cur.executemany(
            "INSERT INTO dirty_windows (window_id, room_id, redacted)"
            " VALUES (?, ?, 1) ON CONFLICT(window_id) DO UPDATE SET"
            " redacted = 1",
            sorted(windows),
        )
        return rows, len(windows)

    def readmit_sender(self, user_id: UserID, now_ms: int) -> bool:
        """`forget --undo`: messages of `user_id` sent from `now_ms` on are admitted
        again (older ones stay out). False if they were not forgotten."""
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE forgotten_users SET readmit_from = ? WHERE user_id = ?"
                " AND readmit_from IS NULL",
                (now_ms, user_id),
            )
            return cur.rowcount > 0

    def forgotten_users(self) -> dict[UserID, int | None]:
        """Every user ever forgotten: the time from which their messages are admitted
        again (None: still forgotten)."""
        with self.db.locked() as db:
            rows = db.execute(
                "SELECT user_id, readmit_from FROM forgotten_users ORDER BY user_id"
            ).fetchall()
        return {UserID(u): r for u, r in rows}

    # -- inside the append's transaction ---------------------------------------------

    def filter_in(self, cur: Cursor, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Rows about to be appended: drop those already redacted; give those already
        edited (by their own sender) their newest text."""
        out = []
        for row in rows:
            event_id, sender = row[0], row[2]
            if cur.execute("SELECT 1 FROM redactions WHERE target = ?", (event_id,)).fetchone():
                continue
            edit = cur.execute(
                "SELECT sender, body FROM edits WHERE target = ?", (event_id,)
            ).fetchone()
            if edit is not None and edit[0] == sender:
                row = (row[0], row[1], row[2], row[3], edit[1], *row[5:])
            out.append(row)
        return out

    def apply(
        self, cur: Cursor, ops: Sequence[Edit | Redaction], applied: Applied, now_ms: int
    ) -> None:
        """`now_ms`: when they arrived, the edited messages' new `text_at`."""
        for op in ops:
            if isinstance(op, Redaction):
                if self._redact(cur, op):
                    applied.rooms.add(op.room_id)
                    applied.redacted.add(op.target)
            elif self._edit(cur, op, now_ms):
                applied.rooms.add(op.room_id)
                applied.edited.add(op.target)

    @staticmethod
    def _target(cur: Cursor, event_id: str) -> tuple[Any, ...] | None:
        return cur.execute(
            "SELECT room_id, sender, status, window_id FROM events WHERE event_id = ?", (event_id,)
        ).fetchone()

    def _redact(self, cur: Cursor, op: Redaction) -> bool:
        cur.execute(
            "INSERT INTO redactions (target, room_id, ts, redaction_event_id)"
            " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (op.target, op.room_id, op.ts, op.event_id),
        )
        cur.execute("UPDATE edits SET body = NULL WHERE target = ?", (op.target,))
        row = self._target(cur, op.target)
        if row is None or row[0] != op.room_id or row[2] in GONE:
            return False
        cur.execute(
            "UPDATE events SET body = NULL, status = ?, window_id = NULL WHERE event_id = ?",
            (EventStatus.REDACTED.value, op.target),
        )
        if row[3] is not None:
            self.mark_dirty(cur, row[3], op.room_id, redacted=True)
            keywords.refresh(cur, [row[3]])  # the words go with the text
        return True

    def _edit(self, cur: Cursor, op: Edit, now_ms: int) -> bool:
        if cur.execute("SELECT 1 FROM redactions WHERE target = ?", (op.target,)).fetchone():
            return False
        newest = cur.execute("SELECT ts FROM edits WHERE target = ?", (op.target,)).fetchone()
        if newest is not None and newest[0] > op.ts:
            return False  # an edit we already applied is newer
        row = self._target(cur, op.target)
        if row is not None and (row[0] != op.room_id or row[1] != op.sender or row[2] in GONE):
            return False  # edits by anyone but the original sender are ignored
        cur.execute(
            "INSERT INTO edits (target, room_id, sender, body, ts, edit_event_id)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (target) DO UPDATE SET"
            " room_id = excluded.room_id, sender = excluded.sender,"
            " body = excluded.body, ts = excluded.ts,"
            " edit_event_id = excluded.edit_event_id",
            (op.target, op.room_id, op.sender, op.body, op.ts, op.event_id),
        )
        if row is None:
            return False  # remembered until the target arrives
        cur.execute(
            "UPDATE events SET body = ?, text_at = ? WHERE event_id = ?",
            (op.body, now_ms, op.target),
        )
        if row[2] == EventStatus.INDEXED.value and row[3] is not None:
            self.mark_dirty(cur, row[3], op.room_id)  # re-cut, its messages judged again
            keywords.refresh(cur, [row[3]])  # found by what it says now
        elif row[2] == EventStatus.DERIVED.value:
            # Judged again as it reads now: the derived filter sees it pending.
            cur.execute(
                "UPDATE events SET status = ? WHERE event_id = ?",
                (EventStatus.PENDING.value, op.target),
            )
        return True

    def mark_dirty(self, cur: Cursor, window_id: str, room_id: str, redacted: bool = False) -> None:
        """Mark a stored window for re-chunking; `redacted`: its old vector must also
        leave the store's files by a compaction (an edit's need not: Matrix shows the original
        of an edited message to anyone in the room anyway)."""
        cur.execute(
            "INSERT INTO dirty_windows (window_id, room_id, redacted) VALUES (?, ?, ?)"
            " ON CONFLICT(window_id) DO UPDATE SET redacted ="
            f" {self.db.dialect.greatest}(dirty_windows.redacted, excluded.redacted)",
            (window_id, room_id, int(redacted)),
        )
