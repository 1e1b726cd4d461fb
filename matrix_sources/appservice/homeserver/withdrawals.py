"""What is withdrawn outside a transaction, applied while the service runs: requests of
`matrix-sources forget` (indexer/ingest/spool.py), the messages room retention expires
(indexer/ingest/retention.py), and the users Synapse erases (erasure.py). Each takes the
redaction path: the worker re-chunks the windows and their old vectors are compacted
away; the answers that quoted the messages are edited (`on_withdrawn`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.forget import Forgetting, apply_request
from matrix_sources.indexer.ingest.retention import Retention
from matrix_sources.indexer.ingest.spool import serve
from matrix_sources.indexer.pipeline.worker import PipelineWorker
from matrix_sources.indexer.records import UserID

log = logging.getLogger(__name__)


class Withdrawals:
    def __init__(
        self,
        cfg: Config,
        ingest: Ingest,
        worker: PipelineWorker,
        on_withdrawn: Callable[[Iterable[str]], None],
        clock: Clock = REAL,
    ) -> None:
        self.cfg, self.ingest, self.worker = cfg, ingest, worker
        self._on_withdrawn = on_withdrawn
        self._clock = clock
        self._retention_last = float("-inf")

    async def serve_spool(self) -> None:
        """`matrix-sources forget` while the service runs: each request applied here,
        the answers no one will read swept."""
        forgetting = Forgetting(self.ingest, self._clock)
        try:
            answers = await asyncio.to_thread(
                serve,
                self.cfg.data_dir,
                lambda req: apply_request(forgetting, req),
                self._clock.wall,
            )
        except OSError:
            log.warning("spool_unreadable", exc_info=True)
            return
        for answer in answers:
            self._taken(bool(answer.get("windows")), answer.get("event_ids") or ())

    async def expire_retained(self) -> None:
        """Room retention, once per compaction interval."""
        now = self._clock.now()
        if now - self._retention_last < self.cfg.index.compaction_interval_seconds:
            return
        self._retention_last = now
        report = await asyncio.to_thread(Retention(self.ingest, self._clock).expire)
        self._taken(bool(report.windows), report.event_ids)

    async def forget_erased(self, user: str) -> None:
        """Synapse erased the user: what they said leaves the index."""
        report = await asyncio.to_thread(
            Forgetting(self.ingest, self._clock).forget_user, UserID(user), "synapse_erasure"
        )
        self._taken(bool(report.windows), report.event_ids)

    def _taken(self, windows: bool, event_ids: Iterable[str]) -> None:
        if windows:
            self.worker.notify()
        event_ids = list(event_ids)
        if event_ids:
            self._on_withdrawn(event_ids)
