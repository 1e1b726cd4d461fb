"""The running service with its bot: shared by `run` and the demo."""

from __future__ import annotations


def serve_with_bot(cfg, embedder=None):
    """The one place the two halves meet: the service that speaks Matrix, and the bot
    that answers in it, each through the other's port."""
    from ..bot.bot import Bot
    from ..homeserver.service import Service

    service = Service(cfg, embedder)
    service.attach(Bot(cfg, service.index, service,
                       on_search_seconds=service.metrics.search_latency.observe,
                       index_changed=service.worker.notify))
    return service
