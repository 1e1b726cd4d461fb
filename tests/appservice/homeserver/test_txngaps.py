"""A numbered transaction that never comes (appservice/homeserver/txngaps.py): the rooms
are read again from their cursors once, after the grace; a late one closes its gap; gaps
found while one backfill waits or runs are merged into it."""

from __future__ import annotations

import asyncio

from matrix_sources.appservice.homeserver.txngaps import MAX_GAP, MAX_RANGES, TransactionGaps
from matrix_sources.indexer.clock import Clock
from tests.fakeclock import FakeClock


def gaps(hold: asyncio.Event | None = None):
    calls: list[int] = []
    fake = FakeClock(100.0)

    async def backfill() -> None:
        calls.append(1)
        if hold is not None:
            await hold.wait()

    return TransactionGaps(backfill, grace=10, clock=Clock(fake, fake.sleep)), calls, fake


async def test_a_missing_transaction_backfills_once_after_the_grace():
    g, calls, clock = gaps()
    for txn in ("1570", "1571", "1573", "1574"):
        g.answered(txn)
    assert g.missing == [1572]
    await clock.advance(9.9)
    assert calls == []
    await clock.advance(0.2)
    await clock.advance(30)
    assert calls == [1] and g.missing == []
    await g.stop()


async def test_a_late_or_retried_transaction_closes_its_gap():
    g, calls, clock = gaps()
    for txn in ("7", "9", "8", "9"):  # 8 late, 9 retried
        g.answered(txn)
    await clock.advance(60)
    assert calls == [] and g.missing == []
    await g.stop()


async def test_opaque_ids_and_another_counter_are_not_gaps():
    g, calls, clock = gaps()
    for txn in ("abc", "5", "txn-7", "٣", str(5 + MAX_GAP + 1), str(5 + MAX_GAP + 2)):
        g.answered(txn)
    await clock.advance(60)
    assert calls == [] and g.missing == []
    await g.stop()


async def test_a_jump_is_one_range_not_one_entry_a_number():
    g, calls, clock = gaps()
    g.answered("1")
    g.answered(str(1 + MAX_GAP - 1))
    assert g.open_ranges == 1 and len(g.missing) == MAX_GAP - 2
    for n in range(2000, 2000 + 4 * MAX_RANGES, 2):  # many small gaps: bounded
        g.answered(str(n))
    assert g.open_ranges <= MAX_RANGES
    await clock.advance(11)
    assert calls == [1]
    await g.stop()


async def test_gaps_found_while_a_backfill_runs_make_one_more_not_one_each():
    hold = asyncio.Event()
    g, calls, clock = gaps(hold)
    g.answered("10")
    g.answered("12")
    await clock.advance(11)
    assert calls == [1]  # running, held
    for n in range(14, 40, 2):  # thirteen more gaps, going overdue one after another
        g.answered(str(n))
        await clock.advance(11)
    await clock.advance(60)
    assert calls == [1]
    hold.set()
    await clock.advance(0)
    assert calls == [1, 1] and g.backfills == 2
    await g.stop()
