"""Opening the index from a config: the parts every command and the service share."""

from __future__ import annotations

from dataclasses import dataclass

from .allowlist import load_allowlist
from .config import Config
from .derived import DerivedFilter, EmittedSection, Matcher, answer_artifacts
from .embedder import Embedder, load_embedder
from .eventlog import EventLog
from .gate import Gate
from .history import History
from .ingest import Ingest
from .journal import Journal
from .linkage import Horizon
from .manifest import Manifest, manifest_path
from .pipeline import Pipeline
from .present import Presenter
from .purge import Purger
from .records import UserID
from .search import Searcher
from .store import ChromaStore


def open_store(cfg: Config, eventlog: EventLog | None = None,
               inspect: bool = False) -> ChromaStore:
    """The collection, with its text and its live generation read from the event log.
    `inspect` (doctor, the start refusal): never create or touch an event log that is
    missing or damaged; the collection is then opened without it (its live generation
    found on disk, no text)."""
    if eventlog is None and inspect:
        from .eventlog_check import check_eventlog

        if check_eventlog(cfg.eventlog_path).state != "ok":
            return _chroma(cfg, None)
    eventlog = eventlog if eventlog is not None else EventLog(cfg.eventlog_path)
    return _chroma(cfg, eventlog)


def _chroma(cfg: Config, eventlog: EventLog | None) -> ChromaStore:
    if cfg.chroma.mode == "server":
        return ChromaStore(host=cfg.chroma.host, port=cfg.chroma.port, eventlog=eventlog)
    return ChromaStore(path=cfg.chroma.path, eventlog=eventlog)


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
    manifest: Manifest | None = None  # artifacts: loaded on first use, not at open
    matcher: Matcher | None = None

    @classmethod
    def open(cls, cfg: Config, embedder: Embedder | None = None) -> "Index":
        eventlog = EventLog(cfg.eventlog_path)
        journal = Journal(cfg.journal_path)
        store = open_store(cfg, eventlog)
        embedder = embedder or load_embedder(cfg.embedder, cfg.embedder_backend,
                                              cfg.data_dir / "models")
        gate = Gate(frozenset(load_allowlist(cfg.allowlist)), UserID(cfg.bot_user),
                    cfg.puppet_patterns)
        ingest = Ingest(gate, eventlog, journal, history=History(eventlog))
        pipeline = Pipeline(eventlog, embedder, store, cfg.policy, room_label=ingest.label,
                            admits=ingest.admits, history=ingest.history)
        # Purges share the pipeline's lock and store (see pipeline.py on the race).
        ingest.purger = Purger(eventlog, journal, pipeline)
        presenter = Presenter(eventlog, embedder,
                              Horizon(cfg.answer_horizon_hours, cfg.answer_horizon_messages))
        searcher = Searcher(embedder, store, cfg.rrf_k, lexical_max_terms=cfg.lexical_max_terms,
                            min_similarity=cfg.min_similarity, presenter=presenter)
        # The derived filter: one manifest, read by the pipeline, appended by replies.
        manifest = Manifest(manifest_path(cfg.data_dir), cfg.derived.shingle_size)
        matcher = Matcher(manifest, cfg.derived)
        pipeline.derived = DerivedFilter(matcher, eventlog, journal)
        return cls(cfg, eventlog, journal, store, embedder, gate, ingest, pipeline, searcher,
                   manifest, matcher)

    def record_answer(self, reply_event_id: str, sections: list[EmittedSection]) -> int:
        """Record what a `!sources` reply quoted, one answer artifact per hit. Call only
        after the reply was sent. Blocking (fsync): run it off the event loop."""
        assert self.manifest is not None
        return self.manifest.append(answer_artifacts(reply_event_id, sections,
                                                     self.manifest.shingle_size))

    def ensure_meta(self, progress=None) -> bool:
        """Rebuild the collection if another model or chunker made it (rebuild.py)."""
        from .rebuild import ensure_meta
        from .reference import References

        def resync() -> None:
            refs = References(self.cfg.data_dir, self.store, self.manifest, self.embedder)
            for corpus in refs.list():
                if corpus.path != "(not registered)":
                    refs.sync(corpus.name)

        return ensure_meta(self.store, self.eventlog, self.pipeline, resync, progress)

    def close(self) -> None:
        self.eventlog.close()
