"""Prometheus metrics at /metrics, and readiness at /health.

Counters that the service owns (events by type, refusals by rule, search latency,
embedding batch sizes) are prometheus-client objects. Figures the
indexer already keeps (pipeline stats, derived exclusions by kind, transaction counts,
queue depth, cursor lag) are
read at scrape time by a collector, so `indexer/` stays free of service concerns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from indexer.eventlog_reports import lag_report

if TYPE_CHECKING:
    from .service import Service

# Types with a bounded set of labels; anything else a homeserver sends counts as "other".
KNOWN_TYPES = frozenset({
    "m.room.message", "m.room.encrypted", "m.room.redaction", "m.room.member",
    "m.room.join_rules", "m.room.encryption", "m.room.name", "m.room.canonical_alias",
    "m.room.create", "m.room.power_levels", "m.room.history_visibility", "m.bridge",
    "uk.half-shot.bridge", "m.reaction", "m.room.topic"})


class _IndexCollector:
    def __init__(self, service: "Service") -> None:
        self.service = service

    def collect(self):
        s = self.service
        stats = s.pipeline.stats
        for name, doc, value in (
                ("windows_upserted", "Windows written to the store", stats.windows_upserted),
                ("windows_deleted", "Windows deleted from the store", stats.windows_deleted),
                ("embeddings", "Texts embedded by the pipeline", stats.embeddings),
                ("messages_indexed", "Messages the pipeline indexed", stats.messages),
                ("transactions_received", "Appservice transactions received",
                 s.transactions.received),
                ("transactions_retried", "Transactions received again (answered, not redone)",
                 s.transactions.replayed),
                ("pipeline_failures", "Pipeline runs that failed and were retried",
                 s.worker.failures)):
            c = CounterMetricFamily(f"matrix_sources_{name}", doc)
            c.add_metric([], value)
            yield c
        c = CounterMetricFamily("matrix_sources_derived_exclusions",
                                "Messages excluded as quotes of the bot's own output",
                                labels=["kind"])
        derived = s.pipeline.derived
        for kind, n in sorted((derived.by_kind if derived else {}).items()):
            c.add_metric([kind], n)
        yield c
        pending, oldest, lags = lag_report(s.eventlog)
        g = GaugeMetricFamily("matrix_sources_pipeline_queue_depth",
                              "Events in the event log waiting for the pipeline")
        g.add_metric([], pending)
        yield g
        g = GaugeMetricFamily("matrix_sources_pipeline_lag_seconds",
                              "Age of the oldest event waiting for the pipeline")
        g.add_metric([], max(0.0, time.time() - oldest / 1000) if oldest else 0.0)
        yield g
        g = GaugeMetricFamily("matrix_sources_cursor_lag_seconds",
                              "Per room: newest event in the log minus the room cursor",
                              labels=["room_id"])
        for room, lag_ms in sorted(lags.items()):
            g.add_metric([room], lag_ms / 1000)
        yield g
        g = GaugeMetricFamily("matrix_sources_ready", "1 when /health answers ready")
        g.add_metric([], 1.0 if s.health.ready else 0.0)
        yield g
        terms = s.store.terms
        g = GaugeMetricFamily("matrix_sources_term_index_ready",
                              "1 once the keyword leg answers from memory, not Chroma")
        g.add_metric([], 1.0 if terms is not None and terms.ready.is_set() else 0.0)
        yield g
        if terms is not None:
            t = terms.stats()
            g = GaugeMetricFamily("matrix_sources_term_index_postings",
                                  "Word postings the keyword leg keeps in memory")
            g.add_metric([], t["postings"])
            yield g


@dataclass
class ServiceMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.events = Counter("matrix_sources_events_received", "Events pushed by the homeserver",
                              ["type"], registry=r)
        self.refusals = Counter("matrix_sources_refusals", "Events the gate refused",
                                ["rule"], registry=r)
        self.search_latency = Histogram(
            "matrix_sources_search_latency_seconds", "Time to answer a search", registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.batch_sizes = Histogram(
            "matrix_sources_embedding_batch_size", "Windows per embedding batch", registry=r,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128))

    def attach(self, service: "Service") -> None:
        self.registry.register(_IndexCollector(service))
        self._drain: Callable[[], list[int]] = lambda: _drain(service.pipeline.stats.batch_sizes)

    def count_events(self, events: list, refused: dict[str, int]) -> None:
        for ev in events:
            t = ev.get("type") if isinstance(ev, dict) else None
            self.events.labels(t if t in KNOWN_TYPES else "other").inc()
        for rule, n in refused.items():
            self.refusals.labels(rule).inc(n)

    async def handle_metrics(self, _request: web.Request) -> web.Response:
        for size in self._drain():
            self.batch_sizes.observe(size)
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def _drain(sizes: list[int]) -> list[int]:
    out = sizes[:]
    del sizes[:len(out)]
    return out


@dataclass
class Health:
    """Ready only when the store and model are loaded and the homeserver answered."""

    store: bool = False
    model: bool = False
    homeserver: bool = False
    detail: str = "starting"

    @property
    def ready(self) -> bool:
        return self.store and self.model and self.homeserver

    async def handle(self, _request: web.Request) -> web.Response:
        body = {"status": "ready" if self.ready else "starting",
                "checks": {"store": self.store, "model": self.model,
                           "homeserver": self.homeserver},
                "detail": "" if self.ready else self.detail}
        return web.json_response(body, status=200 if self.ready else 503)
