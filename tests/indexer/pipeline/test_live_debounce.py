"""Live ingest: a window that is still open is re-embedded at most once per debounce
interval, never on every message (DESIGN.md, Windows). The worker's sleep and the
pipeline's clock are a fake clock the test advances; nothing here waits for real time."""

from __future__ import annotations

import asyncio

import pytest

from matrix_sources.indexer.models.embedder import HashEmbedder, encode_in_length_order
from matrix_sources.indexer.pipeline.chunker import window_id
from matrix_sources.indexer.pipeline.pipeline import Pipeline
from matrix_sources.indexer.pipeline.worker import PipelineWorker
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.fakeclock import FakeClock

ROOM = RoomID("!live:example.org")
ALICE, BOB = UserID("@alice:example.org"), UserID("@bob:example.org")
T0 = 1_700_000_000_000
DEBOUNCE = 1.0
# Big enough that every message below fits one open block and one window.
POLICY = ChunkPolicy(max_bytes=4000, gap_ms=30 * 60 * 1000)


@pytest.fixture
def parts(tmp_path):
    log = EventLog(tmp_path / "eventlog.sqlite3")
    store = ChromaStore(path=tmp_path / "chroma", eventlog=log)
    yield log, store
    log.close()


def debounces(clock: FakeClock) -> list[float]:
    """The sleeps the worker took."""
    return list(clock.sleeps)


def live_worker(log, store, **worker_args):
    """A pipeline on the fake clock, with its worker: (clock, embedder, pipeline, worker)."""
    clock = FakeClock(T0 / 1000)
    emb = HashEmbedder()
    pipeline = Pipeline(log, emb, store, POLICY)
    pipeline.compaction.clock = clock.clock
    worker = PipelineWorker(pipeline, debounce=DEBOUNCE, clock=clock.clock, **worker_args)
    return clock, emb, pipeline, worker


def message(i: int, clock: FakeClock) -> tuple[Message, None]:
    sender = ALICE if i % 2 else BOB
    return (
        Message(
            EventID(f"$m{i:03d}"),
            ROOM,
            sender,
            int(clock.now * 1000),
            f"message {i} about the signing key",
        ),
        None,
    )


async def settle(worker: PipelineWorker, clock: FakeClock) -> None:
    """Once the worker sleeps, move the clock past the debounce interval and wait for
    the run that follows to finish (it runs in a thread)."""
    for _ in range(1000):
        if clock.sleeping_within(DEBOUNCE):
            break
        await asyncio.sleep(0)
    assert clock.sleeping_within(DEBOUNCE), "the worker is not waiting out a debounce interval"
    runs = worker.runs
    await clock.advance(DEBOUNCE)
    try:
        await asyncio.wait_for(worker.wait_runs(runs + 1), 10)
    except TimeoutError:
        raise AssertionError("the pipeline did not run after the debounce interval") from None


async def test_messages_within_one_interval_cost_one_embedding_of_the_open_window(parts):
    log, store = parts
    clock, emb, pipeline, worker = live_worker(log, store)
    worker.start()
    try:
        await settle(worker, clock)  # the start-up catch-up run: nothing pending
        assert emb.texts_seen == 0
        n = 20
        for i in range(n):  # all inside one debounce interval
            log.append([message(i, clock)])
            worker.notify()
            await clock.advance(DEBOUNCE / (2 * n))
        assert emb.texts_seen == 0  # still gathering
        await settle(worker, clock)
        # One embedding for twenty messages: the open window, once, holding them all.
        assert (emb.texts_seen, pipeline.stats.embeddings) == (1, 1)
        assert pipeline.stats.messages == n
        (stored,) = store.get()
        assert stored.window_id == window_id(ROOM, EventID("$m000"))
        assert stored.event_ids == tuple(f"$m{i:03d}" for i in range(n))

        # The next interval's messages extend the same open window: one more embedding.
        for i in range(n, n + 5):
            log.append([message(i, clock)])
            worker.notify()
        await settle(worker, clock)
        assert pipeline.stats.embeddings == 2
        assert pipeline.stats.embeddings / pipeline.stats.messages == pytest.approx(2 / 25)
        (stored,) = store.get()
        assert len(stored.event_ids) == n + 5
        # One run per interval, each waiting out what was left of the interval that
        # began with its first message (the clock moved while the twenty came in).
        assert worker.runs == 3 and len(debounces(clock)) == 3
        assert all(0 < s <= DEBOUNCE for s in debounces(clock))
        assert debounces(clock)[0] == DEBOUNCE
    finally:
        await worker.stop()


async def test_a_message_during_a_run_waits_for_the_next_interval(parts):
    """Messages keep coming while the pipeline runs: they are gathered for one more run
    one interval later, not embedded one by one."""
    log, store = parts
    clock, emb, pipeline, worker = live_worker(log, store)
    loop = asyncio.get_running_loop()
    real_process_all = pipeline.process_all
    arriving = iter(range(1, 4))

    def process_all_while_messages_arrive(progress=None):
        done = real_process_all(progress)
        for i in arriving:  # three more messages land during the first real run
            log.append([message(i, clock)])
            loop.call_soon_threadsafe(worker.notify)
        return done

    pipeline.process_all = process_all_while_messages_arrive
    log.append([message(0, clock)])
    worker.start()
    try:
        await settle(worker, clock)
        assert emb.texts_seen == 1 and not worker.idle.is_set()  # more came in
        await settle(worker, clock)
        assert emb.texts_seen == 2 and pipeline.stats.messages == 4
        assert len(store.get()[0].event_ids) == 4
    finally:
        await worker.stop()


async def test_after_a_run_longer_than_the_interval_the_next_starts_at_once(parts):
    """Under load a run outlasts the interval (a backlog to embed). Messages that came
    in meanwhile have waited an interval when it ends: the next run takes them all at
    once, with no idle interval between the runs."""
    import threading

    log, store = parts
    clock, emb, pipeline, worker = live_worker(log, store)
    loop = asyncio.get_running_loop()
    real_process_all = pipeline.process_all
    first = [True]

    def slow_process_all(progress=None):
        done = real_process_all(progress)
        if first.pop() if first else False:
            for i in range(1, 4):
                log.append([message(i, clock)])
                notified = threading.Event()
                loop.call_soon_threadsafe(lambda: (worker.notify(), notified.set()))
                assert notified.wait(10)
            clock.now += 2 * DEBOUNCE  # the run took two intervals
        return done

    pipeline.process_all = slow_process_all
    log.append([message(0, clock)])
    worker.start()
    try:
        await settle(worker, clock)  # the first run: message 0, then the slow part
        try:
            await asyncio.wait_for(worker.wait_runs(2), 10)
        except TimeoutError:
            pass
        assert worker.runs == 2, "the second run waited for the clock"
        assert debounces(clock) == [DEBOUNCE]  # only the first run slept
        assert emb.texts_seen == 2 and pipeline.stats.messages == 4
        assert len(store.get()[0].event_ids) == 4
    finally:
        await worker.stop()


async def test_after_run_follows_each_run_that_indexed_something(parts):
    """The service hands a run's freed memory back after it (appservice/homeserver/heap.py): once
    per run that indexed messages, in the worker's thread, never after an idle run."""
    import threading

    log, store = parts
    calls: list[str] = []
    clock, _, pipeline, worker = live_worker(
        log, store, after_run=lambda: calls.append(threading.current_thread().name)
    )
    worker.start()
    try:
        await settle(worker, clock)  # the start-up run: nothing pending
        assert calls == []
        log.append([message(0, clock)])
        worker.notify()
        await settle(worker, clock)
        assert len(calls) == 1 and calls[0] != threading.current_thread().name
    finally:
        await worker.stop()


def test_texts_are_embedded_longest_first_in_calls_and_returned_in_order():
    emb = HashEmbedder()
    calls: list[list[str]] = []
    real = emb.encode

    def recording(texts):
        calls.append(list(texts))
        return real(texts)

    emb.encode = recording
    texts = ["b" * n for n in (3, 9, 1, 7, 5)]
    vectors = encode_in_length_order(emb, texts, call_size=2)
    assert calls == [["b" * 9, "b" * 7], ["b" * 5, "b" * 3], ["b"]]
    assert vectors == HashEmbedder().encode(texts)
