"""Compaction of the vector store (a mixin of `ChromaStore`, sharing its `self`): copy
the live points into a fresh generation, swap it in, drop the old one, so no deleted
or superseded vector stays in any file (generations.py); and the migration of a
previous release's collection, whose documents held text, by the same copy."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable

from ..records import CORPUS_REFERENCE

log = logging.getLogger("matrix_sources.indexer.store.chroma")  # the store's events, one logger

COPY_PAGE = 1000  # points per get/add while compacting
TEXT_HOME_KEY = "text_home"  # event log meta: "eventlog" once no text is left in Chroma


class Compacting:
    """The store's generations: `compact`, `sweep`, `migrate_text_out`. Its writes call
    `_wrote` so a compaction under way catches them up before the swap."""

    def compact(self, lock=None, after_copy: Callable[[], None] | None = None,
                before_swap: Callable[[], None] | None = None) -> int:
        """Copy every live point (vector and metadata, as stored: nothing re-embedded)
        into a fresh generation, record it live in the event log, drop the old one.
        Returns how many points were copied. The copy runs while the pipeline goes on
        writing (to the old generation); then, holding `lock` (the pipeline's), the ids
        written meanwhile are copied again or deleted, and the generations swap. A
        failure before the swap leaves the old generation live. `after_copy` and
        `before_swap` are for tests (writes during the copy; a crash before the swap)."""
        with self._compacting:  # one at a time (the worker's, a purge's)
            return self._compact(lock, after_copy, before_swap)

    def _compact(self, lock, after_copy, before_swap) -> int:
        started = time.monotonic()
        n, client, col = self._gens.fresh(self.meta())
        self._written = set()
        try:
            ids = self._col.get(include=[])["ids"]
            for i in range(0, len(ids), COPY_PAGE):
                self._copy(self._col, col, ids[i:i + COPY_PAGE], delete_missing=False)
            if after_copy is not None:
                after_copy()
            with lock if lock is not None else contextlib.nullcontext():
                written, self._written = sorted(self._written), None
                for i in range(0, len(written), COPY_PAGE):
                    self._copy(self._col, col, written[i:i + COPY_PAGE], delete_missing=True)
                if col.count() != self._col.count():
                    raise RuntimeError(f"compaction copied {col.count()} of "
                                       f"{self._col.count()} points")
                if before_swap is not None:
                    before_swap()
                copied = col.count()
                self._swap(n, client, col)
        except BaseException:
            self._written = None
            self._gens.drop(n, client)
            raise
        log.info("chroma_compacted", extra={"generation": n, "points": copied,
                                            "caught_up": len(written),
                                            "seconds": round(time.monotonic() - started, 1)})
        return copied

    @staticmethod
    def _copy(src, dst, ids: list[str], delete_missing: bool) -> None:
        res = src.get(ids=ids, include=["embeddings", "metadatas"])
        if res["ids"]:
            dst.upsert(ids=res["ids"], embeddings=res["embeddings"], metadatas=res["metadatas"])
        if delete_missing:
            gone = sorted(set(ids) - set(res["ids"]))
            if gone:
                dst.delete(ids=gone)

    def _wrote(self, ids) -> None:
        """Ids written while a compaction copies (caught up before its swap)."""
        written = self._written
        if written is not None:
            written.update(ids)

    def _swap(self, n: int, client, col) -> None:
        old_n, old_client = self._gen, self._client
        self._gens.swap(n)  # the atomic step: one row of the event log
        self._gen, self._client, self._col = n, client, col
        self._gens.drop(old_n, old_client)
        if self.eventlog is not None:
            self.eventlog.truncate_wal()

    def sweep(self) -> list[int]:
        """The writer, at start: drop generations a crashed compaction left."""
        return self._gens.sweep()

    def migrate_text_out(self) -> bool:
        """A collection written by the previous release holds documents: reference
        chunks' text moves to the event log (chat text is there already, in `events`),
        then a compaction copies the points without documents. Nothing is re-embedded.
        True if it migrated. The writer calls it at start (rebuild.ensure_meta)."""
        if self.eventlog is None or self.eventlog.get_meta(TEXT_HOME_KEY) == "eventlog":
            return False
        migrated = False
        if self.count():
            moved = 0
            ids = self._col.get(where={"corpus": CORPUS_REFERENCE}, include=[])["ids"]
            for i in range(0, len(ids), COPY_PAGE):
                res = self._col.get(ids=ids[i:i + COPY_PAGE], include=["documents", "metadatas"])
                rows = [(cid, str((m or {}).get("ref_corpus", "")), d)
                        for cid, d, m in zip(res["ids"], res["documents"], res["metadatas"])
                        if d is not None]
                self.eventlog.texts.put_ref_texts(rows)
                moved += len(rows)
            self.compact()
            migrated = True
            log.warning("text_moved_to_event_log", extra={"reference_chunks": moved,
                                                          "points": self.count()})
        self.eventlog.set_meta(TEXT_HOME_KEY, "eventlog")
        return migrated
