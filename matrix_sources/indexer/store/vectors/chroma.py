"""The vector store: Chroma collections of windows (cosine), embedded or a server.

A vectors-and-metadata adapter: upsert, delete, one nearest query, get by ids, and its
segments (segments.py: bounded collections in write order, each copied on its own).
The pipeline is its one writer; search reads. Chroma holds vectors, ids and the
metadata filters and citations need: room, corpus, every event id (as a JSON list:
Chroma metadata values are scalars), first and last event id and timestamps, senders.
No text: a window's text is the event log's (search reads it for the hits it keeps,
search/texts.py); a reference chunk's is in the event log's `ref_chunks`
(eventlog/texts.py), written and dropped with its point here.

After redactions and purges, `compact` (vectors/compactor.py) copies each segment
that holds a deleted or overwritten point into a fresh collection and drops the old
one, so no deleted vector stays in any file (generations.py). A query asks every
segment and keeps the nearest of all.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ...records import RoomID, Window, WindowID
from .compactor import Compactor
from .generations import Generations, MemoryCatalog
from .points import Neighbour, StoredWindow, stored, window_metadata
from .segments import Segment, SegmentPolicy, Segments
from .server_files import ServerFiles

if TYPE_CHECKING:
    from pathlib import Path

    from ..eventlog.log import EventLog

COLLECTION = "matrix_sources"
T = TypeVar("T")
# A search of several segments asks each for a quarter of the n nearest first, and asks
# again for n only the segments whose every answer lies among the n nearest found (only
# they can hold more of them): the same neighbours as asking all for n (HNSW searches
# max(ef_search, k) candidates, 100 for both, so the first k are the same), and 34
# segments x 8 texts x 80 results were a fifth of Chroma's time at a million windows
# (4.5 against 3.5 ms a segment for 8 vectors; bench/scale.py).
FIRST_SHARE = 4
FIRST_MIN = 10
log = logging.getLogger(__name__)


class ChromaStore:
    """Embedded (`path`) or server (`host`, `port`) Chroma behind one interface. The
    event log, when given, records the live segments and holds reference chunks'
    text; without one (tests, benchmarks) the segments are kept in memory."""

    def __init__(
        self,
        path: Path | None = None,
        host: str | None = None,
        port: int | None = None,
        collection: str = COLLECTION,
        eventlog: EventLog | None = None,
        server_files: ServerFiles | None = None,
        policy: SegmentPolicy | None = None,
        shared: bool = False,
    ) -> None:
        """`server_files`: a server's persist dir this host reaches, cleaned after each
        dropped generation (server_files.py). `policy`: the segments' sizes. `shared`:
        embedding workers in other processes write the collection too (Segments).
        """
        self.path = None if host else path  # the embedded folder (its generations)
        self.eventlog = eventlog
        if path is not None and not host:
            path.mkdir(parents=True, exist_ok=True)
        gens = Generations(
            path,
            host,
            port,
            collection,
            eventlog if eventlog is not None else MemoryCatalog(),
            server_files,
        )
        self._segs = Segments(
            gens, policy, eventlog.truncate_wal if eventlog is not None else None, shared=shared
        )
        self._compactor = Compactor(gens, self._segs, eventlog)
        self.asked_further = 0  # queries a segment was asked again for (FIRST_SHARE)
        if host and server_files is not None:
            server_files.check(self._segs.hot.client)

    def _each(self, call: Callable[[Segment], object]) -> list[Any]:
        """call(segment) for every live segment, at once (pinned: none is dropped
        meanwhile)."""
        with self._segs.reading() as segs:
            return self._segs.each(segs, call)

    def _located(
        self, ids: Sequence[str], call: Callable[[Segment, list[str]], object]
    ) -> list[Any]:
        """call(segment, its ids) for the segments holding the given ids."""
        with self._segs.reading():
            return [
                self._segs.reread(seg, lambda: call(seg, part))
                for seg, part in self._segs.locate(list(ids), find=True)
            ]

    def follow_live(self) -> bool:
        """Open the segments the event log names now, if another process compacted
        meanwhile (an embedding worker's store: index.pipeline external). True if they
        moved. The worker asks inside its fenced commit, which no swap runs beside."""
        return self._segs.follow()

    # -- meta: what produced the vectors ---------------------------------------------

    def meta(self) -> dict[str, Any]:
        return dict(self._segs.hot.collection.metadata or {})

    def set_meta(self, meta: dict[str, Any]) -> None:
        merged = {**self.meta(), **meta}
        for seg in self._segs.list:  # each segment says what made its vectors
            seg.collection.modify(metadata=merged)

    def reset(self) -> None:
        """Drop every record (a rebuild: rebuild.py): one fresh, empty segment."""
        old = self._segs.reset()
        self._segs.drop(old, self._segs.epoch)

    # -- segments (segments.py, vectors/compactor.py) --------------------------------

    @property
    def segments(self) -> Segments:
        """The live segments (their generations, sizes, and where generations are)."""
        return self._segs

    def compact(
        self,
        lock: AbstractContextManager[object] | None = None,
        after_copy: Callable[[], None] | None = None,
        before_swap: Callable[[], None] | None = None,
        everything: bool = False,
    ) -> int:
        """Copy each segment holding a deleted or overwritten point (`everything`:
        each segment) into a fresh generation and drop the old one (Compactor.compact);
        returns how many points were copied."""
        return self._compactor.compact(lock, after_copy, before_swap, everything)

    def merge(self, lock: AbstractContextManager[object] | None = None) -> int | None:
        """Copy the next run of small sealed segments into one (Compactor.merge); None
        if none is due."""
        return self._compactor.merge(lock)

    def merge_due(self) -> bool:
        return self._compactor.merge_due()

    def sweep(self) -> list[int]:
        """The writer, at start: drop generations a crashed copy left."""
        return self._compactor.sweep()

    def migrate_text_out(self) -> bool:
        """The writer, at start: a previous release's documents out of Chroma
        (Compactor.migrate_text_out); True if it migrated."""
        return self._compactor.migrate_text_out()

    # -- writing (the pipeline only) -------------------------------------------------

    def _upsert(
        self,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]] | np.ndarray,
        metas: Sequence[dict[str, Any]],
    ) -> None:
        """Each point to the segment that holds its id, new ones to the hot segment."""
        row = {wid: i for i, wid in enumerate(ids)}
        vectors = np.asarray(vectors, dtype=np.float32)
        for seg, part in self._segs.place(list(ids), self.meta()):
            self._segs.wrote(seg, part)
            at = [row[w] for w in part]
            # One float32 array: Chroma stores float32, and checks and converts a list
            # of lists vector by vector (0.07 ms a window of CPU; bench/ingest.py).
            seg.collection.upsert(
                ids=list(part), embeddings=vectors[at], metadatas=[metas[i] for i in at]
            )

    def upsert(self, windows: Sequence[Window], vectors: Sequence[Sequence[float]]) -> None:
        if not windows:
            return
        self._upsert([w.window_id for w in windows], vectors, [window_metadata(w) for w in windows])

    def _delete(self, ids: Sequence[str]) -> None:
        for seg, part in self._segs.locate(list(ids)):
            self._segs.mark_dirty([seg])  # recorded before its files hold the deletion
            self._segs.wrote(seg, part)
            seg.collection.delete(ids=part)
            self._segs.deleted(part)

    def delete(self, window_ids: Sequence[WindowID]) -> None:
        """Delete points; a reference chunk's text leaves the event log first."""
        if window_ids:
            if self.eventlog is not None and self.eventlog.texts.drop_ref_texts(window_ids):
                self.eventlog.truncate_wal()  # its page images held the text
            self._delete(window_ids)

    def delete_room(self, room_id: RoomID) -> list[WindowID]:
        """Delete every window of the room; returns their ids."""
        ids = [
            i
            for got in self._each(
                lambda s: s.collection.get(where={"room_id": room_id}, include=[])["ids"]
            )
            for i in got
        ]
        if ids:
            self._delete(ids)
        return [WindowID(i) for i in ids]

    def upsert_references(
        self,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        texts: Sequence[str],
        metadatas: Sequence[dict[str, Any]],
    ) -> None:
        """Upsert reference chunks (indexer/derived/reference.py): their text into the event
        log's `ref_chunks`, then their vectors and metadata into Chroma."""
        if not ids:
            return
        if self.eventlog is not None:
            self.eventlog.texts.put_ref_texts(
                (i, str(m.get("ref_corpus", "")), t) for i, t, m in zip(ids, texts, metadatas)
            )
        self._upsert(list(ids), vectors, list(metadatas))

    # -- reading ---------------------------------------------------------------------

    def count(self) -> int:
        return self._segs.count()

    def records(
        self, include: Sequence[str] = ("metadatas",), ids: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """What Chroma itself holds of the points (all, or `ids`), as Chroma returns it:
        "ids" and the `include`d "documents", "embeddings", "metadatas". Nothing is read
        from the event log: for the checks that Chroma keeps no text."""
        if ids is None:
            parts = self._each(lambda s: s.collection.get(include=list(include)))
        else:
            parts = self._located(
                ids, lambda s, part: s.collection.get(ids=part, include=list(include))
            )
        out: dict[str, Any] = {"ids": [i for p in parts for i in p["ids"]]}
        for key in include:
            out[key] = [x for p in parts for x in p[key]]
        return out

    def ids(self, corpus: str) -> set[WindowID]:
        """Every record id of one corpus (doctor compares them with the event log)."""
        return {
            i
            for got in self._each(
                lambda s: s.collection.get(where={"corpus": corpus}, include=[])["ids"]
            )
            for i in got
        }

    def nearest(
        self,
        vectors: Sequence[Sequence[float]],
        n: int,
        where: dict[str, Any] | None = None,
        records: bool = False,
    ) -> list[list[Neighbour]]:
        """The n nearest records per vector, with their similarities; `records`:
        with each one's metadata as a StoredWindow. Without, Chroma reads no metadata
        (1.3 ms of a 4 ms search for 20 results a list at 100,000 windows; bench/query.py).
        Every segment is asked for its n nearest ids (at once), the n nearest of all are
        kept, the same as one collection holding every point, and only their metadata is
        read (each segment's for its 20 took 2 to 3 ms of a 4 ms query here)."""
        if len(vectors) == 0:
            return []
        queries = np.asarray(vectors, dtype=np.float32)
        with self._segs.reading() as segs:
            one = len(segs) == 1
            include = ["metadatas", "distances"] if records and one else ["distances"]
            # No count() first: Chroma 1.5 returns what it has when asked for more (also
            # from an empty collection), and count() took 4x the query itself at 100,000
            # windows (13 ms against 3; bench/query.py).

            def ask(seg: Segment, vectors: np.ndarray, k: int) -> dict[str, Any]:
                got = seg.collection.query(
                    query_embeddings=vectors, n_results=k, where=where or None, include=include
                )
                return {key: got.get(key) for key in ("ids", "distances", "metadatas")}

            first = n // FIRST_SHARE if not one and n // FIRST_SHARE >= FIRST_MIN else n
            answers = self._segs.each(segs, lambda s: ask(s, queries, first))
            if first < n:
                self._ask_further(segs, queries, answers, n, first, ask)
            lists = []
            for q in range(len(queries)):
                found = [
                    (d, i, k, m)
                    for k, res in enumerate(answers)
                    for i, d, m in zip(
                        res["ids"][q],
                        res["distances"][q],
                        res["metadatas"][q] if records and one else [None] * len(res["ids"][q]),
                    )
                ]
                lists.append(found[:n] if one else heapq.nsmallest(n, found, key=lambda x: x[0]))
            metas: dict[str, dict[str, Any]] = {}
            if records and not one:
                wanted: dict[int, set[str]] = {}
                for lst in lists:
                    for _, i, k, _ in lst:
                        wanted.setdefault(k, set()).add(i)
                got = self._segs.each(
                    [(segs[k], sorted(ids)) for k, ids in wanted.items()],
                    lambda job: job[0].collection.get(ids=job[1], include=["metadatas"]),
                )
                metas = {i: m for res in got for i, m in zip(res["ids"], res["metadatas"])}
        # Chroma's cosine space normalises the query; the similarity is the dot product
        # with the query as given (a unit vector's is its cosine; pair_embedder.py's
        # queries are not unit vectors).
        scale = np.linalg.norm(queries.astype(np.float64), axis=1).tolist()
        return [
            [
                Neighbour(
                    WindowID(i),
                    (1.0 - float(d)) * scale[q],
                    stored(i, m if one else metas.get(i)) if records else None,
                )
                for d, i, _, m in lst
            ]
            for q, lst in enumerate(lists)
        ]

    def _ask_further(
        self,
        segs: Sequence[Segment],
        queries: np.ndarray,
        answers: list[dict[str, Any]],
        n: int,
        first: int,
        ask: Callable[[Segment, np.ndarray, int], dict[str, Any]],
    ) -> None:
        """`answers` (each segment's `first` nearest per query) made each segment's n
        nearest where it matters: a segment whose `first` all lie within the n nearest
        found so far is asked again for n for those queries. A point of the true n
        nearest that its segment's first answer missed lies behind that answer's last,
        so within the bound, and its segment is asked again."""
        bound = []
        for q in range(len(queries)):
            found = heapq.nsmallest(n, (d for res in answers for d in res["distances"][q]))
            bound.append(found[-1] if len(found) == n else float("inf"))
        jobs = []
        for k, res in enumerate(answers):
            qs = [
                q
                for q in range(len(queries))
                if len(res["ids"][q]) == first and res["distances"][q][-1] <= bound[q]
            ]
            if qs:
                jobs.append((segs[k], k, qs))
        self.asked_further += sum(len(qs) for _, _, qs in jobs)
        again = self._segs.each(jobs, lambda job: ask(job[0], queries[job[2]], n))
        for (_, k, qs), res in zip(jobs, again):
            for j, q in enumerate(qs):
                for key in ("ids", "distances"):
                    answers[k][key][q] = res[key][j]

    def get(
        self,
        window_ids: Sequence[str] | None = None,
        where: dict[str, Any] | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[StoredWindow]:
        if window_ids is not None:
            parts = self._located(
                window_ids,
                lambda s, part: s.collection.get(
                    ids=part, where=where or None, include=["metadatas"]
                ),
            )
        elif where is None and (limit is not None or offset is not None):
            return [w for page in self._paged(limit, offset or 0) for w in page]
        else:
            parts = self._each(
                lambda s: s.collection.get(where=where or None, include=["metadatas"])
            )
        got = [(i, m) for p in parts for i, m in zip(p["ids"], p["metadatas"])]
        start = offset or 0
        got = got[start : start + limit] if limit is not None else got[start:]
        return [stored(i, m) for i, m in got]

    def _paged(self, limit: int | None, offset: int) -> Iterator[list[StoredWindow]]:
        """Points `offset` to `offset + limit` in segment order, reading only the
        segments that hold them."""
        with self._segs.reading() as segs:
            for seg in segs:
                if limit is not None and limit <= 0:
                    return
                size = seg.collection.count()
                if offset >= size:
                    offset -= size
                    continue
                res = seg.collection.get(limit=limit, offset=offset, include=["metadatas"])
                offset = 0
                if limit is not None:
                    limit -= len(res["ids"])
                yield [stored(i, m) for i, m in zip(res["ids"], res["metadatas"])]

    # -- for verify --index ------------------------------------------------------------

    def iter_windows(self, page: int = 500) -> Iterator[StoredWindow]:
        with self._segs.reading() as segs:
            for seg in segs:
                offset = 0
                while True:
                    res = seg.collection.get(limit=page, offset=offset, include=["metadatas"])
                    yield from (stored(i, m) for i, m in zip(res["ids"], res["metadatas"]))
                    if len(res["ids"]) < page:
                        break
                    offset += page

    def pages_with_vectors(
        self, page: int, ids: Sequence[str] | None = None
    ) -> Iterator[list[tuple[WindowID, list[float]]]]:
        """Pages of (window id, vector), over all windows or the given ids."""
        if ids is not None:
            for i in range(0, len(ids), page):
                got = self.get_with_vectors(list(ids[i : i + page]))
                yield [(w.window_id, v) for w, v in got]
            return
        with self._segs.reading() as segs:
            for seg in segs:
                offset = 0
                while True:
                    res = self._segs.reread(
                        seg,
                        lambda: seg.collection.get(
                            limit=page, offset=offset, include=["embeddings"]
                        ),
                    )
                    if res["ids"]:
                        yield list(zip(res["ids"], [list(v) for v in res["embeddings"]]))
                    if len(res["ids"]) < page:
                        break
                    offset += page

    def get_with_vectors(self, window_ids: Sequence[str]) -> list[tuple[StoredWindow, list[float]]]:
        """The given windows that exist, each with its vector: one Chroma call a
        segment that holds some (two cost search 1.2 ms more at 100,000 windows)."""
        if not window_ids:
            return []
        parts = self._located(
            window_ids,
            lambda s, part: s.collection.get(ids=part, include=["metadatas", "embeddings"]),
        )
        return [
            (stored(i, m), list(v))
            for res in parts
            for i, m, v in zip(res["ids"], res["metadatas"], res["embeddings"])
        ]

    def readd(self, window_ids: list[str]) -> None:
        """Delete and add windows again as they are (chroma#7758 repair)."""
        for seg, part in self._segs.locate(list(window_ids)):
            for i in range(0, len(part), 500):
                ids = part[i : i + 500]
                res = seg.collection.get(ids=ids, include=["embeddings", "metadatas"])
                if not res["ids"]:
                    continue
                self._segs.mark_dirty([seg])
                self._segs.wrote(seg, res["ids"])
                seg.collection.delete(ids=res["ids"])
                seg.collection.add(
                    ids=res["ids"], embeddings=res["embeddings"], metadatas=res["metadatas"]
                )
