"""Opening the index from a config: the parts every command and the service share.

The object graph is built here, once, and nothing patches it afterwards: each part is
handed what it uses when it is made (the keyword postings, to the store that keeps
them in step and to the searcher that reads them). It is acyclic:

    Pipeline --> Ingest --> Purger --> Compaction --> WriteGuard (lock, purge counts)
    Pipeline ------------------------> Compaction, WriteGuard, store

    The pipeline asks Ingest whether a room is admitted; the purger and the pipeline
    share the guard, the store and the compaction schedule (a purge compacts at once,
    a redaction within the interval); nothing holds the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .clock import REAL, Clock
from .config import Config, ConfigError
from .derived.filter import DerivedFilter, EmittedSection, Matcher, answer_artifacts, answer_prefix
from .derived.manifest import Manifest, manifest_path
from .derived.reference import References
from .ingest.admit import Ingest
from .ingest.followed import corpus_rooms, load_followed
from .ingest.gate import Gate
from .ingest.history import History
from .ingest.purge import Purger
from .models.embedder import Embedder, load_embedder, query_side
from .models.turns import ModelTurns
from .pipeline import rebuild as rebuilding
from .pipeline.claims import RoomClaims
from .pipeline.pipeline import EMBED_CALL, Pipeline
from .pipeline.standalone import Worker
from .records import ARTIFACT_ANSWER, ChunkPolicy, RoomID, UserID
from .search.abstain import Floor
from .search.linkage import Horizon
from .search.present import Presenter
from .search.searcher import Searcher
from .store.answers import AnswerLog
from .store.commands import CommandLog
from .store.compaction import Compaction
from .store.eventlog.keywords_build import KeywordBuild
from .store.eventlog.log import EventLog
from .store.journal import Journal
from .store.vectors.chroma import ChromaStore
from .store.vectors.segments import SegmentPolicy
from .store.vectors.server_files import ServerFiles, ServerFilesError
from .store.writeguard import WriteGuard


def open_store(cfg: Config, eventlog: EventLog | None = None, inspect: bool = False) -> ChromaStore:
    """The collection, with its text and its live generation read from the event log.
    `inspect` (doctor, the start refusal): never create or touch an event log that is
    missing or damaged; the collection is then opened without it (its live generation
    found on disk, no text)."""
    if eventlog is None and inspect:
        from .store.eventlog.check import check_eventlog

        if check_eventlog(cfg.database).state != "ok":
            return _chroma(cfg, None)
    eventlog = eventlog if eventlog is not None else EventLog(cfg.database)
    return _chroma(cfg, eventlog)


def _chroma(cfg: Config, eventlog: EventLog | None) -> ChromaStore:
    seg = cfg.chroma.segments
    policy = SegmentPolicy(seg.hot_windows, seg.merge_fanout, seg.max_windows)
    shared = cfg.index.pipeline == "external"  # workers write it too (segments.Segments)
    if cfg.chroma.mode == "server":
        files = ServerFiles(cfg.chroma.persist_dir) if cfg.chroma.persist_dir else None
        try:
            return ChromaStore(
                host=cfg.chroma.host,
                port=cfg.chroma.port,
                eventlog=eventlog,
                server_files=files,
                policy=policy,
                shared=shared,
            )
        except ServerFilesError as e:  # said as a config error: the key and the file
            key, _, message = str(e).partition(": ")
            raise ConfigError(cfg.file, key, message) from None
    return ChromaStore(path=cfg.chroma.path, eventlog=eventlog, policy=policy, shared=shared)


def writers(
    eventlog: EventLog,
    journal: Journal,
    store: ChromaStore,
    embedder: Embedder,
    gate: Gate,
    policy: ChunkPolicy | None = None,
    compact_every: float = 60.0,
    clock: Clock = REAL,
    **pipeline_options,
) -> tuple[Ingest, Pipeline]:
    """Ingest (with its history and purger) and the pipeline over one event log and
    store: the part of the graph that writes. Index.open builds it here, and so do the
    tests that build an index from parts. `compact_every`: seconds between compactions
    after redactions; `clock`: admission's and the compaction schedule's;
    `pipeline_options`: Pipeline's fields."""
    # Purges share the pipeline's lock and store (see pipeline/pipeline.py on the race), and its
    # compaction schedule: a purge compacts at once, a redaction within the interval.
    guard = WriteGuard()
    # With claims, workers in other processes write the collection too (compaction.py).
    compaction = Compaction(
        eventlog,
        store,
        guard,
        every=compact_every,
        clock=clock,
        fenced=pipeline_options.get("claims") is not None,
    )
    history = History(eventlog)
    ingest = Ingest(
        gate,
        eventlog,
        journal,
        history=history,
        purger=Purger(eventlog, journal, store, guard, compaction),
        clock=clock,
    )
    pipeline = Pipeline(
        eventlog,
        embedder,
        store,
        policy or ChunkPolicy(),
        room_label=ingest.label,
        admits=ingest.admits,
        guard=guard,
        history=history,
        compaction=compaction,
        **pipeline_options,
    )
    return ingest, pipeline


def open_references(
    cfg: Config, store: ChromaStore, manifest: Manifest, embedder: Embedder | None = None
) -> References:
    """The reference corpora, with chunks of the data dir's window size: `ref add|sync`
    and the rebuild's resync cut the same chunks."""
    return References(
        cfg.data_dir, store, manifest, embedder, chunk_bytes=cfg.index.chunk_policy.max_bytes
    )


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
    answers: AnswerLog  # the bot's replies, by what they quoted
    commands: CommandLog  # `!sources` commands taken and not answered yet
    manifest: Manifest | None = None  # artifacts: loaded on first use, not at open
    matcher: Matcher | None = None
    # The keyword index's build for an event log from before it (Index.open with
    # `postings`: the writer), which /health reports; None in other processes.
    keywords: KeywordBuild | None = None

    @classmethod
    def open(
        cls,
        cfg: Config,
        embedder: Embedder | None = None,
        postings: bool = False,
        on_postings_ready: Callable[[], None] | None = None,
        clock: Clock = REAL,
        on_searched: Callable[[], None] | None = None,
    ) -> Index:
        """`postings`: build the keyword index in the event log if it lacks one (an event
        log from before it: store/eventlog/keywords_build.py), in the background, then
        `on_postings_ready` runs; only for the process that is the collection's one
        writer (the service, holding the data dir's lock). `on_searched`: called after
        each search, from its thread (Searcher.on_searched). `clock`:
        the stamps of the event log, the journal, admission and claims, and the
        compaction schedule."""
        eventlog = EventLog(cfg.database, clock=clock)
        journal = Journal(cfg.journal_path, clock)
        store = open_store(cfg, eventlog)
        # Searches first: before the model (the pipeline) and the keyword index's build.
        turns = ModelTurns(clock)
        keywords = (
            KeywordBuild(eventlog.db).start(turns.pause_for_queries, on_postings_ready)
            if postings
            else None
        )
        embedder = embedder or load_embedder(
            cfg.index.embedder.model, cfg.index.embedder.backend, cfg.models_dir
        )
        gate = Gate(
            corpus_rooms(cfg.allowlist_path, cfg.data_dir),
            UserID(cfg.bot_user),
            cfg.puppet_patterns,
            cfg.bridge_servers,
            cfg.bridge_puppets,
            require_world_readable=cfg.index.require_world_readable,
        )
        # The derived filter: one manifest, read by the pipeline, appended by replies.
        manifest = Manifest(manifest_path(cfg.data_dir), cfg.derived.shingle_size)
        matcher = Matcher(manifest, cfg.derived)
        # External: workers embed; this process claims rooms like them, for a rebuild.
        claims = (
            RoomClaims(eventlog, cfg.index.claim_lease_seconds, clock=clock)
            if cfg.index.pipeline == "external"
            else None
        )
        ingest, pipeline = writers(
            eventlog,
            journal,
            store,
            embedder,
            gate,
            cfg.index.chunk_policy,
            derived=DerivedFilter(matcher, eventlog, journal),
            compact_every=cfg.index.compaction_interval_seconds,
            clock=clock,
            claims=claims,
            turns=turns,
        )
        presenter = Presenter(
            eventlog,
            embedder,
            Horizon(cfg.index.answer_horizon_hours, cfg.index.answer_horizon_messages),
        )
        # The searcher embeds questions: the model's query side (E5's "query: ").
        searcher = Searcher(
            query_side(embedder),
            store,
            cfg.search.rrf_k,
            lexical_max_terms=cfg.search.lexical_max_terms,
            floor=Floor(
                cfg.search.min_similarity,
                cfg.search.no_shared_word_margin,
                cfg.search.no_shared_word_margin_by_script,
            ),
            presenter=presenter,
            turns=turns,
            on_searched=on_searched,
            # The room's label now (a renamed room shows its new name from the next
            # answer), and the rooms its upgrades chained (`--room here` covers them).
            label_of=ingest.label,
            topic_of=ingest.topic,
            chain_of=ingest.lineage.whole_chain,
        )
        for pred, succ in load_followed(cfg.data_dir).accepted_links():
            ingest.lineage.link(RoomID(pred), RoomID(succ))
        return cls(
            cfg,
            eventlog,
            journal,
            store,
            embedder,
            gate,
            ingest,
            pipeline,
            searcher,
            AnswerLog(eventlog),
            CommandLog(eventlog),
            manifest,
            matcher,
            keywords,
        )

    def record_answer(
        self, reply_event_id: str, sections: list[EmittedSection], sent_ms: int
    ) -> int:
        """Record what a `!sources` reply quoted, one answer artifact per hit, emitted at
        `sent_ms` (ms: when its send began). Call only after the reply was sent.
        Blocking (fsync): run it off the event loop."""
        assert self.manifest is not None
        return self.manifest.append(
            answer_artifacts(reply_event_id, sections, self.manifest.shingle_size, sent_ms)
        )

    def replace_answer(self, reply_event_id: str, sections: list[EmittedSection]) -> int:
        """A reply edited to drop a withdrawn quote: its answer artifacts become those of
        the edited sections, emitted when the reply first was (its text has been public
        since). Returns how many were written."""
        assert self.manifest is not None
        prefix = answer_prefix(reply_event_id)
        self.manifest.refresh()
        first = min(
            (
                a.emitted_ms
                for a in self.manifest.live(kind=ARTIFACT_ANSWER)
                if a.name.startswith(prefix)
            ),
            default=self.eventlog.clock.now_ms(),
        )
        self.manifest.remove(lambda e: str(e.get("name", "")).startswith(prefix))
        return self.record_answer(reply_event_id, sections, first) if sections else 0

    def ensure_meta(self, progress=None) -> bool:
        """Rebuild the collection if another model or chunker made it (rebuild.py)."""
        return rebuilding.ensure_meta(
            self.store, self.eventlog, self.pipeline, self._resync_references, progress
        )

    # ensure_meta's three steps, for a writer that does other work during the check
    # (the service joins its rooms then: Service.start).

    def make_whole(self) -> None:
        rebuilding.make_whole(self.store, self.eventlog, self.pipeline)

    def quick_rebuild_reason(self) -> str:
        """Why the collection must be rebuilt, as far as its meta and count tell ('' if
        searches may be served from it now)."""
        return rebuilding.quick_rebuild_reason(self.store, self.eventlog, self.pipeline.embedder)

    def check_collection(self, vouched: bool = False) -> str:
        """Why the collection must be rebuilt ('' if not: then its gaps repaired).
        `vouched`: by the last run's clean stop (store/clean_stop.py)."""
        return rebuilding.check_collection(self.store, self.eventlog, self.pipeline, vouched)

    def rebuild(self, reason: str, progress=None) -> None:
        rebuilding.rebuild(
            self.store, self.eventlog, self.pipeline, reason, self._resync_references, progress
        )

    def _resync_references(self) -> None:
        assert self.manifest is not None
        refs = open_references(self.cfg, self.store, self.manifest, self.embedder)
        for corpus in refs.list():
            if corpus.path != "(not registered)":
                refs.sync(corpus.name)

    def close(self) -> None:
        self.eventlog.close()


def open_worker(cfg: Config, embedder: Embedder | None = None) -> Worker:
    """An embedding worker's part of the graph (`matrix-sources worker`): the pipeline
    over the event log and the store, claiming rooms, committing fenced, never
    compacting (pipeline/standalone.py). The derived filter reads the data dir's
    artifacts.jsonl, its exclusions go to its journal.jsonl: the service's data dir."""
    eventlog = EventLog(cfg.database)
    store = open_store(cfg, eventlog)
    embedder = embedder or load_embedder(
        cfg.index.embedder.model, cfg.index.embedder.backend, cfg.models_dir
    )
    journal = Journal(cfg.journal_path)
    manifest = Manifest(manifest_path(cfg.data_dir), cfg.derived.shingle_size)
    labels: dict = {}
    pipeline = Pipeline(
        eventlog,
        embedder,
        store,
        cfg.index.chunk_policy,
        room_label=lambda room: labels.get(room, ""),
        history=History(eventlog),
        derived=DerivedFilter(Matcher(manifest, cfg.derived), eventlog, journal),
        compaction=Compaction(eventlog, store, fenced=True),
        claims=RoomClaims(eventlog, cfg.index.claim_lease_seconds),
        embed_group=EMBED_CALL,
    )
    return Worker(eventlog, store, pipeline, labels)
