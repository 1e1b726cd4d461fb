"""The vector store: one Chroma collection of windows (cosine), embedded or a server.

The pipeline is its one writer; search reads. Window metadata keeps every event id
(as a JSON list: Chroma metadata values are scalars), first and last event id and
timestamps, senders, room and corpus, so a hit can be cited without the event log.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .chunker import document
from .records import EventID, RoomID, UserID, Window, WindowID

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

    # -- writing (the pipeline only) -------------------------------------------------

    def upsert(self, windows: Sequence[Window], vectors: Sequence[Sequence[float]]) -> None:
        if not windows:
            return
        self._col.upsert(ids=[w.window_id for w in windows],
                         embeddings=[list(v) for v in vectors],
                         documents=[document(w) for w in windows],
                         metadatas=[window_metadata(w) for w in windows])

    def delete(self, window_ids: Sequence[WindowID]) -> None:
        if window_ids:
            self._col.delete(ids=list(window_ids))

    def delete_room(self, room_id: RoomID) -> None:
        self._col.delete(where={"room_id": room_id})

    # -- reading ---------------------------------------------------------------------

    def count(self) -> int:
        return self._col.count()

    def query(self, vectors: Sequence[Sequence[float]], n: int,
              where: dict | None = None) -> list[list[Neighbour]]:
        if not vectors:
            return []
        total = self.count()
        if total == 0:
            return [[] for _ in vectors]
        res = self._col.query(query_embeddings=[list(v) for v in vectors],
                              n_results=min(n, total), where=where or None,
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
