"""The collection records what made its vectors; a mismatch at start means a rebuild.

    meta: embedder name, dimension, chunker version, corpus set
    store empty            -> the meta is written
    meta matches           -> nothing to do
    meta differs (a new model, a new chunker) -> the collection is emptied, every event
        of the event log set pending again, and the pipeline re-embeds everything with
        progress; reference corpora are synced again from their files. Never a mix.
"""

from __future__ import annotations

import logging
from typing import Callable

from .chunker import CHUNKER_VERSION
from .embedder import Embedder
from .eventlog import EventLog
from .pipeline import Pipeline
from .records import CORPUS_CHAT, CORPUS_REFERENCE
from .store import ChromaStore

log = logging.getLogger(__name__)
CORPORA = ",".join(sorted((CORPUS_CHAT, CORPUS_REFERENCE)))


def expected_meta(embedder: Embedder) -> dict:
    return {"embedder": embedder.name, "dim": embedder.dim, "chunker": CHUNKER_VERSION,
            "corpora": CORPORA}


def meta_mismatch(store: ChromaStore, embedder: Embedder) -> dict[str, tuple]:
    """key -> (stored, expected) for every key that differs; {} if none (or empty store)."""
    want = expected_meta(embedder)
    have = store.meta()
    if store.count() == 0:
        return {}
    return {k: (have.get(k), v) for k, v in want.items() if have.get(k) != v}


def ensure_meta(store: ChromaStore, eventlog: EventLog, pipeline: Pipeline,
                resync_references: Callable[[], None] | None = None,
                progress: Callable[[int], None] | None = None) -> bool:
    """Rebuild if the collection was made by something else; True if it rebuilt.
    The writer's start: first the store is made whole (generations a crashed compaction
    left swept, the previous release's text moved out of Chroma, interrupted purges
    finished), with nothing re-embedded."""
    from .purge import finish_pending

    store.sweep()
    store.migrate_text_out()
    finish_pending(eventlog, pipeline)
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
