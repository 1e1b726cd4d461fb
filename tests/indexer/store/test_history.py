"""Edits and redactions keep the event log and the collection a faithful copy."""

from __future__ import annotations

import pytest

from matrix_sources.appservice.bot.answer_edits import EDIT_HEADER, edit_content, rebuild_reply
from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.components import writers
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.pipeline import Pipeline
from matrix_sources.indexer.records import ChunkPolicy, Hit
from matrix_sources.indexer.store.answers import AnswerLog
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.fakeclock import FakeClock
from tests.storekit import stored_vectors, texts
from tests.vectorscan import files_holding

ROOM = "!room:example.org"
ALICE, BOB = "@alice:example.org", "@bob:example.org"
T0 = 1_700_000_000_000


def join_rules() -> dict:
    return {
        "type": "m.room.join_rules",
        "room_id": ROOM,
        "sender": ALICE,
        "state_key": "",
        "event_id": "$jr",
        "origin_server_ts": T0,
        "content": {"join_rule": "public"},
    }


def msg(n: int, body: str, sender: str = ALICE) -> dict:
    return {
        "type": "m.room.message",
        "room_id": ROOM,
        "sender": sender,
        "event_id": f"$m{n}",
        "origin_server_ts": T0 + n * 1000,
        "content": {"msgtype": "m.text", "body": body},
    }


def edit(n: int, target: int, body: str, sender: str = ALICE, ts: int | None = None) -> dict:
    return {
        "type": "m.room.message",
        "room_id": ROOM,
        "sender": sender,
        "event_id": f"$e{n}",
        "origin_server_ts": ts or T0 + n * 1000,
        "content": {
            "msgtype": "m.text",
            "body": f"* {body}",
            "m.new_content": {"msgtype": "m.text", "body": body},
            "m.relates_to": {"rel_type": "m.replace", "event_id": f"$m{target}"},
        },
    }


def redact(n: int, target: int) -> dict:
    return {
        "type": "m.room.redaction",
        "room_id": ROOM,
        "sender": ALICE,
        "event_id": f"$r{n}",
        "origin_server_ts": T0 + n * 1000,
        "redacts": f"$m{target}",
        "content": {},
    }


@pytest.fixture
def world(tmp_path, eventlog_db):
    log = EventLog(eventlog_db)
    store = ChromaStore(path=tmp_path / "chroma", eventlog=log)
    ingest, pipeline = writers(
        log,
        Journal(tmp_path / "journal.jsonl"),
        store,
        HashEmbedder(),
        Gate(frozenset({ROOM}), "@bot:example.org"),
        ChunkPolicy(),
    )
    ingest.admit([join_rules()])
    return ingest, pipeline, store, log, tmp_path


def all_text(store: ChromaStore) -> str:
    return "\n".join(texts(store).values())


def db_bytes(tmp_path, log: EventLog | None = None) -> bytes:
    """What the event log keeps: its SQLite files' bytes (freed pages too); on
    PostgreSQL, every row of every table (dead row versions are VACUUM's:
    docs/storage.md)."""
    kept = b"".join(p.read_bytes() for p in tmp_path.glob("eventlog.sqlite3*"))
    if log is not None and log.path is None:
        with log.transaction(immediate=False) as cur:
            for table in sorted(log.db.dialect.tables(cur)):
                kept += repr(cur.execute(f"SELECT * FROM {table}").fetchall()).encode()
    return kept


def test_edit_replaces_text_in_log_and_window(world):
    ingest, pipeline, store, log, _ = world
    ingest.admit([msg(1, "the backup runs at midnight"), msg(2, "thanks")])
    pipeline.process_all()
    ingest.admit([edit(3, 1, "the backup runs at noon")])
    pipeline.process_all()
    text = all_text(store)
    assert "noon" in text and "midnight" not in text
    assert store.count() == 1


def test_newest_edit_wins_and_others_edits_are_ignored(world):
    ingest, pipeline, store, log, _ = world
    ingest.admit([msg(1, "version one")])
    pipeline.process_all()
    ingest.admit(
        [edit(5, 1, "version three", ts=T0 + 9000), edit(4, 1, "version two", ts=T0 + 8000)]
    )
    ingest.admit([edit(6, 1, "hijacked by bob", sender=BOB, ts=T0 + 10_000)])
    pipeline.process_all()
    text = all_text(store)
    assert "version three" in text
    assert "version two" not in text and "hijacked" not in text and "version one" not in text


def test_redaction_removes_text_everywhere_and_rechunks(world):
    ingest, pipeline, store, log, tmp = world
    ingest.admit(
        [msg(1, "first line stays"), msg(2, "secret canary zq81 goes"), msg(3, "third line stays")]
    )
    pipeline.process_all()
    result = ingest.admit([redact(4, 2)])
    assert result.history.redacted == {"$m2"}
    pipeline.process_all()
    text = all_text(store)
    assert "zq81" not in text and "first line stays" in text and "third line stays" in text
    assert log.status_of("$m2") == ("redacted", None)
    [w] = store.get()
    assert "$m2" not in w.event_ids and len(w.event_ids) == 2
    log.truncate_wal()
    assert b"zq81" not in db_bytes(tmp, log)


def test_redacting_a_windows_first_message_moves_it_to_a_new_id(world):
    ingest, pipeline, store, log, _ = world
    ingest.admit([msg(1, "opening words"), msg(2, "the rest")])
    pipeline.process_all()
    [before] = store.get()
    ingest.admit([redact(3, 1)])
    pipeline.process_all()
    [after] = store.get()
    assert after.window_id != before.window_id and after.event_ids == ("$m2",)


def test_redacting_every_message_deletes_the_window(world):
    ingest, pipeline, store, log, _ = world
    ingest.admit([msg(1, "only message")])
    pipeline.process_all()
    ingest.admit([redact(2, 1)])
    pipeline.process_all()
    assert store.count() == 0


def test_redaction_before_its_event_means_it_is_never_indexed(world):
    ingest, pipeline, store, log, tmp = world
    ingest.admit([redact(9, 1)])  # backfill order: the redaction came first
    ingest.admit([msg(1, "never to be seen zq99"), msg(2, "visible")])
    pipeline.process_all()
    assert "zq99" not in all_text(store) and log.status_of("$m1") is None
    log.truncate_wal()
    assert b"zq99" not in db_bytes(tmp, log)


def test_edit_before_its_event_is_applied_on_arrival(world):
    ingest, pipeline, store, log, _ = world
    ingest.admit([edit(9, 1, "corrected text")])
    ingest.admit([msg(1, "typo txet")])
    pipeline.process_all()
    assert "corrected text" in all_text(store) and "txet" not in all_text(store)


def test_a_redaction_drops_the_edits_text_too(world):
    ingest, pipeline, store, log, tmp = world
    ingest.admit([msg(1, "first"), edit(2, 1, "edited zq77")])
    pipeline.process_all()
    ingest.admit([redact(3, 1)])
    pipeline.process_all()
    log.truncate_wal()
    assert b"zq77" not in db_bytes(tmp, log)
    with log.transaction(immediate=False) as cur:
        assert cur.execute("SELECT body FROM edits").fetchall() == [(None,)]


def test_replies_quoting_a_redacted_message_are_rebuilt_without_it(world):
    ingest, pipeline, store, log, _ = world
    ingest.admit([msg(1, "restart the bridge to fix it"), msg(2, "or reboot the box")])
    pipeline.process_all()
    answers = AnswerLog(log)
    [w] = store.get()
    hit = Hit(
        w.window_id,
        w.room_id,
        "#ops",
        "chat",
        w.event_ids,
        w.senders,
        w.ts_first,
        w.ts_last,
        0.5,
        texts(store)[w.window_id],
    )
    answers.record("$reply", ROOM, "$cmd", None, [hit], [("$m1", "$m2")])
    ingest.admit([redact(3, 1)])
    [rec] = answers.quoting({"$m1"})
    lines = answers.lines([e for h in rec.hits for e in h["quoted"]])
    assert set(lines) == {"$m2"}
    reply = rebuild_reply(rec, lines, "example.org")
    assert reply.body.startswith(EDIT_HEADER)  # the question could not be read back
    asked = rebuild_reply(rec, lines, "example.org", ("how do I fix the bridge?",))
    assert asked.body.startswith(
        "Sources for: how do I fix the bridge? (edited: a message quoted here was deleted)"
    )
    assert "<em>how do I fix the bridge?</em>" in asked.formatted_body
    assert "restart the bridge" not in reply.body and "reboot the box" in reply.body
    content = edit_content("$reply", reply)
    assert content["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$reply"}
    assert "restart the bridge" not in content["m.new_content"]["formatted_body"]
    answers.forget_quote("$reply", {"$m1"})
    assert answers.quoting({"$m1"}) == []


def test_thread_messages_form_their_own_windows(world):
    ingest, pipeline, store, log, _ = world
    main = [msg(i, f"main timeline message {i} about the release") for i in range(1, 5)]
    thread = []
    for i in range(5, 9):
        m = msg(i, f"thread reply {i} about the database migration")
        m["content"]["m.relates_to"] = {"rel_type": "m.thread", "event_id": "$m2"}
        thread.append(m)
    # Interleaved in the timeline, as they would arrive.
    ingest.admit([main[0], main[1], thread[0], main[2], thread[1], thread[2], main[3], thread[3]])
    pipeline.process_all()
    windows = list(store.iter_windows())
    thread_ids = {f"$m{i}" for i in range(5, 9)}
    for w in windows:
        ids = set(w.event_ids)
        assert ids <= thread_ids or not (ids & thread_ids), w.event_ids  # never mixed
    assert sorted(e for w in windows for e in w.event_ids) == sorted(
        [f"$m{i}" for i in range(1, 9)]
    )
    # A later thread reply joins the thread's window, not the main timeline's.
    late = msg(9, "thread reply 9 about the database migration")
    late["content"]["m.relates_to"] = {"rel_type": "m.thread", "event_id": "$m2"}
    ingest.admit([late])
    pipeline.process_all()
    [w9] = [w for w in store.iter_windows() if "$m9" in w.event_ids]
    assert set(w9.event_ids) <= thread_ids | {"$m9"}


def test_a_live_rooms_last_block_is_cut_into_conversations_at_once(world):
    """No waiting for the gap: a live room's interleaved talk is searchable
    conversation by conversation after one run, and a later message re-embeds only
    the window it joins."""
    ingest, pipeline, store, log, _ = world
    bodies = [
        ("@bob:example.org", "anyone here know nfs?"),
        ("@dave:example.org", "hi all"),
        ("@eve:example.org", "I do printers, ask away"),
        ("@alice:example.org", "bob: how do I mount the nfs share from the nas"),
        ("@carol:example.org", "eve: the printer queue is stuck again"),
        ("@bob:example.org", "alice: add it to fstab with the _netdev option"),
        ("@eve:example.org", "carol: restart cups and clear the spool"),
    ]
    ingest.admit([msg(i, body, sender=sender) for i, (sender, body) in enumerate(bodies, start=1)])
    pipeline.process_all()
    windows = {frozenset(w.event_ids) for w in store.iter_windows()}
    assert len(windows) >= 2  # the nfs and the printer conversations apart
    nfs = next(w for w in windows if "$m4" in w)
    printer = next(w for w in windows if "$m5" in w)
    assert {"$m4", "$m6"} <= nfs and {"$m3", "$m5", "$m7"} <= printer
    upserted = pipeline.stats.windows_upserted
    ingest.admit([msg(8, "bob: thanks, fstab did it", sender="@alice:example.org")])
    pipeline.process_all()
    assert pipeline.stats.windows_upserted == upserted + 1  # only the nfs window again
    [nfs] = [set(w.event_ids) for w in store.iter_windows() if "$m4" in w.event_ids]
    assert {"$m4", "$m6", "$m8"} <= nfs
    held = sorted(e for w in store.iter_windows() for e in w.event_ids)
    assert held == sorted(f"$m{i}" for i in range(1, 9))


def chroma_bytes(tmp_path) -> bytes:
    return b"".join(p.read_bytes() for p in (tmp_path / "chroma").rglob("*") if p.is_file())


def test_no_text_in_chroma_and_a_redacted_windows_vector_leaves_at_the_compaction(world):
    """Chroma never holds text. It keeps a window's superseded vector in its files
    after the re-upsert (its queue, the HNSW segment); the compaction after the run
    leaves only the live points, in a fresh collection. An edit alone asks for none:
    Matrix shows the original to the room anyway. It runs at most once per
    `compact_every`: a second redaction soon after waits."""
    ingest, pipeline, store, log, tmp = world
    clock = [T0 / 1000]
    pipeline.compaction.clock = Clock(wall=lambda: clock[0])
    ingest.admit([msg(10, "typo here")])
    pipeline.process_all()
    ingest.admit([edit(11, 10, "typo fixed")])
    pipeline.process_all()
    assert "typo fixed" in all_text(store) and not pipeline.compaction_due
    ingest.admit(
        [
            msg(1, "first line stays"),
            msg(2, "secret canary qv47x goes"),
            msg(3, "the backup key is edit-canary-9k2"),
        ]
    )
    pipeline.process_all()
    assert b"qv47x" not in chroma_bytes(tmp)  # text never reaches Chroma
    [(w, before)] = store.get_with_vectors([w.window_id for w in store.get()])
    wid = w.window_id
    assert files_holding(tmp / "chroma", before, n=len(before))
    ingest.admit([redact(4, 2), edit(5, 3, "the backup key is in the vault")])
    pipeline.process_all()
    assert "qv47x" not in all_text(store) and "9k2" not in all_text(store)
    assert files_holding(tmp / "chroma", before, n=len(before))  # superseded, still there
    assert pipeline.compaction_due and log.get_meta("compaction_due") == "1"
    assert pipeline.run_compaction() is True
    assert files_holding(tmp, before, n=len(before)) == {}
    assert b"qv47x" not in chroma_bytes(tmp) + db_bytes(tmp, log)
    assert b"edit-canary-9k2" not in chroma_bytes(tmp) + db_bytes(tmp, log)
    assert not pipeline.compaction_due and not log.get_meta("compaction_due")
    # The collection is whole and still searchable after the compaction.
    [w] = store.get()
    assert w.event_ids == ("$m1", "$m3", "$m10") and "vault" in texts(store)[w.window_id]
    assert store.nearest(HashEmbedder().encode(["backup key vault"]), 3)[0]

    ingest.admit([msg(6, "another canary wq55z here")])
    pipeline.process_all()
    vectors = stored_vectors(store, [w.window_id for w in store.get()])
    ingest.admit([redact(7, 6)])
    pipeline.process_all()
    assert pipeline.run_compaction() is None and pipeline.compaction_due  # too soon
    clock[0] += 61
    assert pipeline.run_compaction() is True
    live = stored_vectors(store, list(vectors))
    for wid, v in vectors.items():
        if wid not in live or live[wid] != pytest.approx(v, abs=1e-6):
            assert files_holding(tmp, v, n=len(v)) == {}  # superseded or deleted: gone


def test_a_redacted_windows_vector_leaves_its_sealed_segment_and_only_it_is_copied(tmp_path):
    """Segments of two windows: a message redacted in an old, sealed segment. The
    compaction copies the segments holding a deleted or overwritten point, not the
    others (their generations stay), and the window's old vector and the message's
    text are in no file afterwards."""
    from matrix_sources.indexer.store.vectors.segments import SegmentPolicy

    log = EventLog(tmp_path / "eventlog.sqlite3")
    store = ChromaStore(
        path=tmp_path / "chroma",
        eventlog=log,
        policy=SegmentPolicy(hot=2, fanout=8, cap=16, share=None),
    )
    ingest, pipeline = writers(
        log,
        Journal(tmp_path / "journal.jsonl"),
        store,
        HashEmbedder(),
        Gate(frozenset({ROOM}), "@bot:example.org"),
        ChunkPolicy(max_bytes=80),
    )
    ingest.admit([join_rules()])
    ingest.admit([msg(i, f"line {i} of the talk, canary sg{i}x kept here") for i in range(1, 17)])
    pipeline.process_all()
    segs = store.segments
    assert len(segs.list) >= 4
    [target] = [w for w in store.get() if "$m3" in w.event_ids]
    [(_, before)] = store.get_with_vectors([target.window_id])
    held = {
        s.n
        for s in segs.list
        if target.window_id in {i for i in s.collection.get(include=[])["ids"]}
    }
    generations = [s.n for s in segs.list]
    clean = {s.n for s in segs.list if not s.dirty}
    assert held <= clean and files_holding(tmp_path / "chroma", before, n=len(before))
    ingest.admit([redact(40, 3)])
    pipeline.process_all()
    assert pipeline.compaction_due and pipeline.run_compaction() is True
    after = [s.n for s in store.segments.list]
    assert not held & set(after)  # its segment was copied
    assert set(generations) & set(after) >= clean - held  # clean ones were not
    assert files_holding(tmp_path, before, n=len(before)) == {}
    log.truncate_wal()
    assert b"sg3x" not in chroma_bytes(tmp_path) + db_bytes(tmp_path)
    assert "sg3x" not in all_text(store) and "sg4x" in all_text(store)


def test_a_compaction_due_survives_a_restart(world):
    """The redaction's points were deleted, then the process stopped before the
    compaction: the pipeline opened on the same event log still owes it."""
    ingest, pipeline, store, log, tmp = world
    ingest.admit([msg(1, "line one"), msg(2, "canary zz81p")])
    pipeline.process_all()
    ingest.admit([redact(3, 2)])
    pipeline.process_all()
    assert pipeline.compaction_due
    again = Pipeline(log, HashEmbedder(), store, ChunkPolicy())
    assert again.compaction_due and again.run_compaction() is True
    assert not Pipeline(log, HashEmbedder(), store, ChunkPolicy()).compaction_due


async def test_the_worker_runs_a_deferred_scrub_without_new_events(world):
    """A redaction soon after a scrub: the worker comes back when the interval has
    passed, with no further message to wake it."""
    import asyncio

    from matrix_sources.indexer.pipeline.worker import PipelineWorker

    ingest, pipeline, store, log, tmp = world
    clock = FakeClock(T0 / 1000)
    pipeline.compaction.clock = clock.clock
    pipeline.compaction.every = 3.0
    worker = PipelineWorker(pipeline, debounce=0.01, clock=clock.clock)

    async def idle() -> None:
        # Debounce sleeps on the fake clock: move it on until the worker is idle.
        for _ in range(1000):
            if worker.idle.is_set():
                return
            if clock.sleeping:
                await clock.advance(0.01)
                continue
            try:  # a run or a compaction in its thread: until the worker changes state
                await asyncio.wait_for(worker.wait_idle(), 0.05)
            except TimeoutError:
                pass
        raise AssertionError("the worker did not go idle")

    worker.start()
    try:
        ingest.admit([msg(1, "line one"), msg(2, "first canary hh31q")])
        worker.notify()
        await idle()
        ingest.admit([redact(3, 2)])
        worker.notify()
        await idle()  # scrubbed: the first scrub
        assert not pipeline.compaction_due and b"hh31q" not in chroma_bytes(tmp)
        ingest.admit([msg(4, "second canary pp72k")])
        worker.notify()
        await idle()
        ingest.admit([redact(5, 4)])
        worker.notify()
        await idle()
        assert pipeline.compaction_due  # too soon after the first: deferred
        # The worker goes idle as it starts its timer task; the task then sleeps.
        for _ in range(200):
            if clock.sleeping_within(3.0):
                break
            await asyncio.sleep(0)
        assert clock.sleeping_within(3.0)  # the worker waits for it, on the clock
        await clock.advance(3.0)  # the interval passes: nothing else wakes the worker
        await clock.advance(0.01)  # the run it wakes waits out its debounce
        await idle()
        assert not pipeline.compaction_due and b"pp72k" not in chroma_bytes(tmp)
    finally:
        await worker.stop()


def test_a_redacted_edited_message_leaves_no_text_in_the_event_log_file(world):
    """secure_delete: the original body (replaced by the edit), the edit's text (in the
    edits table, NULLed by the redaction) and the WAL's page images are all zeroed."""
    ingest, pipeline, store, log, tmp = world
    ingest.admit([msg(1, "kept line"), msg(2, "original canary ow83n")])
    pipeline.process_all()
    ingest.admit([edit(3, 2, "edited canary ed51v")])
    pipeline.process_all()
    assert b"ed51v" in db_bytes(tmp, log)  # the check can see it
    ingest.admit([redact(4, 2)])
    pipeline.process_all()
    pipeline.run_compaction()  # the compaction also empties the event log's WAL
    for canary in (b"ow83n", b"ed51v"):
        assert canary not in db_bytes(tmp, log) + chroma_bytes(tmp)


async def test_new_messages_are_indexed_while_a_compaction_copies(world):
    """A compaction copies the whole collection (minutes at 100,000 windows): it runs
    beside the pipeline's runs, and the worker is idle only once both are done."""
    import asyncio
    import threading

    from matrix_sources.indexer.pipeline.worker import PipelineWorker

    ingest, pipeline, store, log, tmp = world
    copying, release = threading.Event(), threading.Event()
    compact = store.compact

    def slow_compact(**kw):
        def after_copy():
            copying.set()
            assert release.wait(20)

        return compact(after_copy=after_copy, **kw)

    store.compact = slow_compact
    worker = PipelineWorker(pipeline, debounce=0)  # no timer: real time is not faked here
    worker.start()
    try:
        ingest.admit([msg(1, "line one"), msg(2, "canary rr41t")])
        worker.notify()
        await asyncio.wait_for(worker.wait_idle(), 10)
        ingest.admit([redact(3, 2)])
        worker.notify()
        assert await asyncio.to_thread(copying.wait, 10)
        ingest.admit([msg(4, "written during the copy")])
        worker.notify()
        for _ in range(5):
            if log.status_of("$m4") and log.status_of("$m4")[0] == "indexed":
                break
            await asyncio.wait_for(worker.wait_runs(worker.runs + 1), 20)
        assert log.status_of("$m4")[0] == "indexed" and not worker.idle.is_set()
        release.set()
        await asyncio.wait_for(worker.wait_idle(), 20)
        assert not pipeline.compaction_due
        assert "written during the copy" in all_text(store)  # caught up before the swap
    finally:
        release.set()
        await worker.stop()
