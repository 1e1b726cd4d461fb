"""Room retention (issue 21): messages older than the room's max_lifetime leave the
index, text and vectors, within the compaction interval; a later change applies from then on."""

from __future__ import annotations

from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.ingest.retention import Retention
from tests.indexer.store.test_history import (
    ALICE,
    ROOM,
    T0,
    all_text,
    chroma_bytes,
    db_bytes,
    msg,
    world,  # noqa: F401  (world: the fixture)
)
from tests.storekit import stored_vectors
from tests.vectorscan import files_holding


def retention(ms: int | None) -> dict:
    return {
        "type": "m.room.retention",
        "room_id": ROOM,
        "sender": ALICE,
        "state_key": "",
        "event_id": f"$ret{ms}",
        "origin_server_ts": T0,
        "content": {} if ms is None else {"max_lifetime": ms},
    }


def test_expired_messages_leave_text_and_vectors_and_a_later_change_applies(world):
    ingest, pipeline, store, log, tmp = world
    clock = [T0 / 1000]
    pipeline.compaction.clock = Clock(wall=lambda: clock[0])
    expiry = Retention(ingest, clock=Clock(wall=lambda: clock[0]))
    ingest.admit(
        [
            retention(60_000),
            msg(1, "old canary rt11x line"),
            {**msg(2, "newer line stays"), "origin_server_ts": T0 + 50_000},
        ]
    )
    pipeline.process_all()
    before = stored_vectors(store, [w.window_id for w in store.get()])
    clock[0] = (T0 + 30_000) / 1000
    assert expiry.expire().rooms == {}  # nothing expired yet
    clock[0] = (T0 + 61_500) / 1000  # $m1 (T0+1 s) is 60.5 s old; $m2 is not
    report = expiry.expire()
    assert report.rooms == {ROOM: 1} and report.event_ids == {"$m1"}
    pipeline.process_all()
    assert pipeline.run_compaction() is True
    assert "rt11x" not in all_text(store) and "newer line stays" in all_text(store)
    assert b"rt11x" not in db_bytes(tmp) + chroma_bytes(tmp)
    for v in before.values():
        assert files_holding(tmp, v, n=len(v)) == {}
    assert "rt11x" not in (tmp / "journal.jsonl").read_text()
    # The room lengthens its retention: what is left stays; removed: nothing expires.
    ingest.admit([retention(None)])
    clock[0] += 10_000
    assert expiry.expire().rooms == {} and "newer line stays" in all_text(store)
