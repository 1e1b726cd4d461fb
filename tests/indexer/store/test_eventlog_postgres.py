"""The event log on PostgreSQL, what SQLite has no counterpart for: store.database in the
config, passwords kept out of it, text PostgreSQL would refuse, a server that drops the
connection, and doctor's view of the database."""

from __future__ import annotations

import time

import pytest

from matrix_sources.indexer.config import ConfigError, load_config
from matrix_sources.indexer.ingest.events import MessageEvent, parse_event
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, WindowID
from matrix_sources.indexer.store.eventlog.check import check_eventlog
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.eventlog.schema import LATEST
from tests.pgkit import base_dsn, fresh_schema
from tests.storekit import stored_vectors

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


@pytest.mark.parametrize(
    "value, says",
    [
        ("postgresql://ms:hunter2@db/ms", "holds a password"),
        ("postgresql://ms@db/ms?password=hunter2", "holds a password"),
        ("mysql://ms@db/ms", "neither sqlite:PATH nor a postgresql:// URL"),
        ("postgresql://ms@db/ms?nosuchoption=1", "not a PostgreSQL URL libpq accepts"),
        ("sqlite:", "needs a file"),
    ],
)
def test_a_bad_store_database_is_refused_naming_the_key_and_never_echoing_a_password(
    tmp_path, value, says
):
    with pytest.raises(ConfigError) as e:
        config(tmp_path, value)
    assert "store.database" in str(e.value) and says in str(e.value)
    assert "hunter2" not in str(e.value)


def test_a_nul_in_a_body_is_stored_as_a_replacement_character_on_both(eventlog_db):
    raw = {
        "type": "m.room.message",
        "room_id": ROOM,
        "sender": "@a:example.org",
        "event_id": "$nul",
        "origin_server_ts": 1_700_000_000_000,
        "content": {"msgtype": "m.text", "body": "before\x00after"},
    }
    ev = parse_event(raw)
    assert isinstance(ev, MessageEvent) and ev.message.body == "before\ufffdafter"
    log = EventLog(eventlog_db)
    # And text that reaches the event log some other way (a reference file) cannot fail
    # an append on PostgreSQL either.
    log.append(
        [
            (ev.message, None),
            (Message(EventID("$raw"), ROOM, UserID("@a:example.org"), 1, "x\x00y"), None),
        ]
    )
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
            ended = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND backend_type ="
                " 'client backend' AND datname = current_database()"
            ).fetchone()[0]
        assert ended >= 1  # the log's own connection was among them
        got = None
        for _ in range(2):  # a call on a connection that broke mid-flight may fail once
            try:
                got = log.append([(Message(EventID("$2"), ROOM, UserID("@a:x"), 2, "two"), None)])
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
    from matrix_sources.indexer.store.eventlog.reports import lag_report_at, meta_at

    log = EventLog(eventlog_db)
    msgs = [
        (Message(EventID(f"$m{i}"), ROOM, UserID("@a:x"), 1_000 * i, f"m{i}"), None)
        for i in range(1, 4)
    ]
    before = int(time.time() * 1000)
    log.append(msgs)
    after = int(time.time() * 1000)
    log.mark_indexed(ROOM, {EventID("$m1"): "w1"}, msgs[0][0])
    log.set_meta("k", "v")
    pending, oldest, lags = lag_report_at(eventlog_db)
    assert (pending, lags) == (2, {ROOM: 2_000})
    assert before <= oldest <= after  # when the oldest pending one was appended
    assert meta_at(eventlog_db, "k") == "v" and meta_at(eventlog_db, "nope") is None
    log.close()


# -- matrix-sources eventlog migrate ------------------------------------------------------


def test_migrate_moves_the_sqlite_log_and_search_answers_the_same_without_reembedding(
    tmp_path, capsys
):
    import json

    from matrix_sources.appservice.cli.main import main
    from matrix_sources.indexer.components import open_store
    from matrix_sources.indexer.config import load_config
    from tests.appservice.cli.test_cli import datadir as make_datadir

    cfg_path, tmp = make_datadir.__wrapped__(tmp_path, capsys)
    assert main(["import", "-q", "-c", str(cfg_path), str(tmp / "events.jsonl")]) == 0
    capsys.readouterr()

    def hits():
        assert main(["search", "--json", "-c", str(cfg_path), "ntfs", "partition"]) == 0
        return [
            (h["window_id"], round(h["score"], 6))
            for h in json.loads(capsys.readouterr().out)["hits"]
        ]

    before = hits()
    store = open_store(load_config(cfg_path))
    vectors = stored_vectors(store, sorted(store.ids("chat")))
    assert before and vectors
    with fresh_schema() as dsn:
        assert main(["eventlog", "migrate", "-q", "-c", str(cfg_path), "--to", dsn]) == 0
        out = capsys.readouterr().out
        assert "verified" in out and "still holds every message's text" in out
        cfg = load_config(cfg_path)
        assert cfg.database.kind == "postgresql" and cfg.store.database == dsn
        assert "# The event log:" in cfg_path.read_text()  # comments kept
        assert hits() == before
        store = open_store(cfg)  # the same generation, the same vectors: none re-made
        assert stored_vectors(store, sorted(vectors)) == vectors
        log = EventLog(dsn)
        assert log.counts() == {"indexed": 6}
        # The keyword index was built there from the copied text (not copied).
        assert log.keywords.ready() and log.keywords.count() == len(log.window_ids()) > 0
        # New events continue the sequence past the copied ones.
        log.append(
            [
                (
                    Message(
                        EventID("$new"), ROOM, UserID("@a:x"), 2_000_000_000_000, "after the move"
                    ),
                    None,
                )
            ]
        )
        with log.transaction(immediate=False) as cur:
            seqs = [r[0] for r in cur.execute("SELECT seq FROM events ORDER BY seq")]
        assert len(seqs) == len(set(seqs)) == 7 and seqs[-1] > max(seqs[:-1])
        log.close()
        # Run again: it says so and changes nothing.
        assert main(["eventlog", "migrate", "-q", "-c", str(cfg_path), "--to", dsn]) == 0
        assert "already" in capsys.readouterr().out


def test_an_interrupted_move_resumes_and_a_foreign_target_is_refused(tmp_path, monkeypatch):
    from matrix_sources.indexer.store.eventlog import move as eventlog_move
    from matrix_sources.indexer.store.eventlog.move import move_eventlog

    source = tmp_path / "eventlog.sqlite3"
    log = EventLog(source)
    log.append(
        [
            (Message(EventID(f"$m{i}"), ROOM, UserID("@a:x"), 1_000 + i, f"m{i}"), None)
            for i in range(25)
        ]
    )
    log.set_meta("chroma_generation", "3")
    log.close()
    monkeypatch.setattr(eventlog_move, "PAGE", 10)
    with fresh_schema() as dsn:
        seen: list[int] = []

        def stop_after_two_pages(n):
            seen.append(n)
            if len(seen) == 2:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            move_eventlog(source, dsn, stop_after_two_pages)
        first = EventLog(dsn, read_only=True)
        halfway = first.counts().get("pending", 0)
        first.close()
        assert 0 < halfway < 25  # stopped in the middle of the events
        moved = []
        report = move_eventlog(source, dsn, moved.append)
        assert report.ok and report.tables["events"] == 25
        assert report.copied == 25 - halfway + 1  # the rest of the events, and the meta row
        target = EventLog(dsn)
        assert target.counts() == {"pending": 25} and target.get_meta("chroma_generation") == "3"
        target.append([(Message(EventID("$other"), ROOM, UserID("@a:x"), 9, "x"), None)])
        target.close()
        refused = move_eventlog(source, dsn)
        assert not refused.ok and refused.mismatched == {"events": (25, 26)}


def test_doctor_checks_the_database_and_the_sqlite_file_left_behind(tmp_path):
    from matrix_sources.appservice.cli.doctor_index import (
        check_eventlog_health,
        check_sqlite_left_behind,
    )

    with fresh_schema() as dsn:
        EventLog(dsn).close()
        cfg = config(tmp_path, dsn)
        health = check_eventlog_health(cfg)
        assert health.ok and f"schema version {LATEST}" in health.detail
        assert check_sqlite_left_behind(cfg) is None
        EventLog(tmp_path / "eventlog.sqlite3").close()  # what the move left
        left = check_sqlite_left_behind(cfg)
        assert not left.ok and "shred -u" in left.fix
    down = check_eventlog_health(config(tmp_path, "postgresql://ms@127.0.0.1:1/ms"))
    assert not down.ok and "cannot connect" in down.detail and "pgpass" in down.fix


def test_analyze_keeps_no_sample_of_message_text():
    """PostgreSQL's planner statistics (pg_statistic) would hold sample values of a
    column: message text that no redaction reaches. Migration 9 turns them off."""
    import psycopg

    with fresh_schema() as dsn:
        log = EventLog(dsn)
        log.append(
            [
                (Message(EventID(f"$m{i}"), ROOM, UserID("@a:x"), i, "stat-canary-4f"), None)
                for i in range(50)
            ]
        )
        log.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE events")
            targets = dict(
                conn.execute(
                    "SELECT attname, attstattarget FROM pg_attribute WHERE attrelid ="
                    " 'events'::regclass AND attname IN ('body', 'room_id')"
                ).fetchall()
            )
            sampled = conn.execute(
                "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND"
                " tablename = 'events' AND attname = 'body'"
            ).fetchone()[0]
            room_sampled = conn.execute(
                "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND"
                " tablename = 'events' AND attname = 'room_id'"
            ).fetchone()[0]
        assert targets["body"] == 0 and sampled == 0
        assert room_sampled == 1  # the check can see statistics where they are kept


def test_analyze_keeps_no_sample_of_the_keyword_index():
    """The keyword index's keys are the messages' words: ANALYZE must keep no sample of
    them either (migration 16), or a withdrawn word would stay in pg_statistic."""
    import psycopg

    with fresh_schema() as dsn:
        log = EventLog(dsn)
        msgs = [
            Message(EventID(f"$m{i}"), ROOM, UserID("@a:x"), i, "kwstat-canary-48")
            for i in range(50)
        ]
        log.append([(m, None) for m in msgs])
        log.mark_indexed(ROOM, {m.event_id: WindowID(f"w{m.ts}") for m in msgs}, msgs[-1])
        assert log.keywords.count() == 50
        log.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE kw_postings")
            stats = dict(
                conn.execute(
                    "SELECT attname, count(*) FROM pg_stats WHERE schemaname ="
                    " current_schema() AND tablename = 'kw_postings' GROUP BY attname"
                ).fetchall()
            )
        assert "key" not in stats and stats.get("doc") == 1  # the check sees statistics


def test_analyze_keeps_no_sample_of_command_text():
    """Issue 44: a `!sources` command's text waits in `commands.body` until it is
    answered; ANALYZE (autovacuum's too) copied a sample of it into pg_statistic, where
    no answer reaches it. Migration 14 turns them off and drops what was kept before."""
    import psycopg

    from matrix_sources.indexer.store.commands import CommandLog
    from matrix_sources.indexer.store.eventlog.db import Database
    from matrix_sources.indexer.store.eventlog.schema import LATEST, migrate

    sampled = (
        "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND"
        " tablename = 'commands' AND attname = 'body'"
    )
    with fresh_schema() as dsn:
        log = EventLog(dsn)
        CommandLog(log).keep(
            [
                (
                    Message(EventID(f"$c{i}"), ROOM, UserID("@a:x"), i, "!sources cmd-canary-8e"),
                    None,
                )
                for i in range(50)
            ],
            1,
        )
        log.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE commands")
            assert conn.execute(sampled).fetchone()[0] == 0
            # A log from before: its sample taken at version 14, then the migration.
            conn.execute("ALTER TABLE commands ALTER COLUMN body SET STATISTICS -1")
            conn.execute("ANALYZE commands")
            assert conn.execute(sampled).fetchone()[0] == 1  # the check sees a sample
            conn.execute("UPDATE schema_version SET version = 14")
        db = Database(dsn, upgrade=False)
        assert migrate(db) == list(range(15, LATEST + 1))
        db.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE commands")
            assert conn.execute(sampled).fetchone()[0] == 0


def test_vacuum_full_leaves_no_withdrawn_word_in_the_files_of_the_tables_that_held_it():
    """docs/storage.md's path on PostgreSQL, done: a redacted message's text and its
    words (the keyword index's rows) sit in dead row versions until `VACUUM FULL`; after
    it and a CHECKPOINT, no file of those tables or of their indexes holds them. Reads
    the server's files: skipped where the server is not on this machine."""
    from pathlib import Path

    import psycopg

    from matrix_sources.indexer.ingest.events import RedactionEvent
    from matrix_sources.indexer.ingest.history import History

    canary = b"vacfullcanary48"
    with fresh_schema() as dsn:
        log = EventLog(dsn)
        msgs = [
            Message(EventID(f"$m{i}"), ROOM, UserID("@a:x"), i, f"plain words {i}")
            for i in range(20)
        ]
        msgs.append(
            Message(EventID("$c"), ROOM, UserID("@a:x"), 99, f"secret {canary.decode()} here")
        )
        log.append([(m, None) for m in msgs])
        log.mark_indexed(ROOM, {m.event_id: WindowID(f"w{m.ts}") for m in msgs}, msgs[-1])
        tables = ("events", "edits", "ref_chunks", "feedback_questions", "commands", "kw_postings")

        def files(conn) -> list[Path]:
            root = Path(conn.execute("SHOW data_directory").fetchone()[0])
            rels = [
                r[0]
                for t in tables
                for r in conn.execute(
                    "SELECT pg_relation_filepath(c.oid) FROM pg_class c WHERE c.oid = %s::regclass"
                    " OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = %s::regclass)"
                    " OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = %s::regclass)",
                    (t, t, t),
                )
                if r[0]
            ]
            return [p for rel in rels for p in (root / rel).parent.glob(Path(rel).name + "*")]

        def holding(conn) -> list[Path]:
            conn.execute("CHECKPOINT")  # the pages written to the files
            return [p for p in files(conn) if canary in p.read_bytes()]

        with psycopg.connect(dsn, autocommit=True) as conn:
            try:
                assert holding(conn)  # the check sees the text and the words
            except (psycopg.errors.InsufficientPrivilege, PermissionError, OSError) as e:
                pytest.skip(f"the server's files are not readable here: {e}")
            History(log).apply(
                [RedactionEvent(ROOM, EventID("$r"), UserID("@a:x"), EventID("$c"), 100)]
            )
            assert log.keywords.postings("vacfullcanary48", False) is not None
            assert len(log.keywords.postings("vacfullcanary48", False)[0]) == 0  # type: ignore[index]
            conn.execute(f"VACUUM FULL {', '.join(tables)}")
            assert holding(conn) == []
        log.close()


def test_the_postgresql_remedy_names_every_table_that_holds_text():
    """docs/storage.md's VACUUM FULL (dead row versions keep old text) covers every
    table whose text a redaction, a purge or an answer drops: the commands' too."""
    import re

    from tests.paths import ROOT

    doc = (ROOT / "docs" / "storage.md").read_text()
    [remedy] = re.findall(r"So, after redactions.*?`VACUUM\s+FULL\s+([a-z_,\s]+)`", doc, re.S)
    tables = {t.strip() for t in remedy.split(",")}
    assert tables == {
        "events",
        "edits",
        "ref_chunks",
        "feedback_questions",
        "commands",
        "kw_postings",
    }
