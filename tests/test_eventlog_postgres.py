"""The event log on PostgreSQL, what SQLite has no counterpart for: store.database in the
config, passwords kept out of it, text PostgreSQL would refuse, a server that drops the
connection, and doctor's view of the database."""

from __future__ import annotations

import pytest

from indexer.config import ConfigError, load_config
from indexer.ingest.events import MessageEvent, parse_event
from indexer.records import EventID, Message, RoomID, UserID
from indexer.store.eventlog import EventLog
from indexer.store.eventlog_check import check_eventlog
from indexer.store.eventlog_schema import LATEST

from .pgkit import base_dsn, fresh_schema

ROOM = RoomID("!r:example.org")


def config(tmp_path, database: str | None):
    text = "homeserver: {url: 'http://127.0.0.1:8008', domain: example.org}\n"
    if database is not None:
        text += f"store: {{database: '{database}'}}\n"
    (tmp_path / "config.yaml").write_text(text)
    return load_config(tmp_path / "config.yaml")


def test_store_database_defaults_to_the_data_dirs_sqlite_file(tmp_path):
    cfg = config(tmp_path, None)
    assert cfg.database.kind == "sqlite" and cfg.database.path == tmp_path / "eventlog.sqlite3"
    assert config(tmp_path, "sqlite:log/events.db").database.path == tmp_path / "log/events.db"
    assert config(tmp_path, "sqlite:/var/x.db").database.path.as_posix() == "/var/x.db"
    cfg = config(tmp_path, "postgresql://ms@db.internal:5433/ms?passfile=/etc/ms/pgpass")
    assert cfg.database.kind == "postgresql" and cfg.database.path is None


@pytest.mark.parametrize("value, says", [
    ("postgresql://ms:hunter2@db/ms", "holds a password"),
    ("postgresql://ms@db/ms?password=hunter2", "holds a password"),
    ("mysql://ms@db/ms", "neither sqlite:PATH nor a postgresql:// URL"),
    ("postgresql://ms@db/ms?nosuchoption=1", "not a PostgreSQL URL libpq accepts"),
    ("sqlite:", "needs a file"),
])
def test_a_bad_store_database_is_refused_naming_the_key_and_never_echoing_a_password(
        tmp_path, value, says):
    with pytest.raises(ConfigError) as e:
        config(tmp_path, value)
    assert "store.database" in str(e.value) and says in str(e.value)
    assert "hunter2" not in str(e.value)


def test_a_nul_in_a_body_is_stored_as_a_replacement_character_on_both(eventlog_db):
    raw = {"type": "m.room.message", "room_id": ROOM, "sender": "@a:example.org",
           "event_id": "$nul", "origin_server_ts": 1_700_000_000_000,
           "content": {"msgtype": "m.text", "body": "before\x00after"}}
    ev = parse_event(raw)
    assert isinstance(ev, MessageEvent) and ev.message.body == "before\ufffdafter"
    log = EventLog(eventlog_db)
    # And text that reaches the event log some other way (a reference file) cannot fail
    # an append on PostgreSQL either.
    log.append([(ev.message, None),
                (Message(EventID("$raw"), ROOM, UserID("@a:example.org"), 1, "x\x00y"), None)])
    texts = log.texts.event_texts([EventID("$nul"), EventID("$raw")])
    assert texts[EventID("$nul")][2] == "before\ufffdafter"
    assert texts[EventID("$raw")][2] in ("x\x00y", "x\ufffdy")  # SQLite keeps it as it is
    log.close()


def test_a_dropped_connection_is_replaced_and_the_log_goes_on():
    """The server restarted, or an admin ended our sessions: the next call works."""
    with fresh_schema() as dsn:
        log = EventLog(dsn)
        log.append([(Message(EventID("$1"), ROOM, UserID("@a:x"), 1, "one"), None)])
        import psycopg

        with psycopg.connect(base_dsn(), autocommit=True) as conn:
            ended = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                                 " WHERE pid <> pg_backend_pid() AND backend_type ="
                                 " 'client backend' AND datname = current_database()"
                                 ).fetchone()[0]
        assert ended >= 1  # the log's own connection was among them
        got = None
        for _ in range(2):  # a call on a connection that broke mid-flight may fail once
            try:
                got = log.append([(Message(EventID("$2"), ROOM, UserID("@a:x"), 2, "two"),
                                   None)])
                break
            except Exception:
                continue
        assert got == 1 and log.counts() == {"pending": 2}
        log.close()


def test_check_eventlog_reads_the_schema_version_or_says_what_is_wrong():
    with fresh_schema() as dsn:
        assert check_eventlog(dsn).state == "missing"  # a database the service never used
        EventLog(dsn).close()
        health = check_eventlog(dsn)
        assert health.state == "ok" and health.version == LATEST
        assert f"schema version {LATEST}" in health.detail
    gone = check_eventlog("postgresql://nobody@127.0.0.1:1/none")
    assert gone.state == "unreachable" and "127.0.0.1" in gone.detail


def test_lag_figures_and_meta_are_read_on_a_connection_of_their_own(eventlog_db):
    """/metrics and doctor read beside the running service, never through its log."""
    from indexer.store.eventlog_reports import lag_report_at, meta_at

    log = EventLog(eventlog_db)
    msgs = [(Message(EventID(f"$m{i}"), ROOM, UserID("@a:x"), 1_000 * i, f"m{i}"), None)
            for i in range(1, 4)]
    log.append(msgs)
    log.mark_indexed(ROOM, {EventID("$m1"): "w1"}, msgs[0][0])
    log.set_meta("k", "v")
    pending, oldest, lags = lag_report_at(eventlog_db)
    assert (pending, oldest, lags) == (2, 2_000, {ROOM: 2_000})
    assert meta_at(eventlog_db, "k") == "v" and meta_at(eventlog_db, "nope") is None
    log.close()
