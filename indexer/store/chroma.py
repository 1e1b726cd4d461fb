"""The vector store: one Chroma collection of windows (cosine), embedded or a server.

A vectors-and-metadata adapter: upsert, delete, one nearest query, get by ids, and its
generations. The pipeline is its one writer; search reads. Chroma holds vectors, ids
and the metadata filters and citations need: room, corpus, every event id (as a JSON
list: Chroma metadata values are scalars), first and last event id and timestamps,
senders. No text: a window's text is the event log's (search reads it for the hits it
keeps, search/texts.py); a reference chunk's is in the event log's `ref_chunks`
(eventlog_texts.py), written and dropped with its point here.

After redactions and purges, `compact` (chroma_compaction.py) copies the live points
into a fresh collection and drops the old one, so no deleted vector stays in any file
(generations.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence, TypeVar

import numpy as np

from ..records import EventID, RefSource, RoomID, UserID, Window, WindowID
from .chroma_compaction import Compactor
from .generations import Generations, Live, MemoryCatalog
from .server_files import ServerFiles

if TYPE_CHECKING:
    from pathlib import Path

    from .eventlog import EventLog

COLLECTION = "matrix_sources"
T = TypeVar("T")
log = logging.getLogger(f"matrix_sources.{__name__}")


class WriteFollower(Protocol):
    """Kept in step with every write of the store: the lexical leg's postings
    (search/termindex.py), which the collection's one writer process attaches."""

    def windows_written(self, windows: Sequence[Window]) -> None: ...

    def texts_written(self, ids: Sequence[str], texts: Sequence[str],
                      metas: Sequence[dict]) -> None: ...

    def remove(self, ids: Iterable[str]) -> None: ...

    def clear(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StoredWindow:
    """A point's metadata as Chroma holds it: no text (the event log's)."""
    window_id: WindowID
    room_id: RoomID
    room_label: str
    corpus: str
    event_ids: tuple[EventID, ...]
    senders: tuple[UserID, ...]
    ts_first: int
    ts_last: int
    ref: RefSource | None = None  # corpus reference: corpus name, file, heading path


@dataclass(frozen=True, slots=True)
class Neighbour:
    window_id: WindowID
    similarity: float  # cosine similarity, 1 - cosine distance
    window: StoredWindow | None = None  # its record, when asked for


def point_metadata(room_id: str, room_label: str, corpus: str, event_ids: Sequence[str],
                   senders: Sequence[str], ts_first: int, ts_last: int, **extra) -> dict:
    """The metadata of one point of the collection, chat window or reference chunk: the
    one writer of the format `_stored` reads. Chroma keeps scalars, so lists are JSON.
    `extra`: a reference chunk's ref_* keys."""
    return {
        "room_id": room_id,
        "room_label": room_label,
        "corpus": corpus,
        "event_ids": json.dumps(list(event_ids)),
        "first_event_id": event_ids[0] if event_ids else "",
        "last_event_id": event_ids[-1] if event_ids else "",
        "senders": json.dumps(list(senders)),
        "ts_first": ts_first,
        "ts_last": ts_last,
        "n_events": len(event_ids),
        **extra,
    }


def window_metadata(w: Window) -> dict:
    return point_metadata(w.room_id, w.room_label, w.corpus, w.event_ids, w.senders,
                          w.ts_first, w.ts_last)


def _stored(wid: str, meta: dict | None) -> StoredWindow:
    meta = meta or {}
    return StoredWindow(
        window_id=WindowID(wid),
        room_id=RoomID(meta.get("room_id", "")),
        room_label=str(meta.get("room_label", "")),
        corpus=str(meta.get("corpus", "")),
        event_ids=tuple(json.loads(meta.get("event_ids", "[]"))),
        senders=tuple(json.loads(meta.get("senders", "[]"))),
        ts_first=int(meta.get("ts_first", 0)),
        ts_last=int(meta.get("ts_last", 0)),
        ref=(RefSource(str(meta["ref_corpus"]), str(meta.get("ref_file", "")),
                       str(meta.get("ref_heading", ""))) if meta.get("ref_corpus") else None),
    )


class ChromaStore:
    """Embedded (`path`) or server (`host`, `port`) Chroma behind one interface. The
    event log, when given, records the live generation and holds reference chunks'
    text; without one (tests, benchmarks) the generation is kept in memory."""

    def __init__(self, path: Path | None = None, host: str | None = None,
                 port: int | None = None, collection: str = COLLECTION,
                 eventlog: EventLog | None = None,
                 server_files: ServerFiles | None = None) -> None:
        """`server_files`: a server's persist dir this host reaches, cleaned after each
        dropped generation (server_files.py)."""
        self.path = None if host else path  # the embedded folder (its generations)
        self.eventlog = eventlog
        # The lexical leg's postings (search/termindex.py), only in the one writer process.
        self.terms: WriteFollower | None = None
        if path is not None and not host:
            path.mkdir(parents=True, exist_ok=True)
        gens = Generations(path, host, port, collection,
                           eventlog if eventlog is not None else MemoryCatalog(), server_files)
        self._live = Live(gens, eventlog.truncate_wal if eventlog is not None else None)
        self._compactor = Compactor(gens, self._live, eventlog)
        if host and server_files is not None:
            server_files.check(self._live.client)

    @property
    def _col(self):
        """The live collection, read at each call: a compaction swaps it."""
        return self._live.collection

    def follow_live(self) -> bool:
        """Open the generation the event log names now, if another process compacted
        meanwhile (an embedding worker's store: index.pipeline external). True if it
        moved. The worker asks inside its fenced commit, which no swap runs beside."""
        return self._live.follow()

    def _read(self, call: Callable[[], T]) -> T:
        """A read of vectors, or filtered by metadata. Embedded Chroma loads a folder's
        vector index once per process: a process that opened it before another wrote
        (a CLI beside the service, a checker after a restart) finds the new records'
        metadata but not their vectors, and Chroma raises "Error finding id". The
        folder is then opened afresh and the read tried once more."""
        try:
            return call()
        except Exception as e:  # chromadb.errors.InternalError, not imported up front
            if "Error finding id" not in str(e) or self.path is None:
                raise
        log.warning("chroma_reopened_stale_vectors", extra={"generation": self._live.n})
        self._live.reopen()
        return call()

    # -- meta: what produced the vectors ---------------------------------------------

    def meta(self) -> dict:
        return dict(self._col.metadata or {})

    def set_meta(self, meta: dict) -> None:
        merged = {**self.meta(), **meta}
        self._col.modify(metadata=merged)

    def reset(self) -> None:
        """Drop every record (a rebuild: rebuild.py): a fresh, empty generation."""
        self._live.swap(*self._live.gens.fresh())
        if self.terms is not None:
            self.terms.clear()

    # -- generations (chroma_compaction.py) --------------------------------------------

    @property
    def live(self) -> Live:
        """The live generation (its number, collection, and where generations are)."""
        return self._live

    def compact(self, lock=None, after_copy: Callable[[], None] | None = None,
                before_swap: Callable[[], None] | None = None) -> int:
        """Copy the live points into a fresh generation and drop the old one
        (Compactor.compact); returns how many points were copied."""
        return self._compactor.compact(lock, after_copy, before_swap)

    def sweep(self) -> list[int]:
        """The writer, at start: drop generations a crashed compaction left."""
        return self._compactor.sweep()

    def migrate_text_out(self) -> bool:
        """The writer, at start: a previous release's documents out of Chroma
        (Compactor.migrate_text_out); True if it migrated."""
        return self._compactor.migrate_text_out()

    # -- writing (the pipeline only) -------------------------------------------------

    def upsert(self, windows: Sequence[Window], vectors: Sequence[Sequence[float]]) -> None:
        if not windows:
            return
        ids = [w.window_id for w in windows]
        metas = [window_metadata(w) for w in windows]
        self._live.wrote(ids)
        # One float32 array: Chroma stores float32, and checks and converts a list of
        # lists vector by vector (0.07 ms a window of CPU; bench/ingest.py).
        self._col.upsert(ids=ids, embeddings=np.asarray(vectors, dtype=np.float32),
                         metadatas=metas)
        if self.terms is not None:
            self.terms.windows_written(windows)

    def delete(self, window_ids: Sequence[WindowID]) -> None:
        """Delete points; a reference chunk's text leaves the event log first."""
        if window_ids:
            if self.eventlog is not None and self.eventlog.texts.drop_ref_texts(window_ids):
                self.eventlog.truncate_wal()  # its page images held the text
            self._live.wrote(window_ids)
            self._col.delete(ids=list(window_ids))
            if self.terms is not None:
                self.terms.remove(window_ids)

    def delete_room(self, room_id: RoomID) -> list[WindowID]:
        """Delete every window of the room; returns their ids."""
        ids = self._col.get(where={"room_id": room_id}, include=[])["ids"]
        if ids:
            self._live.wrote(ids)
            self._col.delete(ids=ids)
            if self.terms is not None:
                self.terms.remove(ids)
        return [WindowID(i) for i in ids]

    def upsert_references(self, ids: Sequence[str], vectors: Sequence[Sequence[float]],
                          texts: Sequence[str], metadatas: Sequence[dict]) -> None:
        """Upsert reference chunks (indexer/derived/reference.py): their text into the event
        log's `ref_chunks`, then their vectors and metadata into Chroma."""
        if not ids:
            return
        if self.eventlog is not None:
            self.eventlog.texts.put_ref_texts(
                (i, str(m.get("ref_corpus", "")), t) for i, t, m in zip(ids, texts, metadatas))
        self._live.wrote(ids)
        self._col.upsert(ids=list(ids), embeddings=[list(v) for v in vectors],
                         metadatas=list(metadatas))
        if self.terms is not None:
            self.terms.texts_written(ids, texts, metadatas)

    # -- reading ---------------------------------------------------------------------

    def count(self) -> int:
        return self._col.count()

    def records(self, include: Sequence[str] = ("metadatas",),
                ids: Sequence[str] | None = None) -> dict:
        """What Chroma itself holds of the points (all, or `ids`), as Chroma returns it:
        "ids" and the `include`d "documents", "embeddings", "metadatas". Nothing is read
        from the event log: for the checks that Chroma keeps no text."""
        return self._read(lambda: self._col.get(ids=list(ids) if ids is not None else None,
                                                include=list(include)))

    def ids(self, corpus: str) -> set[str]:
        """Every record id of one corpus (doctor compares them with the event log)."""
        return set(self._col.get(where={"corpus": corpus}, include=[])["ids"])

    def nearest(self, vectors: Sequence[Sequence[float]], n: int,
                where: dict | None = None, records: bool = False
                ) -> list[list[Neighbour]]:
        """The n nearest records per vector, with their cosine similarities; `records`:
        with each one's metadata as a StoredWindow. Without, Chroma reads no metadata
        (1.3 ms of a 4 ms search for 20 results a list at 100,000 windows; bench/query.py)."""
        if not vectors:
            return []
        # No count() first: Chroma 1.5 returns what it has when asked for more (also
        # from an empty collection), and count() took 4x the query itself at 100,000
        # windows (13 ms against 3; bench/query.py).
        res = self._read(lambda: self._col.query(
            query_embeddings=[list(v) for v in vectors], n_results=n, where=where or None,
            include=["metadatas", "distances"] if records else ["distances"]))
        metas = res["metadatas"] if records else [[None] * len(ids) for ids in res["ids"]]
        return [[Neighbour(WindowID(i), 1.0 - float(d),
                           _stored(i, m) if records else None)
                 for i, m, d in zip(ids, ms, dists)]
                for ids, ms, dists in zip(res["ids"], metas, res["distances"])]

    def get(self, window_ids: Sequence[WindowID] | None = None, where: dict | None = None,
            limit: int | None = None, offset: int | None = None) -> list[StoredWindow]:
        res = self._col.get(ids=list(window_ids) if window_ids is not None else None,
                            where=where or None, limit=limit, offset=offset,
                            include=["metadatas"])
        return [_stored(i, m) for i, m in zip(res["ids"], res["metadatas"])]

    # -- for verify --index ------------------------------------------------------------

    def iter_windows(self, page: int = 500):
        offset = 0
        while True:
            batch = self.get(limit=page, offset=offset)
            yield from batch
            if len(batch) < page:
                return
            offset += page

    def pages_with_vectors(self, page: int, ids: list | None = None):
        """Pages of (window id, vector), over all windows or the given ids."""
        if ids is not None:
            for i in range(0, len(ids), page):
                res = self._read(lambda: self._col.get(ids=list(ids[i:i + page]),
                                                       include=["embeddings"]))
                yield list(zip(res["ids"], [list(v) for v in res["embeddings"]]))
            return
        offset = 0
        while True:
            res = self._read(lambda: self._col.get(limit=page, offset=offset,
                                                   include=["embeddings"]))
            if not res["ids"]:
                return
            yield list(zip(res["ids"], [list(v) for v in res["embeddings"]]))
            if len(res["ids"]) < page:
                return
            offset += page

    def get_with_vectors(self, window_ids: Sequence[str]
                         ) -> list[tuple[StoredWindow, list[float]]]:
        """The given windows that exist, each with its vector: one Chroma call (two cost
        search 1.2 ms more at 100,000 windows)."""
        if not window_ids:
            return []
        res = self._read(lambda: self._col.get(ids=list(window_ids),
                                               include=["metadatas", "embeddings"]))
        return [(_stored(i, m), list(v))
                for i, m, v in zip(res["ids"], res["metadatas"], res["embeddings"])]

    def readd(self, window_ids: list) -> None:
        """Delete and add windows again as they are (chroma#7758 repair)."""
        for i in range(0, len(window_ids), 500):
            ids = list(window_ids[i:i + 500])
            res = self._col.get(ids=ids, include=["embeddings", "metadatas"])
            if not res["ids"]:
                continue
            self._col.delete(ids=res["ids"])
            self._col.add(ids=res["ids"], embeddings=[list(v) for v in res["embeddings"]],
                          metadatas=res["metadatas"])

