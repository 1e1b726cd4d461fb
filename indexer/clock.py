"""Time, injected: everything that waits, schedules or retries takes a `Clock`, so tests
drive it with a fake one (tests/fakeclock.py) and never wait for real time.

One retry policy too: a delay that doubles from `initial` up to `maximum`. It is written
here rather than taken from stamina because stamina sleeps on its own (its testing mode
skips the waits instead), and the tests here check the schedule itself by advancing a
fake clock through every wait.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable, TypeVar

Now = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Clock:
    now: Now = time.monotonic
    sleep: Sleep = asyncio.sleep

    def later(self, seconds: float, call: Callable[[], None], name: str) -> asyncio.Task:
        """Run `call` once `seconds` have passed on this clock (a task: cancel it to drop)."""
        deadline = self.now() + seconds  # from now, not from when the task first runs

        async def wait_then_call() -> None:
            await self.sleep(max(0.0, deadline - self.now()))
            call()
        return asyncio.create_task(wait_then_call(), name=name)


REAL = Clock()


def format_ts(ts_ms: int) -> str:
    """A Matrix timestamp (ms since the epoch) as people read it in a citation, in UTC."""
    return datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


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


async def retrying(call: Callable[[], Awaitable[T]], *, retry_if: Callable[[Exception], bool],
                   initial: float, maximum: float, clock: Clock = REAL,
                   give_up_after: float | None = None,
                   on_retry: Callable[[Exception, float], None] | None = None) -> T:
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
