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

A room can be purged (purge.py) while this runs in its worker thread. Embedding, the
slow part, runs unlocked; the upsert and the commit run under `lock`, which the purge
holds too, after re-checking that the gate still admits the room and that no purge of
it happened since its tail was read (`purges`). So a batch either lands before the
purge (which then deletes it) or is dropped: a racing upsert cannot bring back a
purged room's windows, nor text read before the purge once the room is public again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from .chunker import ChunkPolicy, build_blocks, commit_batches, embed_text
from .chunker import window_id as chunk_window_id
from .derived import DerivedFilter
from .history import History
from .embedder import Embedder, encode_in_length_order
from .eventlog import EventLog
from .records import EventID, RoomID, Window, WindowID
from .store import ChromaStore

log = logging.getLogger(__name__)

EMBED_BATCH = 64  # windows per upsert + commit step
# Windows gathered across rooms and embedded in length order before their steps commit:
# the padding the model wastes falls with the size of the set sorted (1.03x the word
# pieces of sorting all 3,942 windows of the eval chat at 1024; 1.6x cut per room by 64).
EMBED_GROUP = 1024
EMBED_CALL = 64  # texts per encode call: a query waits for one call at most


@dataclass(frozen=True)
class _Step:
    """One upsert + commit: windows of one timeline, in its order."""

    room_id: RoomID
    thread_root: EventID | None
    batch: list[Window]
    stale: list[WindowID]  # windows to delete once the batch is stored (first step only)
    generation: int  # the room's purge count when its tail was read
    messages: int  # pending messages the step indexes


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
    # Shared with the purger: see the module docstring.
    lock: threading.RLock = field(default_factory=threading.RLock)
    purges: Counter = field(default_factory=Counter)  # room -> purges so far
    # Derived text (DESIGN.md "Derived filter"): judged before chunking; None: off.
    derived: DerivedFilter | None = None
    # Edits and redactions mark stored windows dirty (history.py); None: none tracked.
    history: History | None = None
    # Timelines whose last window is known to be final: (room, thread, window id).
    _settled: set = field(default_factory=set)
    # Wall clock (seconds): a room's last block closes once its gap has passed.
    clock: Callable[[], float] = time.time
    # Windows re-upserted or deleted for a redaction whose old text may still sit in
    # Chroma's files (its write-ahead log, free pages, full-text index): scrubbed after
    # the run, at most once per `scrub_every` seconds (a scrub rewrites Chroma's file:
    # 16 s at 100,000 windows here). Edits are not scrubbed: Matrix keeps showing an
    # edited message's original to the room.
    scrub_due: set = field(default_factory=set)
    scrub_every: float = 60.0
    _scrubbed_at: float = float("-inf")

    def process_all(self, progress: Callable[[int], None] | None = None) -> int:
        """Index every pending event of every room; return how many were indexed.

        Windows are gathered across rooms and timelines, up to EMBED_GROUP, embedded
        together in length order (embedder.encode_in_length_order), then upserted and
        committed step by step, each step (EMBED_BATCH windows at most) of one timeline,
        in timeline order."""
        if self.history is not None:
            self.rechunk_windows([(WindowID(w), RoomID(r), bool(red))
                                  for w, r, red in self.history.dirty()
                                  if self.admits(RoomID(r))])
        done = 0
        group: list[_Step] = []
        dropped: set[tuple[RoomID, EventID | None]] = set()
        # A group's upserts and commits run in one helper thread while the next group is
        # embedded (Chroma's upsert waits on its own disk writes); groups commit in order.
        pool: ThreadPoolExecutor | None = None
        committing: Future | None = None

        def flush() -> None:
            nonlocal done, pool, committing
            vectors = self._embed(group)
            if committing is not None:
                done += committing.result()
            pool = pool or ThreadPoolExecutor(1, thread_name_prefix="pipeline-commit")
            committing = pool.submit(self._commit_group, list(group), vectors, dropped,
                                     progress)

        try:
            for room_id in sorted(self.eventlog.rooms_with_pending()):
                if not self.admits(room_id):
                    log.debug("room_skipped_refused", extra={"room_id": room_id})
                    continue
                for thread in self.eventlog.pending_threads(room_id):
                    group += self._plan_timeline(room_id, thread)
                    if sum(len(step.batch) for step in group) >= EMBED_GROUP:
                        flush()
                        group = []
            if group:
                flush()
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        return done + (committing.result() if committing is not None else 0)

    def _plan_timeline(self, room_id: RoomID, thread_root: EventID | None) -> list[_Step]:
        """The steps that index one timeline's pending events (none if there are none)."""
        generation = self.purges[room_id]
        tail, pending = self.eventlog.room_tail(room_id, thread_root)
        if not pending:
            return []
        # -- derived filter: a pending message quoting an artifact is tagged derived in
        # -- the event log, journalled, and left out of every window (indexer/derived.py)
        if self.derived is not None:
            tail, pending = self.derived.screen(room_id, tail, pending)
            if not pending:
                return []
        # -- end of derived filter
        grouped = build_blocks(tail, self.policy, self.room_label(room_id),
                               now_ms=int(self.clock() * 1000))
        # The tail's indexed events sit in the stored open window (the room's open block,
        # indexer/chunker.py). Usually re-chunking reproduces its id; when older history
        # arrived (backfill after live events), its messages move to a window starting
        # earlier, and the old one must go: in the first batch, which re-points them.
        held = {self.eventlog.status_of(m.event_id)[1] for m in tail
                if m.event_id not in pending}
        stale = sorted(w for w in held - {w.window_id for b in grouped for w in b} if w)
        return [_Step(room_id, thread_root, batch, stale if i == 0 else [], generation,
                      sum(1 for w in batch for m in w.messages if m.event_id in pending))
                for i, batch in enumerate(commit_batches(grouped, pending, EMBED_BATCH))]

    def _embed(self, group: list[_Step]) -> list:
        """The vectors of the steps' windows, embedded in one go, in step order."""
        return encode_in_length_order(
            self.embedder, [embed_text(w) for step in group for w in step.batch], EMBED_CALL)

    def _commit_group(self, group: list[_Step], vectors: list,
                      dropped: set[tuple[RoomID, EventID | None]],
                      progress: Callable[[int], None] | None) -> int:
        """Commit each step in order; return how many pending messages were indexed.
        Once a timeline's step is dropped (its room refused or purged meanwhile) its
        later steps are dropped too: its pending events stay pending, to be re-chunked
        from the same block start."""
        done = 0
        at = 0
        for step in group:
            step_vectors, at = vectors[at:at + len(step.batch)], at + len(step.batch)
            key = (step.room_id, step.thread_root)
            if key in dropped or not self._commit(step, step_vectors):
                dropped.add(key)
                continue
            done += step.messages
            self.stats.messages += step.messages
            if progress:
                progress(step.messages)
        return done

    def close_quiet_blocks(self) -> int:
        """A room's last block is one coarse window while it may grow (chunker.py). Once
        the room has been quiet for the gap, nothing can join it: cut it into its
        conversation windows now, rather than when the room next speaks. Returns how
        many blocks were closed."""
        now_ms = int(self.clock() * 1000)
        closed = 0
        for room_id, thread, window_id in self.eventlog.quiet_timelines(
                now_ms - self.policy.gap_ms):
            key = (room_id, thread, window_id)
            if key in self._settled or not self.admits(room_id):
                continue
            generation = self.purges[room_id]
            tail, pending = self.eventlog.room_tail(room_id, thread)
            if pending or not tail:
                continue  # the next ordinary run re-chunks it
            windows = [w for b in build_blocks(tail, self.policy, self.room_label(room_id),
                                               now_ms=now_ms) for w in b]
            held = {self.eventlog.status_of(m.event_id)[1] for m in tail}
            if {w.window_id for w in windows} == held:
                self._settled.add(key)  # already its conversation windows
                continue
            stale = sorted(w for w in held - {w.window_id for w in windows} if w)
            step = _Step(room_id, thread, windows, stale, generation, 0)
            if self._commit(step, self.embedder.encode([embed_text(w) for w in windows])):
                closed += 1
        return closed

    def rechunk_window(self, window_id: WindowID, room_id: RoomID,
                       redacted: bool = False) -> None:
        """One dirty window: see rechunk_windows."""
        self.rechunk_windows([(window_id, room_id, redacted)])

    def rechunk_windows(self, dirty: list[tuple[WindowID, RoomID, bool]]) -> None:
        """Stored windows whose messages were edited or redacted: upsert each as it is now
        (one window, never split, so a room's open block stays whole), under its new id
        if its first message went; delete it if nothing is left. `redacted`: its old
        text is to be scrubbed from the store's files too (scrub_history).

        All of them are embedded together in length order, then stored EMBED_BATCH at a
        time: one upsert, one delete and one event-log transaction per batch (one Chroma
        call per window was 13.1 of the churn test's 14.1 s)."""
        rebuilt: list[tuple[WindowID, bool, Window | None, int]] = []
        for window_id, room_id, redacted in dirty:
            generation = self.purges[room_id]
            messages = self.eventlog.window_messages(window_id)
            window = Window(chunk_window_id(room_id, messages[0].event_id), room_id,
                            tuple(messages), self.room_label(room_id)) if messages else None
            rebuilt.append((window_id, redacted, window, generation))
        texts = [embed_text(w) for _, _, w, _ in rebuilt if w is not None]
        vectors = iter(encode_in_length_order(self.embedder, texts, EMBED_CALL) if texts else [])
        paired = [(old, red, w, gen, next(vectors) if w is not None else None)
                  for old, red, w, gen in rebuilt]
        for start in range(0, len(paired), EMBED_BATCH):
            self._store_rechunked(paired[start:start + EMBED_BATCH])

    def _store_rechunked(self, part: list[tuple]) -> None:
        with self.lock:
            # A room purged or refused since its windows were read: left dirty, and a
            # purge drops its dirty marks with its windows.
            part = [p for p in part if p[2] is None or (
                self.purges[p[2].room_id] == p[3] and self.admits(p[2].room_id))]
            upserts = [(w, v) for _, _, w, _, v in part if w is not None]
            if upserts:
                self.store.upsert([w for w, _ in upserts], [v for _, v in upserts])
            # After the upsert: nothing is ever missing.
            kept = {w.window_id for w, _ in upserts}
            gone = [old for old, _, w, _, _ in part
                    if (w is None or w.window_id != old) and old not in kept]
            self.store.delete(gone)
            self.eventlog.rewindow_many(
                [(old, w.window_id if w is not None else None) for old, _, w, _, _ in part])
            self.stats.windows_upserted += len(upserts)
            self.stats.embeddings += len(upserts)
            self.stats.windows_deleted += len(gone)
        for old, redacted, w, _, _ in part:
            if redacted:
                self.scrub_due.update((old,) if w is None else (old, w.window_id))
        if part:
            log.info("windows_rechunked", extra={"windows": len(part), "deleted": len(gone)})

    def scrub_wait(self) -> float | None:
        """Seconds until the due scrub may run (0: now); None if none is due."""
        if not self.scrub_due:
            return None
        return max(0.0, self._scrubbed_at + self.scrub_every - self.clock())

    def scrub_history(self) -> bool | None:
        """Scrub the superseded text of windows re-upserted for redactions from Chroma's
        files and the event log's WAL (chromascrub.py), unless one ran less than
        `scrub_every` seconds ago. None if nothing was due or it is too soon; else
        whether Chroma's files were scrubbed (a server's cannot be)."""
        if not self.scrub_due or self.scrub_wait():
            return None
        with self.lock:  # nothing writes to the collection meanwhile
            due = sorted(self.scrub_due)
            scrubbed = self.store.scrub_windows(due)
            self.eventlog.truncate_wal()
            self._scrubbed_at = self.clock()
            if scrubbed or getattr(self.store, "path", None) is None:  # a server: out of reach
                self.scrub_due.difference_update(due)
        return scrubbed

    def _commit(self, step: _Step, vectors: list) -> bool:
        with self.lock:
            if self.purges[step.room_id] != step.generation or not self.admits(step.room_id):
                log.info("windows_dropped_room_refused", extra={"room_id": step.room_id,
                                                                "windows": len(step.batch)})
                return False
            self._store_batch(step.room_id, step.batch, vectors, step.stale)
        return True

    def _store_batch(self, room_id: RoomID, batch: list[Window], vectors: list,
                     stale: list[WindowID]) -> None:
        self.store.upsert(batch, vectors)
        # After the upsert, before the events point elsewhere: a crash in between leaves
        # them pointing at the deleted window, which the next run re-chunks again.
        self.store.delete(stale)
        self.stats.windows_deleted += len(stale)
        self.stats.embeddings += len(batch)
        if len(self.stats.batch_sizes) < 10_000:
            self.stats.batch_sizes.append(len(batch))
        self.stats.windows_upserted += len(batch)
        self.stats.batches += 1
        assignments: dict[EventID, WindowID] = {
            m.event_id: w.window_id for w in batch for m in w.messages}
        # Windows follow conversations: the batch's latest message may be in any of them.
        latest = max((m for w in batch for m in w.messages), key=lambda m: m.ts)
        self.eventlog.mark_indexed(room_id, assignments, latest)
        log.info("windows_upserted", extra={"room_id": room_id, "windows": len(batch),
                                            "events": len(assignments)})
