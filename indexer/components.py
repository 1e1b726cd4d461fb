"""Opening the index from a config: the parts every command and the service share."""

from __future__ import annotations

from dataclasses import dataclass

from .allowlist import load_allowlist
from .config import Config
from .embedder import Embedder, load_embedder
from .eventlog import EventLog
from .gate import Gate
from .ingest import Ingest
from .journal import Journal
from .pipeline import Pipeline
from .records import UserID
from .search import Searcher
from .store import ChromaStore


def open_store(cfg: Config) -> ChromaStore:
    if cfg.chroma.mode == "server":
        return ChromaStore(host=cfg.chroma.host, port=cfg.chroma.port)
    return ChromaStore(path=cfg.chroma.path)


@dataclass
class Index:
    cfg: Config
    eventlog: EventLog
    journal: Journal
    store: ChromaStore
    embedder: Embedder
    gate: Gate
    ingest: Ingest
    pipeline: Pipeline
    searcher: Searcher

    @classmethod
    def open(cls, cfg: Config, embedder: Embedder | None = None) -> "Index":
        eventlog = EventLog(cfg.eventlog_path)
        journal = Journal(cfg.journal_path)
        store = open_store(cfg)
        embedder = embedder or load_embedder(cfg.embedder)
        gate = Gate(frozenset(load_allowlist(cfg.allowlist)), UserID(cfg.bot_user),
                    cfg.puppet_patterns)
        ingest = Ingest(gate, eventlog, journal)
        pipeline = Pipeline(eventlog, embedder, store, cfg.policy, room_label=ingest.label)
        searcher = Searcher(embedder, store, cfg.rrf_k)
        return cls(cfg, eventlog, journal, store, embedder, gate, ingest, pipeline, searcher)

    def close(self) -> None:
        self.eventlog.close()
