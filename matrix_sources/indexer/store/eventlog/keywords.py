"""The keyword leg's index, in the event log beside the text it indexes (migration 16):

    kw_docs      one row a stored window or reference chunk: its number (`doc`), id,
                 room ('' for a chunk), corpus, and length in words (BM25's)
    kw_postings  (seg, key, doc, tf): the doc's bodies hold `key` tf times; seg is the
                 doc's block of numbers (SEG_BITS); keys are cut by the project's
                 tokenizer (indexer/tokens.py), the one that cuts queries

Every write that changes which text a window holds (mark_indexed, a re-chunk's move, a
redaction, a forget, an expiry, a purge, a rebuild, a reference chunk's text) refreshes
that window's rows from `events` in the same transaction (`refresh`), so the words leave
with the text, atomically; with SQLite's secure_delete their bytes are zeroed in the file
(the WAL is emptied after every withdrawal, as for the text). Search reads it through
`KeywordIndex` (keyword_reads.py); no process builds postings in memory.

Why tables of our own and not FTS5: FTS5 tokenizes what it stores, and none of its
tokenizers leaves our keys as they are (`max_bytes`, `2.6.8`, `c++`, CJK bigrams) without
a tokenizer written in C; BM25 needs each key's count in each window, which a
(key, doc) row keeps and one indexed range scan a segment reads, also for a stem's prefix. The same
tables serve PostgreSQL, where `key` sorts bytewise (COLLATE "C") so a prefix is a range.

An event log from before migration 16 gains its index at the service's first start
(`build`: window by window in id order, resumable from `keywords_after` in `meta`);
until `keywords_ready` is set, search scans the text as before (search/lexical.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from ...records import CORPUS_CHAT, CORPUS_REFERENCE, EventStatus
from ...tokens import doc_keys
from .sqldialect import Cursor, Dialect


class Database(Protocol):
    """What the index needs of the event log's database (db.Database; named here, not
    imported: the database's schema makes these tables)."""

    dialect: Dialect

    def transaction(self, immediate: bool = True) -> AbstractContextManager[Cursor]: ...

    def locked(self) -> AbstractContextManager[Any]: ...


READY = "keywords_ready"  # meta: every window and chunk is indexed
AFTER = "keywords_after"  # meta: the build's progress, the last window id done
_IN = 500
TF_MAX = 63  # a key's count in one window, capped: BM25 saturates long before
# Postings are kept by (segment, key, doc), a segment being 2**SEG_BITS consecutive doc
# numbers: new windows' rows land in the last segment's small part of the tree instead
# of one leaf page a key across all of it (a write's cost stays flat as the index
# grows); a read seeks each segment (tens at a million windows).
SEG_BITS = 12
T = TypeVar("T")


def _chunks(ids: Sequence[T], n: int = _IN) -> Iterator[Sequence[T]]:
    for i in range(0, len(ids), n):
        yield ids[i : i + n]


def _marks(n: int) -> str:
    return ",".join("?" * n)


def create(cur: Cursor, dialect: Dialect) -> None:
    """Migration 16: the tables; an event log with nothing indexed yet is ready at once
    (a new data dir), any other is built at the service's next start."""
    key = 'key TEXT COLLATE "C" NOT NULL' if dialect.postgresql else "key TEXT NOT NULL"
    tail = "" if dialect.postgresql else " WITHOUT ROWID"
    for statement in (
        """CREATE TABLE IF NOT EXISTS kw_docs (
            doc       INTEGER PRIMARY KEY AUTOINCREMENT,
            window_id TEXT NOT NULL UNIQUE,
            room_id   TEXT NOT NULL,
            corpus    TEXT NOT NULL,
            length    INTEGER NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS kw_docs_room ON kw_docs (room_id)",
        f"""CREATE TABLE IF NOT EXISTS kw_postings (
            seg INTEGER NOT NULL, {key}, doc INTEGER NOT NULL, tf INTEGER NOT NULL,
            PRIMARY KEY (seg, key, doc)
        ){tail}""",
        "CREATE INDEX IF NOT EXISTS kw_postings_doc ON kw_postings (doc)",
    ):
        cur.execute(dialect.ddl(statement))
    if dialect.postgresql:  # ANALYZE would keep a sample of the words (pg_statistic)
        cur.execute("ALTER TABLE kw_postings ALTER COLUMN key SET STATISTICS 0")
    indexed = cur.execute(
        "SELECT 1 FROM events WHERE status = ? LIMIT 1", (EventStatus.INDEXED.value,)
    ).fetchone()
    if indexed is None and cur.execute("SELECT 1 FROM ref_chunks LIMIT 1").fetchone() is None:
        _set(cur, READY, "1")


def _set(cur: Cursor, key: str, value: str) -> None:
    cur.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key)"
        " DO UPDATE SET value = excluded.value",
        (key, value),
    )


# -- writes: inside the event log's own transactions --------------------------------


def drop(cur: Cursor, window_ids: Sequence[str]) -> None:
    """Remove the windows' (or chunks') rows."""
    for part in _chunks(sorted(set(window_ids))):
        marks = _marks(len(part))
        cur.execute(
            "DELETE FROM kw_postings WHERE doc IN"
            f" (SELECT doc FROM kw_docs WHERE window_id IN ({marks}))",
            part,
        )
        cur.execute(f"DELETE FROM kw_docs WHERE window_id IN ({marks})", part)


def drop_room(cur: Cursor, room_id: str) -> None:
    cur.execute(
        "DELETE FROM kw_postings WHERE doc IN (SELECT doc FROM kw_docs WHERE room_id = ?)",
        (room_id,),
    )
    cur.execute("DELETE FROM kw_docs WHERE room_id = ?", (room_id,))


def drop_chat(cur: Cursor) -> None:
    """Every chat window's rows (a rebuild: nothing is indexed any more)."""
    cur.execute(
        "DELETE FROM kw_postings WHERE doc IN (SELECT doc FROM kw_docs WHERE corpus = ?)",
        (CORPUS_CHAT,),
    )
    cur.execute("DELETE FROM kw_docs WHERE corpus = ?", (CORPUS_CHAT,))


def refresh(cur: Cursor, window_ids: Iterable[str | None]) -> None:
    """The windows' rows as their indexed events read now: rewritten, or removed for
    a window that holds none."""
    ids = sorted({w for w in window_ids if w})
    drop(cur, ids)
    for part in _chunks(ids):
        rows = cur.execute(
            "SELECT window_id, room_id, body FROM events WHERE window_id IN"
            f" ({_marks(len(part))}) AND status = ? ORDER BY window_id, ts, seq",
            (*part, EventStatus.INDEXED.value),
        ).fetchall()
        bodies: dict[str, tuple[str, list[str]]] = {}
        for wid, room, body in rows:
            bodies.setdefault(wid, (room, []))[1].append(body or "")
        _put(cur, [(wid, room, CORPUS_CHAT, texts) for wid, (room, texts) in bodies.items()])


def refresh_refs(cur: Cursor, chunk_ids: Iterable[str]) -> None:
    """Reference chunks' rows as `ref_chunks` holds their text now."""
    ids = sorted(set(chunk_ids))
    drop(cur, ids)
    for part in _chunks(ids):
        rows = cur.execute(
            f"SELECT chunk_id, text FROM ref_chunks WHERE chunk_id IN ({_marks(len(part))})", part
        ).fetchall()
        _put(cur, [(cid, "", CORPUS_REFERENCE, [text]) for cid, text in rows])


def _put(cur: Cursor, docs: list[tuple[str, str, str, list[str]]]) -> None:
    """(id, room, corpus, texts) of docs the index lacks: their rows."""
    cut = [(wid, room, corpus, *doc_keys(texts)) for wid, room, corpus, texts in docs]
    if isinstance(cur, sqlite3.Cursor):
        # One writer at a time (BEGIN IMMEDIATE): numbers past the largest, in one
        # statement for all (a number freed by a delete may come back: its rows went
        # with it).
        row = cur.execute("SELECT COALESCE(MAX(doc), 0) FROM kw_docs").fetchone()
        numbers = list(range(row[0] + 1, row[0] + 1 + len(cut)))
        cur.executemany(
            "INSERT INTO kw_docs (doc, window_id, room_id, corpus, length) VALUES (?, ?, ?, ?, ?)",
            [
                (n, w, r, c, min(length, 0x7FFFFFFF))
                for n, (w, r, c, length, _) in zip(numbers, cut)
            ],
        )
    else:  # writers run side by side (embedding workers): the identity numbers them
        numbers = []
        for wid, room, corpus, length, _ in cut:
            got = cur.execute(
                "INSERT INTO kw_docs (window_id, room_id, corpus, length) VALUES (?, ?, ?, ?)"
                " RETURNING doc",
                (wid, room, corpus, min(length, 0x7FFFFFFF)),
            ).fetchone()
            assert got is not None  # RETURNING gives the row
            numbers.append(got[0])
    postings = [
        (n >> SEG_BITS, k, n, tf if tf < TF_MAX else TF_MAX)
        for n, (*_, counts) in zip(numbers, cut)
        for k, tf in counts.items()
    ]
    # In key order: the inserts walk the tree once instead of hopping.
    postings.sort()
    cur.executemany("INSERT INTO kw_postings (seg, key, doc, tf) VALUES (?, ?, ?, ?)", postings)


# -- the build, for an event log from before the index ------------------------------


def build(
    db: Database,
    progress: Callable[[int, int], None] | None = None,
    pause: Callable[[], None] = lambda: None,
    page: int = 200,
) -> int:
    """Index every indexed window and reference chunk the index lacks, `page` windows a
    transaction, in window id order from where a stopped build got to; then mark the
    index ready. Writes meanwhile refresh their own windows (same transactions, so
    whichever runs last reads the text as it is). `progress(done, total)` after each
    page; `pause()` before each (a search waiting runs first). Returns windows done."""
    # Window ids in code point order on both (PostgreSQL's own collation may differ).
    wid = 'window_id COLLATE "C"' if db.dialect.postgresql else "window_id"
    with db.locked() as conn:
        if _get(conn, READY):
            return 0
        after = _get(conn, AFTER) or ""
        total = conn.execute(
            "SELECT COUNT(DISTINCT window_id) FROM events WHERE status = ?",
            (EventStatus.INDEXED.value,),
        ).fetchone()[0]
        done = conn.execute(
            f"SELECT COUNT(DISTINCT window_id) FROM events WHERE status = ? AND {wid} <= ?",
            (EventStatus.INDEXED.value, after),
        ).fetchone()[0]
    n = 0
    while True:
        pause()
        with db.transaction() as cur:
            ids = [
                r[0]
                for r in cur.execute(
                    f"SELECT DISTINCT {wid} AS w FROM events WHERE status = ? AND {wid} > ?"
                    " ORDER BY w LIMIT ?",
                    (EventStatus.INDEXED.value, after, page),
                )
            ]
            if not ids:
                refs = [r[0] for r in cur.execute("SELECT chunk_id FROM ref_chunks")]
                refresh_refs(cur, refs)
                _set(cur, READY, "1")
                cur.execute("DELETE FROM meta WHERE key = ?", (AFTER,))
                return n
            refresh(cur, ids)
            after = ids[-1]
            _set(cur, AFTER, after)
        n += len(ids)
        if progress is not None:
            progress(done + n, max(total, done + n))


def reset(cur: Cursor) -> None:
    """Forget the index (a moved event log's copy): the next build makes it anew."""
    cur.execute("DELETE FROM kw_postings")
    cur.execute("DELETE FROM kw_docs")
    cur.execute("DELETE FROM meta WHERE key IN (?, ?)", (READY, AFTER))


def _get(conn: Any, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None
