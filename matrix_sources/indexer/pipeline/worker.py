"""The live pipeline runner: runs `Pipeline.process_all` in the background, debounced,
off the event loop, retried with backoff when the store or the model fails.

    idle --notify()--> debounce --> run --ok--> idle
                                     |  ^
                               error v  | backoff (doubling, capped)

A window of a room's last block is re-embedded at most once per debounce interval
however many messages join it. The interval runs from the first message not yet taken
by a run: one that lands while a long run is under way is taken as soon as that run
ends if it has waited an interval already, so under load runs follow each other with
no idle second between them. A compaction due after redactions (Pipeline.run_compaction)
brings the worker back when it may run. A compaction runs in a task of its own beside
the runs (it copies the whole collection: minutes at 100,000 windows, docs/storage.md),
one at a time; the worker is idle when neither is running.
Every timer here (debounce, backoff, deferred compaction) waits and reads the time on
the injected `clock`: tests drive them with a fake one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..clock import REAL, Backoff, Clock
from .pipeline import Pipeline

log = logging.getLogger(__name__)


class PipelineWorker:
    """Runs the pipeline in the background for the live service: debounced, off the
    event loop, retried with backoff when the store or the model fails."""

    def __init__(
        self,
        pipeline: Pipeline,
        debounce: float = 1.0,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        clock: Clock = REAL,
        after_run: Callable[[], None] | None = None,
    ):
        self.pipeline = pipeline
        # Called in the worker thread after each run that succeeded (the service hands
        # the run's freed memory back to the system: appservice/homeserver/heap.py).
        self.after_run = after_run
        self.debounce = debounce
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._clock = clock
        self._wake = asyncio.Event()
        self._waiting_since: float | None = None  # first notify not yet taken by a run
        self._compaction_timer: asyncio.Task | None = None
        self._run_lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._compaction: asyncio.Task | None = None
        self._running = False
        self.failures = 0
        # Runs failed in a row (0 after one that worked), and the last error's type:
        # /health turns 503 while every run fails.
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.runs = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self._ran = asyncio.Event()  # set after each run that worked

    def notify(self) -> None:
        self.idle.clear()
        if self._waiting_since is None:
            self._waiting_since = self._clock.now()
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="pipeline")
        self.notify()  # catch up on whatever a previous run left pending

    async def stop(self) -> None:
        for task in (self._task, self._compaction_timer):
            if task:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        if self._compaction is not None:  # its thread cannot be cancelled: let it end
            await asyncio.gather(self._compaction, return_exceptions=True)

    async def _loop(self) -> None:
        backoff = Backoff(self.backoff_initial, self.backoff_max)
        while True:
            await self._wake.wait()
            since = self._waiting_since if self._waiting_since is not None else self._clock.now()
            wait = since + self.debounce - self._clock.now()
            if wait > 0:
                await self._clock.sleep(wait)
            self._wake.clear()
            self._waiting_since = None
            self._running = True
            try:
                async with self._run_lock:
                    await asyncio.to_thread(self._run)
                self.runs += 1
                self._ran.set()
                self.consecutive_failures = 0
                backoff.reset()
            except Exception as e:  # the store or the model failed: retry, cursor unmoved
                self._running = False
                self.failures += 1
                self.consecutive_failures += 1
                self.last_error = type(e).__name__
                log.error(
                    "pipeline_failed",
                    exc_info=True,
                    extra={
                        "failures_in_a_row": self.consecutive_failures,
                        "retry_in": backoff.delay,
                    },
                )
                await self._clock.sleep(backoff.next())
                if self._waiting_since is None:  # retry now: the backoff was the wait
                    self._waiting_since = self._clock.now() - self.debounce
                self._wake.set()
                continue
            self._running = False
            self._maybe_compact()
            self._settle()

    def _settle(self) -> None:
        """Idle if nothing is running or waiting; a compaction due but too soon brings
        the worker back when it may go."""
        wait = self.pipeline.compaction_wait()
        if wait and self._compaction is None:
            if self._compaction_timer is not None:
                self._compaction_timer.cancel()
            self._compaction_timer = asyncio.create_task(
                self._notify_after(wait), name="pipeline-compaction-timer"
            )
        if not self._wake.is_set() and not self._running and self._compaction is None:
            self.idle.set()

    def _maybe_compact(self) -> None:
        """Start the due compaction in its own task, unless one runs or it is too soon."""
        if self._compaction is None and self.pipeline.compaction_wait() == 0:
            self._compaction = asyncio.create_task(self._compact(), name="compaction")

    async def _compact(self) -> None:
        try:
            await asyncio.to_thread(self.pipeline.run_compaction)
        except Exception:  # stays due: retried after the next run
            log.error("compaction_failed", exc_info=True)
        finally:
            self._compaction = None
        self._maybe_compact()  # due again meanwhile (a redaction during the copy)
        self._settle()

    async def _notify_after(self, seconds: float) -> None:
        await self._clock.sleep(seconds)
        self.notify()

    def _run(self) -> None:
        indexed = self.pipeline.process_all()
        if indexed and self.after_run is not None:
            self.after_run()

    async def wait_idle(self) -> None:
        await self.idle.wait()

    async def wait_runs(self, n: int) -> None:
        """Until `n` runs have worked: what tests and benchmarks wait on, not time."""
        while self.runs < n:
            self._ran.clear()
            await self._ran.wait()
