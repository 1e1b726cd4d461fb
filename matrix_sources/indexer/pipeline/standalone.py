"""The pipeline as a process of its own: `matrix-sources worker` (index.pipeline: external).

    loop:  labels read (the service writes what it knows of each room)
           -> Pipeline.process_all under claims (claims.py): the rooms no other worker
              holds, each committed in a fenced transaction, released when done
           -> nothing to do: wait `poll` seconds; a failure (Chroma or the database
              unreachable): wait a backoff (doubling, capped), then again
    stop:  after the run under way (SIGTERM, SIGINT); claims released. A worker killed
           outright loses nothing: its uncommitted steps stay pending, and its claims
           are taken over when their lease runs out.

Workers never compact: they ask the service through the event log (compaction.py).
Waits go through the injected `wait` (a threading.Event's, by default), so tests
drive the loop without sleeping.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..clock import Backoff
from ..records import RoomID
from ..store.eventlog.log import EventLog
from ..store.vectors.chroma import ChromaStore
from .pipeline import Pipeline

log = logging.getLogger(__name__)


@dataclass
class Worker:
    eventlog: EventLog
    store: ChromaStore
    pipeline: Pipeline
    labels: dict[RoomID, str] = field(default_factory=dict)  # read by pipeline.room_label

    def run_once(self) -> int:
        """One pass over the rooms with work; how many messages it indexed."""
        self.labels.clear()
        self.labels.update(self.eventlog.claims.labels())
        return self.pipeline.process_all()

    def close(self) -> None:
        if self.pipeline.claims is not None:
            self.pipeline.claims.release()
        self.eventlog.close()


@dataclass
class WorkerLoop:
    worker: Worker
    poll: float = 1.0  # seconds between looks when there is nothing to do
    stop: threading.Event = field(default_factory=threading.Event)
    backoff: Backoff = field(default_factory=lambda: Backoff(1.0, 60.0))
    # Waits up to its argument, or less if stopped: the stop event's, unless a test's.
    wait: Callable[[float], object] | None = None
    runs: int = 0
    indexed: int = 0
    failures: int = 0

    def run(self, max_runs: int | None = None) -> None:
        wait = self.wait or self.stop.wait
        while not self.stop.is_set() and (max_runs is None or self.runs < max_runs):
            try:
                n = self.worker.run_once()
            except Exception as e:  # noqa: BLE001 - the store or the database: retried
                self.failures += 1
                delay = self.backoff.next()
                log.error(
                    "worker_run_failed",
                    exc_info=True,
                    extra={"error": type(e).__name__, "retry_in": delay},
                )
                wait(delay)
                continue
            self.runs += 1
            self.indexed += n
            self.backoff.reset()
            if n:
                log.info("worker_indexed", extra={"messages": n, "total": self.indexed})
            else:
                wait(self.poll)
