"""A fake clock for the worker's timers and the pipeline's clock: time moves only when a
test advances it, so no test waits for real time."""

from __future__ import annotations

import asyncio

from matrix_sources.indexer.clock import Clock


class FakeClock:
    """Seconds since the epoch, moved only by `advance`; `sleep` returns once the clock
    has passed its deadline. `sleeps` records every sleep asked for, in order. The
    product takes it as `fake.clock`: its monotonic and wall clocks are the one time
    (`now`), and a blocking sleep moves it on by itself (nothing else runs meanwhile)."""

    def __init__(self, start: float) -> None:
        self.now = start
        self._moved = asyncio.Condition()
        self.sleeps: list[float] = []
        self.deadlines: list[float] = []  # of the sleeps under way

    def __call__(self) -> float:
        return self.now

    @property
    def clock(self) -> Clock:
        return Clock(now=self, sleep=self.sleep, wall=self, sleep_blocking=self.sleep_blocking)

    def sleep_blocking(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    @property
    def sleeping(self) -> int:
        return len(self.deadlines)

    def sleeping_within(self, seconds: float) -> int:
        """How many sleeps under way end within `seconds` from now."""
        return sum(1 for d in self.deadlines if d <= self.now + seconds)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        deadline = self.now + seconds
        self.deadlines.append(deadline)
        try:
            async with self._moved:
                await self._moved.wait_for(lambda: self.now >= deadline)
        finally:
            self.deadlines.remove(deadline)

    async def advance(self, seconds: float) -> None:
        async with self._moved:
            self.now += seconds
            self._moved.notify_all()
        for _ in range(5):  # let the woken tasks get going
            await asyncio.sleep(0)
