"""Compaction of the vector store: copy the live points into a fresh generation, swap
it in, drop the old one, so no deleted or superseded vector stays in any file
(generations.py); and the migration of a previous release's collection, whose
documents held text, by the same copy. A part of `ChromaStore`, given the store's
generations and its live one (`Live`, shared with the store) explicitly."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Callable

from ..records import CORPUS_REFERENCE
from .generations import Generations, Live

if TYPE_CHECKING:
    from .eventlog import EventLog

log = logging.getLogger("matrix_sources.indexer.store.chroma")  # the store's events, one logger

COPY_PAGE = 1000  # points per get/add while compacting
TEXT_HOME_KEY = "text_home"  # event log meta: "eventlog" once no text is left in Chroma


class Compactor:
    """The store's generations: `compact`, `sweep`, `migrate_text_out`. The store's
    writes record their ids in `live` (Live.wrote), so a compaction under way catches
    them up before the swap."""

    def __init__(self, gens: Generations, live: Live, eventlog: EventLog | None) -> None:
        self.gens, self.live, self.eventlog = gens, live, eventlog
        self._running = threading.Lock()  # one at a time (the worker's, a purge's)

    def compact(self, lock=None, after_copy: Callable[[], None] | None = None,
                before_swap: Callable[[], None] | None = None) -> int:
        """Copy every live point (vector and metadata, as stored: nothing re-embedded)
        into a fresh generation, record it live in the event log, drop the old one.
        Returns how many points were copied. The copy runs while the pipeline goes on
        writing (to the old generation); then, holding `lock` (the pipeline's), the ids
        written meanwhile are copied again or deleted, and the generations swap. A
        failure before the swap leaves the old generation live. `after_copy` and
        `before_swap` are for tests (writes during the copy; a crash before the swap)."""
        with self._running:
            return self._compact(lock, after_copy, before_swap)

    def _compact(self, lock, after_copy, before_swap) -> int:
        started = time.monotonic()
        live = self.live
        n, client, col = self.gens.fresh(dict(live.collection.metadata or {}))
        live.written = set()
        try:
            ids = live.collection.get(include=[])["ids"]
            for i in range(0, len(ids), COPY_PAGE):
                _copy(live.collection, col, ids[i:i + COPY_PAGE], delete_missing=False)
            if after_copy is not None:
                after_copy()
            with lock if lock is not None else contextlib.nullcontext():
                written, live.written = sorted(live.written), None
                for i in range(0, len(written), COPY_PAGE):
                    _copy(live.collection, col, written[i:i + COPY_PAGE], delete_missing=True)
                if col.count() != live.collection.count():
                    raise RuntimeError(f"compaction copied {col.count()} of "
                                       f"{live.collection.count()} points")
                if before_swap is not None:
                    before_swap()
                copied = col.count()
                live.swap(n, client, col)
        except BaseException:
            live.written = None
            self.gens.drop(n, client)
            raise
        log.info("chroma_compacted", extra={"generation": n, "points": copied,
                                            "caught_up": len(written),
                                            "seconds": round(time.monotonic() - started, 1)})
        return copied

    def sweep(self) -> list[int]:
        """The writer, at start: drop generations a crashed compaction left."""
        return self.gens.sweep()

    def migrate_text_out(self) -> bool:
        """A collection written by the previous release holds documents: reference
        chunks' text moves to the event log (chat text is there already, in `events`),
        then a compaction copies the points without documents. Nothing is re-embedded.
        True if it migrated. The writer calls it at start (rebuild.ensure_meta)."""
        eventlog = self.eventlog
        if eventlog is None or eventlog.get_meta(TEXT_HOME_KEY) == "eventlog":
            return False
        migrated = False
        col = self.live.collection
        if col.count():
            moved = 0
            ids = col.get(where={"corpus": CORPUS_REFERENCE}, include=[])["ids"]
            for i in range(0, len(ids), COPY_PAGE):
                res = col.get(ids=ids[i:i + COPY_PAGE], include=["documents", "metadatas"])
                rows = [(cid, str((m or {}).get("ref_corpus", "")), d)
                        for cid, d, m in zip(res["ids"], res["documents"], res["metadatas"])
                        if d is not None]
                eventlog.texts.put_ref_texts(rows)
                moved += len(rows)
            self.compact()
            migrated = True
            log.warning("text_moved_to_event_log", extra={"reference_chunks": moved,
                                                          "points": self.live.collection.count()})
        eventlog.set_meta(TEXT_HOME_KEY, "eventlog")
        return migrated


def _copy(src, dst, ids: list[str], delete_missing: bool) -> None:
    res = src.get(ids=ids, include=["embeddings", "metadatas"])
    if res["ids"]:
        dst.upsert(ids=res["ids"], embeddings=res["embeddings"], metadatas=res["metadatas"])
    if delete_missing:
        gone = sorted(set(ids) - set(res["ids"]))
        if gone:
            dst.delete(ids=gone)
