"""The vector store: one Chroma collection of windows (cosine), embedded or a server.

The pipeline is its one writer; search reads. Window metadata keeps every event id
(as a JSON list: Chroma metadata values are scalars), first and last event id and
timestamps, senders, room and corpus, so a hit can be cited without the event log.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .chromascrub import ScrubError, scrub_room_isolated, scrub_windows_isolated
from .chunker import document
from .records import EventID, RefSource, RoomID, UserID, Window, WindowID
from .termindex import TermIndex

COLLECTION = "matrix_sources"
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoredWindow:
    window_id: WindowID
    room_id: RoomID
    room_label: str
    corpus: str
    event_ids: tuple[EventID, ...]
    senders: tuple[UserID, ...]
    ts_first: int
    ts_last: int
    text: str
    ref: RefSource | None = None  # corpus reference: corpus name, file, heading path


@dataclass(frozen=True, slots=True)
class Neighbour:
    window: StoredWindow
    similarity: float  # cosine similarity, 1 - cosine distance


def window_metadata(w: Window) -> dict:
    return {
        "room_id": w.room_id,
        "room_label": w.room_label,
        "corpus": w.corpus,
        "event_ids": json.dumps(w.event_ids),
        "first_event_id": w.event_ids[0],
        "last_event_id": w.event_ids[-1],
        "senders": json.dumps(w.senders),
        "ts_first": w.ts_first,
        "ts_last": w.ts_last,
        "n_events": len(w.messages),
    }


def _stored(wid: str, doc: str | None, meta: dict | None) -> StoredWindow:
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
        text=doc or "",
        ref=(RefSource(str(meta["ref_corpus"]), str(meta.get("ref_file", "")),
                       str(meta.get("ref_heading", ""))) if meta.get("ref_corpus") else None),
    )


def _client(path: Path | None, host: str | None, port: int | None):
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if host:
        return chromadb.HttpClient(host=host, port=port or 8000, settings=settings)
    assert path is not None
    path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


class ChromaStore:
    """Embedded (`path`) or server (`host`, `port`) Chroma behind one interface."""

    def __init__(self, path: Path | None = None, host: str | None = None,
                 port: int | None = None, collection: str = COLLECTION) -> None:
        self.path = None if host else path  # the embedded folder, which a purge scrubs
        # The lexical leg's postings (termindex.py), kept only by the one writer process.
        self.terms: TermIndex | None = None
        self._client = _client(path, host, port)
        # embedding_function=None on every call, or Chroma reaches for a model download.
        self._col = self._client.get_or_create_collection(
            collection, embedding_function=None,
            configuration={"hnsw": {"space": "cosine"}})

    # -- meta: what produced the vectors ---------------------------------------------

    def meta(self) -> dict:
        return dict(self._col.metadata or {})

    def set_meta(self, meta: dict) -> None:
        merged = {**self.meta(), **meta}
        self._col.modify(metadata=merged)

    def reset(self) -> None:
        """Drop every record (a rebuild: rebuild.py), keeping the collection's settings."""
        name = self._col.name
        self._client.delete_collection(name)
        self._col = self._client.get_or_create_collection(
            name, embedding_function=None, configuration={"hnsw": {"space": "cosine"}})
        if self.terms is not None:
            self.terms.clear()

    def enable_term_index(self, page: int = 250,
                          on_ready: Callable[[], None] | None = None) -> TermIndex:
        """Keep an in-memory word index of the collection for the lexical leg: built
        from the collection in a background thread (the leg asks Chroma until it is
        ready), then kept in step by this store's writes. Only for the process that
        is the collection's one writer: another writer's changes would not reach it."""
        terms = self.terms = TermIndex()

        def pages(ids: list[str]):
            # By id, not offset: Chroma's offset paging costs more the further it goes
            # (100,000 windows: 14 s by id, 39 s by offset).
            for i in range(0, len(ids), page):
                res = self._col.get(ids=ids[i:i + page], include=["documents", "metadatas"])
                yield res["ids"], res["documents"], res["metadatas"]

        def build() -> None:
            started = time.monotonic()
            try:
                complete = terms.build(self._col.get(include=[])["ids"], pages)
            except Exception as e:  # the leg keeps asking Chroma; search still works
                log.error("term_index_failed", extra={"error": f"{type(e).__name__}: {e}"})
                return
            log.info("term_index_ready", extra={
                **terms.stats(), "complete": complete,
                "seconds": round(time.monotonic() - started, 1)})
            if on_ready is not None:
                on_ready()

        threading.Thread(target=build, name="term-index", daemon=True).start()
        return terms

    # -- writing (the pipeline only) -------------------------------------------------

    def upsert(self, windows: Sequence[Window], vectors: Sequence[Sequence[float]]) -> None:
        if not windows:
            return
        ids = [w.window_id for w in windows]
        docs = [document(w) for w in windows]
        metas = [window_metadata(w) for w in windows]
        self._col.upsert(ids=ids, embeddings=[list(v) for v in vectors], documents=docs,
                         metadatas=metas)
        if self.terms is not None:
            self.terms.add(ids, docs, metas)

    def delete(self, window_ids: Sequence[WindowID]) -> None:
        if window_ids:
            self._col.delete(ids=list(window_ids))
            if self.terms is not None:
                self.terms.remove(window_ids)

    def delete_room(self, room_id: RoomID) -> list[WindowID]:
        """Delete every window of the room; returns their ids."""
        ids = self._col.get(where={"room_id": room_id}, include=[])["ids"]
        if ids:
            self._col.delete(ids=ids)
            if self.terms is not None:
                self.terms.remove(ids)
        return [WindowID(i) for i in ids]

    def scrub_room(self, room_id: RoomID) -> bool:
        """After `delete_room`: remove the deleted windows' text from Chroma's files too.
        Only possible embedded; a Chroma server's files are out of reach. False when
        not scrubbed (logged: the text stays in the files until a later scrub)."""
        if self.path is None:
            log.warning("chroma_scrub_unavailable", extra={"room_id": room_id,
                                                          "mode": "server"})
            return False
        try:
            blanked = scrub_room_isolated(self.path, room_id)
        except (ScrubError, OSError, subprocess.SubprocessError) as e:
            log.error("chroma_scrub_failed", extra={"room_id": room_id, "error": str(e)[:300]})
            return False
        log.info("chroma_scrubbed", extra={"room_id": room_id, "log_entries": blanked})
        return True

    def scrub_windows(self, window_ids: Sequence[str]) -> bool:
        """After edits or redactions re-upserted these windows: remove their superseded
        text from Chroma's files too (embedded only). False when not scrubbed (logged)."""
        if self.path is None:
            log.warning("chroma_scrub_unavailable", extra={"windows": len(window_ids),
                                                          "mode": "server"})
            return False
        try:
            blanked = scrub_windows_isolated(self.path, list(window_ids))
        except (ScrubError, OSError, subprocess.SubprocessError) as e:
            log.error("chroma_scrub_failed", extra={"windows": len(window_ids),
                                                    "error": str(e)[:300]})
            return False
        log.info("chroma_scrubbed", extra={"windows": len(window_ids), "log_entries": blanked})
        return True

    # -- reading ---------------------------------------------------------------------

    def count(self) -> int:
        return self._col.count()

    def query(self, vectors: Sequence[Sequence[float]], n: int,
              where: dict | None = None) -> list[list[Neighbour]]:
        if not vectors:
            return []
        # No count() first: Chroma 1.5 returns what it has when asked for more (also
        # from an empty collection), and count() took 4x the query itself at 100,000
        # windows (13 ms against 3; bench/query.py).
        res = self._col.query(query_embeddings=[list(v) for v in vectors],
                              n_results=n, where=where or None,
                              include=["documents", "metadatas", "distances"])
        out = []
        for ids, docs, metas, dists in zip(res["ids"], res["documents"], res["metadatas"],
                                           res["distances"]):
            out.append([Neighbour(_stored(i, d, m), 1.0 - float(dist))
                        for i, d, m, dist in zip(ids, docs, metas, dists)])
        return out

    def get(self, window_ids: Sequence[WindowID] | None = None, where: dict | None = None,
            limit: int | None = None, offset: int | None = None) -> list[StoredWindow]:
        res = self._col.get(ids=list(window_ids) if window_ids is not None else None,
                            where=where or None, limit=limit, offset=offset,
                            include=["documents", "metadatas"])
        return [_stored(i, d, m) for i, d, m in zip(res["ids"], res["documents"],
                                                     res["metadatas"])]

    def matching(self, regex: str, where: dict | None = None) -> list[str]:
        """Ids of the records whose document matches the regex (Chroma scans them all:
        the lexical leg asks this only when its postings cannot answer)."""
        return self._col.get(where=where or None, where_document={"$regex": regex},
                             include=[])["ids"]

    def upsert_documents(self, ids: Sequence[str], vectors: Sequence[Sequence[float]],
                         documents: Sequence[str], metadatas: Sequence[dict]) -> None:
        """Upsert records that are not chat windows (reference chunks, indexer/reference.py)."""
        if ids:
            self._col.upsert(ids=list(ids), embeddings=[list(v) for v in vectors],
                             documents=list(documents), metadatas=list(metadatas))
            if self.terms is not None:
                self.terms.add(ids, documents, metadatas)


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
                res = self._col.get(ids=list(ids[i:i + page]), include=["embeddings"])
                yield list(zip(res["ids"], [list(v) for v in res["embeddings"]]))
            return
        offset = 0
        while True:
            res = self._col.get(limit=page, offset=offset, include=["embeddings"])
            if not res["ids"]:
                return
            yield list(zip(res["ids"], [list(v) for v in res["embeddings"]]))
            if len(res["ids"]) < page:
                return
            offset += page

    def vectors(self, window_ids: Sequence[str]) -> list[tuple[str, list[float]]]:
        """(id, vector) of the given windows that exist."""
        if not window_ids:
            return []
        res = self._col.get(ids=list(window_ids), include=["embeddings"])
        return list(zip(res["ids"], [list(v) for v in res["embeddings"]]))

    def query_ids(self, vectors: list, n: int) -> list[set[str]]:
        if not vectors:
            return []
        res = self._col.query(query_embeddings=vectors, n_results=min(n, max(1, self.count())),
                              include=[])
        return [set(ids) for ids in res["ids"]]

    def readd(self, window_ids: list) -> None:
        """Delete and add windows again as they are (chroma#7758 repair)."""
        for i in range(0, len(window_ids), 500):
            ids = list(window_ids[i:i + 500])
            res = self._col.get(ids=ids, include=["embeddings", "documents", "metadatas"])
            if not res["ids"]:
                continue
            self._col.delete(ids=res["ids"])
            self._col.add(ids=res["ids"], embeddings=[list(v) for v in res["embeddings"]],
                          documents=res["documents"], metadatas=res["metadatas"])
