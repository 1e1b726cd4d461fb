"""The event log as the one home of text (DESIGN.md "Stores and who writes them"):
`EventLog.texts`, what the store, search, the lexical leg and presentation read.

    chat window   -> its messages, as they are now (edits applied, redactions gone),
                     read from `events` by window id; formatted by chunker.document
    reference chunk -> its text, in `ref_chunks` (eventlog/schema.py, migration 7; the
                     reference sync writes it before the chunk's vector is upserted
                     and deletes it before the vector)

Chroma keeps vectors, ids and filter metadata only. Deleting a chunk's row or
zeroing an event's body leaves no bytes behind in SQLite: the event log runs with
`secure_delete=ON`, and the WAL is truncated after purges and compactions. PostgreSQL
keeps dead row versions until VACUUM: docs/storage.md says what to run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from ...records import (
    CORPUS_CHAT,
    CORPUS_REFERENCE,
    EventID,
    EventStatus,
    Message,
    RoomID,
    UserID,
    WindowID,
)
from . import keywords
from .db import Database
from .rows import MESSAGE_COLUMNS, EventText, message_of

_IN = 500  # ids per `IN (...)`: well under SQLite's variable limit
_Id = TypeVar("_Id", bound=str)


def _chunks(ids: list[_Id], n: int = _IN) -> Iterator[list[_Id]]:
    for i in range(0, len(ids), n):
        yield ids[i : i + n]


class TextReads:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- reference chunks ------------------------------------------------------------

    def put_ref_texts(self, rows: Iterable[tuple[str, str, str]]) -> None:
        """(chunk id, corpus name, text) of reference chunks about to be upserted."""
        rows = list(rows)
        with self.db.transaction() as cur:
            cur.executemany(
                "INSERT INTO ref_chunks (chunk_id, corpus, text) VALUES"
                " (?, ?, ?) ON CONFLICT(chunk_id) DO UPDATE SET"
                " corpus = excluded.corpus, text = excluded.text",
                rows,
            )
            keywords.refresh_refs(cur, [r[0] for r in rows])

    def drop_ref_texts(self, chunk_ids: Iterable[str]) -> int:
        """Delete reference chunks' text (zeroed in place: secure_delete)."""
        ids = [i for i in chunk_ids if i.startswith("r")]
        n = 0
        with self.db.transaction() as cur:
            for part in _chunks(ids):
                n += cur.execute(
                    f"DELETE FROM ref_chunks WHERE chunk_id IN ({','.join('?' * len(part))})", part
                ).rowcount
            keywords.drop(cur, ids)
        return n

    def ref_texts(self, chunk_ids: Iterable[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        ids = list(chunk_ids)
        with self.db.locked() as db:
            for part in _chunks(ids):
                out.update(
                    db.execute(
                        "SELECT chunk_id, text FROM ref_chunks WHERE chunk_id IN"
                        f" ({','.join('?' * len(part))})",
                        part,
                    ).fetchall()
                )
        return out

    def ref_chunk_ids(self) -> list[str]:
        with self.db.locked() as db:
            return [r[0] for r in db.execute("SELECT chunk_id FROM ref_chunks")]

    # -- chat windows ---------------------------------------------------------------

    def window_messages(self, window_id: WindowID) -> list[Message]:
        """The messages a stored window holds now (edits applied, redactions gone)."""
        with self.db.locked() as db:
            rows = db.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM events"
                " WHERE window_id = ? AND status = ? ORDER BY ts, seq",
                (window_id, EventStatus.INDEXED.value),
            ).fetchall()
        return [message_of(r) for r in rows]

    def event_texts(self, event_ids: Iterable[EventID]) -> dict[EventID, EventText]:
        """The text of those events whose text is still there (not redacted nor purged)."""
        ids = sorted(set(event_ids))
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        with self.db.locked() as db:
            rows = db.execute(
                f"SELECT event_id, sender, ts, body FROM events WHERE event_id IN ({marks})"
                " AND body IS NOT NULL AND status NOT IN (?, ?)",
                [*ids, EventStatus.REDACTED.value, EventStatus.PURGED.value],
            ).fetchall()
        return {EventID(e): EventText(UserID(sender), ts, body) for e, sender, ts, body in rows}

    def recent_bodies(self, room_id: RoomID, n: int) -> list[str]:
        """The text of a room's latest `n` messages that still have it (doctor's
        language share: read, measured, never kept)."""
        with self.db.locked() as db:
            rows = db.execute(
                "SELECT body FROM events WHERE room_id = ? AND body IS NOT NULL AND body != ''"
                " AND status NOT IN (?, ?) ORDER BY ts DESC, seq DESC LIMIT ?",
                (room_id, EventStatus.REDACTED.value, EventStatus.PURGED.value, n),
            ).fetchall()
        return [r[0] for r in rows]

    def replied_to(self, messages: Iterable[Message], hops: int) -> dict[EventID, str]:
        """The bodies of the messages these reply to, and those they reply to, up to
        `hops` replies back (indexed ones only: nothing redacted, forgotten or derived):
        the conversation a window goes on with from an earlier one."""
        seen = {m.event_id for m in messages}
        todo = {m.reply_to for m in messages if m.reply_to} - seen
        out: dict[EventID, str] = {}
        for _ in range(hops):
            if not todo:
                break
            ids = sorted(todo)
            seen |= todo
            todo = set()
            with self.db.locked() as db:
                for part in _chunks(ids):
                    marks = ",".join("?" * len(part))
                    for e, body, reply_to in db.execute(
                        f"SELECT event_id, body, reply_to FROM events WHERE event_id IN "
                        f"({marks}) AND body IS NOT NULL AND status = ?",
                        [*part, EventStatus.INDEXED.value],
                    ).fetchall():
                        out[EventID(e)] = body
                        if reply_to and reply_to not in seen:
                            todo.add(EventID(reply_to))
        return out

    def windows_messages(self, window_ids: Iterable[str]) -> dict[WindowID, list[Message]]:
        """Window id -> its messages now, for the windows that still hold any."""
        out: dict[WindowID, list[Message]] = {}
        ids = list(window_ids)
        with self.db.locked() as db:
            for part in _chunks(ids):
                rows = db.execute(
                    f"SELECT window_id, {MESSAGE_COLUMNS}"
                    f" FROM events WHERE window_id IN ({','.join('?' * len(part))})"
                    " AND status = ? ORDER BY window_id, ts, seq",
                    (*part, EventStatus.INDEXED.value),
                ).fetchall()
                for r in rows:
                    out.setdefault(WindowID(r[0]), []).append(message_of(r[1:]))
        return out

    def indexed_windows(self, page: int = 20_000) -> Iterator[tuple[str, list[Message]]]:
        """Every indexed window with its messages, in window id order, read in pages of
        about `page` events (the lexical postings' build at start)."""
        after = ""
        while True:
            with self.db.locked() as db:
                rows = db.execute(
                    f"SELECT window_id, {MESSAGE_COLUMNS}"
                    " FROM events WHERE status = ? AND window_id > ? AND window_id IN"
                    " (SELECT DISTINCT window_id FROM events WHERE status = ? AND window_id > ?"
                    "  ORDER BY window_id LIMIT ?) ORDER BY window_id, ts, seq",
                    (
                        EventStatus.INDEXED.value,
                        after,
                        EventStatus.INDEXED.value,
                        after,
                        max(1, page // 4),
                    ),
                ).fetchall()
            if not rows:
                return
            msgs: list[Message]
            current, msgs = rows[0][0], []
            for r in rows:
                if r[0] != current:
                    yield current, msgs
                    current, msgs = r[0], []
                msgs.append(message_of(r[1:]))
            yield current, msgs
            after = current

    def bodies_matching(
        self, test: Callable[[str], bool], room_id: str | None = None, contains: str | None = None
    ) -> set[str]:
        """Ids of the indexed windows one of whose message bodies passes `test`: the
        lexical leg's scan when its postings cannot answer. `contains`: an ASCII
        literal every passing body holds once normalised (NFKC, casefold), which the
        database checks first (a LIKE blind to ASCII case; a body with any other
        character is always tested, as normalising it may make the literal: "ＡＢＣ" is
        "abc")."""
        sql = "SELECT window_id, body FROM events WHERE status = ? AND window_id IS NOT NULL"
        args: tuple[Any, ...] = (EventStatus.INDEXED.value,)
        if room_id is not None:
            sql, args = sql + " AND room_id = ?", args + (room_id,)
        if contains and contains.isascii():
            like = contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            non_ascii, pattern = self.db.dialect.non_ascii("body")
            sql += f" AND (body {self.db.dialect.ilike} ? ESCAPE '\\' OR {non_ascii})"
            args += (f"%{like}%", pattern)
        out: set[str] = set()
        with self.db.locked() as db:
            for wid, body in db.execute(sql, args):
                if wid not in out and body and test(body):
                    out.add(wid)
        return out

    def refs_matching(self, test: Callable[[str], bool]) -> set[str]:
        with self.db.locked() as db:
            return {
                cid
                for cid, text in db.execute("SELECT chunk_id, text FROM ref_chunks")
                if test(text)
            }


__all__ = ["TextReads", "CORPUS_CHAT", "CORPUS_REFERENCE"]
