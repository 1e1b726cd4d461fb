"""The collection records what made its vectors; a mismatch at start means a rebuild.

    meta: embedder name, dimension, backend, chunker version, corpus set
    store empty            -> the meta is written
    meta matches           -> nothing to do
    backend differs, same vector class (embedder.VECTOR_CLASS: torch, torch-bf16 and
        onnx give the same vectors within cosine 0.99) -> kept, the meta says the new one
    meta differs (a new model, a new chunker, int8 <-> float) -> the collection is emptied, every event
        of the event log set pending again, and the pipeline re-embeds everything with
        progress; reference corpora are synced again from their files. Never a mix.
"""

from __future__ import annotations

import logging
from typing import Callable

from .chunker import CHUNKER_VERSION
from .embedder import VECTOR_CLASS, Embedder
from .eventlog import EventLog
from .pipeline import Pipeline
from .records import CORPUS_CHAT, CORPUS_REFERENCE
from .store import ChromaStore

log = logging.getLogger(__name__)
CORPORA = ",".join(sorted((CORPUS_CHAT, CORPUS_REFERENCE)))


def backend_of(embedder: Embedder) -> str:
    return getattr(embedder, "backend", "torch")


def expected_meta(embedder: Embedder) -> dict:
    return {"embedder": embedder.name, "dim": embedder.dim, "backend": backend_of(embedder),
            "chunker": CHUNKER_VERSION, "corpora": CORPORA}


def _same(key: str, have: object, want: object) -> bool:
    if key == "backend":  # collections from before backends were torch's
        return VECTOR_CLASS.get(str(have or "torch")) == VECTOR_CLASS.get(str(want))
    return have == want


def meta_mismatch(store: ChromaStore, embedder: Embedder) -> dict[str, tuple]:
    """key -> (stored, expected) for every key that differs; {} if none (or empty store)."""
    want = expected_meta(embedder)
    have = store.meta()
    if store.count() == 0:
        return {}
    return {k: (have.get(k), v) for k, v in want.items() if not _same(k, have.get(k), v)}


def ensure_meta(store: ChromaStore, eventlog: EventLog, pipeline: Pipeline,
                resync_references: Callable[[], None] | None = None,
                progress: Callable[[int], None] | None = None) -> bool:
    """Rebuild if the collection was made by something else; True if it rebuilt."""
    mismatch = meta_mismatch(store, pipeline.embedder)
    if not mismatch:
        store.set_meta(expected_meta(pipeline.embedder))
        return False
    log.warning("collection_rebuild", extra={
        "reason": ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in mismatch.items()),
        "windows": store.count()})
    with pipeline.lock:
        store.reset()
        eventlog.requeue_all()
        store.set_meta(expected_meta(pipeline.embedder))
    done = pipeline.process_all(progress)
    if resync_references is not None:
        resync_references()
    log.warning("collection_rebuilt", extra={"messages": done, "windows": store.count()})
    return True
