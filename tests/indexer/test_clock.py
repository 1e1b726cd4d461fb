"""indexer/clock.py on a fake clock: a deadline fires when the clock passes it and not
before, a block that ends in time leaves no timer behind, stamps read the wall clock."""

from __future__ import annotations

import asyncio

import pytest

from matrix_sources.indexer.clock import Clock, stopwatch
from tests.fakeclock import FakeClock


async def _until(cond) -> None:
    while not cond():
        await asyncio.sleep(0)


async def test_a_deadline_cancels_the_block_once_the_clock_passes_it():
    fake = FakeClock(1_000.0)
    ended = asyncio.Event()
    expired: list[bool] = []

    async def hang() -> None:
        try:
            async with fake.clock.timeout(15) as deadline:
                await asyncio.Event().wait()  # never set
        except TimeoutError:
            expired.append(deadline.expired())
        ended.set()

    task = asyncio.create_task(hang())
    await _until(lambda: fake.sleeping)
    await fake.advance(14.9)
    assert not ended.is_set()  # not before
    await fake.advance(0.1)
    await asyncio.wait_for(ended.wait(), 5)
    assert expired == [True] and fake.sleeps == [15.0]
    await task


async def test_a_block_that_ends_in_time_leaves_no_timer():
    fake = FakeClock(0.0)
    async with fake.clock.timeout(15) as deadline:
        await asyncio.sleep(0)
    assert not deadline.expired()
    await _until(lambda: not fake.sleeping)  # the timer cancelled, not left waiting
    with pytest.raises(ValueError):  # an error of the block goes through as it is
        async with fake.clock.timeout(15):
            raise ValueError("the block's own")


def test_stamps_and_durations_read_the_clocks_given():
    wall, mono = [1_700_000_000.25], [5.0]
    clock = Clock(now=lambda: mono[0], wall=lambda: wall[0])
    assert clock.now_ms() == 1_700_000_000_250
    took = stopwatch(clock)
    mono[0] += 2.5
    assert took() == 2.5
