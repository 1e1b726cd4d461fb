"""The running service: appservice HTTP, the bot's rooms, the pipeline, `!sources`.

Start-up: registration checked -> event log, store, model -> HTTP up -> homeserver
accepts as_token (whoami: startup.py) -> join every allowlisted room, learn its state
(rooms.py; the collection checked against the event log meanwhile) -> pipeline catches
up on what a previous run left pending -> the chores, once a poll: allowlist.yaml
followed (allowlistwatch.py), `forget` requests and room retention (withdrawals.py), the
workers' compactions; with an admin token, Synapse's erasures looked for at start and at
an interval (erasure.py). The bot reaches Matrix through matrixport.py.

Commands are answered in a bounded pool of their own (commandpool.py). Every SQLite and
Chroma call runs off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from mautrix.appservice import AppService
from mautrix.appservice.state_store import ASStateStore
from mautrix.client.state_store.memory import MemoryStateStore
from mautrix.errors import MatrixError

from matrix_sources.indexer.clock import REAL, Clock, stopwatch
from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.datadir import admin_token, service_registration
from matrix_sources.indexer.ingest.admit import AdmitResult
from matrix_sources.indexer.ingest.events import MessageEvent, ReactionEvent
from matrix_sources.indexer.models.embedder import Embedder
from matrix_sources.indexer.pipeline.worker import PipelineWorker
from matrix_sources.indexer.records import UserID
from matrix_sources.indexer.search.language import english_only_note
from matrix_sources.indexer.search.searcher import SourceQuery
from matrix_sources.indexer.store import clean_stop, read_ahead
from matrix_sources.indexer.store.lock import WriterLock
from matrix_sources.indexer.store.vectors.idmap import IdMapByGeneration

from .allowlistwatch import AllowlistWatch
from .backlog import BacklogBound
from .erasure import ErasureWatch, self_leaves
from .health import Health, appends_problem, pipeline_problem
from .heap import IdleTrim, release_free_memory
from .matrixport import MatrixPort
from .metrics import EventLogFigures, MetricSources, ServiceMetrics
from .rooms import Rooms
from .search_api import SearchAPI
from .spaces import Spaces
from .startup import StartupError, ping_homeserver, raise_fd_limit, wait_for_homeserver
from .transactions import Routed, TransactionHandler
from .txngaps import TransactionGaps
from .upgrades import Upgrades
from .withdrawals import Withdrawals

log = logging.getLogger(__name__)
CHORES_POLL_SECONDS = 1.0  # allowlist.yaml, `forget` requests, retention looked at


class _StateStore(MemoryStateStore, ASStateStore):
    """mautrix's default state store writes mx-state.json into the working directory;
    keep its membership cache in memory."""

    def __init__(self) -> None:
        MemoryStateStore.__init__(self)
        ASStateStore.__init__(self)


class _SourcesAppService(AppService):
    transaction_handler: TransactionHandler

    async def _http_handle_transaction(self, request):
        return await self.transaction_handler.handle(request)

    async def _http_ping(self, request):
        return await self.transaction_handler.ping(request)

    def _check_token(self, request) -> bool:  # the user and alias queries: same check
        return self.transaction_handler.check_token(request) is None


class BotPort(Protocol):
    """What the service hands the bot (appservice/bot/bot.py is one)."""

    def on_commands(self, commands: Sequence[MessageEvent]) -> None: ...
    def on_invites(self, room_ids: Sequence[str]) -> None: ...
    async def prepare(self) -> str: ...
    def resume(self) -> None: ...
    def on_withdrawn(self, event_ids: Iterable[str]) -> None: ...
    def on_reactions(self, reactions: Sequence[ReactionEvent]) -> None: ...
    def on_redacted(self, event_ids: Sequence[str]) -> None: ...
    async def stop(self) -> None: ...


class Service:
    def __init__(
        self,
        cfg: Config,
        embedder: Embedder | None = None,
        clock: Clock = REAL,
        collection_vouched: bool = False,
        id_map: IdMapByGeneration | None = None,
    ) -> None:
        """`clock`: every wait, deadline and stamp of the service's own parts.
        `collection_vouched`: the last run checked the collection against the event log
        and stopped cleanly, and neither was written since (indexer/store/clean_stop.py):
        the start reads no id list. `id_map`: which segment holds each id, as that stop
        kept it (read from the segments otherwise)."""
        self.cfg, self.clock = cfg, clock
        self.collection_vouched = collection_vouched
        # The collection agreed with the event log this run (checked or vouched for, or
        # rebuilt): a clean stop may then vouch for it to the next start.
        self.collection_checked = False
        self.registration = service_registration(cfg)  # tokens: datadir.py
        self.lock = WriterLock(cfg.data_dir, "matrix-sources run").acquire()
        # This process is the collection's one writer (the lock above): it builds the
        # keyword index of an event log from before it (store/eventlog/keywords.py), in
        # the background; every process writing windows keeps it in step from then on.
        self.external = cfg.index.pipeline == "external"
        # What searches freed goes back once they pause (heap.py).
        self.idle_trim = IdleTrim(clock)
        self.index = Index.open(
            cfg,
            embedder,
            postings=True,
            on_postings_ready=release_free_memory,
            clock=clock,
            on_searched=self.idle_trim.searched,
        )
        self.eventlog, self.store = self.index.eventlog, self.index.store
        if id_map is not None and self.store.segments.adopt_map(*id_map):
            log.info("id_map_kept", extra={"ids": self.store.count()})
        self.embedder, self.gate = self.index.embedder, self.index.gate
        self.ingest, self.pipeline = self.index.ingest, self.index.pipeline
        self.searcher = self.index.searcher
        # After each run, freed memory goes back to the system: the next run's peak then
        # starts from what is in use, not from the last peak (docs/benchmarks.md).
        self.worker = PipelineWorker(
            self.pipeline,
            debounce=cfg.index.debounce_seconds,
            after_run=release_free_memory,
            clock=clock,
        )
        self.az = _SourcesAppService(
            server=cfg.homeserver.url,
            domain=cfg.homeserver.domain,
            as_token=self.registration.as_token,
            hs_token=self.registration.hs_token,
            bot_localpart=self.registration.sender_localpart,
            id=self.registration.id,
            state_store=_StateStore(),
            log=logging.getLogger("mau.as"),
        )
        self._tasks: set[asyncio.Task] = set()
        # The search API answers once the collection is known good (start), before
        # every room is joined and its state learnt (az.ready, /health's "ready").
        self.searchable = False
        self.rooms = Rooms(
            cfg, self.az, self.ingest, self.worker, self._spawn, clock, self._withdrawn
        )
        self.allowlist = AllowlistWatch(cfg, self.rooms, self.ingest)
        # A listed space's rooms, and an upgraded room's successor, followed on their own.
        self.spaces = Spaces(
            cfg,
            lambda: self.az.intent,
            self.ingest.journal,
            self.allowlist.followed,
            self.allowlist.reload,
            clock,
        )
        self.allowlist.spaces = self.spaces
        self.upgrades = Upgrades(
            cfg,
            lambda: self.az.intent,
            self.ingest,
            self.allowlist.followed,
            self.allowlist.reload,
            clock,
        )
        # What the bot asks of Matrix (app.py hands it to the bot).
        self.matrix = MatrixPort(self.az, self.rooms)
        self.rooms.on_learned = lambda room_id: self._spawn(self.upgrades.check(room_id), "upgrade")
        # A numbered transaction never came: every room read again (txngaps.py).
        self.gaps = TransactionGaps(self.rooms.backfill_all, clock=clock)
        # Past index.max_pending, Synapse keeps the events; pinged when there is room.
        self.backlog = BacklogBound(
            self.eventlog.status.backlog,
            cfg.index.max_pending,
            on_drained=lambda: self._spawn(ping_homeserver(self.az, clock), "homeserver-ping"),
            clock=clock,
        )
        self.az.transaction_handler = TransactionHandler(
            self.registration.hs_token,
            self.registration.id,
            self.ingest,
            self.rooms.learn,
            self._on_admitted,
            self.rooms.state_retry,
            self.gaps,
            commands=self.index.commands,
            backlog=self.backlog,
            clock=clock,
        )
        self.transactions = self.az.transaction_handler
        self.answers = self.index.answers
        self.metrics = ServiceMetrics(per_room=cfg.metrics.per_room)
        self.bot: BotPort | None = None  # attach(): the composing front wires it in
        # Forget, retention and erasure: applied here, the answers quoting them edited.
        self.withdrawals = Withdrawals(cfg, self.ingest, self.worker, self._withdrawn, clock)
        self.erasures = (
            ErasureWatch(
                cfg.homeserver.url,
                admin_token(cfg),
                self.withdrawals.forget_erased,
                self._forgotten_now,
                clock=clock,
            )
            if cfg.homeserver.admin_token_file
            else None
        )
        # The store opened and the model loaded above; the homeserver is checked in start().
        self.health = Health(
            store=True,
            model=True,
            detail="waiting for the homeserver",
            backlog=self.backlog.report,
            keywords=self._keyword_state,
            problems={
                "appends": appends_problem(lambda: self.transactions.append_failures),
                "pipeline": pipeline_problem(
                    lambda: self.worker.consecutive_failures, lambda: self.worker.last_error
                ),
            },
        )
        self.metrics.attach(
            MetricSources(
                self.pipeline,
                self.transactions,
                self.worker,
                self.index.keywords,
                EventLogFigures(self.eventlog.path, clock=clock),
                lambda: self.health.ready,
                self.backlog,
                clock,
            )
        )
        # Routes must exist before the aiohttp runner starts in az.start().
        self.az.app.router.add_get("/health", self.health.handle)
        self.az.app.router.add_get("/metrics", self.metrics.handle_metrics)
        # Searches for programs and `matrix-sources search|mcp`, once started (search_api.py).
        self.search_api = SearchAPI.for_service(
            cfg,
            self.registration,
            self.searcher.search,
            ready=lambda: None if self.searchable else self.health.detail,
            clock=clock,
            note=english_only_note(self.embedder),
        )
        self.search_api.attach(self.az.app.router)

    def attach(self, bot: BotPort) -> None:
        self.bot = bot

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        # Each step of the start, timed in the log: where a slow start spends its time.
        since = stopwatch(self.clock)

        def done(step: str) -> None:
            log.info("start_step_done", extra={"step": step, "at_s": round(since(), 2)})

        self.idle_trim.start()
        soft, hard = raise_fd_limit()
        log.info("fd_limit", extra={"soft": soft, "hard": hard})
        await self.az.start(host=self.cfg.appservice.host, port=self.cfg.appservice.port)

        def unreachable(detail: str) -> None:
            self.health.detail = detail

        await wait_for_homeserver(self.az, self.cfg, unreachable, self.clock)
        if self.bot is not None:
            refusal = await self.bot.prepare()  # a digest room it must not post into
            if refusal:
                raise StartupError(refusal)
        try:
            await self.az.intent.set_displayname(self.cfg.appservice.bot_displayname)
        except MatrixError:
            pass  # cosmetic
        done("homeserver")
        # The store made whole before a room's state can call for a purge; then the
        # collection checked against the event log while the rooms are joined, not one
        # after the other (bench/scale.py). A purge meanwhile waits for the check's lock.
        await asyncio.to_thread(self.index.make_whole)
        done("store_made_whole")
        # Searches are served once the collection's meta and count say it is the one to
        # keep, every listed space was read before (its rooms known), and the warm-up
        # below is done: the rooms' joins and state (a round trip each: 9,528 rooms at a
        # million windows) and the id check come after. Rooms delisted while the
        # service was down are purged first.
        keep = False
        if not self.spaces.unread():
            await asyncio.to_thread(self.ingest.purge_unlisted)
            done("unlisted_rooms_purged")
            keep = not await asyncio.to_thread(self.index.quick_rebuild_reason)
        # Its count reads every segment's HNSW index in, unless the id map was kept.
        done("collection_meta_read")

        # The warm-up: the first search reads every segment's HNSW index into memory and
        # runs the model once; then which segment holds each id is read, off the lock (2
        # to 3 s at a million windows; nothing when a clean stop kept it); what they
        # freed goes back at once. Searches wait for it:
        # served while the map was read, they waited behind its reads of a million ids
        # (the first !sources 6 to 8 s, p95 660 to 740 ms over the first 20;
        # bench/scale.py). The collection check, which needs the map, comes after it.
        def warm_up() -> None:
            self.searcher.search(SourceQuery.build(["warm up"]))
            done("first_search")
            self.index.store.segments.preload()
            release_free_memory()
            done("id_map_read")

        warm = self._task(asyncio.to_thread(warm_up), "warm")

        async def serve_once_warm() -> None:
            await asyncio.wait([warm])
            self.searchable = True
            log.info("searchable", extra={"rooms": len(self.gate.allowlist)})
            self._task(self._read_ahead(), "read-ahead")

        if keep:
            self._task(serve_once_warm(), "searchable")

        async def check_once_warm() -> str:
            await asyncio.wait([warm])
            return await asyncio.to_thread(self.index.check_collection, self.collection_vouched)

        checking = asyncio.create_task(check_once_warm())
        self.health.detail = (
            f"joining the {len(self.gate.allowlist)} allowlisted rooms and learning their state"
        )
        try:
            await self.rooms.join_allowlisted()
            await self.spaces.due()  # every listed space read, before the purge below
        finally:
            reason = await checking
        # Another model or chunker made the collection, or it was lost: rebuild it from
        # the event log before serving (after the joins: only rooms with known facts
        # are indexed, so the rebuild, and its logged progress, covers them all now).
        if reason:
            self.searchable = False
            await asyncio.to_thread(self.index.rebuild, reason)
        self.collection_checked = True
        # Rooms taken off the allowlist while the service was down: purged now.
        await asyncio.to_thread(self.ingest.purge_unlisted)
        # Poison stored by an older version: quarantined before the pipeline meets it.
        quarantined = await asyncio.to_thread(self.ingest.quarantine_stored_poison)
        if quarantined:
            log.warning(
                "events_quarantined",
                extra={"events": quarantined, "rule": "timestamp_out_of_range"},
            )
        if not self.external:  # else `matrix-sources worker` processes embed
            self.worker.start()
        self.backlog.start()
        self._spawn(self._chores(), "chores")
        for room_id in self.upgrades.upgraded():  # upgraded while the service was down
            self._spawn(self.upgrades.check(room_id), "upgrade")
        if self.erasures is not None:  # erasures made while the service was down, then more
            self._spawn(self.erasures.watch(), "erasure-watch")
        self.az.ready = self.searchable = True
        self._spawn(self._release_start_up(), "start-up-release")
        if self.bot is not None:
            self.bot.resume()  # the commands a crash left unanswered
        self.health.homeserver = True
        self._spawn(ping_homeserver(self.az, self.clock), "homeserver-ping")
        log.info(
            "started",
            extra={
                "bot": self.cfg.bot_user,
                "rooms": len(self.gate.allowlist),
                "port": self.cfg.appservice.port,
            },
        )

    async def stop(self) -> None:
        self.idle_trim.stop()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.gaps.stop()
        await self.backlog.stop()
        if self.erasures is not None:
            await self.erasures.stop()
        await self.rooms.state_retry.stop()
        if self.bot is not None:
            await self.bot.stop()
        await self.worker.stop()
        await self.az.stop()
        self.search_api.close()
        await asyncio.to_thread(self.index.close)
        self.lock.release()

    # -- chores, once a poll ---------------------------------------------------------

    async def _chores(self) -> None:
        """Each poll: the allowlist file followed, `forget` requests served, expired
        messages withdrawn, and the workers' compactions run."""
        while True:
            await self.clock.sleep(CHORES_POLL_SECONDS)
            await self.allowlist.look()
            await self.rooms.retry_joins()
            await self.spaces.due()
            await self.withdrawals.serve_spool()
            await self.withdrawals.expire_retained()
            if self.external:
                await self._compact_for_workers()

    async def _compact_for_workers(self) -> None:
        """External pipeline: the workers' redactions ask for a compaction through the
        event log; this process, the data dir's one holder, runs it (compaction.py)."""
        compaction = self.pipeline.compaction
        assert compaction is not None  # set by Pipeline.__post_init__
        due = await asyncio.to_thread(compaction.refresh_due)
        if due and compaction.wait() == 0:
            try:
                await asyncio.to_thread(compaction.run)
            except Exception:  # stays due: tried again at the next look
                log.error("compaction_failed", exc_info=True)

    # -- after a transaction was stored ----------------------------------------------

    def _on_admitted(self, events: list[Any], result: AdmitResult, routed: Routed) -> None:
        self.metrics.count_events(events, result.refused)
        if self.erasures is not None:
            self.erasures.saw_leaves(self_leaves(events, self.cfg.bot_user))
        if result.appended or result.history.rooms:
            self.worker.notify()
        self.spaces.saw(events)  # a room added to or removed from a space
        for room_id, sender in self.upgrades.tombstones(events):  # an allowlisted room upgraded
            self._spawn(self.upgrades.check(room_id, sender), "upgrade")
        if self.bot is not None:
            self.bot.on_commands(routed.commands)
            self.bot.on_invites(routed.invites)  # a DM or private room: nothing stored
            self.bot.on_withdrawn(result.history.redacted)
            self.bot.on_reactions(routed.reactions)  # votes on its answers (feedback)
            self.bot.on_redacted(routed.redacted)

    def _keyword_state(self) -> dict:
        """/health's keyword_index: ready, or how far its build got."""
        build = self.index.keywords
        return dict(build.state) if build is not None else {"ready": False}

    def _forgotten_now(self, user: str) -> bool:
        return UserID(user) in self.ingest.forgotten and self.ingest.forgotten[UserID(user)] is None

    def _withdrawn(self, event_ids) -> None:
        """Messages withdrawn outside a transaction (withdrawals.py): the bot edits the
        answers that quoted them."""
        if self.bot is not None and event_ids:
            self.bot.on_withdrawn(event_ids)

    def _spawn(self, coro, name: str) -> None:
        self._task(coro, name)

    def _task(self, coro, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    async def _read_ahead(self) -> None:
        """What searches read from disk, read into the page cache at once (read_ahead.py)."""
        took = stopwatch(self.clock)
        files = await asyncio.to_thread(read_ahead.files_of, *clean_stop.local_files(self.cfg))
        asked = await asyncio.to_thread(read_ahead.read_ahead, files)
        log.info(
            "read_ahead",
            extra={"files": len(files), "mib": round(asked / 2**20), "s": round(took(), 1)},
        )

    async def _release_start_up(self) -> None:
        """Start-up's one-off work done (the warm-up, then the check), what it freed
        goes back to the system: at a million windows 124 MiB that the resident set
        otherwise kept until the first pipeline run (bench/scale.py)."""
        took = stopwatch(self.clock)
        await asyncio.to_thread(release_free_memory)
        log.info("start_up_memory_released", extra={"ms": round(took() * 1000, 1)})

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task_failed", extra={"task": task.get_name()}, exc_info=task.exception())
