"""The collection records what made its vectors; a mismatch at start means a rebuild.

meta: embedder name, dimension, backend, chunker version, corpus set, and for int8 the
    weights' type (onnx_embedder.INT8_WEIGHTS: a collection of the signed weights of
    before, whose vectors depended on the CPU, is rebuilt)
store empty            -> the meta is written
meta matches           -> nothing to do
backend differs, same vector class (embedder.VECTOR_CLASS: torch, torch-bf16 and
    onnx give the same vectors within cosine 0.99) -> kept, the meta says the new one
meta differs (a new model, a new chunker, int8 <-> float) -> the collection is emptied, every event
    of the event log set pending again, and the pipeline re-embeds everything with
    progress; reference corpora are synced again from their files. Never a mix.
collection lost (it holds less than half the windows the event log says it indexed:
    a Chroma folder deleted or restored from an old backup) -> the same rebuild. An
    empty store is not taken for a new one while the event log says otherwise.
else, gaps (verify_index.repair_gaps) -> a window of indexed events the collection
    lacks: its events set pending again; a chat window no indexed event is in: deleted
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ..clock import stopwatch
from ..config.per_model import rebuild_estimate_s
from ..ingest.purge import finish_pending
from ..models.embedder import VECTOR_CLASS, Embedder
from ..models.onnx_embedder import INT8_WEIGHTS
from ..records import CORPUS_CHAT, CORPUS_REFERENCE, WindowID
from ..store.eventlog.log import EventLog
from ..store.vectors.chroma import ChromaStore
from .chunker import CHUNKER_VERSION
from .pipeline import Pipeline
from .verify_index import repair_gaps

log = logging.getLogger(__name__)
CORPORA = ",".join(sorted((CORPUS_CHAT, CORPUS_REFERENCE)))
LOST_FRACTION = 0.5


def expected_meta(embedder: Embedder) -> dict:
    meta = {
        "embedder": embedder.name,
        "dim": embedder.dim,
        "backend": embedder.backend,
        "chunker": CHUNKER_VERSION,
        "corpora": CORPORA,
    }
    if VECTOR_CLASS.get(embedder.backend) == "int8":
        meta["int8_weights"] = INT8_WEIGHTS
    return meta


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


def lost_windows(
    store: ChromaStore, eventlog: EventLog, logged: set[WindowID] | None = None
) -> tuple[int, int] | None:
    """(held, expected) if the collection holds less than LOST_FRACTION of the windows
    the event log says are indexed (`logged`, if read already); None if it holds about
    what it should. The store's count includes reference sections: cheap, and a lost
    folder loses those too."""
    expected = len(logged if logged is not None else eventlog.window_ids())
    held = store.count()
    return (held, expected) if expected and held < expected * LOST_FRACTION else None


def rebuild_reason(
    store: ChromaStore, eventlog: EventLog, embedder: Embedder, logged: set[WindowID] | None = None
) -> str:
    """Why the collection must be rebuilt from the event log ('' if it need not be).
    `logged`: the event log's indexed window ids, if read already."""
    mismatch = meta_mismatch(store, embedder)
    if mismatch:
        return ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in mismatch.items())
    lost = lost_windows(store, eventlog, logged)
    if lost:
        return (
            f"the collection holds {lost[0]} of the {lost[1]} windows the event log "
            "says are indexed (Chroma folder lost or restored from an older backup?)"
        )
    return ""


def quick_rebuild_reason(store: ChromaStore, eventlog: EventLog, embedder: Embedder) -> str:
    """What the collection's meta and count tell without reading any id list: another
    model or chunker made it, or it is empty while the event log has indexed windows.
    Enough to serve searches from it at start; a partial loss and the gaps are
    check_collection's, which reads every id (17 s at a million windows: bench/scale.py)."""
    mismatch = meta_mismatch(store, embedder)
    if mismatch:
        return ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in mismatch.items())
    if store.count() == 0 and eventlog.status.has_indexed():
        return (
            "the collection is empty but the event log says windows are indexed (Chroma "
            "folder lost or restored from an older backup?)"
        )
    return ""


def _logged(total: int, every_s: float = 10.0) -> Callable[[int], None]:
    """Progress for a rebuild nobody watches on a terminal (`run`): a log line with the
    total and the time left at the rate so far, every few seconds."""
    done, since, elapsed = 0, stopwatch(), stopwatch()

    def progress(n: int) -> None:
        nonlocal done, since
        done += n
        if since() >= every_s:
            since = stopwatch()
            left = (total - done) * elapsed() / done if done else None
            log.warning(
                "collection_rebuild_progress",
                extra={
                    "messages": done,
                    "total": total,
                    "left_s": None if left is None else round(left),
                },
            )

    return progress


def ensure_meta(
    store: ChromaStore,
    eventlog: EventLog,
    pipeline: Pipeline,
    resync_references: Callable[[], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> bool:
    """Rebuild if the collection was made by something else, or lost; True if it rebuilt.
    The writer's start, in its three steps (the service joins rooms during the second)."""
    make_whole(store, eventlog, pipeline)
    reason = check_collection(store, eventlog, pipeline)
    if reason:
        rebuild(store, eventlog, pipeline, reason, resync_references, progress)
    return bool(reason)


def make_whole(store: ChromaStore, eventlog: EventLog, pipeline: Pipeline) -> None:
    """Generations a crashed compaction left swept, the previous release's text moved out
    of Chroma, interrupted purges finished; nothing re-embedded. Before anything else
    can write or compact: a sweep beside a live compaction would take its generation."""
    store.sweep()
    store.migrate_text_out()
    assert pipeline.compaction is not None  # set by Pipeline.__post_init__
    finish_pending(eventlog, pipeline.store, pipeline.guard, pipeline.compaction)


def check_collection(
    store: ChromaStore, eventlog: EventLog, pipeline: Pipeline, vouched: bool = False
) -> str:
    """Why the collection must be rebuilt ('' if not); if it need not be, its meta
    written and its gaps repaired (verify_index.repair_gaps). Under the writers' lock
    throughout: a purge meanwhile (a room's state fetched at start) waits, so the ids
    compared are of one moment. `vouched`: the last run checked the pair and stopped
    cleanly, and neither was written since (store/clean_stop.py): no id is read, only
    the meta and count."""
    if vouched:
        reason = quick_rebuild_reason(store, eventlog, pipeline.embedder)
        if not reason:
            with pipeline.lock:
                store.set_meta(expected_meta(pipeline.embedder))
        log.info("collection_checked", extra={"ids_read": False, "why": "clean stop"})
        return reason
    took = stopwatch()
    try:
        return _check_ids(store, eventlog, pipeline)
    finally:
        log.info("collection_checked", extra={"ids_read": True, "seconds": round(took(), 1)})


def _check_ids(store: ChromaStore, eventlog: EventLog, pipeline: Pipeline) -> str:
    with pipeline.lock, ThreadPoolExecutor(2, thread_name_prefix="start-checks") as pool:
        # The event log's window ids (read once for both checks), the collection's chat
        # ids and the map of which segment holds each id, read at once, not one
        # after another: SQLite and Chroma let go of the GIL (bench/scale.py).
        reading = pool.submit(eventlog.window_ids)
        listing = pool.submit(store.ids, CORPUS_CHAT)
        store.count()
        held, logged = listing.result(), reading.result()
        reason = rebuild_reason(store, eventlog, pipeline.embedder, logged)
        if not reason:
            store.set_meta(expected_meta(pipeline.embedder))
            repair_gaps(store, eventlog, logged, held)
        return reason


def rebuild(
    store: ChromaStore,
    eventlog: EventLog,
    pipeline: Pipeline,
    reason: str,
    resync_references: Callable[[], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> None:
    """The collection emptied and made again from the event log, with progress. The
    meta is the new model's from the start and every event is pending: stopped halfway,
    the next start finds the meta matching and indexes what is still pending, so the
    re-embedding resumes where it stopped, never mixing models."""
    windows = store.count()
    with pipeline.lock:
        store.reset()
        eventlog.requeue_all()
        store.set_meta(expected_meta(pipeline.embedder))
    pending = eventlog.counts().get("pending", 0)
    log.warning(
        "collection_rebuild",
        extra={
            "reason": reason,
            "windows": windows,
            "messages": pending,
            "model": pipeline.embedder.name,
            "estimate_s": round(rebuild_estimate_s(pipeline.embedder.name, pending)),
        },
    )
    if progress is None:
        progress = _logged(pending)
    done = pipeline.process_all(progress)
    if resync_references is not None:
        resync_references()
    log.warning("collection_rebuilt", extra={"messages": done, "windows": store.count()})
