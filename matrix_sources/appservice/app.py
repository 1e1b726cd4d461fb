"""The composition root of the running service: the service that speaks Matrix and the
bot that answers in it, each given the other's port. `run` (cli/serve.py), the demo
(tools/demo.py) and the end-to-end tests build the service here and nowhere else; the
index's own graph is indexer/components.py's."""

from __future__ import annotations

from matrix_sources.indexer.clock import REAL, Clock
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.store.vectors.idmap import IdMapByGeneration


def serve_with_bot(
    cfg: Config,
    embedder=None,
    clock: Clock = REAL,
    collection_vouched: bool = False,
    id_map: IdMapByGeneration | None = None,
):
    """The one place the two halves meet, each through the other's port, on one clock.
    `collection_vouched`, `id_map`: Service's."""
    from .bot.bot import Bot
    from .homeserver.service import Service

    service = Service(cfg, embedder, clock, collection_vouched, id_map)
    service.attach(
        Bot(
            cfg,
            service.index,
            service.matrix,
            on_search_seconds=service.metrics.search_latency.observe,
            index_changed=service.worker.notify,
            clock=clock,
            on_question=service.metrics.count_question,
            on_votes=service.metrics.count_votes,
        )
    )
    return service
