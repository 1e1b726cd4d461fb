"""The service's withdrawals outside a transaction (appservice/homeserver/withdrawals.py):
room retention looked at once per compaction interval, on an injected clock; what was
withdrawn wakes the worker and reaches the bot, so its answers that quoted it are edited;
the spool's answers no one will read swept."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from matrix_sources.appservice.homeserver.withdrawals import Withdrawals
from matrix_sources.indexer.clock import Clock
from tests.fakeclock import FakeClock
from tests.indexer.ingest.test_retention import retention
from tests.indexer.store.test_history import ALICE, ROOM, T0, all_text, msg, world  # noqa: F401  (the fixture)


def make(world, interval: float = 60.0, wall=time.time):
    ingest, pipeline, store, log, tmp = world
    cfg = SimpleNamespace(data_dir=tmp, index=SimpleNamespace(compaction_interval_seconds=interval))
    woken: list[int] = []
    withdrawn: list[list[str]] = []
    now = [1000.0]
    w = Withdrawals(
        cfg,
        ingest,
        SimpleNamespace(notify=lambda: woken.append(1)),
        withdrawn.append,
        clock=Clock(now=lambda: now[0], wall=wall),
    )
    return w, now, woken, withdrawn


def test_retention_is_looked_at_once_per_compaction_interval(world):
    ingest, pipeline, store, _, _ = world
    w, now, woken, withdrawn = make(world)
    # Retention's own clock is the real one: messages of 2023 are past a minute's life.
    ingest.admit([retention(60_000), msg(1, "old canary rt11x line")])
    pipeline.process_all()
    asyncio.run(w.expire_retained())
    assert withdrawn == [["$m1"]] and woken == [1]
    ingest.admit([msg(2, "another old line qz7")])
    pipeline.process_all()
    now[0] += 59.0  # within the interval: not looked at again
    asyncio.run(w.expire_retained())
    assert withdrawn == [["$m1"]] and "qz7" in all_text(store)
    now[0] += 1.0
    asyncio.run(w.expire_retained())
    assert withdrawn == [["$m1"], ["$m2"]] and woken == [1, 1]
    pipeline.process_all()
    assert "qz7" not in all_text(store) and "rt11x" not in all_text(store)


def test_nothing_expired_wakes_nobody(world):
    ingest, pipeline, _, _, _ = world
    w, _, woken, withdrawn = make(world)
    ingest.admit([msg(1, "a line with no retention in its room")])
    pipeline.process_all()
    asyncio.run(w.expire_retained())
    assert withdrawn == [] and woken == []


def test_an_erased_user_leaves_the_index_and_the_bot_hears_of_it(world):
    ingest, pipeline, store, _, _ = world
    w, _, woken, withdrawn = make(world)
    ingest.admit(
        [msg(1, "alice said erasable xq9"), msg(2, "bob stays", sender="@bob:example.org")]
    )
    pipeline.process_all()
    asyncio.run(w.forget_erased(ALICE))
    assert withdrawn == [["$m1"]] and woken == [1]
    pipeline.process_all()
    assert "xq9" not in all_text(store) and "bob stays" in all_text(store)


def test_an_answer_no_one_reads_is_swept_after_a_bounded_time(world):
    """Issue 44: a CLI `forget` that gave up waiting never reads its `.answer.json`
    (counts and event ids): the service removes it once ANSWER_KEPT_S have passed, with
    what a crash left half-written, and keeps the answers still awaited."""
    from matrix_sources.indexer.ingest.spool import ANSWER_KEPT_S, submit, wait_answer

    ingest, pipeline, _, _, tmp = world
    ingest.admit([msg(1, "alice said sw33p once")])
    pipeline.process_all()
    wall = FakeClock(time.time())
    w, _, _, _ = make(world, wall=wall)
    answer = submit(tmp, {"op": "forget", "user_id": ALICE})  # as `matrix-sources forget`
    assert (
        wait_answer(answer, timeout=0, clock=Clock(sleep_blocking=lambda s: None)) is None
    )  # it gave up
    half = tmp / "spool" / "crashed.request.json.tmp"
    half.write_text("{")
    asyncio.run(w.serve_spool())
    assert answer.exists() and half.exists()
    wall.now += ANSWER_KEPT_S - 1  # a CLI could still be waiting: kept
    asyncio.run(w.serve_spool())
    assert answer.exists()
    wall.now += 2
    asyncio.run(w.serve_spool())
    assert list((tmp / "spool").iterdir()) == []
