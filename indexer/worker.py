"""The live pipeline runner: runs `Pipeline.process_all` in the background, debounced,
off the event loop, retried with backoff when the store or the model fails.

    idle --notify()--> debounce --> run --ok--> idle
                                     |  ^
                               error v  | backoff (doubling, capped)

The open window of a room (its last) is re-embedded at most once per debounce interval
however many messages arrive. The interval runs from the first message not yet taken
by a run: one that lands while a long run is under way is taken as soon as that run
ends if it has waited an interval already, so under load runs follow each other with
no idle second between them. A sweep closes quiet rooms' last blocks, and a scrub due
after redactions (Pipeline.scrub_history) brings the worker back when it may run.
Every timer here (debounce, backoff, sweep, deferred scrub) waits on the injected
`sleep` and reads the injected `clock`: tests drive them with a fake clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from .pipeline import Pipeline

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


class PipelineWorker:
    """Runs the pipeline in the background for the live service: debounced, off the
    event loop, retried with backoff when the store or the model fails."""

    def __init__(self, pipeline: Pipeline, debounce: float = 1.0,
                 backoff_initial: float = 1.0, backoff_max: float = 60.0,
                 sleep: Sleep = asyncio.sleep, clock: Callable[[], float] = time.monotonic,
                 sweep_every: float = 60.0, after_run: Callable[[], None] | None = None):
        self.pipeline = pipeline
        # Called in the worker thread after each run that succeeded (the service hands
        # the run's freed memory back to the system: appservice/heap.py).
        self.after_run = after_run
        self.sweep_every = sweep_every  # seconds between closing quiet rooms' last blocks
        self.debounce = debounce
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._clock = clock
        self._wake = asyncio.Event()
        self._waiting_since: float | None = None  # first notify not yet taken by a run
        self._scrub_timer: asyncio.Task | None = None
        self._run_lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._sweeper: asyncio.Task | None = None
        self.failures = 0
        self.runs = 0
        self.idle = asyncio.Event()
        self.idle.set()

    def notify(self) -> None:
        self.idle.clear()
        if self._waiting_since is None:
            self._waiting_since = self._clock()
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="pipeline")
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="pipeline-sweep")
        self.notify()  # catch up on whatever a previous run left pending

    async def stop(self) -> None:
        for task in (self._task, self._sweeper, self._scrub_timer):
            if task:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    async def _loop(self) -> None:
        backoff = self.backoff_initial
        while True:
            await self._wake.wait()
            since = self._waiting_since if self._waiting_since is not None else self._clock()
            wait = since + self.debounce - self._clock()
            if wait > 0:
                await self._sleep(wait)
            self._wake.clear()
            self._waiting_since = None
            try:
                async with self._run_lock:
                    await asyncio.to_thread(self._run)
                self.runs += 1
                backoff = self.backoff_initial
            except Exception as e:  # the store or the model failed: retry, cursor unmoved
                self.failures += 1
                log.warning("pipeline_failed", extra={"error": type(e).__name__,
                                                       "retry_in": backoff})
                await self._sleep(backoff)
                backoff = min(backoff * 2, self.backoff_max)
                if self._waiting_since is None:  # retry now: the backoff was the wait
                    self._waiting_since = self._clock() - self.debounce
                self._wake.set()
                continue
            wait = self.pipeline.scrub_wait()
            if wait:  # a scrub is due but too soon: run again when it may go
                if self._scrub_timer is not None:
                    self._scrub_timer.cancel()
                self._scrub_timer = asyncio.create_task(self._notify_after(wait),
                                                        name="pipeline-scrub-timer")
            if not self._wake.is_set():
                self.idle.set()

    async def _notify_after(self, seconds: float) -> None:
        await self._sleep(seconds)  # the injected sleep: tests move a fake clock
        self.notify()

    def _run(self) -> None:
        indexed = self.pipeline.process_all()
        self.pipeline.scrub_history()
        if indexed and self.after_run is not None:
            self.after_run()

    async def _sweep_loop(self) -> None:
        """Every sweep interval, close the last blocks of rooms gone quiet; never at the
        same time as a pipeline run (they re-chunk the same tails)."""
        while True:
            await self._sleep(self.sweep_every)
            try:
                async with self._run_lock:
                    closed = await asyncio.to_thread(self.pipeline.close_quiet_blocks)
                    await asyncio.to_thread(self.pipeline.scrub_history)  # one that waited
            except Exception as e:  # retried at the next sweep
                log.warning("sweep_failed", extra={"error": type(e).__name__})
                continue
            if closed:
                log.info("quiet_blocks_closed", extra={"blocks": closed})

    async def wait_idle(self) -> None:
        await self.idle.wait()
