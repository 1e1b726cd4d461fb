"""The collection as segments: bounded Chroma collections, each copied on its own.

A compaction copies a collection to leave no deleted vector in any file
(generations.py); one collection makes every compaction copy everything (285 s at
100,000 windows). So the points are split into segments, in write order:

    [sealed ...................................................] [hot]
     a point stays in the segment it was first written to     new points; sealed
     (its updates and deletes go there: IdMap says which)     when it holds `hot`
                                                              (a small index: less)

    dirty      a segment where a point was deleted or overwritten: its files hold the
               old vector. A compaction copies the dirty segments only (the catalog
               records the flag, so a restart still knows).
    merge      `fanout` adjacent sealed segments of one size class (hot, hot*fanout,
               hot*fanout^2 ...) are copied into one, never past `cap` (nor, in a
               small index, past a tenth of it); an empty sealed segment is dropped,
               and one shrunk below half the hot size joins a neighbour.
    split      a copy of more than `cap` points (a collection of the release before
               segments) writes ceil(points / cap) segments.

Recent messages take most edits and redactions, and their windows are in the hot
segment or the few small sealed ones after it: a redaction there copies a few thousand
points, not the index. A search queries every segment (searcher: Segments.reading)
and merges by similarity. Each segment's guarantees are the collection's of before:
a crash part-way keeps the old segment, writes during a copy are caught up before the
swap (`written`), and a dropped generation leaves no file (generations.py).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from .generations import Entry, Generations, stop_client
from .idmap import IdMap, IdMapByGeneration

log = logging.getLogger("matrix_sources.indexer.store.vectors.chroma")  # the store's one logger

T = TypeVar("T")
QUERY_THREADS = 4  # segments queried at once (Chroma releases the GIL in a query)
DROP_WAIT_S = 30.0  # a search still reading a swapped-out segment: its folder waits


# The hot segment's size in an index too small for `hot`: each segment costs a search one
# more Chroma query (at 5,000 windows segments of 500 took 11 ms of Chroma, one took 5).
MIN_HOT = 1_000


# Sizes just under powers of two: Chroma holds an HNSW index at the next one, all of it
# resident with the heap scrub (40,000 points took 65,536 slots: 1 GiB at a million).
@dataclass(frozen=True, slots=True)
class SegmentPolicy:
    hot: int = 2_000  # points in the hot segment before it is sealed
    fanout: int = 4  # sealed segments of one size class merged into one
    cap: int = 32_000  # no merge makes a segment larger; a larger copy is split
    # In a small index no segment is made larger than 1/share of it (a merge) and the
    # hot one holds at most 1/(2 share) (but MIN_HOT): a redaction then copies a fifth
    # of it at most, not all of it (at 10,000 windows, segments of 1,000 and 1,250).
    # None: no such bound.
    share: int | None = 8

    def level(self, count: int) -> int:
        """A sealed segment's size class: 0 up to `hot`, 1 up to hot*fanout, ..."""
        if count <= self.hot:
            return 0
        return max(1, math.ceil(math.log(count / self.hot, self.fanout) - 1e-9))

    def hot_cap(self, total: int) -> int:
        """Points the hot segment takes before it is sealed, in an index of `total`."""
        if self.share is None:
            return self.hot
        return min(self.hot, max(MIN_HOT, total // (2 * self.share)))

    def merge_cap(self, total: int) -> int:
        """The largest segment a merge may make in an index of `total` points."""
        if self.share is None:
            return self.cap
        return min(self.cap, max(self.hot_cap(total), total // self.share))

    def largest(self, total: int) -> int:
        """The largest segments merges leave in an index of `total` (corpus_scale.py)."""
        size, limit = self.hot_cap(total), self.merge_cap(total)
        while size * self.fanout <= limit:
            size *= self.fanout
        return size


def plan_merge(counts: Sequence[int], policy: SegmentPolicy) -> tuple[int, int] | None:
    """The next run [start, end) of sealed segments to copy into one, or None. `counts`:
    the live points of every segment in catalog order, the hot one last."""
    sealed = list(counts[:-1])
    limit = policy.merge_cap(sum(counts))
    for i, c in enumerate(sealed):
        if c == 0:
            return i, i + 1
    f = policy.fanout
    levels = [policy.level(c) for c in sealed]
    for i in range(len(sealed) - f + 1):
        if len(set(levels[i : i + f])) == 1 and sum(sealed[i : i + f]) <= limit:
            return i, i + f
    small = policy.hot_cap(sum(counts)) // 2
    for i, c in enumerate(sealed):
        if c < small:
            fits = [j for j in (i - 1, i + 1) if 0 <= j < len(sealed) and sealed[j] + c <= limit]
            if fits:
                j = min(fits, key=lambda k: sealed[k])
                return min(i, j), max(i, j) + 1
    return None


class Segment:
    """One live segment: its generation's number, client and collection."""

    __slots__ = ("key", "n", "client", "collection", "dirty", "written")

    def __init__(self, key: int, n: int, client: Any, collection: Any, dirty: bool) -> None:
        self.key, self.n, self.client, self.collection = key, n, client, collection
        self.dirty = dirty
        self.written: set[str] | None = None  # ids written while a copy runs

    def __repr__(self) -> str:
        return f"Segment(key={self.key}, g{self.n}{', dirty' if self.dirty else ''})"


class Segments:
    """The live segments (their order is the catalog's), which one holds each id, and
    the ids written while a copy runs. Shared by the store (its reads and writes) and
    its compactor (vectors/compactor.py), which swaps segments for fresh generations."""

    def __init__(
        self,
        gens: Generations,
        policy: SegmentPolicy | None = None,
        after_swap: Callable[[], object] | None = None,
        shared: bool = False,
    ) -> None:
        """`after_swap`: called once a swapped-out generation is dropped (the event
        log's WAL truncated: its pages held the old catalog). `shared`: processes of
        their own write the collection too (embedding workers, index.pipeline
        external): each one's map of ids misses the others' points, so the hot segment
        is never sealed and small ones never merged (the list changes only by the
        service's compaction, which copies every segment), and an id the map lacks is
        looked for in every segment before it is taken as new."""
        self.gens = gens
        self.policy = policy or SegmentPolicy()
        self.shared = shared
        self.after_swap = after_swap
        self._lock = threading.RLock()  # the list, the map, the catalog
        self.list: tuple[Segment, ...] = tuple(
            Segment(key, e.n, *gens.open(e.n), e.dirty) for key, e in enumerate(gens.entries())
        )
        self._map: IdMap | None = None  # built at first use (a search may never need it)
        self._epoch = 0  # swaps so far; readers pin the list of their epoch
        self._readers: Counter[int] = Counter()
        self._cond = threading.Condition(self._lock)
        self._pool: ThreadPoolExecutor | None = None

    def _free_key(self, taken: Sequence[Segment]) -> int:
        """The smallest key no segment of `taken` has (keys index the map's uint16s)."""
        used = {s.key for s in taken}
        return next(k for k in range(len(used) + 1) if k not in used)

    # -- reading --------------------------------------------------------------------

    @property
    def hot(self) -> Segment:
        return self.list[-1]

    @contextmanager
    def reading(self) -> Iterator[tuple[Segment, ...]]:
        """The live segments, pinned: none of their generations is dropped until the
        reader is done (a swap waits for it, up to DROP_WAIT_S)."""
        with self._lock:
            epoch, segs = self._epoch, self.list
            self._readers[epoch] += 1
        try:
            yield segs
        finally:
            with self._lock:
                self._readers[epoch] -= 1
                if not self._readers[epoch]:
                    del self._readers[epoch]
                self._cond.notify_all()

    def each(self, jobs: Sequence[Any], call: Callable[[Any], Any]) -> list[Any]:
        """call(job) for every job (a segment, or a segment and what to read there), at
        once when there are several."""

        def one(job: Any) -> Any:
            return self.reread(job if isinstance(job, Segment) else job[0], lambda: call(job))

        if len(jobs) <= 1:
            return [one(s) for s in jobs]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(QUERY_THREADS, thread_name_prefix="chroma-seg")
        return list(self._pool.map(one, jobs))

    def reread(self, seg: Segment, call: Callable[[], T]) -> T:
        """A read of a segment's vectors, or filtered by metadata. Embedded Chroma loads
        a folder's vector index once per process: a process that opened it before
        another wrote (a CLI beside the service, a checker after a restart) finds the
        new records' metadata but not their vectors, and Chroma raises "Error finding
        id". The segment's folder is then opened afresh and the read tried once more."""
        try:
            return call()
        except Exception as e:  # chromadb.errors.InternalError, not imported up front
            if "Error finding id" not in str(e) or self.gens.root is None:
                raise
        log.warning("chroma_reopened_stale_vectors", extra={"generation": seg.n})
        with self._lock:
            stop_client(seg.client)
            seg.client, seg.collection = self.gens.open(seg.n)
        return call()

    def follow(self) -> bool:
        """Open the segments the catalog names now, if another process swapped some
        (shared: the service compacted). True if the list moved; the map is then read
        afresh at its next use."""
        with self._lock:
            entries = self.gens.entries()
            if [e.n for e in entries] == [s.n for s in self.list]:
                for s, e in zip(self.list, entries):
                    s.dirty = e.dirty
                return False
            old = {s.n: s for s in self.list}
            fresh = []
            for key, e in enumerate(entries):
                seg = old.get(e.n) or Segment(key, e.n, *self.gens.open(e.n), e.dirty)
                seg.key, seg.dirty = key, e.dirty
                fresh.append(seg)
            self.list = tuple(fresh)
            self._map = None
            self._epoch += 1
            return True

    def idmap(self) -> IdMap:
        """Which segment holds each id, read from the segments at first use."""
        with self._lock:
            if self._map is None:
                m = IdMap()
                for s in self.list:
                    m.load(s.collection.get(include=[])["ids"], s.key)
                self._map = m
            return self._map

    def preload(self) -> None:
        """Read the map now without holding the lock while reading (8 s at a million
        windows): at start, beside the first search's HNSW reads, so neither a count
        nor a search waits on it. Kept unless the list moved meanwhile."""
        with self._lock:
            if self._map is not None:
                return
            epoch, segs = self._epoch, self.list
        m = IdMap()
        for s in segs:
            m.load(s.collection.get(include=[])["ids"], s.key)
        with self._lock:
            if self._map is None and self._epoch == epoch:
                self._map = m

    def map_by_generation(self) -> IdMapByGeneration | None:
        """The map as IdMap.export gives it, each id's segment named by its generation
        (keys are this process's); None if it was never read."""
        with self._lock:
            if self._map is None:
                return None
            gen = {s.key: s.n for s in self.list}
            keys, segs, other = self._map.export()
            lookup = np.zeros(max(gen) + 1, dtype=np.uint32)
            for key, n in gen.items():
                lookup[key] = n
            return keys, lookup[segs], {wid: gen[k] for wid, k in other.items()}

    def adopt_map(self, keys: np.ndarray, gens: np.ndarray, other: dict[str, int]) -> bool:
        """Take a map written at the last clean stop (map_by_generation) instead of
        reading every id again (2 to 3 s at a million windows); not if it names a
        generation that is not live, or the map was read already."""
        with self._lock:
            if self._map is not None:
                return False
            key_of = {s.n: s.key for s in self.list}
            if not set(np.unique(gens).tolist()) | set(other.values()) <= key_of.keys():
                return False
            lookup = np.zeros(max(key_of) + 1, dtype=np.uint16)
            for n, key in key_of.items():
                lookup[n] = key
            self._map = IdMap(
                keys,
                lookup[np.asarray(gens, dtype=np.int64)],
                {w: key_of[n] for w, n in other.items()},
            )
            return True

    def counts(self) -> list[int]:
        with self._lock:
            m = self.idmap()
            return [m.counts[s.key] for s in self.list]

    def count(self) -> int:
        """Every segment's points. Before the map is read, each segment's own count:
        reading the map takes 8 s at a million windows (bench/scale.py), and the
        start-up check and the first search only need the number."""
        with self._lock:
            if self._map is None:
                return sum(s.collection.count() for s in self.list)
            return len(self._map)

    def locate(self, ids: Sequence[str], find: bool = False) -> list[tuple[Segment, list[str]]]:
        """The ids each segment holds, in segment order (ids none holds are left out).
        `find`: an id the map lacks is looked for in the segments (a read: another
        process may have written it since this one read the map). A read before the map
        is read asks the segments instead: reading it here, under the lock, held every
        search for its 8 s at a million windows while start-up's `preload` read it."""
        with self._lock:
            groups: dict[int, list[str]] = {}
            if find and self._map is None:
                for seg in self.list:
                    got = self.reread(seg, lambda: seg.collection.get(ids=list(ids), include=[]))
                    if got["ids"]:
                        groups[seg.key] = got["ids"]
                return [(s, groups[s.key]) for s in self.list if s.key in groups]
            m = self.idmap()
            keys = m.get(ids)
            if self.shared or find:
                self._find_unknown(ids, keys)
                keys = self.idmap().get(ids)  # a new map, if the list moved
            for wid, key in zip(ids, keys):
                if key >= 0:
                    groups.setdefault(key, []).append(wid)
            return [(s, groups[s.key]) for s in self.list if s.key in groups]

    def _find_unknown(self, ids: Sequence[str], keys: Sequence[int]) -> None:
        """Ids this process's map lacks may have been written by another process since
        (a worker; the service, beside a CLI): each segment is asked, after the catalog
        is read again (another process may have sealed a segment). Shared, one segment:
        the only place they can go."""
        unknown = [wid for wid, key in zip(ids, keys) if key < 0]
        if not unknown:
            return
        self.follow()
        if self.shared and len(self.list) == 1:
            self.idmap().set(unknown, self.list[0].key)
            return
        for seg in self.list:
            found = self.reread(seg, lambda: seg.collection.get(ids=unknown, include=[]))
            if found["ids"]:
                self.idmap().set(found["ids"], seg.key)

    # -- writing --------------------------------------------------------------------

    def place(
        self, ids: Sequence[str], meta: dict[str, Any] | None
    ) -> list[tuple[Segment, list[str]]]:
        """Where each id of an upsert goes: the segment that holds it (marked dirty: its
        old vector stays in its files), else the hot one, sealed when full (`meta`: the
        collection metadata a new hot segment gets). Records the new ids as placed."""
        with self._lock:
            held = dict(self.locate(ids))
            known = {wid for part in held.values() for wid in part}
            new = [wid for wid in dict.fromkeys(ids) if wid not in known]
            self.mark_dirty(held)
            out = [(s, part) for s, part in held.items()]
            while new:
                m = self.idmap()
                room = (
                    len(new)
                    if self.shared
                    else self.policy.hot_cap(len(m)) - m.counts[self.hot.key]
                )
                if room <= 0:
                    self.seal(meta)
                    continue
                part, new = new[:room], new[room:]
                self.idmap().set(part, self.hot.key)
                out.append((self.hot, part))
            return out

    def mark_dirty(self, segs: Iterable[Segment]) -> None:
        """These segments will hold deleted or overwritten points: recorded first."""
        with self._lock:
            fresh = [s for s in segs if not s.dirty]
            if fresh:
                for s in fresh:
                    s.dirty = True
                self.record()

    def wrote(self, seg: Segment, ids: Sequence[str]) -> None:
        """Ids written to (or deleted from) a segment while a copy of it runs."""
        written = seg.written
        if written is not None:
            written.update(ids)

    def deleted(self, ids: Sequence[str]) -> None:
        with self._lock:
            self.idmap().delete(ids)

    def seal(self, meta: dict[str, Any] | None) -> Segment:
        """A fresh, empty hot segment after the current one, which is sealed."""
        with self._lock:
            n, client, col = self.gens.fresh(meta)
            seg = Segment(self._free_key(self.list), n, client, col, False)
            self.list = (*self.list, seg)
            self.record()
            log.info(
                "chroma_segment_sealed",
                extra={"generation": self.list[-2].n, "segments": len(self.list)},
            )
            return seg

    def record(self) -> None:
        self.gens.record(Entry(s.n, s.dirty) for s in self.list)

    # -- swapping ---------------------------------------------------------------------

    def swap(
        self, run: Sequence[Segment], fresh: Sequence[Segment], placed: Sequence[Sequence[str]]
    ) -> int:
        """Put `fresh` (already holding their points) where `run` is, in one catalog
        write. `placed[i]`: the ids fresh[i] holds, for the map (a copy of one segment
        into one keeps its key: nothing to move). Returns the swap's epoch."""
        with self._lock:
            at = self.list.index(run[0])
            assert self.list[at : at + len(run)] == tuple(run), "a run is adjacent"
            m = self.idmap()
            rest = [s for s in self.list if s not in run]
            if len(fresh) == 1:  # a copy, or a merge: the run's ids all go to it
                fresh[0].key = run[0].key if len(run) == 1 else self._free_key(rest)
                m.rekey([s.key for s in run], fresh[0].key)
            else:  # dropped (nothing left in the run) or split
                for s in run:
                    m.drop_key(s.key)
                for s, ids in zip(fresh, placed):
                    s.key = self._free_key(rest)
                    rest.append(s)
                    m.set(ids, s.key)
            self.list = (*self.list[:at], *fresh, *self.list[at + len(run) :])
            if not self.list:  # never without a hot segment
                n, client, col = self.gens.fresh()
                self.list = (Segment(0, n, client, col, False),)
            self.record()
            self._epoch += 1
            return self._epoch

    def drop(self, segs: Sequence[Segment], epoch: int) -> None:
        """Drop swapped-out generations once no reader of an earlier list is left."""
        with self._cond:
            self._cond.wait_for(
                lambda: not any(e < epoch for e in self._readers), timeout=DROP_WAIT_S
            )
        for s in segs:
            self.gens.drop(s.n, s.client)
        if segs and self.after_swap is not None:
            self.after_swap()

    def reset(self) -> list[Segment]:
        """One fresh, empty segment in place of all (a rebuild); returns the old ones,
        to drop."""
        with self._lock:
            old = self.list
            n, client, col = self.gens.fresh()
            self.list = (Segment(0, n, client, col, False),)
            self._map = IdMap()
            self.record()
            self._epoch += 1
            return list(old)

    @property
    def epoch(self) -> int:
        return self._epoch
