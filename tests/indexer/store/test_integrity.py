"""A damaged or lost store is found and never made worse, through the CLI a deployer
uses: `doctor` checks the event log and the collection against it, `run` refuses a
damaged event log with how to recover, `verify --index` never deletes on the word of an
event log that cannot judge (and has --dry-run), and a lost Chroma folder is rebuilt
from the event log at start instead of serving a sliver of the index. Real SQLite,
real Chroma, the deterministic embedder."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.cli.main import main
from matrix_sources.indexer.store.eventlog.check import check_eventlog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

ROOM = "!room:example.org"
N = 60


@pytest.fixture
def indexed(tmp_path, capsys):
    """A data dir with N messages imported and indexed (windows of a few messages)."""
    assert (
        main(
            [
                "init",
                "--data-dir",
                str(tmp_path / "d"),
                "--domain",
                "example.org",
                "--homeserver-url",
                "http://127.0.0.1:9",
            ]
        )
        == 0
    )  # nothing listens there
    cfg = tmp_path / "d" / "config.yaml"
    y = YAML()
    data = y.load(cfg.read_text())
    data["index"]["embedder"] = "hash"
    data["index"]["window_max_bytes"] = 120
    with open(cfg, "w") as f:
        y.dump(data, f)
    assert main(["allowlist", "add", "-c", str(cfg), ROOM]) == 0
    events = [
        {
            "type": "m.room.join_rules",
            "room_id": ROOM,
            "sender": "@a:example.org",
            "state_key": "",
            "event_id": "$jr",
            "origin_server_ts": 1,
            "content": {"join_rule": "public"},
        }
    ]
    events += [
        {
            "type": "m.room.message",
            "room_id": ROOM,
            "sender": f"@u{i % 3}:example.org",
            "event_id": f"$m{i}",
            "origin_server_ts": 1_700_000_000_000 + i * 1000,
            "content": {"msgtype": "m.text", "body": f"message {i} on disks and keys"},
        }
        for i in range(N)
    ]
    (tmp_path / "events.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    assert main(["import", "-c", str(cfg), "-q", str(tmp_path / "events.jsonl")]) == 0
    capsys.readouterr()
    return cfg, tmp_path


def windows(cfg) -> int:
    return ChromaStore(path=cfg.parent / "chroma").count()


def eventlog(cfg):
    return cfg.parent / "eventlog.sqlite3"


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def zero(path):
    path.write_bytes(b"")


def corrupt_page(path):
    raw = bytearray(path.read_bytes())
    page = 4096
    for p in range(1, len(raw) // page):  # every page but the header's: b-tree garbage
        raw[p * page + 8 : p * page + 200] = b"\xa5" * 192
    path.write_bytes(bytes(raw))


DAMAGE = {"truncated": truncate, "zero_length": zero, "page_corrupted": corrupt_page}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_doctor_and_run_refuse_a_damaged_event_log(indexed, capsys, monkeypatch, damage):
    cfg, tmp = indexed
    DAMAGE[damage](eventlog(cfg))
    assert check_eventlog(eventlog(cfg)).damaged
    assert main(["doctor", "-c", str(cfg)]) == 1
    out = capsys.readouterr().out
    assert "FAIL event log:" in out and ".recover" in out

    from matrix_sources.appservice.homeserver import service

    def never(*a, **kw):
        raise AssertionError("run opened the service on a damaged event log")

    monkeypatch.setattr(service, "Service", never)
    assert main(["run", "-c", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "the event log is damaged" in err and "backup" in err
    assert "Traceback" not in err


def test_run_reports_an_event_log_it_cannot_open_without_a_traceback(indexed, capsys, monkeypatch):
    cfg, tmp = indexed
    from matrix_sources.appservice.homeserver import service

    def damaged(*a, **kw):  # damage that only shows once the service reads the log
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(service, "Service", damaged)
    assert main(["run", "-c", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "cannot be used (database disk image is malformed)" in err and ".recover" in err


def test_doctor_and_run_refuse_a_deleted_event_log_beside_a_full_collection(
    indexed, capsys, monkeypatch
):
    cfg, tmp = indexed
    eventlog(cfg).unlink()
    assert main(["doctor", "-c", str(cfg)]) == 1
    assert f"FAIL index: no event log, {windows(cfg)} windows" in capsys.readouterr().out
    from matrix_sources.appservice.homeserver import service

    monkeypatch.setattr(service, "Service", None)
    assert main(["run", "-c", str(cfg)]) == 1
    assert "is missing while the collection holds" in capsys.readouterr().err
    assert not eventlog(cfg).exists()  # nothing created in its place


def test_doctor_passes_a_whole_store_and_finds_lost_windows(indexed, capsys):
    cfg, tmp = indexed
    main(["doctor", "-c", str(cfg)])
    out = capsys.readouterr().out
    assert "ok   event log:" in out and "quick_check ok" in out
    n = windows(cfg)
    assert f"ok   index: the event log has {n} indexed windows, the collection {n}" in out
    store = ChromaStore(path=cfg.parent / "chroma")
    store.delete([w.window_id for w in list(store.iter_windows())[:3]])
    assert main(["doctor", "-c", str(cfg)]) == 1
    out = capsys.readouterr().out
    assert "FAIL index:" in out and "3 missing from the collection" in out


def held_events(cfg) -> list[str]:
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()  # what another process wrote, read fresh
    return sorted(
        e for w in ChromaStore(path=cfg.parent / "chroma").iter_windows() for e in w.event_ids
    )


def test_a_writers_start_repairs_events_marked_indexed_in_no_window(indexed, capsys):
    """Issue 26 item 8: the crash race's trace (events the event log says are indexed,
    their window in no Chroma record; a window no indexed event is in) is named by
    doctor and repaired from the event log at a writer's start: the lost window's events
    set pending and indexed again, the orphan deleted. `run` starts the same way
    (Service.start -> Index.ensure_meta); `import` is the writer that needs no
    homeserver."""
    cfg, tmp = indexed
    store = ChromaStore(path=cfg.parent / "chroma")
    lost = list(store.iter_windows())[4]
    store.delete([lost.window_id])
    from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, Window

    ghost = Window(
        "w" + "0" * 31,
        RoomID(ROOM),
        (Message(EventID("$m0"), RoomID(ROOM), UserID("@u0:example.org"), 1, "x"),),
    )
    store.upsert([ghost], [[1.0] + [0.0] * 63])
    assert main(["doctor", "-c", str(cfg)]) == 1
    out = capsys.readouterr().out
    n = len(lost.event_ids)
    assert (
        f"1 missing from the collection, {n} message{'' if n == 1 else 's'} marked "
        "indexed in no window of it"
    ) in out
    assert main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")]) == 0
    assert held_events(cfg) == sorted(f"$m{i}" for i in range(N))  # each once
    main(["doctor", "-c", str(cfg)])
    out = capsys.readouterr().out
    assert "ok   index:" in out and "not in the event log" not in out


def _messages(cfg, window_id):
    from matrix_sources.indexer.store.eventlog.log import EventLog

    log = EventLog(eventlog(cfg))
    try:
        return log.texts.window_messages(window_id)
    finally:
        log.close()


def test_doctor_names_an_event_its_window_does_not_list(indexed, capsys):
    """The window is there, but its record lost one of its events: still a gap."""
    cfg, tmp = indexed
    from matrix_sources.indexer.records import Window

    store = ChromaStore(path=cfg.parent / "chroma")
    w = next(w for w in store.iter_windows() if len(w.event_ids) > 1)
    ((_, vector),) = store.get_with_vectors([w.window_id])
    # Its record rewritten without its first event, under the same id.
    store.upsert([Window(w.window_id, w.room_id, tuple(_messages(cfg, w.window_id)[1:]))], [vector])
    assert main(["doctor", "-c", str(cfg)]) == 1
    assert (
        "0 missing from the collection, 1 message marked indexed in no window"
        in capsys.readouterr().out
    )
    assert main(["verify", "-c", str(cfg), "--index"]) == 0
    assert (
        "messages their window does not list: 1 (windows deleted, events set pending)"
        in capsys.readouterr().out
    )
    assert main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")]) == 0
    assert held_events(cfg) == sorted(f"$m{i}" for i in range(N))


def test_verify_index_refuses_with_the_event_log_missing(indexed, capsys):
    cfg, tmp = indexed
    before = windows(cfg)
    eventlog(cfg).unlink()
    assert main(["verify", "-c", str(cfg), "--index"]) == 1
    out = capsys.readouterr().out
    assert "FAIL the event log is missing" in out and "nothing checked or repaired" in out
    assert windows(cfg) == before and not eventlog(cfg).exists()


def test_verify_index_refuses_with_an_empty_event_log(indexed, capsys):
    cfg, tmp = indexed
    before = windows(cfg)
    eventlog(cfg).unlink()
    from matrix_sources.indexer.store.eventlog.log import EventLog

    EventLog(eventlog(cfg)).close()  # a valid, empty event log
    assert main(["verify", "-c", str(cfg), "--index"]) == 1
    out = capsys.readouterr().out
    assert "FAIL deleting refused: the event log has no indexed window" in out
    assert "ok:" not in out and windows(cfg) == before


def test_verify_index_refuses_an_event_log_that_disowns_most_windows(indexed, capsys):
    cfg, tmp = indexed
    before = windows(cfg)
    db = sqlite3.connect(eventlog(cfg))
    keep = db.execute(
        "SELECT window_id FROM events WHERE status = 'indexed' ORDER BY seq LIMIT 1"
    ).fetchone()[0]
    db.execute(
        "UPDATE events SET status = 'pending', window_id = NULL WHERE window_id != ?", (keep,)
    )
    db.commit()
    db.close()
    assert main(["verify", "-c", str(cfg), "--index"]) == 1
    assert "FAIL deleting refused: the event log disowns" in capsys.readouterr().out
    assert windows(cfg) == before


def test_verify_index_dry_run_changes_nothing_then_repairs(indexed, capsys):
    cfg, tmp = indexed
    store = ChromaStore(path=cfg.parent / "chroma")
    lost = next(store.iter_windows()).window_id
    store.delete([lost])
    store.upsert_references(["orphan"], [[0.1] * 64], ["x"], [{"room_id": ROOM, "corpus": "chat"}])
    before = windows(cfg)
    assert main(["verify", "-c", str(cfg), "--index", "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert (
        "dry run: nothing changed" in out and "orphaned in the store: 1 (would be deleted)" in out
    )
    assert "missing from the store: 1 (events would be set pending)" in out
    assert windows(cfg) == before
    assert main(["verify", "-c", str(cfg), "--index"]) == 0
    assert "orphaned in the store: 1 (deleted)" in capsys.readouterr().out
    assert "orphan" not in ChromaStore(path=cfg.parent / "chroma").ids("chat")


def test_a_lost_chroma_folder_is_rebuilt_from_the_event_log_at_start(indexed, capsys):
    cfg, tmp = indexed
    before = windows(cfg)
    assert before >= 10
    shutil.rmtree(cfg.parent / "chroma")
    # A new process would open it fresh; this one must forget its cached Chroma client.
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()
    # Any start of a writer rebuilds it; import is the one that needs no homeserver
    # (the same file again: nothing new, its state events say the room is public).
    assert main(["import", "-c", str(cfg), "-q", str(tmp / "events.jsonl")]) == 0
    err = capsys.readouterr().err
    assert f"the collection holds 0 of the {before} windows" in err
    assert windows(cfg) == before
    held = sorted(
        e for w in ChromaStore(path=cfg.parent / "chroma").iter_windows() for e in w.event_ids
    )
    assert held == sorted(f"$m{i}" for i in range(N))


def test_a_nearly_empty_collection_is_rebuilt_with_logged_progress(indexed, caplog):
    """What `run` does at start (Service.start calls Index.ensure_meta): the rebuild
    logs its progress with the total."""
    cfg, tmp = indexed
    from matrix_sources.indexer.components import Index
    from matrix_sources.indexer.config import load_config
    from matrix_sources.indexer.pipeline import rebuild

    store = ChromaStore(path=cfg.parent / "chroma")
    before = store.count()
    store.delete([w.window_id for w in list(store.iter_windows())[2:]])  # 2 of them left
    index = Index.open(load_config(cfg))
    from matrix_sources.indexer.ingest.roomfacts import RoomFacts

    index.ingest.facts[ROOM] = RoomFacts(join_rule="public")  # learned when it joined
    real = rebuild._logged
    rebuild._logged = lambda total: real(total, every_s=0)
    try:
        with caplog.at_level("WARNING", logger="matrix_sources.indexer.pipeline.rebuild"):
            assert index.ensure_meta() is True
    finally:
        rebuild._logged = real
        index.close()
    assert windows(cfg) == before
    progress = [r for r in caplog.records if r.msg == "collection_rebuild_progress"]
    assert progress and all(r.total == N for r in progress)
    assert progress[-1].messages == N


def test_a_start_after_a_clean_stop_skips_quick_check_and_after_a_crash_does_not(indexed):
    """The service stamps the event log when it stops cleanly (size, mtime); the next
    start trusts a file that still has that stamp and skips quick_check (7 s at a
    million windows); any write since, or a start without a clean stop (the stamp is
    removed at start), checks the whole file again. Shown with damage that keeps the
    file's size and mtime: only quick_check sees it."""
    import os

    from matrix_sources.indexer.store.eventlog.check import clear_clean, mark_clean

    cfg, _tmp = indexed
    path = eventlog(cfg)
    mark_clean(path)
    st = path.stat()
    raw = bytearray(path.read_bytes())  # the last pages' b-trees: the schema stays readable
    for p in range(len(raw) // 4096 - 5, len(raw) // 4096):
        raw[p * 4096 + 8 : p * 4096 + 200] = b"\xa5" * 192
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    trusted = check_eventlog(path, trust_clean=True)
    assert trusted.state == "ok" and "clean stop" in trusted.detail, trusted
    assert check_eventlog(path).damaged  # doctor's check reads every page
    clear_clean(path)  # a start: the stamp goes until the next clean stop
    assert check_eventlog(path, trust_clean=True).damaged


def test_a_write_after_the_clean_stop_means_a_full_check(indexed):
    from matrix_sources.indexer.store.eventlog.check import mark_clean

    cfg, _tmp = indexed
    path = eventlog(cfg)
    mark_clean(path)
    assert "clean stop" in check_eventlog(path, trust_clean=True).detail
    with open(path, "r+b") as f:  # a write since: its mtime moves
        f.seek(100)
        f.write(path.read_bytes()[100:104])
    assert "quick_check ok" in check_eventlog(path, trust_clean=True).detail
