"""The event log's schema: numbered migrations with a stored version, old logs upgraded,
one schema on SQLite and PostgreSQL, and one transaction context manager."""

from __future__ import annotations

import sqlite3

import pytest

from matrix_sources.indexer.records import EventID, Message, RoomID, UserID
from matrix_sources.indexer.store.eventlog import schema as eventlog_schema
from matrix_sources.indexer.store.eventlog.db import Database
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.eventlog.schema import (
    LATEST,
    MIGRATIONS,
    Migration,
    migrate,
    version,
)

ROOM = RoomID("!r:x")

# What the release before versioned migrations made of a fresh data dir: eventlog.py's
# SCHEMA, the derived columns added on open, then answers.py's SCHEMA (AnswerLog).
PREVIOUS_RELEASE = """
CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE,
    room_id TEXT NOT NULL, sender TEXT NOT NULL, ts INTEGER NOT NULL, body TEXT,
    status TEXT NOT NULL, window_id TEXT, thread_root TEXT, reply_to TEXT, mentions TEXT);
CREATE INDEX events_room_status ON events (room_id, status, ts, seq);
CREATE INDEX events_window ON events (window_id);
CREATE TABLE txns (txn_key TEXT PRIMARY KEY, done_at INTEGER NOT NULL);
CREATE TABLE cursors (room_id TEXT PRIMARY KEY, event_id TEXT NOT NULL, ts INTEGER NOT NULL,
    updated_at INTEGER NOT NULL);
CREATE TABLE edits (target TEXT PRIMARY KEY, room_id TEXT NOT NULL, sender TEXT NOT NULL,
    body TEXT, ts INTEGER NOT NULL, edit_event_id TEXT NOT NULL);
CREATE TABLE redactions (target TEXT PRIMARY KEY, room_id TEXT NOT NULL, ts INTEGER NOT NULL,
    redaction_event_id TEXT NOT NULL);
CREATE TABLE dirty_windows (window_id TEXT PRIMARY KEY, room_id TEXT NOT NULL,
    redacted INTEGER NOT NULL DEFAULT 0);
CREATE TABLE open_blocks (room_id TEXT NOT NULL, thread_root TEXT NOT NULL,
    first_event_id TEXT NOT NULL, PRIMARY KEY (room_id, thread_root));
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
ALTER TABLE events ADD COLUMN derived_artifact TEXT;
ALTER TABLE events ADD COLUMN derived_kind TEXT;
ALTER TABLE events ADD COLUMN derived_score REAL;
ALTER TABLE events ADD COLUMN derived_threshold REAL;
CREATE TABLE answers (reply_event_id TEXT PRIMARY KEY, room_id TEXT NOT NULL,
    in_reply_to TEXT, thread_root TEXT, hits TEXT NOT NULL, created_at INTEGER NOT NULL);
CREATE TABLE answer_quotes (event_id TEXT NOT NULL, reply_event_id TEXT NOT NULL,
    PRIMARY KEY (event_id, reply_event_id));
INSERT INTO events (event_id, room_id, sender, ts, body, status, reply_to)
    VALUES ('$q', '!r:x', '@a:x', 1, 'how do I rotate the key', 'pending', NULL);
INSERT INTO answers VALUES ('$reply', '!r:x', '$cmd', NULL, '[]', 5);
INSERT INTO answer_quotes VALUES ('$q', '$reply');
"""


def layout(path) -> dict[str, list[tuple]]:
    """Every table's columns (name, type, not null, default, pk), and every index."""
    db = sqlite3.connect(path)
    try:
        tables = [
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                " ORDER BY name"
            )
        ]
        out = {t: [tuple(r[1:]) for r in db.execute(f"PRAGMA table_info({t})")] for t in tables}
        out["(indexes)"] = sorted(
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            )
        )
        return out
    finally:
        db.close()


def user_version(path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


def tables(db: Database) -> set[str]:
    with db.transaction(immediate=False) as cur:
        return db.dialect.tables(cur)


def test_migrations_are_numbered_from_one_and_a_fresh_log_is_at_the_latest(eventlog_db):
    assert [m.version for m in MIGRATIONS] == list(range(1, LATEST + 1))
    log = EventLog(eventlog_db)
    assert version(log.db) == LATEST
    log.close()
    if log.path is not None:
        assert user_version(log.path) == LATEST  # SQLite keeps it in the file's header


def pg_layout(dsn: str) -> dict[str, list[str]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema()"
            " ORDER BY table_name, ordinal_position"
        ).fetchall()
    out: dict[str, list[str]] = {}
    for table, column in rows:
        out.setdefault(table, []).append(column)
    return out


def test_postgresql_gets_the_same_tables_and_columns_as_sqlite(tmp_path):
    from tests.pgkit import fresh_schema

    EventLog(tmp_path / "eventlog.sqlite3").close()
    sqlite_tables = {
        t: [c[0] for c in cols]
        for t, cols in layout(tmp_path / "eventlog.sqlite3").items()
        if t != "(indexes)"
    }
    with fresh_schema() as dsn:
        EventLog(dsn).close()
        got = pg_layout(dsn)
    assert got.pop("schema_version") == ["version"]  # PostgreSQL's PRAGMA user_version
    assert got == sqlite_tables


def test_a_log_of_the_previous_release_opens_upgraded_with_its_data(tmp_path):
    old = tmp_path / "old.sqlite3"
    db = sqlite3.connect(old)
    db.executescript(PREVIOUS_RELEASE)
    db.close()
    assert user_version(old) == 0
    log = EventLog(old)
    assert user_version(old) == LATEST
    # The same tables, columns (in the same order) and indexes as a log made today.
    EventLog(tmp_path / "new.sqlite3").close()
    assert layout(old) == layout(tmp_path / "new.sqlite3")
    assert log.texts.event_texts([EventID("$q")]) == {"$q": ("@a:x", 1, "how do I rotate the key")}
    from matrix_sources.indexer.store.answers import AnswerLog

    assert [a.reply_event_id for a in AnswerLog(log).quoting({EventID("$q")})] == ["$reply"]
    log.close()


# The release that moved reference text into the event log (h14b), still unversioned.
TEXT_IN_EVENT_LOG_RELEASE = (
    PREVIOUS_RELEASE
    + """
CREATE TABLE ref_chunks (chunk_id TEXT PRIMARY KEY, corpus TEXT NOT NULL, text TEXT NOT NULL);
INSERT INTO ref_chunks VALUES ('r1', 'docs', 'rotate the key with keyctl');
"""
)


def test_a_log_with_reference_text_but_no_version_opens_upgraded_with_its_text(tmp_path):
    old = tmp_path / "old.sqlite3"
    db = sqlite3.connect(old)
    db.executescript(TEXT_IN_EVENT_LOG_RELEASE)
    db.close()
    log = EventLog(old)
    assert user_version(old) == LATEST
    EventLog(tmp_path / "new.sqlite3").close()
    assert layout(old) == layout(tmp_path / "new.sqlite3")
    assert log.texts.ref_texts(["r1"]) == {"r1": "rotate the key with keyctl"}
    log.close()


def test_a_log_older_still_gains_each_column_and_table(tmp_path):
    """Before replies, redaction scrubs, derived tags, answers and open blocks."""
    old = tmp_path / "old.sqlite3"
    db = sqlite3.connect(old)
    db.executescript(
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " event_id TEXT NOT NULL UNIQUE, room_id TEXT NOT NULL,"
        " sender TEXT NOT NULL, ts INTEGER NOT NULL, body TEXT,"
        " status TEXT NOT NULL, window_id TEXT, thread_root TEXT);"
        "CREATE TABLE dirty_windows (window_id TEXT PRIMARY KEY,"
        " room_id TEXT NOT NULL);"
    )
    db.close()
    EventLog(old).close()
    EventLog(tmp_path / "new.sqlite3").close()
    assert layout(old) == layout(tmp_path / "new.sqlite3")


def test_only_the_missing_migrations_run_and_reopening_runs_none(eventlog_db):
    db = Database(eventlog_db, upgrade=False)
    assert version(db) == 0
    assert migrate(db) == list(range(1, LATEST + 1))
    assert migrate(db) == []
    with db.transaction() as cur:
        cur.execute("DROP TABLE forgotten_users")  # as if made at version 7
        db.dialect.set_version(cur, 7)
    assert migrate(db) == list(range(8, LATEST + 1))
    assert "forgotten_users" in tables(db) and version(db) == LATEST
    with db.transaction() as cur:
        cur.execute("ALTER TABLE events DROP COLUMN text_at")  # as if made before 9
        db.dialect.set_version(cur, 8)
    assert migrate(db) == list(range(9, LATEST + 1))
    with db.transaction(immediate=False) as cur:
        assert "text_at" in db.dialect.columns(cur, "events")
    with db.transaction() as cur:
        cur.execute("DROP INDEX events_pending")  # as if made at version 11
        cur.execute("ALTER TABLE events DROP COLUMN received_at")
        db.dialect.set_version(cur, 11)
    assert migrate(db) == list(range(12, LATEST + 1))
    with db.transaction(immediate=False) as cur:
        assert "received_at" in db.dialect.columns(cur, "events")
    with db.transaction() as cur:
        cur.execute("ALTER TABLE forgotten_users DROP COLUMN messages")  # as at 12
        cur.execute("DROP TABLE feedback_votes")
        cur.execute("DROP TABLE feedback_questions")
        db.dialect.set_version(cur, 12)
    assert migrate(db) == list(range(13, LATEST + 1))
    assert {"feedback_questions", "feedback_votes"} <= tables(db)
    with db.transaction(immediate=False) as cur:
        assert "messages" in db.dialect.columns(cur, "forgotten_users")
    db.close()


def test_a_failing_migration_keeps_the_last_version_and_changes_nothing(eventlog_db, monkeypatch):
    def broken(cur, dialect):
        cur.execute("CREATE TABLE half (x TEXT)")
        raise RuntimeError("disk on fire")

    EventLog(eventlog_db).close()
    monkeypatch.setattr(
        eventlog_schema, "MIGRATIONS", MIGRATIONS + (Migration(LATEST + 1, "broken", broken),)
    )
    with pytest.raises(RuntimeError, match="disk on fire"):
        EventLog(eventlog_db)
    db = Database(eventlog_db, read_only=True)
    assert version(db) == LATEST and "half" not in tables(db)
    db.close()


def test_a_transaction_commits_when_its_block_ends_and_rolls_back_if_it_raises(
    eventlog_db, monkeypatch
):
    log = EventLog(eventlog_db)
    msg = Message(EventID("$a"), ROOM, UserID("@a:x"), 1, "hello")
    with pytest.raises(KeyError):
        with log.transaction() as cur:
            cur.execute("INSERT INTO meta VALUES ('k', 'v')")
            raise KeyError("abandoned")
    assert log.get_meta("k") is None
    with log.transaction() as cur:
        cur.execute("INSERT INTO meta VALUES ('k', 'v')")
    assert log.get_meta("k") == "v"

    def fail(cur, ops, applied, now_ms):
        raise ValueError("history failed")

    monkeypatch.setattr(log.history, "apply", fail)  # fails after the insert
    with pytest.raises(ValueError):
        log.append([(msg, None)], txn_key="t1", history=[])
    monkeypatch.undo()
    assert log.counts() == {} and not log.has_txn("t1")  # nothing of the batch stayed
    assert log.append([(msg, None)], txn_key="t1") == 1 and log.has_txn("t1")
    log.close()
