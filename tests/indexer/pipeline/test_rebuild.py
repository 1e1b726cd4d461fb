"""A collection made by another model or chunker is rebuilt from the event log."""

from __future__ import annotations

import threading

from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.chunker import CHUNKER_VERSION
from matrix_sources.indexer.pipeline.pipeline import Pipeline
from matrix_sources.indexer.pipeline.rebuild import (
    check_collection,
    ensure_meta,
    expected_meta,
    make_whole,
    meta_mismatch,
    quick_rebuild_reason,
    rebuild,
)
from matrix_sources.indexer.records import ChunkPolicy
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

ROOM = "!r:example.org"


def setup(tmp_path, dim=64):
    log = EventLog(tmp_path / "eventlog.sqlite3")
    store = ChromaStore(path=tmp_path / "chroma", eventlog=log)
    ingest = Ingest(Gate(frozenset({ROOM}), "@bot:x"), log, Journal(tmp_path / "j.jsonl"))
    pipeline = Pipeline(
        log, HashEmbedder(dim), store, ChunkPolicy(max_bytes=50), admits=ingest.admits
    )
    return log, store, ingest, pipeline


def admit_public_room(ingest, messages: int) -> None:
    ingest.admit(
        [
            {
                "type": "m.room.join_rules",
                "room_id": ROOM,
                "sender": "@a:x",
                "state_key": "",
                "event_id": "$jr",
                "origin_server_ts": 1,
                "content": {"join_rule": "public"},
            }
        ]
        + [
            {
                "type": "m.room.message",
                "room_id": ROOM,
                "sender": "@a:x",
                "event_id": f"$m{i}",
                "origin_server_ts": 1000 * i,
                "content": {"msgtype": "m.text", "body": f"message {i} text here"},
            }
            for i in range(messages)
        ]
    )


def test_mismatch_rebuilds_every_window_with_the_new_embedder(tmp_path):
    log, store, ingest, pipeline = setup(tmp_path)
    admit_public_room(ingest, 20)
    assert ensure_meta(store, log, pipeline) is False  # empty: meta written
    pipeline.process_all()
    assert store.meta()["chunker"] == CHUNKER_VERSION and not meta_mismatch(
        store, pipeline.embedder
    )
    before = store.count()

    # The same data dir opened with another embedder (other dimension): a rebuild.
    log2, store2, _ingest2, pipeline2 = (
        log,
        ChromaStore(path=tmp_path / "chroma", eventlog=log),
        ingest,
        Pipeline(log, HashEmbedder(32), store, ChunkPolicy(max_bytes=50), admits=ingest.admits),
    )
    pipeline2.store = store2
    assert meta_mismatch(store2, pipeline2.embedder)["dim"] == (64, 32)
    seen = []
    assert ensure_meta(store2, log2, pipeline2, progress=seen.append) is True
    assert store2.count() == before and sum(seen) == 20
    assert store2.meta() == {**store2.meta(), **expected_meta(pipeline2.embedder)}
    held = sorted(e for w in store2.iter_windows() for e in w.event_ids)
    assert held == sorted(f"$m{i}" for i in range(20))
    assert ensure_meta(store2, log2, pipeline2) is False  # settled


def test_the_check_holds_the_writers_lock_and_leaves_a_rebuild_to_its_caller(tmp_path):
    """The service joins its rooms during check_collection (Service.start): a purge a
    room's state calls for meanwhile must wait for it, so the ids it compares are of
    one moment; and on a model change it only says why, the rebuild is the caller's."""
    log, store, ingest, pipeline = setup(tmp_path)
    admit_public_room(ingest, 12)
    make_whole(store, log, pipeline)
    assert check_collection(store, log, pipeline) == ""
    pipeline.process_all()
    before = store.count()

    taken_elsewhere = []
    reading = log.window_ids

    def window_ids():  # called inside the check: another thread tries the purge's lock
        other = threading.Thread(
            target=lambda: taken_elsewhere.append(pipeline.guard.lock.acquire(blocking=False))
        )
        other.start()
        other.join()
        return reading()

    log.window_ids = window_ids
    assert check_collection(store, log, pipeline) == ""
    assert taken_elsewhere == [False]

    other = Pipeline(log, HashEmbedder(32), store, ChunkPolicy(max_bytes=50), admits=ingest.admits)
    reason = check_collection(store, log, other)
    assert "dim: 64 -> 32" in reason
    assert store.count() == before and store.meta()["dim"] == 64  # not rebuilt by the check
    rebuild(store, log, other, reason)
    assert store.count() == before and store.meta()["dim"] == 32
    assert check_collection(store, log, other) == ""


def test_the_quick_check_tells_a_model_change_and_a_lost_folder_without_the_ids(tmp_path):
    """What the service decides before serving searches at start (Service.start): a
    new model, or an empty collection beside an event log that says windows are
    indexed; never a fresh data dir, nor a kept collection."""
    log, store, ingest, pipeline = setup(tmp_path)
    assert quick_rebuild_reason(store, log, pipeline.embedder) == ""  # fresh
    admit_public_room(ingest, 12)
    make_whole(store, log, pipeline)
    check_collection(store, log, pipeline)
    pipeline.process_all()
    asked = []
    log.window_ids = lambda: asked.append(1)  # never read: the ids are check_collection's
    assert quick_rebuild_reason(store, log, pipeline.embedder) == ""
    assert "dim: 64 -> 32" in quick_rebuild_reason(store, log, HashEmbedder(32))
    store.reset()  # the Chroma folder lost
    assert "collection is empty" in quick_rebuild_reason(store, log, pipeline.embedder)
    assert asked == []


def test_a_vouched_check_reads_no_id_and_still_tells_a_model_change(tmp_path):
    """After a clean stop that nothing wrote since (store/clean_stop.py) the start's
    check reads no id list and repairs nothing; a model change still rebuilds."""
    log, store, ingest, pipeline = setup(tmp_path)
    admit_public_room(ingest, 12)
    make_whole(store, log, pipeline)
    check_collection(store, log, pipeline)
    pipeline.process_all()
    gap = sorted(log.window_ids())[0]
    store.delete([gap])  # a gap the unvouched check repairs
    asked = []
    reading = log.window_ids
    log.window_ids = lambda: asked.append(1) or reading()
    assert check_collection(store, log, pipeline, vouched=True) == ""
    assert asked == [] and log.counts().get("pending", 0) == 0
    other = Pipeline(log, HashEmbedder(32), store, ChunkPolicy(max_bytes=50), admits=ingest.admits)
    assert "dim: 64 -> 32" in check_collection(store, log, other, vouched=True)
    assert check_collection(store, log, pipeline) == "" and asked == [1]
    assert log.counts().get("pending", 0) > 0  # the gap's events set pending again
