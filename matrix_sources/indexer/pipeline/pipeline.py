"""The pipeline: pending events of the event log -> windows -> vectors -> Chroma.

    event log (pending) --room_tail--> chunker --windows, gathered across rooms-->
        embedder (length order) --vectors--> per step of one timeline: store.upsert
        --acknowledged--> event log: events indexed, room cursor advanced
        (a group's steps commit in a helper thread while the next group is embedded)

Live, worker.py runs it in the background, debounced.

The pipeline is the one writer of the collection and of cursors. A cursor moves only
after the upsert returned, in the same SQLite transaction that marks the events indexed,
so a crash or a failing store at any point leaves pending events pending: the next run
re-chunks them into the same window ids and nothing is lost or doubled.

Import embeds each closed window once.

One timeline that cannot be planned (an event no code path expected) is logged with its
room and a traceback and left pending; every other timeline of the run goes on, so one
poisoned room never holds back the rooms sorting after it (`failing` names them until
they plan again). A failing model or store fails the run: the worker retries it.

A room can be purged (purge.py) while this runs in its worker thread. Embedding, the
slow part, runs unlocked; the upsert and the commit run under `lock`, which the purge
holds too, after re-checking that the gate still admits the room and that no purge of
it happened since its tail was read (`purges`). So a batch either lands before the
purge (which then deletes it) or is dropped: a racing upsert cannot bring back a
purged room's windows, nor text read before the purge once the room is public again.

With `claims` (several processes run the pipeline: `matrix-sources worker`), a room is
planned only under this process's claim on it, and each upsert and commit runs in a
fenced transaction of the event log (claims.py, eventlog/claims.py), which a purge
in another process waits for and which a revoked or taken-over claim fails: the
cross-process form of the lock above. A room's claim is released once its steps are in.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Protocol

from ..ingest.history import History
from ..models.embedder import Embedder, encode_in_length_order
from ..models.turns import ModelTurns
from ..records import ChunkPolicy, EventID, Message, RoomID, Window, WindowID
from ..store.compaction import Compaction
from ..store.eventlog.log import EventLog
from ..store.eventlog.rows import BlockStart, DirtyWindow, WindowMove
from ..store.vectors.chroma import ChromaStore
from ..store.writeguard import WriteGuard
from .chunker import build_blocks, commit_batches, document, embed_text
from .chunker import window_id as chunk_window_id
from .claims import RoomClaims

log = logging.getLogger(__name__)

EMBED_BATCH = 64  # windows per upsert + commit step
# Windows gathered across rooms and embedded in length order before their steps commit:
# the larger the set sorted, the less padding the model computes (bench/ingest.py).
EMBED_GROUP = 1024
# Windows per Chroma upsert when committing a group's steps: larger calls cost Chroma
# less CPU a window (bench/ingest.py).
UPSERT_BATCH = 256
# Texts per encode call, one forward pass a background turn (models/turns.py): a query
# waits for one short pass at most, and length-sorted calls of 16 embed as fast as larger
# ones (bench/ingest.py).
EMBED_CALL = 16


@dataclass(frozen=True)
class _Step:
    """One upsert + commit: windows of one timeline, in its order."""

    room_id: RoomID
    thread_root: EventID | None
    batch: list[Window]
    stale: list[WindowID]  # windows to delete once the batch is stored (first step only)
    generation: int  # the room's purge count when its tail was read
    messages: int  # pending messages the step indexes
    texts: list[str] = field(default_factory=list)  # what is embedded, one per window
    # The timeline's last block starts here (the last step of a plan records it).
    block_start: EventID | None = None


@dataclass(frozen=True, slots=True)
class _Rechunk:
    """A dirty window re-cut (rechunk_windows): what becomes of it, stored together."""

    old: WindowID
    redacted: bool  # its old vector must leave the store's files too (a compaction)
    window: Window | None  # it as it is now; None: no message of it is left
    generation: int  # its room's purge count when it was read
    vector: list[float] | None = None  # the window's, once embedded


class Screen(Protocol):
    """What the pipeline asks of the derived filter (derived/filter.py, which components
    wires in): the pending messages to leave out of every window, the indexed ones an
    edit made derived, and their counts."""

    excluded: int  # messages left out so far
    by_kind: dict[str, int]  # of them, per artifact kind

    def screen(
        self, room_id: RoomID, tail: list[Message], pending: set[EventID]
    ) -> tuple[list[Message], set[EventID]]: ...

    def withdraw_edited(self, windows: dict[WindowID, list[Message]]) -> set[WindowID]:
        """The windows (of those an edit changed) that lost a message judged derived."""
        ...


@dataclass
class PipelineStats:
    messages: int = 0
    windows_upserted: int = 0
    embeddings: int = 0
    batches: int = 0
    windows_deleted: int = 0
    # Sizes of recent embedding batches, drained by whoever reports them (metrics).
    batch_sizes: list[int] = field(default_factory=list)


@dataclass
class Pipeline:
    eventlog: EventLog
    embedder: Embedder
    store: ChromaStore
    policy: ChunkPolicy = field(default_factory=ChunkPolicy)
    room_label: Callable[[RoomID], str] = lambda _room: ""
    stats: PipelineStats = field(default_factory=PipelineStats)
    # Whether the gate admits the room now (Ingest.admits); a refused room's pending
    # events are never indexed.
    admits: Callable[[RoomID], bool] = lambda _room: True
    # The lock and purge counts shared with the purger: see the module docstring.
    guard: WriteGuard = field(default_factory=WriteGuard)
    # Derived text (DESIGN.md "Derived filter"): judged before chunking; None: off.
    derived: Screen | None = None
    # Edits and redactions mark stored windows dirty (eventlog/history.py); None:
    # none tracked.
    history: History | None = None
    # When the collection is compacted after redactions and purges (compaction.py):
    # shared with the purger; None: this pipeline's own, over its store and guard.
    compaction: Compaction | None = None
    # Timelines whose planning failed at the last run that reached them -> error type.
    failing: dict = field(default_factory=dict)
    # Several processes run the pipeline: rooms claimed, commits fenced (module docstring).
    claims: RoomClaims | None = None
    # Windows gathered before they are embedded together (EMBED_GROUP); a worker among
    # others gathers fewer, so that it does not claim every room with work at once.
    embed_group: int = EMBED_GROUP
    # The model shared with searches, which go first (models/turns.py); None: not shared.
    turns: ModelTurns | None = None

    def __post_init__(self) -> None:
        if self.compaction is None:
            self.compaction = Compaction(self.eventlog, self.store, self.guard)

    def request_compaction(self, what: set | list) -> None:
        """Points were deleted for a redaction: compact within the interval."""
        assert self.compaction is not None  # set by __post_init__
        self.compaction.request(what)

    @property
    def compaction_due(self) -> set:
        """What asked for the compaction that is due (empty: none is)."""
        assert self.compaction is not None  # set by __post_init__
        return self.compaction.due

    @property
    def lock(self) -> threading.RLock:
        return self.guard.lock

    @property
    def purges(self) -> Counter:
        return self.guard.purges

    def process_all(self, progress: Callable[[int], None] | None = None) -> int:
        """Index every pending event of every room; return how many were indexed.

        Windows are gathered across rooms and timelines, up to EMBED_GROUP, embedded
        together in length order (embedder.encode_in_length_order), then upserted and
        committed step by step, each step (EMBED_BATCH windows at most) of one timeline,
        in timeline order."""
        if self.claims is not None:
            self.claims.renew()
        if self.history is not None:
            self.rechunk_windows(
                [
                    d
                    for d in self.history.dirty()
                    if self.admits(d.room_id) and self._claimed(d.room_id)
                ]
            )
        done = 0
        group: list[_Step] = []
        dropped: set[tuple[RoomID, EventID | None]] = set()
        # A group's upserts and commits run in one helper thread while the next group is
        # embedded (Chroma's upsert waits on its own disk writes); groups commit in order.
        # (Embedding in a helper thread too, while the next group is planned, gained
        # nothing on onnx-int8 and cost torch a quarter: 30.8 s against 24.8 for the dev
        # split.)
        pool: ThreadPoolExecutor | None = None
        committing: Future | None = None

        def flush() -> None:
            nonlocal done, pool, committing
            if self.claims is not None:
                self.claims.renew()
            vectors = self._embed(group)
            if committing is not None:
                done += committing.result()
            pool = pool or ThreadPoolExecutor(1, thread_name_prefix="pipeline-commit")
            committing = pool.submit(self._commit_group, list(group), vectors, dropped, progress)

        try:
            for room_id in sorted(self.eventlog.rooms_with_pending()):
                if not self.admits(room_id):
                    log.debug("room_skipped_refused", extra={"room_id": room_id})
                    continue
                if not self._claimed(room_id):
                    continue  # another worker builds it
                planned = len(group)
                for thread in self.eventlog.pending_threads(room_id):
                    group += self._plan_isolated(room_id, thread)
                    # Under claims a room's steps stay in one group: its claim goes
                    # when that group is committed.
                    if (
                        self.claims is None
                        and sum(len(step.batch) for step in group) >= self.embed_group
                    ):
                        flush()
                        group = []
                if self.claims is not None:
                    if len(group) == planned:
                        self.claims.release([room_id])  # nothing to do after all
                    elif sum(len(step.batch) for step in group) >= self.embed_group:
                        flush()
                        group = []
            if group:
                flush()
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
            if self.claims is not None:
                self.claims.release()
        return done + (committing.result() if committing is not None else 0)

    def _claimed(self, room_id: RoomID) -> bool:
        return self.claims is None or self.claims.take(room_id)

    def _plan_isolated(self, room_id: RoomID, thread_root: EventID | None) -> list[_Step]:
        """_plan_timeline, a failure of it kept to its timeline (the module docstring)."""
        try:
            steps = self._plan_timeline(room_id, thread_root)
        except Exception as e:
            self.failing[(room_id, thread_root)] = type(e).__name__
            log.error(
                "timeline_failed",
                exc_info=True,
                extra={"room_id": room_id, "thread_root": thread_root},
            )
            return []
        self.failing.pop((room_id, thread_root), None)
        return steps

    def _plan_timeline(self, room_id: RoomID, thread_root: EventID | None) -> list[_Step]:
        """The steps that index one timeline's pending events (none if there are none)."""
        generation = self.purges[room_id]
        tail = self.eventlog.room_tail(room_id, thread_root)
        messages, pending = tail.messages, tail.pending
        if not pending:
            return []
        # -- derived filter: a pending message quoting an artifact is tagged derived in
        # -- the event log, journalled, and left out of every window (indexer/derived/filter.py)
        if self.derived is not None:
            messages, pending = self.derived.screen(room_id, messages, pending)
            if not pending:
                return []
        # -- end of derived filter
        grouped = build_blocks(messages, self.policy, self.room_label(room_id))
        # The tail's indexed events sit in the stored windows of the timeline's last
        # block. Re-chunking reproduces them with the pending messages added; only the
        # windows that changed are embedded again. When older history arrived (backfill
        # after live events), messages move to windows starting earlier, and the
        # windows no longer produced must go: in the first batch, which re-points them.
        produced = {w.window_id for b in grouped for w in b}
        stale = sorted(set(tail.held.values()) - produced)
        for w in (w for b in grouped for w in b):
            document(w)  # what the store writes: a window that cannot be, fails here
        batches = commit_batches(grouped, pending, tail.held, EMBED_BATCH)
        start = grouped[-1][0].messages[0].event_id
        return [
            _Step(
                room_id,
                thread_root,
                batch,
                stale if i == 0 else [],
                generation,
                sum(1 for w in batch for m in w.messages if m.event_id in pending),
                [embed_text(w) for w in batch],
                start if i == len(batches) - 1 else None,
            )
            for i, batch in enumerate(batches)
        ]

    def _embed(self, group: list[_Step]) -> list:
        """The vectors of the steps' windows, embedded in one go, in step order."""
        return encode_in_length_order(
            self.embedder, [t for step in group for t in step.texts], EMBED_CALL, self.turns
        )

    def _commit_group(
        self,
        group: list[_Step],
        vectors: list,
        dropped: set[tuple[RoomID, EventID | None]],
        progress: Callable[[int], None] | None,
    ) -> int:
        """Commit each step in order; return how many pending messages were indexed.
        Steps go to Chroma UPSERT_BATCH windows or more at a time (one upsert, then each
        step's event-log commit). Once a timeline's step is dropped (its room refused or
        purged meanwhile) its later steps are dropped too: its pending events stay
        pending, to be re-chunked from the same block start."""
        done = 0
        at = 0
        part: list[tuple[_Step, list]] = []
        for i, step in enumerate(group):
            part.append((step, vectors[at : at + len(step.batch)]))
            at += len(step.batch)
            if sum(len(s.batch) for s, _ in part) >= UPSERT_BATCH or i == len(group) - 1:
                for committed in self._commit(part, dropped):
                    done += committed.messages
                    self.stats.messages += committed.messages
                    if progress:
                        progress(committed.messages)
                part = []
        if self.claims is not None:  # every step of these rooms is in: others may go on
            self.claims.release({step.room_id for step in group})
        return done

    def _commit(
        self, part: list[tuple[_Step, list]], dropped: set[tuple[RoomID, EventID | None]]
    ) -> list[_Step]:
        """Upsert the windows of the steps whose rooms are still admitted and unpurged,
        in one Chroma call, then commit those steps to the event log in order; return
        them. Under the lock (and the claims' fence): no purge or refusal lands in
        between."""
        with self.lock, self._fence({step.room_id for step, _ in part}) as lost:
            kept: list[tuple[_Step, list]] = []
            for step, vectors in part:
                key = (step.room_id, step.thread_root)
                if key not in dropped and (
                    self.purges[step.room_id] != step.generation
                    or not self.admits(step.room_id)
                    or step.room_id in lost
                ):
                    log.info(
                        "windows_dropped_room_refused",
                        extra={"room_id": step.room_id, "windows": len(step.batch)},
                    )
                    dropped.add(key)
                if key not in dropped:
                    kept.append((step, vectors))
            self.store.upsert(
                [w for step, _ in kept for w in step.batch],
                [v for _, vectors in kept for v in vectors],
            )
            for step, _ in kept:
                self._record_batch(
                    step.room_id,
                    step.batch,
                    step.stale,
                    BlockStart(step.thread_root, step.block_start) if step.block_start else None,
                )
        return [step for step, _ in kept]

    def rechunk_windows(self, dirty: list[DirtyWindow]) -> None:
        """Stored windows whose messages were edited or redacted: upsert each as it is now
        (one window, never split), under its new id
        if its first message went; delete it if nothing is left. `redacted`: its
        old vector is to leave the store's files too (run_compaction: a compaction).

        All of them are embedded together in length order, then stored EMBED_BATCH at a
        time: one upsert, one delete and one event-log transaction per batch (one Chroma
        call per window was 13.1 of the churn test's 14.1 s)."""
        if self.derived is not None and dirty:
            # An edit is judged again: a message edited into a quote leaves its window
            # as a redacted one does, its old vector compacted away.
            lost = self.derived.withdraw_edited(
                self.eventlog.texts.windows_messages(d.window_id for d in dirty)
            )
            dirty = [d._replace(redacted=d.redacted or d.window_id in lost) for d in dirty]
        rebuilt: list[_Rechunk] = []
        for d in dirty:
            generation = self.purges[d.room_id]
            messages = self.eventlog.texts.window_messages(d.window_id)
            window = (
                Window(
                    chunk_window_id(d.room_id, messages[0].event_id),
                    d.room_id,
                    tuple(messages),
                    self.room_label(d.room_id),
                )
                if messages
                else None
            )
            rebuilt.append(_Rechunk(d.window_id, d.redacted, window, generation))
        texts = [embed_text(r.window) for r in rebuilt if r.window is not None]
        vectors = iter(
            encode_in_length_order(self.embedder, texts, EMBED_CALL, self.turns) if texts else []
        )
        paired = [replace(r, vector=next(vectors)) if r.window is not None else r for r in rebuilt]
        rooms = {d.window_id: d.room_id for d in dirty}
        for start in range(0, len(paired), EMBED_BATCH):
            self._store_rechunked(paired[start : start + EMBED_BATCH], rooms)

    def _fence(self, rooms: set[RoomID]):
        """The claims' fenced transaction (its lost rooms), or nothing to fence."""
        if self.claims is None:
            return nullcontext(set())
        return self._fenced(rooms)

    @contextmanager
    def _fenced(self, rooms: set[RoomID]):
        assert self.claims is not None
        self.claims.renew()
        with self.claims.commit(rooms) as lost:
            self.store.follow_live()  # a compaction swapped generations meanwhile
            yield lost

    def _store_rechunked(self, part: list[_Rechunk], rooms: dict[WindowID, RoomID]) -> None:
        with self.lock, self._fence({rooms[p.old] for p in part}) as lost:
            # A room purged or refused since its windows were read: left dirty, and a
            # purge drops its dirty marks with its windows. One whose claim this worker
            # lost: left dirty for the claim's holder.
            part = [
                p
                for p in part
                if rooms[p.old] not in lost
                and (
                    p.window is None
                    or (
                        self.purges[p.window.room_id] == p.generation
                        and self.admits(p.window.room_id)
                    )
                )
            ]
            upserts = [
                (p.window, p.vector) for p in part if p.window is not None and p.vector is not None
            ]  # embedded together
            if upserts:
                self.store.upsert([w for w, _ in upserts], [v for _, v in upserts])
            # After the upsert: nothing is ever missing.
            kept = {w.window_id for w, _ in upserts}
            gone = [
                p.old
                for p in part
                if (p.window is None or p.window.window_id != p.old) and p.old not in kept
            ]
            self.store.delete(gone)
            self.eventlog.rewindow_many(
                [
                    WindowMove(p.old, p.window.window_id if p.window is not None else None)
                    for p in part
                ]
            )
            self.stats.windows_upserted += len(upserts)
            self.stats.embeddings += len(upserts)
            self.stats.windows_deleted += len(gone)
        self.request_compaction(
            {
                i
                for p in part
                if p.redacted
                for i in ((p.old,) if p.window is None else (p.old, p.window.window_id))
            }
        )
        if part:
            log.info("windows_rechunked", extra={"windows": len(part), "deleted": len(gone)})

    def compaction_wait(self) -> float | None:
        """Seconds until the due compaction may run (0: now); None if none is due."""
        assert self.compaction is not None  # set by __post_init__
        return self.compaction.wait()

    def run_compaction(self) -> bool | None:
        """Compact the collection (store.compact) if redactions or purges asked for it,
        unless one ran less than `compaction.every` seconds ago. None if nothing was due
        or it is too soon; else True once compacted."""
        assert self.compaction is not None  # set by __post_init__
        return self.compaction.run()

    def _record_batch(
        self,
        room_id: RoomID,
        batch: list[Window],
        stale: list[WindowID],
        block_start: BlockStart | None = None,
    ) -> None:
        """A step whose windows are upserted: its stale windows deleted, its events
        pointed at their windows (mark_indexed)."""
        assignments: dict[EventID, WindowID] = {
            m.event_id: w.window_id for w in batch for m in w.messages
        }
        # And any window whose every event now goes elsewhere: a late message of an
        # earlier block re-cut windows the tail did not hold (the crash test found two
        # such windows left in Chroma beside their successors).
        stale = sorted(set(stale) | set(self.eventlog.windows_emptied_by(assignments)))
        # After the upsert, before the events point elsewhere: a crash in between leaves
        # them pointing at the deleted window, which the next run re-chunks again.
        self.store.delete(stale)
        self.stats.windows_deleted += len(stale)
        self.stats.embeddings += len(batch)
        if len(self.stats.batch_sizes) < 10_000:
            self.stats.batch_sizes.append(len(batch))
        self.stats.windows_upserted += len(batch)
        self.stats.batches += 1
        # Windows follow conversations: the batch's latest message may be in any of them.
        latest = max((m for w in batch for m in w.messages), key=lambda m: m.ts)
        self.eventlog.mark_indexed(room_id, assignments, latest, block_start)
        log.info(
            "windows_upserted",
            extra={"room_id": room_id, "windows": len(batch), "events": len(assignments)},
        )
