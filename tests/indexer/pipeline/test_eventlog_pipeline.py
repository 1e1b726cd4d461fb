"""The event log and the pipeline: durable appends, cursors that move only after the
store acknowledged, catching up after failures, live extension of the open window, and
the background worker's backoff (driven by a fake sleep, never by waiting)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline import pipeline as pipeline_mod
from matrix_sources.indexer.pipeline.chunker import build_windows, window_id
from matrix_sources.indexer.pipeline.pipeline import Pipeline
from matrix_sources.indexer.pipeline.worker import PipelineWorker
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

ROOM = RoomID("!ops:example.org")
ROOM2 = RoomID("!chat:example.org")
ALICE = UserID("@alice:example.org")
T0 = 1_700_000_000_000
MINUTE = 60_000
# 30-byte bodies, 100-byte windows: three messages to a window.
POLICY = ChunkPolicy(max_bytes=100, gap_ms=30 * MINUTE)


def body(i: int) -> str:
    return f"message number {i:03d} about key"[:30].ljust(30, ".")


def msgs(room: RoomID, start: int, n: int, ts0: int = T0) -> list[tuple[Message, None]]:
    return [
        (Message(EventID(f"${room[1:4]}{i:04d}"), room, ALICE, ts0 + i * MINUTE, body(i)), None)
        for i in range(start, start + n)
    ]


class FlakyStore:
    """A real store whose upsert fails on its first `fail` calls, as an unreachable
    Chroma server would."""

    def __init__(self, inner: ChromaStore, fail: int = 0) -> None:
        self.inner, self.fail, self.upserts = inner, fail, 0

    def upsert(self, windows, vectors):
        self.upserts += 1
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("chroma unreachable")
        return self.inner.upsert(windows, vectors)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def log(eventlog_db):
    el = EventLog(eventlog_db)
    yield el
    el.close()


@pytest.fixture
def store(tmp_path, log):
    return ChromaStore(path=tmp_path / "chroma", eventlog=log)


def stored_event_ids(store: ChromaStore) -> Counter:
    return Counter(e for w in store.get() for e in w.event_ids)


def assert_each_message_in_exactly_one_window(
    store: ChromaStore, log: EventLog, expected: list[str]
) -> None:
    counts = stored_event_ids(store)
    assert set(counts) == set(expected)
    assert all(n == 1 for n in counts.values()), {e: n for e, n in counts.items() if n > 1}
    # And the event log agrees with the store on which window holds each event.
    windows = {w.window_id: set(w.event_ids) for w in store.get()}
    for e in expected:
        status, wid = log.status_of(EventID(e))
        assert status == "indexed" and e in windows[wid]


# -- EventLog ---------------------------------------------------------------------------


def test_append_with_txn_is_remembered_across_reopening(tmp_path):
    path = tmp_path / "eventlog.sqlite3"
    el = EventLog(path)
    assert el.append(msgs(ROOM, 0, 3), txn_key="reg:txn-1") == 3
    assert el.has_txn("reg:txn-1") and not el.has_txn("reg:txn-2")
    el.close()
    el = EventLog(path)
    assert el.has_txn("reg:txn-1")
    assert el.counts() == {"pending": 3}
    el.close()


def test_append_is_atomic_with_its_txn(log):
    good = msgs(ROOM, 0, 2)
    # Fails while binding, after the good rows were inserted: a lone surrogate.
    bad = (Message(EventID("$bad"), ROOM, ALICE, T0, "bad \ud800"), None)
    with pytest.raises(UnicodeEncodeError):
        log.append(good + [bad], txn_key="reg:txn-1")
    assert not log.has_txn("reg:txn-1")  # Synapse will retry it...
    assert log.counts() == {}  # ...and nothing half-appended is waiting
    assert log.append(good, txn_key="reg:txn-1") == 2
    assert log.has_txn("reg:txn-1")


def test_append_twice_adds_once_and_keeps_status(log, store):
    log.append(msgs(ROOM, 0, 2))
    Pipeline(log, HashEmbedder(), store, POLICY).process_all()
    assert log.append(msgs(ROOM, 0, 2)) == 0
    assert log.counts() == {"indexed": 2}


def test_the_backlog_counts_pending_events_and_when_the_oldest_was_appended(eventlog_db, tmp_path):
    """How far indexing is behind (/health, /metrics, the transaction bound): the
    pending events, and how long the oldest has waited since it was appended (or set
    pending again), whatever its own timestamp says (backfilled history is old)."""
    from matrix_sources.indexer.store.eventlog.status import Backlog

    now = [1_000.0]
    log = EventLog(eventlog_db, clock=Clock(wall=lambda: now[0]))  # its stamps' clock
    store = ChromaStore(path=tmp_path / "chroma", eventlog=log)
    assert log.status.backlog().pending == 0
    assert log.status.backlog().oldest_age(1_000_000) == 0.0
    log.append(msgs(ROOM, 0, 3, ts0=1))  # sent in 1970, appended now
    now[0] = 1_030.0
    log.append(msgs(ROOM2, 0, 2))
    b = log.status.backlog()
    assert (b.pending, b.oldest_received_ms) == (5, 1_000_000)
    assert b.oldest_age(int(now[0] * 1000)) == 30.0
    Pipeline(log, HashEmbedder(), store, POLICY).process_all()
    assert log.status.backlog() == Backlog(0, None)
    now[0] = 2_000.0
    log.requeue_windows([window_id(ROOM, EventID("$ops0000"))])
    assert log.status.backlog() == Backlog(3, 2_000_000)
    log.close()


# -- Pipeline ---------------------------------------------------------------------------


def test_process_all_indexes_pending_events_into_windows(log, store):
    log.append(msgs(ROOM, 0, 7) + msgs(ROOM2, 0, 2))
    emb = HashEmbedder()
    p = Pipeline(log, emb, store, POLICY)
    assert p.process_all() == 9
    assert log.counts() == {"indexed": 9}
    assert store.count() == 3 + 1  # 3+3+1 in ROOM, 2 in ROOM2
    ids = [m.event_id for m, _ in msgs(ROOM, 0, 7) + msgs(ROOM2, 0, 2)]
    assert_each_message_in_exactly_one_window(store, log, ids)
    first = store.get([window_id(ROOM, EventID("$ops0000"))])[0]
    assert first.event_ids == ("$ops0000", "$ops0001", "$ops0002")
    assert first.room_id == ROOM and first.senders == (ALICE,)
    assert (first.ts_first, first.ts_last) == (T0, T0 + 2 * MINUTE)


def test_cursor_advances_to_the_last_indexed_event(log, store):
    log.append(msgs(ROOM, 0, 5))
    assert log.cursor(ROOM) is None
    Pipeline(log, HashEmbedder(), store, POLICY).process_all()
    c = log.cursor(ROOM)
    assert (c.event_id, c.ts) == ("$ops0004", T0 + 4 * MINUTE)


def test_rerunning_does_nothing(log, store):
    log.append(msgs(ROOM, 0, 5))
    emb = HashEmbedder()
    flaky = FlakyStore(store)
    p = Pipeline(log, emb, flaky, POLICY)
    p.process_all()
    batches, upserts, cursor = emb.batches, flaky.upserts, log.cursor(ROOM)
    assert p.process_all() == 0
    assert (emb.batches, flaky.upserts) == (batches, upserts)
    assert log.cursor(ROOM) == cursor


@pytest.mark.parametrize("failures", [1, 3])
def test_failed_upsert_leaves_cursor_and_statuses_then_catches_up(log, store, failures):
    log.append(msgs(ROOM, 0, 4))
    p0 = Pipeline(log, HashEmbedder(), store, POLICY)
    p0.process_all()
    cursor = log.cursor(ROOM)
    log.append(msgs(ROOM, 4, 5) + msgs(ROOM2, 0, 3))
    flaky = FlakyStore(store, fail=failures)
    p = Pipeline(log, HashEmbedder(), flaky, POLICY)
    for _ in range(failures):
        with pytest.raises(ConnectionError):
            p.process_all()
        assert log.cursor(ROOM) == cursor
        assert log.cursor(ROOM2) is None
        assert log.counts() == {"indexed": 4, "pending": 8}
        assert stored_event_ids(store) == Counter(m.event_id for m, _ in msgs(ROOM, 0, 4))
    assert p.process_all() == 8
    assert log.counts() == {"indexed": 12}
    assert log.cursor(ROOM).event_id == "$ops0008"
    assert log.cursor(ROOM2).event_id == "$cha0002"
    ids = [m.event_id for m, _ in msgs(ROOM, 0, 9) + msgs(ROOM2, 0, 3)]
    assert_each_message_in_exactly_one_window(store, log, ids)


def test_steps_share_one_upsert_and_a_failed_one_keeps_nothing_of_its_steps(
    log, store, monkeypatch
):
    monkeypatch.setattr(pipeline_mod, "EMBED_BATCH", 2)  # 2 windows a step: 3 steps
    log.append(msgs(ROOM, 0, 15))  # 5 windows
    flaky = FlakyStore(store, fail=1)
    p = Pipeline(log, HashEmbedder(), flaky, POLICY)
    with pytest.raises(ConnectionError):
        p.process_all()
    assert flaky.upserts == 1 and log.counts() == {"pending": 15}  # no step half-kept
    p.process_all()
    assert flaky.upserts == 2 and log.counts() == {"indexed": 15}
    assert_each_message_in_exactly_one_window(
        store, log, [m.event_id for m, _ in msgs(ROOM, 0, 15)]
    )


def test_failure_between_batches_keeps_what_was_acknowledged(log, store, monkeypatch):
    monkeypatch.setattr(pipeline_mod, "EMBED_BATCH", 2)  # 2 windows per step
    monkeypatch.setattr(pipeline_mod, "UPSERT_BATCH", 2)  # and per upsert
    log.append(msgs(ROOM, 0, 15))  # 5 windows: 3 upserts
    flaky = FlakyStore(store)
    p = Pipeline(log, HashEmbedder(), flaky, POLICY)
    real_upsert = flaky.upsert

    def fail_second(windows, vectors):
        if flaky.upserts == 1:
            flaky.fail = 1
        return real_upsert(windows, vectors)

    flaky.upsert = fail_second
    with pytest.raises(ConnectionError):
        p.process_all()
    # The first batch (2 windows, 6 messages) was acknowledged and is kept.
    assert log.counts() == {"indexed": 6, "pending": 9}
    assert log.cursor(ROOM).event_id == "$ops0005"
    p.process_all()
    ids = [m.event_id for m, _ in msgs(ROOM, 0, 15)]
    assert_each_message_in_exactly_one_window(store, log, ids)
    assert log.cursor(ROOM).event_id == "$ops0014"


def test_live_extension_rechunks_only_the_open_window(log, store):
    emb = HashEmbedder()
    p = Pipeline(log, emb, store, POLICY)
    log.append(msgs(ROOM, 0, 5))  # windows [0,1,2] [3,4 (open)]
    p.process_all()
    closed = store.get([window_id(ROOM, EventID("$ops0000"))])[0]
    assert store.count() == 2
    seen = emb.texts_seen
    log.append(msgs(ROOM, 5, 3))  # [3,4,5] [6,7]
    p.process_all()
    # Only the open window and the new one were embedded; the closed window untouched.
    assert emb.texts_seen - seen == 2
    assert store.get([closed.window_id])[0] == closed
    assert log.status_of(EventID("$ops0000")) == ("indexed", closed.window_id)
    reopened = store.get([window_id(ROOM, EventID("$ops0003"))])[0]
    assert reopened.event_ids == ("$ops0003", "$ops0004", "$ops0005")
    assert store.count() == 3
    assert_each_message_in_exactly_one_window(store, log, [m.event_id for m, _ in msgs(ROOM, 0, 8)])


def test_message_after_a_long_silence_opens_a_new_window(log, store):
    p = Pipeline(log, HashEmbedder(), store, POLICY)
    log.append(msgs(ROOM, 0, 2))
    p.process_all()
    log.append(msgs(ROOM, 2, 1, ts0=T0 + 2 * 3_600_000))
    p.process_all()
    assert store.count() == 2


def test_backfilled_older_messages_still_land_in_exactly_one_window(log, store):
    """History fetched after live events (/messages on join) arrives with older
    timestamps; the windows already stored for the live messages must not keep copies."""
    p = Pipeline(log, HashEmbedder(), store, POLICY)
    live = msgs(ROOM, 10, 4)  # windows [10,11,12] [13]
    log.append(live)
    p.process_all()
    history = msgs(ROOM, 5, 5)  # minutes 5..9, just before the live ones
    log.append(history)
    p.process_all()
    ids = [m.event_id for m, _ in history + live]
    assert_each_message_in_exactly_one_window(store, log, ids)


def _talk(i: int, minute: int, sender: str) -> tuple[Message, None]:
    return (
        Message(
            EventID(f"$t{i:03d}"),
            ROOM,
            UserID(f"@{sender}:example.org"),
            T0 + minute * MINUTE,
            f"line {i:03d} of the talk".ljust(30, "."),
        ),
        None,
    )


# Two people in turn, 30-byte lines, blocks of 200 bytes: six messages a block, and
# windows that interleave (each person's own conversation) inside a block.
TALK_POLICY = ChunkPolicy(max_bytes=100, gap_ms=30 * MINUTE, block_windows=2)


def test_history_older_than_the_open_block_leaves_no_event_in_a_deleted_window(log, store):
    """Issue 26 item 8, the crash test's `missing 1`: a message older than the open
    block's start (a backfill page landing after live events were indexed) joined the
    open block and moved its recorded start into the middle of stored windows. The next
    re-chunk took those windows for stale and deleted them whole, though their earlier
    events were never re-pointed: indexed in the event log, in no Chroma record."""
    p = Pipeline(log, HashEmbedder(), store, TALK_POLICY)
    live = [_talk(i, 2 * i, "ab"[i % 3 == 0]) for i in range(11)]  # blocks 0-5, 6-10
    log.append(live)
    p.process_all()
    late = [_talk(100, 9, "a")]  # between t004 (minute 8) and t005 (minute 10)
    log.append(late)
    p.process_all()
    later = [_talk(11, 24, "b")]
    log.append(later)
    p.process_all()
    assert_each_message_in_exactly_one_window(
        store, log, [m.event_id for m, _ in live + late + later]
    )


class Killed(Exception):
    """A SIGKILL at that point: nothing after it runs."""


@pytest.mark.parametrize("point", ["upsert", "delete", "mark_indexed"])
def test_a_crash_at_any_step_of_a_rechunk_loses_nothing_after_restart(
    log, store, monkeypatch, point
):
    """Fault injection into a re-chunk that moves stored events between windows (late
    history re-cutting the open block): the run dies after the named call returned;
    a new pipeline (the restart) then leaves every message in exactly one window."""
    first = Pipeline(log, HashEmbedder(), store, TALK_POLICY)
    live = [_talk(i, 2 * i, "ab"[i % 3 == 0]) for i in range(11)]
    log.append(live)
    first.process_all()
    late = [_talk(100, 13, "b"), _talk(101, 15, "a")]  # inside the open block
    log.append(late)
    target = log if point == "mark_indexed" else store
    real = getattr(target, point)

    def then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise Killed(point)

    monkeypatch.setattr(target, point, then_die)
    with pytest.raises(Killed):
        Pipeline(log, HashEmbedder(), store, TALK_POLICY).process_all()
    monkeypatch.undo()
    Pipeline(log, HashEmbedder(), store, TALK_POLICY).process_all()
    assert_each_message_in_exactly_one_window(store, log, [m.event_id for m, _ in live + late])


# -- windows that follow conversations (indexer/pipeline/chunker.py) ----------------------------

# Two questions interleaved with their answers: two conversations in one block.
CHAT = [
    ("@alice:example.org", "how do I open a rar archive?"),
    ("@bob:example.org", "alice: apt install unrar"),
    ("@carol:example.org", "my wifi drops every few minutes"),
    ("@dave:example.org", "carol, which card is it?"),
    ("@alice:example.org", "bob: thanks, that works"),
    ("@carol:example.org", "dave: an intel 3945"),
    ("@bob:example.org", "or file-roller if you want a gui"),
    ("@dave:example.org", "carol: try the iwlwifi firmware"),
]
CHAT_POLICY = ChunkPolicy(max_bytes=200, gap_ms=30 * MINUTE, block_windows=8)


def chat(start: int, n: int) -> list[tuple[Message, None]]:
    return [
        (Message(EventID(f"$c{i}"), ROOM, UserID(CHAT[i][0]), T0 + i * MINUTE, CHAT[i][1]), None)
        for i in range(start, start + n)
    ]


def test_live_runs_give_the_conversation_windows_at_once(log, store):
    """Indexed a few messages at a time while the block is open: after every run the
    room holds the conversation windows chunking everything so far at once gives, each
    message once, with no wait for the gap; a run embeds only the windows it changed."""
    emb = HashEmbedder()
    p = Pipeline(log, emb, store, CHAT_POLICY)
    sizes = {0: 3, 3: 2, 5: 3}
    for start in (0, 3, 5):
        log.append(chat(start, sizes[start]))
        seen = emb.texts_seen
        p.process_all()
        so_far = [m for m, _ in chat(0, start + sizes[start])]
        expected = {w.window_id: tuple(w.event_ids) for w in build_windows(so_far, CHAT_POLICY)}
        assert {w.window_id: w.event_ids for w in store.get()} == expected
        touched = {
            w.window_id
            for w in build_windows(so_far, CHAT_POLICY)
            if set(w.event_ids) & {m.event_id for m, _ in chat(start, sizes[start])}
        }
        assert emb.texts_seen - seen == len(touched)
    windows = {w.window_id: w.event_ids for w in store.get()}
    assert sorted(windows.values()) == [("$c0", "$c1", "$c4", "$c6"), ("$c2", "$c3", "$c5", "$c7")]
    assert_each_message_in_exactly_one_window(store, log, [f"$c{i}" for i in range(8)])
    assert log.cursor(ROOM).event_id == "$c7"


def test_a_failed_live_run_leaves_every_message_in_one_window(log, store, monkeypatch):
    """A run that fails part-way through the open block's changed windows leaves what
    was stored consistent; the next run catches up to the windows of the whole."""
    monkeypatch.setattr(pipeline_mod, "EMBED_BATCH", 1)
    log.append(chat(0, 5))
    Pipeline(log, HashEmbedder(), store, CHAT_POLICY).process_all()
    log.append(chat(5, 3))
    flaky = FlakyStore(store, fail=1)
    p = Pipeline(log, HashEmbedder(), flaky, CHAT_POLICY)
    with pytest.raises(ConnectionError):
        p.process_all()
    assert_each_message_in_exactly_one_window(store, log, [f"$c{i}" for i in range(5)])
    assert log.cursor(ROOM).event_id == "$c4"  # the failed run moved nothing
    p.process_all()
    assert {w.window_id: w.event_ids for w in store.get()} == {
        w.window_id: tuple(w.event_ids)
        for w in build_windows([m for m, _ in chat(0, 8)], CHAT_POLICY)
    }
    assert_each_message_in_exactly_one_window(store, log, [f"$c{i}" for i in range(8)])


# -- PipelineWorker ---------------------------------------------------------------------


class FakeSleep:
    """Returns at once, recording the wait."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        await asyncio.sleep(0)


class FakePipelineBase:
    """What the worker calls besides process_all: no edits, so no compaction is ever due."""

    def run_compaction(self) -> None:
        return None

    def compaction_wait(self) -> None:
        return None


class FailingPipeline(FakePipelineBase):
    def __init__(self, fail: int) -> None:
        self.fail, self.calls = fail, 0

    def process_all(self, progress=None) -> int:
        self.calls += 1
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("store down")
        return 0


async def run_until_idle(worker: PipelineWorker, timeout: float = 5) -> None:
    await asyncio.wait_for(worker.wait_idle(), timeout)


async def test_worker_retries_with_doubling_backoff():
    sleep = FakeSleep()
    pipe = FailingPipeline(fail=4)
    worker = PipelineWorker(
        pipe, debounce=0.5, backoff_initial=1.0, backoff_max=60, clock=Clock(sleep=sleep)
    )
    worker.start()
    try:
        await run_until_idle(worker)
    finally:
        await worker.stop()
    assert pipe.calls == 5 and worker.failures == 4 and worker.runs == 1
    # One debounce interval first; after a failure the backoff is the only wait.
    assert sleep.calls == pytest.approx([0.5, 1.0, 2.0, 4.0, 8.0], abs=0.05)


async def test_worker_backoff_is_capped_and_resets_after_success():
    sleep = FakeSleep()
    pipe = FailingPipeline(fail=5)
    worker = PipelineWorker(
        pipe, debounce=0, backoff_initial=1.0, backoff_max=4.0, clock=Clock(sleep=sleep)
    )
    worker.start()
    try:
        await run_until_idle(worker)
        backoffs = [s for s in sleep.calls if s]
        assert backoffs == [1.0, 2.0, 4.0, 4.0, 4.0]
        sleep.calls.clear()
        pipe.fail = 1
        worker.notify()
        await run_until_idle(worker)
    finally:
        await worker.stop()
    assert [s for s in sleep.calls if s] == [1.0]  # back to the initial backoff


async def test_worker_catches_up_after_store_outage(log, store):
    log.append(msgs(ROOM, 0, 7))
    flaky = FlakyStore(store, fail=2)
    sleep = FakeSleep()
    worker = PipelineWorker(
        Pipeline(log, HashEmbedder(), flaky, POLICY),
        debounce=0.01,
        backoff_initial=0.02,
        clock=Clock(sleep=sleep),
    )
    worker.start()
    try:
        await run_until_idle(worker)
    finally:
        await worker.stop()
    assert worker.failures == 2
    # The first run waits out (what is left of) one debounce interval; then backoffs.
    assert sleep.calls[0] <= 0.01 and sleep.calls[1:] == [0.02, 0.04]
    assert_each_message_in_exactly_one_window(store, log, [m.event_id for m, _ in msgs(ROOM, 0, 7)])
    assert log.cursor(ROOM).event_id == "$ops0006"


async def test_notify_during_a_run_runs_again():
    sleep = FakeSleep()
    worker = None

    class NotifyingPipeline(FakePipelineBase):
        calls = 0

        def process_all(self, progress=None):
            NotifyingPipeline.calls += 1
            if NotifyingPipeline.calls == 1:
                loop.call_soon_threadsafe(worker.notify)  # a message arrives mid-run
            return 0

    loop = asyncio.get_running_loop()
    worker = PipelineWorker(NotifyingPipeline(), debounce=0, clock=Clock(sleep=sleep))
    worker.start()
    try:
        await asyncio.wait_for(worker.wait_runs(2), 5)
        await run_until_idle(worker)
    finally:
        await worker.stop()
    assert NotifyingPipeline.calls == 2


def test_reply_relations_survive_the_event_log_and_old_logs_gain_the_column(tmp_path):
    import sqlite3

    # An event log made before replies were kept: no reply_to column.
    old = sqlite3.connect(tmp_path / "eventlog.sqlite3")
    old.executescript(
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " event_id TEXT NOT NULL UNIQUE, room_id TEXT NOT NULL,"
        " sender TEXT NOT NULL, ts INTEGER NOT NULL, body TEXT,"
        " status TEXT NOT NULL, window_id TEXT, thread_root TEXT);"
        "INSERT INTO events (event_id, room_id, sender, ts, body, status)"
        f" VALUES ('$old', '{ROOM}', '@a:x', 1, 'old question', 'pending');"
        "CREATE TABLE dirty_windows (window_id TEXT PRIMARY KEY,"
        " room_id TEXT NOT NULL);"
        f"INSERT INTO dirty_windows VALUES ('w-edited', '{ROOM}');"
    )
    old.close()
    log = EventLog(tmp_path / "eventlog.sqlite3")
    from matrix_sources.indexer.ingest.history import History

    assert History(log).dirty() == [("w-edited", ROOM, False)]  # no compaction asked for
    with log.transaction() as cur:
        cur.execute("DELETE FROM dirty_windows")
    log.append(
        [
            (
                Message(
                    EventID("$new"),
                    ROOM,
                    UserID("@b:x"),
                    2,
                    "an answer",
                    EventID("$old"),
                    (UserID("@a:x"), UserID("@c:x")),
                ),
                None,
            )
        ]
    )
    tail = log.room_tail(ROOM).messages
    assert [(m.event_id, m.reply_to, m.mentions) for m in tail] == [
        ("$old", None, ()),
        ("$new", "$old", ("@a:x", "@c:x")),
    ]
    store = ChromaStore(path=tmp_path / "chroma", eventlog=log)
    Pipeline(log, HashEmbedder(), store, POLICY).process_all()
    [w] = store.get()
    assert log.texts.window_messages(w.window_id)[1].reply_to == "$old"
    assert log.texts.window_messages(w.window_id)[1].mentions == ("@a:x", "@c:x")
    log.close()
    EventLog(tmp_path / "eventlog.sqlite3").close()  # opening again: nothing to add


def test_a_window_whose_every_event_is_re_pointed_is_found_emptied(log):
    """What the pipeline deletes beside a re-chunk's stale windows (windows_emptied_by):
    a window left holding no event, never one that keeps one, nor a window id the
    re-point itself uses."""
    from matrix_sources.indexer.records import WindowID

    m = msgs(ROOM, 0, 4)
    log.append(m)
    e = [x.event_id for x, _ in m]
    wa, wb, wc = WindowID("wa"), WindowID("wb"), WindowID("wc")
    log.mark_indexed(ROOM, {e[0]: wa, e[1]: wa, e[2]: wb, e[3]: wb}, m[-1][0])
    assert log.windows_emptied_by({e[0]: wc, e[1]: wc}) == [wa]
    assert log.windows_emptied_by({e[0]: wc}) == []  # e[1] stays in wa
    assert log.windows_emptied_by({e[0]: wa, e[2]: wc, e[3]: wc}) == [wb]
    assert log.windows_emptied_by({e[0]: wb, e[1]: wb}) == [wa]  # wb: used by the re-point
    assert log.windows_emptied_by({e[2]: wa, e[3]: wa}) == [wb]  # into a window that stays


def test_a_message_redacted_while_its_window_is_embedded_is_not_indexed_and_is_scrubbed(log, store):
    """A redaction lands between reading the tail and committing the window that holds
    the message: the message stays redacted (never `indexed` with no text), and the
    window made from its text is re-chunked without it and asks for a compaction."""
    from matrix_sources.indexer.ingest.history import History
    from matrix_sources.indexer.store.eventlog.history import Redaction

    log.append(msgs(ROOM, 0, 3))
    target = EventID(f"${ROOM[1:4]}0001")

    class RedactingEmbedder(HashEmbedder):
        def encode(self, texts):
            if self.batches == 0:  # during the first run's embedding
                log.append(
                    [], history=[Redaction(target, ROOM, T0 + 10 * MINUTE, EventID("$redaction"))]
                )
            return super().encode(texts)

    pipeline = Pipeline(log, RedactingEmbedder(), store, POLICY, history=History(log))
    pipeline.process_all()
    assert log.status_of(target) == ("redacted", None)
    assert [w for w, _, red in log.history.dirty() if red]  # the stored window: to re-cut
    pipeline.process_all()
    assert target not in stored_event_ids(store)
    assert_each_message_in_exactly_one_window(
        store, log, [f"${ROOM[1:4]}0000", f"${ROOM[1:4]}0002"]
    )
    assert pipeline.compaction_due  # its old vector leaves the files at the next compaction
