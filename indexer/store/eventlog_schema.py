"""The event log's schema, as numbered migrations; the version is `PRAGMA user_version`.

    version 0          a new file, or an event log made before versions were kept:
                       every migration runs, each one idempotent (CREATE ... IF NOT
                       EXISTS, a column added only where it is missing), so a log of
                       any earlier release opens and is brought up to date
    version n > 0      migrations n+1.. run, in order, each in its own transaction that
                       also sets the version: a crash keeps the log at the last version
                       fully applied

To change the schema, append a migration; never edit one that shipped. A log written
by a newer release (version above the last migration here) is left as it is.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    what: str
    apply: Callable[[sqlite3.Cursor], None]


def _sql(*statements: str) -> Callable[[sqlite3.Cursor], None]:
    def run(cur: sqlite3.Cursor) -> None:
        for statement in statements:
            cur.execute(statement)
    return run


def _columns(table: str, *columns: tuple[str, str]) -> Callable[[sqlite3.Cursor], None]:
    """Add what `table` lacks of (name, type) columns."""
    def run(cur: sqlite3.Cursor) -> None:
        have = {r[1] for r in cur.execute(f"PRAGMA table_info({table})")}
        for name, kind in columns:
            if name not in have:
                cur.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
    return run


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "events, transactions, cursors, edits, redactions, dirty windows, meta", _sql(
        """CREATE TABLE IF NOT EXISTS events (
            seq        INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id   TEXT NOT NULL UNIQUE,
            room_id    TEXT NOT NULL,
            sender     TEXT NOT NULL,
            ts         INTEGER NOT NULL,
            body       TEXT,
            status     TEXT NOT NULL,
            window_id  TEXT,
            thread_root TEXT
        )""",
        "CREATE INDEX IF NOT EXISTS events_room_status ON events (room_id, status, ts, seq)",
        "CREATE INDEX IF NOT EXISTS events_window ON events (window_id)",
        "CREATE TABLE IF NOT EXISTS txns (txn_key TEXT PRIMARY KEY, done_at INTEGER NOT NULL)",
        """CREATE TABLE IF NOT EXISTS cursors (
            room_id TEXT PRIMARY KEY, event_id TEXT NOT NULL, ts INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS edits (
            target TEXT PRIMARY KEY, room_id TEXT NOT NULL, sender TEXT NOT NULL,
            body TEXT, ts INTEGER NOT NULL, edit_event_id TEXT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS redactions (
            target TEXT PRIMARY KEY, room_id TEXT NOT NULL, ts INTEGER NOT NULL,
            redaction_event_id TEXT NOT NULL
        )""",
        "CREATE TABLE IF NOT EXISTS dirty_windows (window_id TEXT PRIMARY KEY,"
        " room_id TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    )),
    Migration(2, "replies and mentions kept (linkage); mentions: user ids, space-separated",
              _columns("events", ("reply_to", "TEXT"), ("mentions", "TEXT"))),
    Migration(3, "dirty windows remember a redaction (its old text scrubbed)",
              _columns("dirty_windows", ("redacted", "INTEGER NOT NULL DEFAULT 0"))),
    Migration(4, "derived messages: the artifact, kind, score and threshold judged",
              _columns("events", ("derived_artifact", "TEXT"), ("derived_kind", "TEXT"),
                       ("derived_score", "REAL"), ("derived_threshold", "REAL"))),
    Migration(5, "the bot's replies and the events they quoted (answers.py)", _sql(
        """CREATE TABLE IF NOT EXISTS answers (
            reply_event_id TEXT PRIMARY KEY, room_id TEXT NOT NULL, in_reply_to TEXT,
            thread_root TEXT, hits TEXT NOT NULL, created_at INTEGER NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS answer_quotes (
            event_id TEXT NOT NULL, reply_event_id TEXT NOT NULL,
            PRIMARY KEY (event_id, reply_event_id)
        )""",
    )),
    Migration(6, "where each timeline's open block starts (EventLog.room_tail)", _sql(
        """CREATE TABLE IF NOT EXISTS open_blocks (
            room_id TEXT NOT NULL, thread_root TEXT NOT NULL, first_event_id TEXT NOT NULL,
            PRIMARY KEY (room_id, thread_root)
        )""",
    )),
    Migration(7, "reference chunks' text: the event log is text's one home (eventlog_texts.py)",
              _sql(
        """CREATE TABLE IF NOT EXISTS ref_chunks (
            chunk_id TEXT PRIMARY KEY,
            corpus   TEXT NOT NULL,  -- the reference corpus name (`ref add NAME`)
            text     TEXT NOT NULL
        )""",
    )),
    Migration(8, "users forgotten on request (`matrix-sources forget`; ingest/forget.py)", _sql(
        """CREATE TABLE IF NOT EXISTS forgotten_users (
            user_id      TEXT PRIMARY KEY,
            forgotten_at INTEGER NOT NULL,  -- ms; their messages sent before stay out
            readmit_from INTEGER,           -- ms; NULL: still forgotten (`forget --undo`)
            source       TEXT NOT NULL
        )""",
    )),
    Migration(9, "when each event was appended, the pending ones indexed by it (how far "
                 "indexing is behind: eventlog_status.py); `!sources` commands taken and "
                 "not answered yet (commands.py)", lambda cur: (
        _columns("events", ("received_at", "INTEGER"))(cur),
        cur.execute("CREATE INDEX IF NOT EXISTS events_pending ON events (received_at)"
                    " WHERE status = 'pending'"),
        cur.execute("""CREATE TABLE IF NOT EXISTS commands (
            event_id    TEXT PRIMARY KEY,
            room_id     TEXT NOT NULL,
            sender      TEXT NOT NULL,
            ts          INTEGER NOT NULL,
            body        TEXT,              -- NULL once answered: a query is kept no longer
            thread_root TEXT,
            reply_to    TEXT,
            received_at INTEGER NOT NULL,  -- ms, wall clock
            answered_at INTEGER            -- ms; the row stays a day: a retry is not new
        )"""))),
)

LATEST = MIGRATIONS[-1].version
assert [m.version for m in MIGRATIONS] == list(range(1, LATEST + 1)), "numbered 1, 2, 3..."


@contextmanager
def atomic(db: sqlite3.Connection, immediate: bool = True) -> Iterator[sqlite3.Cursor]:
    """One SQLite transaction on a connection in autocommit mode: BEGIN IMMEDIATE (the
    write lock taken up front; `immediate=False`: BEGIN, for a consistent read), COMMIT
    when the block ends, ROLLBACK if it raised, or if the COMMIT itself failed."""
    cur = db.cursor()
    cur.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    try:
        yield cur
        cur.execute("COMMIT")
    except BaseException:
        cur.execute("ROLLBACK")
        raise


def version(db: sqlite3.Connection | sqlite3.Cursor) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: sqlite3.Connection) -> list[int]:
    """Bring the event log (a connection in autocommit mode) up to LATEST; return the
    versions applied. Safe when two processes open an old log at once: each migration
    runs under BEGIN IMMEDIATE and re-reads the version first."""
    applied = []
    for m in MIGRATIONS:
        if version(db) >= m.version:
            continue
        with atomic(db) as cur:
            if version(cur) < m.version:  # another process may have got here first
                m.apply(cur)
                cur.execute(f"PRAGMA user_version = {m.version}")
                applied.append(m.version)
    return applied
