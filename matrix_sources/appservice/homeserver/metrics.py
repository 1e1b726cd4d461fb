"""Prometheus metrics at /metrics.

Counters that the service owns (events by type, refusals by rule, search latency,
embedding batch sizes, questions and votes, by room only with metrics.per_room) are
prometheus-client objects. Figures the indexer already keeps
in memory (pipeline stats, derived exclusions by kind, transaction counts) are read at
scrape time by a collector, so `indexer/` stays free of service concerns. Figures that
take an aggregate over the event log (queue depth, cursor lag) come from
`EventLogFigures`: read in a worker thread on a connection of their own, at most every
`max_age` seconds, started by a scrape and served to the next ones: a scrape never
waits for the event log, and the loop never runs a query.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.store.eventlog.reports import LagReport, lag_report_at

log = logging.getLogger(__name__)

# Types with a bounded set of labels; anything else a homeserver sends counts as "other".
KNOWN_TYPES = frozenset(
    {
        "m.room.message",
        "m.room.encrypted",
        "m.room.redaction",
        "m.room.member",
        "m.room.join_rules",
        "m.room.encryption",
        "m.room.name",
        "m.room.canonical_alias",
        "m.room.create",
        "m.room.power_levels",
        "m.room.history_visibility",
        "m.bridge",
        "uk.half-shot.bridge",
        "m.reaction",
        "m.room.server_acl",
        "m.poll.start",
        "org.matrix.msc3381.poll.start",
        "m.room.topic",
    }
)


class EventLogFigures:
    """The event log's aggregate figures, cached; `refresh()` reads them again in a
    worker thread unless they are younger than `max_age` or a read is under way."""

    def __init__(self, path: Path | None, max_age: float = 5.0, clock: Clock = REAL) -> None:
        self.path = path
        self.max_age = max_age
        self._clock = clock
        self.figures: LagReport | None = None
        self.read_at = float("-inf")
        self._reading: asyncio.Task | None = None

    def refresh(self) -> asyncio.Task | None:
        if self._reading is not None or self._clock.now() - self.read_at < self.max_age:
            return self._reading
        self._reading = asyncio.create_task(self._read(), name="eventlog-figures")
        return self._reading

    async def _read(self) -> None:
        try:
            # None (PostgreSQL) reads as the file "None", as before: the read fails, logged.
            self.figures = await asyncio.to_thread(lag_report_at, str(self.path))
            self.read_at = self._clock.now()
        except Exception:
            log.error("metrics_read_failed", exc_info=True, extra={"path": str(self.path)})
        finally:
            self._reading = None


@dataclass
class MetricSources:
    """What the collector reads: in-memory figures only (the event log's through
    `figures`). Built by the service; any object with these attributes will do."""

    pipeline: Any  # indexer.pipeline.pipeline.Pipeline: stats, derived, failing
    transactions: Any  # .transactions.TransactionHandler: received, replayed
    worker: Any  # indexer.pipeline.worker.PipelineWorker: failures
    keywords: Any  # indexer.store.eventlog.keywords_build.KeywordBuild (its state) or None
    figures: EventLogFigures
    ready: Callable[[], bool]
    backlog: Any = None  # .backlog.BacklogBound: pending, oldest wait, bound, refusals
    clock: Clock = REAL  # the pipeline's lag: now less the oldest append's stamp


class _IndexCollector:
    def __init__(self, sources: MetricSources) -> None:
        self.sources = sources

    def collect(self):
        s = self.sources
        stats = s.pipeline.stats
        for name, doc, value in (
            ("windows_upserted", "Windows written to the store", stats.windows_upserted),
            ("windows_deleted", "Windows deleted from the store", stats.windows_deleted),
            ("embeddings", "Texts embedded by the pipeline", stats.embeddings),
            ("messages_indexed", "Messages the pipeline indexed", stats.messages),
            ("transactions_received", "Appservice transactions received", s.transactions.received),
            (
                "transactions_retried",
                "Transactions received again (answered, not redone)",
                s.transactions.replayed,
            ),
            ("pipeline_failures", "Pipeline runs that failed and were retried", s.worker.failures),
        ):
            c = CounterMetricFamily(f"matrix_sources_{name}", doc)
            c.add_metric([], value)
            yield c
        c = CounterMetricFamily(
            "matrix_sources_derived_exclusions",
            "Messages excluded as quotes of the bot's own output",
            labels=["kind"],
        )
        derived = s.pipeline.derived
        for kind, n in sorted((derived.by_kind if derived else {}).items()):
            c.add_metric([kind], n)
        yield c
        g = GaugeMetricFamily(
            "matrix_sources_timelines_failing",
            "Timelines the pipeline cannot plan (logged with a traceback)",
        )
        g.add_metric([], len(s.pipeline.failing))
        yield g
        g = GaugeMetricFamily("matrix_sources_ready", "1 when /health answers ready")
        g.add_metric([], 1.0 if s.ready() else 0.0)
        yield g
        yield from self._terms()
        yield from self._backlog()
        if s.figures.figures is None:
            return  # not read yet: the scrape started the first read
        pending, oldest, lags = s.figures.figures
        if s.backlog is None:
            g = GaugeMetricFamily(
                "matrix_sources_pipeline_queue_depth",
                "Events in the event log waiting for the pipeline",
            )
            g.add_metric([], pending)
            yield g
            g = GaugeMetricFamily(
                "matrix_sources_pipeline_lag_seconds",
                "How long the oldest event waiting for the pipeline has "
                "waited since it was appended",
            )
            g.add_metric([], max(0.0, s.clock.wall() - oldest / 1000) if oldest else 0.0)
            yield g
        g = GaugeMetricFamily(
            "matrix_sources_cursor_lag_seconds",
            "Per room: newest event in the log minus the room cursor",
            labels=["room_id"],
        )
        for room, lag_ms in sorted(lags.items()):
            g.add_metric([room], lag_ms / 1000)
        yield g

    def _backlog(self):
        """The backlog as the bound sees it (read every second: backlog.py)."""
        b = self.sources.backlog
        if b is None:
            return
        for name, doc, value in (
            (
                "pipeline_queue_depth",
                "Events in the event log waiting for the pipeline",
                b.latest.pending,
            ),
            (
                "pipeline_lag_seconds",
                "How long the oldest event waiting for the pipeline "
                "has waited since it was appended",
                b.oldest_seconds,
            ),
            (
                "pipeline_queue_limit",
                "index.max_pending: past it transactions are refused (503) and Synapse keeps them",
                b.limit,
            ),
        ):
            g = GaugeMetricFamily(f"matrix_sources_{name}", doc)
            g.add_metric([], value)
            yield g
        c = CounterMetricFamily(
            "matrix_sources_transactions_refused_backlog",
            "Transactions answered 503 because the backlog was full",
        )
        c.add_metric([], b.refused)
        yield c

    def _terms(self):
        state = self.sources.keywords.state if self.sources.keywords is not None else {}
        g = GaugeMetricFamily(
            "matrix_sources_term_index_ready",
            "1 once the keyword leg answers from the event log's keyword index, not a scan",
        )
        g.add_metric([], 1.0 if state.get("ready") else 0.0)
        yield g


@dataclass
class ServiceMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    # metrics.per_room: the questions and votes labelled by room (room ids reach the
    # monitoring); else totals.
    per_room: bool = False

    def __post_init__(self) -> None:
        r = self.registry
        room = ["room_id"] if self.per_room else []
        self.asked = Counter(
            "matrix_sources_questions_asked",
            "Searches answered in indexed rooms (the moderators' report counts the same)",
            room,
            registry=r,
        )
        self.answered = Counter(
            "matrix_sources_questions_answered",
            "Searches answered with at least one hit",
            room,
            registry=r,
        )
        self.nothing_matched = Counter(
            "matrix_sources_questions_nothing_matched",
            'Searches answered "nothing matches"',
            room,
            registry=r,
        )
        self.votes = Counter(
            "matrix_sources_votes",
            "Votes on the bot's answers: up, down, solved (the asker's ✅)",
            ["vote", *room],
            registry=r,
        )
        self.events = Counter(
            "matrix_sources_events_received",
            "Events pushed by the homeserver",
            ["type"],
            registry=r,
        )
        self.refusals = Counter(
            "matrix_sources_refusals", "Events the gate refused", ["rule"], registry=r
        )
        self.search_latency = Histogram(
            "matrix_sources_search_latency_seconds",
            "Time to answer a search",
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.batch_sizes = Histogram(
            "matrix_sources_embedding_batch_size",
            "Windows per embedding batch",
            registry=r,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
        )

    def attach(self, sources: MetricSources) -> None:
        self.sources = sources
        self.registry.register(_IndexCollector(sources))
        self._drain: Callable[[], list[int]] = lambda: _drain(sources.pipeline.stats.batch_sizes)

    def count_question(self, room_id: str, hits: int) -> None:
        """A search answered in an indexed room (the bot, once it is recorded)."""
        labels = [room_id] if self.per_room else []
        for counter in (self.asked, self.answered if hits else self.nothing_matched):
            (counter.labels(*labels) if labels else counter).inc()

    def count_votes(self, votes: list) -> None:
        """Votes counted (eventlog/feedback.py's Reaction: room_id, vote)."""
        for v in votes:
            self.votes.labels(v.vote.value, *([v.room_id] if self.per_room else [])).inc()

    def count_events(self, events: list, refused: dict[str, int]) -> None:
        for ev in events:
            t = ev.get("type") if isinstance(ev, dict) else None
            self.events.labels(t if t in KNOWN_TYPES else "other").inc()
        for rule, n in refused.items():
            self.refusals.labels(rule).inc(n)

    async def handle_metrics(self, _request: web.Request) -> web.Response:
        self.sources.figures.refresh()  # for the next scrape; this one is not held up
        for size in self._drain():
            self.batch_sizes.observe(size)
        # In a thread too: the collector takes the keyword index's lock, which its
        # background build may hold for a while.
        body = await asyncio.to_thread(generate_latest, self.registry)
        return web.Response(
            body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )


def _drain(sizes: list[int]) -> list[int]:
    out = sizes[:]
    del sizes[: len(out)]
    return out
