"""Copying segments into fresh generations: the compaction after redactions and purges,
so no deleted or superseded vector stays in any file (generations.py); the merge of
small sealed segments and the split of one too large (segments.py); and the migration
of an older release's collection, whose documents held text, by the same copy. A part
of `ChromaStore`, given the store's generations and its live segments explicitly."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ...clock import stopwatch
from ...records import CORPUS_REFERENCE
from .generations import Generations
from .segments import Segment, Segments, plan_merge

if TYPE_CHECKING:
    from ..eventlog.log import EventLog

log = logging.getLogger("matrix_sources.indexer.store.chroma")  # the store's events, one logger

COPY_PAGE = 1000  # points per get/add while copying
TEXT_HOME_KEY = "text_home"  # event log meta: "eventlog" once no text is left in Chroma


class Compactor:
    """The store's generations: `compact`, `merge`, `sweep`, `migrate_text_out`. The
    store's writes record their ids in the segment they write (Segments.wrote), so a
    copy under way catches them up before its swap."""

    def __init__(self, gens: Generations, segs: Segments, eventlog: EventLog | None) -> None:
        self.gens, self.segs, self.eventlog = gens, segs, eventlog
        self._running = threading.Lock()  # one copy at a time (the worker's, a purge's)
        self.last: dict[str, Any] = {}  # what the last copy did (benchmarks read it)

    def compact(
        self,
        lock: AbstractContextManager[object] | None = None,
        after_copy: Callable[[], None] | None = None,
        before_swap: Callable[[], None] | None = None,
        everything: bool = False,
    ) -> int:
        """Copy every dirty segment (`everything`: every segment) into a fresh
        generation, one segment at a time: its live points, vectors and metadata as
        stored, nothing re-embedded; record it live in the event log; drop the old one.
        Returns how many points were copied. A copy runs while the pipeline goes on
        writing (to the old segment); then, holding `lock` (the pipeline's), the ids
        written meanwhile are copied again or deleted, and the segment is swapped. A
        failure before a swap leaves that segment's old generation live. `after_copy`
        and `before_swap` are for tests (writes during a copy; a crash before a swap)."""
        with self._running:
            copied = 0
            touched: list[int] = []
            for seg in [s for s in self.segs.list if everything or s.dirty]:
                if seg in self.segs.list:  # not merged away meanwhile
                    copied += self._rewrite([seg], lock, after_copy, before_swap)
                    touched.append(seg.n)
            self.last = {
                "kind": "compaction",
                "segments": len(touched),
                "points": copied,
                "of": self.segs.count(),
            }
            return copied

    def merge(self, lock: AbstractContextManager[object] | None = None) -> int | None:
        """Copy the next run of small sealed segments into one (segments.plan_merge);
        None if none is due, else how many points were copied."""
        with self._running:
            plan = plan_merge(self.segs.counts(), self.segs.policy)
            if plan is None:
                return None
            run = list(self.segs.list[plan[0] : plan[1]])
            copied = self._rewrite(run, lock, None, None)
            self.last = {
                "kind": "merge",
                "segments": len(run),
                "points": copied,
                "of": self.segs.count(),
            }
            return copied

    def merge_due(self) -> bool:
        """Shared segments are never merged (segments.Segments)."""
        return not self.segs.shared and plan_merge(self.segs.counts(), self.segs.policy) is not None

    def _rewrite(
        self,
        run: Sequence[Segment],
        lock: AbstractContextManager[object] | None,
        after_copy: Callable[[], None] | None,
        before_swap: Callable[[], None] | None,
    ) -> int:
        """Copy the points of adjacent segments `run` into fresh generations (one, or
        ceil(points / cap) when more than the cap; none when empty and sealed) and swap
        them in for the run."""
        took = stopwatch()
        segs = self.segs
        guard = lock if lock is not None else contextlib.nullcontext()
        with guard:  # no write of the pipeline is under way: each one is caught up
            for s in run:
                s.written = set()
        fresh: list[Segment] = []
        try:
            sources = [(s, s.collection.get(include=[])["ids"]) for s in run]
            total = sum(len(ids) for _, ids in sources)
            has_hot = run[-1] is segs.hot
            limit = segs.policy.merge_cap(segs.count())
            parts = math.ceil(total / limit) or (1 if has_hot else 0)
            meta = dict(run[-1].collection.metadata or {})
            for _ in range(parts):
                n, client, col = self.gens.fresh(meta)
                fresh.append(Segment(-1, n, client, col, False))
            size = math.ceil(total / parts) if parts else 0
            part_of: dict[str, int] = {}
            at = 0
            for s, ids in sources:
                for i in range(0, len(ids), COPY_PAGE):
                    page = ids[i : i + COPY_PAGE]
                    # A page can straddle two parts: each id to the part of its position.
                    by_part: dict[int, list[str]] = {}
                    for k, wid in enumerate(page, start=at + i):
                        by_part.setdefault(min(k // size, parts - 1), []).append(wid)
                    for j, chunk in by_part.items():
                        _copy(s.collection, fresh[j].collection, chunk, delete_missing=False)
                        part_of.update(dict.fromkeys(chunk, j))
                at += len(ids)
            if after_copy is not None:
                after_copy()
            with guard:
                written = sorted(set().union(*(s.written or () for s in run)))
                for s in run:
                    s.written = None
                self._catch_up(run, fresh, part_of, written)
                have: int = sum(f.collection.count() for f in fresh)
                want = sum(s.collection.count() for s in run)
                if have != want:
                    raise RuntimeError(f"a copy holds {have} of {want} points")
                if before_swap is not None:
                    before_swap()
                placed: list[list[str]] = [[] for _ in fresh]
                for wid, j in part_of.items():
                    placed[j].append(wid)
                epoch = segs.swap(run, fresh, placed)
        except BaseException:
            for s in run:
                s.written = None
            for f in fresh:
                self.gens.drop(f.n, f.client)
            raise
        segs.drop(run, epoch)
        log.info(
            "chroma_segments_copied",
            extra={
                "from": [s.n for s in run],
                "to": [f.n for f in fresh],
                "points": have,
                "caught_up": len(written),
                "seconds": round(took(), 1),
            },
        )
        return have

    def _catch_up(
        self,
        run: Sequence[Segment],
        fresh: list[Segment],
        part_of: dict[str, int],
        written: list[str],
    ) -> None:
        """Ids written to the run during the copy, as they are now: copied again (an
        upsert), deleted (a delete), a new id into the last part. What was copied
        before and changed after stays in the fresh generation's files: it is dirty."""
        if not written:
            return
        where = dict(zip(written, self.segs.idmap().get(written)))
        by_key = {s.key: s for s in run}
        last = len(fresh) - 1
        for i in range(0, len(written), COPY_PAGE):
            for s in run:
                page = [w for w in written[i : i + COPY_PAGE] if where[w] == s.key]
                for j in sorted({part_of.get(w, last) for w in page}):
                    chunk = [w for w in page if part_of.get(w, last) == j]
                    if any(w in part_of for w in chunk):
                        fresh[j].dirty = True
                    _copy(s.collection, fresh[j].collection, chunk, delete_missing=False)
                    part_of.update(dict.fromkeys(chunk, j))
            gone = [
                w for w in written[i : i + COPY_PAGE] if where[w] not in by_key and w in part_of
            ]
            for j in sorted({part_of[w] for w in gone}):
                fresh[j].dirty = True
                fresh[j].collection.delete(ids=[w for w in gone if part_of[w] == j])
            for w in gone:
                del part_of[w]

    def sweep(self) -> list[int]:
        """The writer, at start: drop generations a crashed copy left."""
        return self.gens.sweep()

    def migrate_text_out(self) -> bool:
        """A collection written by an older release holds documents: reference
        chunks' text moves to the event log (chat text is there already, in `events`),
        then every segment is copied without documents. Nothing is re-embedded. True if
        it migrated. The writer calls it at start (rebuild.ensure_meta)."""
        eventlog = self.eventlog
        if eventlog is None or eventlog.get_meta(TEXT_HOME_KEY) == "eventlog":
            return False
        migrated = False
        if self.segs.count():
            moved = 0
            for seg in self.segs.list:
                col = seg.collection
                ids = col.get(where={"corpus": CORPUS_REFERENCE}, include=[])["ids"]
                for i in range(0, len(ids), COPY_PAGE):
                    res = col.get(ids=ids[i : i + COPY_PAGE], include=["documents", "metadatas"])
                    rows = [
                        (cid, str((m or {}).get("ref_corpus", "")), d)
                        for cid, d, m in zip(res["ids"], res["documents"], res["metadatas"])
                        if d is not None
                    ]
                    eventlog.texts.put_ref_texts(rows)
                    moved += len(rows)
            self.compact(everything=True)
            migrated = True
            log.warning(
                "text_moved_to_event_log",
                extra={"reference_chunks": moved, "points": self.segs.count()},
            )
        eventlog.set_meta(TEXT_HOME_KEY, "eventlog")
        return migrated


def _copy(src: Any, dst: Any, ids: list[str], delete_missing: bool) -> None:
    res = src.get(ids=ids, include=["embeddings", "metadatas"])
    if res["ids"]:
        dst.upsert(ids=res["ids"], embeddings=res["embeddings"], metadatas=res["metadatas"])
    if delete_missing:
        gone = sorted(set(ids) - set(res["ids"]))
        if gone:
            dst.delete(ids=gone)
