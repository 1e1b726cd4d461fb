"""`!sources` answered in a pool of its own, bounded, so commands never delay acks.

    transaction handler --submit--> queue (at most `max_waiting`) --> `workers` tasks
                                                                       --> answer(cmd)

Why a pool of its own: a flood of commands (100 in one transaction) searched at once in
the default thread pool, which `admit` shares, delays the next transaction's 200 by
31-36 s. Here at most `workers` answers run at a time, their searches in the
responder's own executor; a command beyond `max_waiting` is dropped, logged by id.

At stop the answers under way may finish for a grace period: a reply the homeserver
already took but not yet marked answered (indexer/store/commands.py) would be answered
again after the restart. Commands still waiting stay kept and are answered then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from matrix_sources.indexer.ingest.events import MessageEvent

log = logging.getLogger(__name__)

Answer = Callable[[MessageEvent], Awaitable[object]]


class CommandPool:
    def __init__(self, answer: Answer, workers: int = 2, max_waiting: int = 1000) -> None:
        self._answer = answer
        self.workers = workers
        self._queue: asyncio.Queue[MessageEvent] | None = None
        self._max_waiting = max_waiting
        self._tasks: list[asyncio.Task] = []
        self._answering: set[asyncio.Task] = set()  # the workers with a command under way
        self._closing = False
        self.dropped = 0

    def submit(self, cmd: MessageEvent) -> bool:
        """Queue a command; False (and logged) if too many are waiting."""
        if self._closing:
            return True  # kept (the transaction stored it): answered after the restart
        if self._queue is None:
            self._queue = asyncio.Queue(self._max_waiting)
            self._tasks = [
                asyncio.create_task(self._work(), name="command") for _ in range(self.workers)
            ]
        try:
            self._queue.put_nowait(cmd)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning(
                "command_dropped",
                extra={
                    "room_id": cmd.message.room_id,
                    "event_id": cmd.message.event_id,
                    "waiting": self._queue.qsize(),
                },
            )
            return False
        return True

    @property
    def waiting(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    async def join(self) -> None:
        if self._queue is not None:
            await self._queue.join()

    async def _work(self) -> None:
        assert self._queue is not None
        me = asyncio.current_task()
        assert me is not None
        while not self._closing:
            cmd = await self._queue.get()
            self._answering.add(me)
            try:
                await self._answer(cmd)
            except Exception:
                log.exception(
                    "answer_failed",
                    extra={"room_id": cmd.message.room_id, "event_id": cmd.message.event_id},
                )
            finally:
                self._answering.discard(me)
                self._queue.task_done()

    async def stop(self, grace: Callable[[], Awaitable[object]] | None = None) -> None:
        """Takes no more commands; the answers under way run until they end or `grace()`
        does (a clock's sleep), then whatever is left is cancelled."""
        self._closing = True
        for t in self._tasks:
            if t not in self._answering:
                t.cancel()  # waiting for a command
        if grace is not None and self._answering:
            ends: asyncio.Future[Any] = asyncio.ensure_future(grace())
            answered: asyncio.Future[Any] = asyncio.gather(*self._answering, return_exceptions=True)
            try:
                await asyncio.wait([ends, answered], return_when=asyncio.FIRST_COMPLETED)
            finally:
                ends.cancel()
            if self._answering:
                log.warning("answers_cut_short", extra={"answering": len(self._answering)})
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
