"""Time, injected: everything that waits, schedules, retries or stamps a time takes a
`Clock`, so tests drive it with a fake one (tests/fakeclock.py) and never wait for real
time. This is the one module that reads the system's clocks or sleeps
(tests/test_architecture.py): elsewhere `clock.now()` for durations and deadlines,
`clock.wall()` / `clock.now_ms()` for timestamps (Matrix's are ms since the epoch),
`await clock.sleep(s)` on the event loop, `clock.sleep_blocking(s)` off it,
`async with clock.timeout(s)` for a deadline on a block.

One retry policy too: a delay that doubles from `initial` up to `maximum`. It is written
here rather than taken from stamina because stamina sleeps on its own (its testing mode
skips the waits instead), and the tests here check the schedule itself by advancing a
fake clock through every wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

Now = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
SleepBlocking = Callable[[float], None]
T = TypeVar("T")


def _sleep(seconds: float) -> Awaitable[None]:
    # asyncio.sleep and time.sleep looked up at each call, not bound at import: the fast
    # suite's guard (tests/conftest.py) replaces them to catch a real wait in a test.
    return asyncio.sleep(seconds)


def _sleep_blocking(seconds: float) -> None:
    time.sleep(seconds)


@dataclass(frozen=True, slots=True)
class Clock:
    now: Now = time.monotonic  # seconds, for durations and deadlines: never goes back
    sleep: Sleep = _sleep  # a wait on the event loop
    wall: Now = time.time  # seconds since the epoch: timestamps, ages, horizons
    sleep_blocking: SleepBlocking = _sleep_blocking  # a wait off the event loop

    def now_ms(self) -> int:
        """The wall clock in ms since the epoch, as Matrix stamps events."""
        return int(self.wall() * 1000)

    def later(self, seconds: float, call: Callable[[], None], name: str) -> asyncio.Task[None]:
        """Run `call` once `seconds` have passed on this clock (a task: cancel it to drop)."""
        deadline = self.now() + seconds  # from now, not from when the task first runs

        async def wait_then_call() -> None:
            await self.sleep(max(0.0, deadline - self.now()))
            call()

        return asyncio.create_task(wait_then_call(), name=name)

    @contextlib.asynccontextmanager
    async def timeout(self, seconds: float) -> AsyncIterator[asyncio.Timeout]:
        """`asyncio.timeout(seconds)` on this clock: the block is cancelled and
        TimeoutError raised once `seconds` have passed; `.expired()` of what it yields
        says whether that is what ended it."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(None) as deadline:
            timer = self.later(seconds, lambda: deadline.reschedule(loop.time()), "timeout")
            try:
                yield deadline
            finally:
                timer.cancel()


REAL = Clock()


def stopwatch(clock: Clock = REAL) -> Callable[[], float]:
    """Seconds since this call, on `clock`'s monotonic time: how long a step took, for a
    log line or a figure. A duration only logged may be taken on REAL, the one clock of
    a part that has none injected."""
    started = clock.now()
    return lambda: clock.now() - started


def format_ts(ts_ms: int) -> str:
    """A Matrix timestamp (ms since the epoch) as people read it in a citation, in UTC."""
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M")


class Backoff:
    """The delays between tries: `initial`, doubled after each failure, at most `maximum`;
    `reset` after a success."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial, self.maximum = initial, maximum
        self.delay = initial

    def next(self) -> float:
        """The delay to wait now; the one after it doubles."""
        d = self.delay
        self.delay = min(self.delay * 2, self.maximum)
        return d

    def reset(self) -> None:
        self.delay = self.initial


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    retry_if: Callable[[Exception], bool],
    initial: float,
    maximum: float,
    clock: Clock = REAL,
    give_up_after: float | None = None,
    on_retry: Callable[[Exception, float], None] | None = None,
) -> T:
    """`call` until it returns. An exception `retry_if` rejects is raised at once; one it
    accepts is retried after the next backoff delay, until `give_up_after` seconds (if
    given) would be passed, when it is raised too."""
    backoff = Backoff(initial, maximum)
    deadline = None if give_up_after is None else clock.now() + give_up_after
    while True:
        try:
            return await call()
        except Exception as e:
            delay = backoff.delay
            if not retry_if(e) or (deadline is not None and clock.now() + delay > deadline):
                raise
            if on_retry is not None:
                on_retry(e, delay)
        await clock.sleep(backoff.next())
