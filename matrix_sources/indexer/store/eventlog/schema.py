"""The event log's schema, as numbered migrations, one list for SQLite and PostgreSQL
(the dialect maps the few types that differ: sqldialect.py). The version is SQLite's
`PRAGMA user_version`, or PostgreSQL's one-row `schema_version` table.

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

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from . import keywords
from .sqldialect import Cursor, Dialect


class Database(Protocol):
    """What migrations need of the event log's database (eventlog_db.Database)."""

    dialect: Dialect

    def transaction(self, immediate: bool = True) -> AbstractContextManager[Cursor]: ...


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    what: str
    apply: Callable[[Cursor, Dialect], None]


def _sql(*statements: str) -> Callable[[Cursor, Dialect], None]:
    def run(cur: Cursor, dialect: Dialect) -> None:
        for statement in statements:
            cur.execute(dialect.ddl(statement))

    return run


def _steps(*steps: Callable[[Cursor, Dialect], None]) -> Callable[[Cursor, Dialect], None]:
    def run(cur: Cursor, dialect: Dialect) -> None:
        for step in steps:
            step(cur, dialect)

    return run


def _columns(table: str, *columns: tuple[str, str]) -> Callable[[Cursor, Dialect], None]:
    """Add what `table` lacks of (name, type) columns."""

    def run(cur: Cursor, dialect: Dialect) -> None:
        have = dialect.columns(cur, table)
        for name, kind in columns:
            if name not in have:
                cur.execute(dialect.ddl(f"ALTER TABLE {table} ADD COLUMN {name} {kind}"))

    return run


def _postgresql(*statements: str) -> Callable[[Cursor, Dialect], None]:
    """Statements for PostgreSQL only (SQLite has nothing to change: the version moves)."""

    def run(cur: Cursor, dialect: Dialect) -> None:
        if dialect.postgresql:
            for statement in statements:
                cur.execute(statement)

    return run


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "events, transactions, cursors, edits, redactions, dirty windows, meta",
        _sql(
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
        ),
    ),
    Migration(
        2,
        "replies and mentions kept (linkage); mentions: user ids, space-separated",
        _columns("events", ("reply_to", "TEXT"), ("mentions", "TEXT")),
    ),
    Migration(
        3,
        "dirty windows remember a redaction (its old text scrubbed)",
        _columns("dirty_windows", ("redacted", "INTEGER NOT NULL DEFAULT 0")),
    ),
    Migration(
        4,
        "derived messages: the artifact, kind, score and threshold judged",
        _columns(
            "events",
            ("derived_artifact", "TEXT"),
            ("derived_kind", "TEXT"),
            ("derived_score", "REAL"),
            ("derived_threshold", "REAL"),
        ),
    ),
    Migration(
        5,
        "the bot's replies and the events they quoted (answers.py)",
        _sql(
            """CREATE TABLE IF NOT EXISTS answers (
            reply_event_id TEXT PRIMARY KEY, room_id TEXT NOT NULL, in_reply_to TEXT,
            thread_root TEXT, hits TEXT NOT NULL, created_at INTEGER NOT NULL
        )""",
            """CREATE TABLE IF NOT EXISTS answer_quotes (
            event_id TEXT NOT NULL, reply_event_id TEXT NOT NULL,
            PRIMARY KEY (event_id, reply_event_id)
        )""",
        ),
    ),
    Migration(
        6,
        "where each timeline's open block starts (EventLog.room_tail)",
        _sql(
            """CREATE TABLE IF NOT EXISTS open_blocks (
            room_id TEXT NOT NULL, thread_root TEXT NOT NULL, first_event_id TEXT NOT NULL,
            PRIMARY KEY (room_id, thread_root)
        )"""
        ),
    ),
    Migration(
        7,
        "reference chunks' text: the event log is text's one home (eventlog/texts.py)",
        _sql(
            """CREATE TABLE IF NOT EXISTS ref_chunks (
            chunk_id TEXT PRIMARY KEY,
            corpus   TEXT NOT NULL,  -- the reference corpus name (`ref add NAME`)
            text     TEXT NOT NULL
        )"""
        ),
    ),
    Migration(
        8,
        "users forgotten on request (`matrix-sources forget`; ingest/forget.py)",
        _sql(
            """CREATE TABLE IF NOT EXISTS forgotten_users (
            user_id      TEXT PRIMARY KEY,
            forgotten_at INTEGER NOT NULL,  -- ms; their messages sent before stay out
            readmit_from INTEGER,           -- ms; NULL: still forgotten (`forget --undo`)
            source       TEXT NOT NULL
        )"""
        ),
    ),
    # ms, this service's clock: when the message's text as it reads now arrived (appended,
    # or its newest edit applied). The derived filter judges it only against artifacts
    # emitted before then (derived/filter.py); NULL (a row from before): its ts.
    Migration(
        9,
        "when each message's current text arrived (the derived filter's cutoff)",
        _columns("events", ("text_at", "INTEGER")),
    ),
    Migration(
        10,
        "PostgreSQL: ANALYZE keeps no sample of message text (docs/storage.md)",
        _postgresql(
            *(
                f"ALTER TABLE {t} ALTER COLUMN {c} SET STATISTICS 0"
                for t, c in (("events", "body"), ("edits", "body"), ("ref_chunks", "text"))
            )
        ),
    ),
    Migration(
        11,
        "embedding workers: claims on rooms, room labels, the collection's fence"
        " (eventlog/claims.py)",
        _sql(
            """CREATE TABLE IF NOT EXISTS claims (
            room_id  TEXT PRIMARY KEY,
            worker   TEXT NOT NULL,     -- who holds it ('' once released or revoked)
            token    INTEGER NOT NULL,  -- grows at every claim and revocation: a fence
            until_ms INTEGER NOT NULL   -- the lease's end, wall clock ms
        )""",
            "CREATE TABLE IF NOT EXISTS room_labels "
            "(room_id TEXT PRIMARY KEY, label TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS collection_fence (id INTEGER PRIMARY KEY)",
            "INSERT INTO collection_fence (id) VALUES (1) ON CONFLICT DO NOTHING",
        ),
    ),
    Migration(
        12,
        "when each event was appended, the pending ones indexed by it (how far "
        "indexing is behind: eventlog/status.py); `!sources` commands taken and "
        "not answered yet (commands.py)",
        _steps(
            _columns("events", ("received_at", "INTEGER")),
            _sql(
                "CREATE INDEX IF NOT EXISTS events_pending ON events (received_at)"
                " WHERE status = 'pending'",
                """CREATE TABLE IF NOT EXISTS commands (
            event_id    TEXT PRIMARY KEY,
            room_id     TEXT NOT NULL,
            sender      TEXT NOT NULL,
            ts          INTEGER NOT NULL,
            body        TEXT,              -- NULL once answered: a query is kept no longer
            thread_root TEXT,
            reply_to    TEXT,
            received_at INTEGER NOT NULL,  -- ms, wall clock
            answered_at INTEGER            -- ms; the row stays a day: a retry is not new
        )""",
            ),
        ),
    ),
    # The moderation report's (eventlog/feedback.py): each row goes after moderation.keep_days
    # days, with a redaction, `forget`, an erasure or the room's purge.
    Migration(
        13,
        "feedback: the bot's answers to searches and the votes on them",
        _steps(
            _sql(
                """CREATE TABLE IF NOT EXISTS feedback_questions (
            command_event_id TEXT PRIMARY KEY,
            room_id        TEXT NOT NULL,
            asker          TEXT NOT NULL,     -- whose ✅ marks it solved; forget finds it
            asked_at       INTEGER NOT NULL,  -- ms, the service's clock
            reply_event_id TEXT NOT NULL UNIQUE,  -- the bot's answer: what votes point at
            hits           INTEGER NOT NULL,  -- 0: "nothing matches"
            text           TEXT               -- the question, kept only when nothing matched
        )""",
                "CREATE INDEX IF NOT EXISTS feedback_questions_room"
                " ON feedback_questions (room_id, asked_at)",
                "CREATE INDEX IF NOT EXISTS feedback_questions_asker ON feedback_questions (asker)",
                """CREATE TABLE IF NOT EXISTS feedback_votes (
            reaction_event_id TEXT PRIMARY KEY,
            reply_event_id TEXT NOT NULL,
            room_id        TEXT NOT NULL,
            sender         TEXT NOT NULL,
            vote           TEXT NOT NULL,     -- up, down, solved
            voted_at       INTEGER NOT NULL   -- ms, the service's clock
        )""",
                "CREATE INDEX IF NOT EXISTS feedback_votes_room "
                "ON feedback_votes (room_id, voted_at)",
                "CREATE INDEX IF NOT EXISTS feedback_votes_sender ON feedback_votes (sender)",
            ),
            _postgresql("ALTER TABLE feedback_questions ALTER COLUMN text SET STATISTICS 0"),
        ),
    ),
    # A forget run again (its command resumed after a crash) reports the whole forget.
    Migration(
        14,
        "how many messages each user's forget removed, all runs of it together",
        _columns("forgotten_users", ("messages", "INTEGER NOT NULL DEFAULT 0")),
    ),
    # A pending command's text, sampled by ANALYZE, would outlive its answer. Re-stating
    # the column's type (no rewrite) drops the sample kept before.
    Migration(
        15,
        "PostgreSQL: ANALYZE keeps no sample of a command's text either",
        _postgresql(
            "ALTER TABLE commands ALTER COLUMN body SET STATISTICS 0",
            "ALTER TABLE commands ALTER COLUMN body TYPE TEXT",
        ),
    ),
    Migration(
        16,
        "the keyword leg's index beside the text it indexes (eventlog/keywords.py)",
        keywords.create,
    ),
)

LATEST = MIGRATIONS[-1].version
assert [m.version for m in MIGRATIONS] == list(range(1, LATEST + 1)), "numbered 1, 2, 3..."


def version(db: Database) -> int:
    with db.transaction(immediate=False) as cur:
        return db.dialect.version(cur)


def migrate(db: Database) -> list[int]:
    """Bring the event log up to LATEST; return the versions applied. Safe when two
    processes open an old log at once: each migration runs in a transaction that holds
    the migrations' lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock) and
    re-reads the version first."""
    applied = []
    dialect = db.dialect
    for m in MIGRATIONS:
        if version(db) >= m.version:
            continue
        with db.transaction() as cur:
            dialect.lock_migrations(cur)
            if dialect.version(cur) < m.version:  # another process may have got here first
                m.apply(cur, dialect)
                dialect.set_version(cur, m.version)
                applied.append(m.version)
    return applied
