"""The lexical leg's postings (termindex.py) built when the service starts: from the
event log's text, in a background thread, page by page, yielding to searches; the store
keeps them in step with its writes, having been handed them when it was opened
(components.Index.open)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..clock import stopwatch
from ..records import CORPUS_CHAT, CORPUS_REFERENCE
from .termindex import TermIndex, matchable

if TYPE_CHECKING:
    from ..models.turns import ModelTurns
    from ..store.eventlog.log import EventLog

log = logging.getLogger(__name__)


def start_term_index(
    terms: TermIndex,
    eventlog: EventLog,
    page: int = 250,
    on_ready: Callable[[], None] | None = None,
    turns: ModelTurns | None = None,
) -> TermIndex:
    """Build `terms`, the postings for the lexical leg, from the event log's text in a
    background thread (the leg scans the event log until they are ready); returns them.
    The store the event log's windows are in follows them from its opening
    (ChromaStore's `follower`), so a window written meanwhile reaches them. Only for
    the process that is the collection's one writer: another writer's changes would
    not reach them. With `turns`, the build waits before each page while a search
    waits or runs: a search shares the GIL with one page at most (`page` windows,
    about 30 ms), not with the build (a million windows build for 3 minutes;
    `!sources` meanwhile took 2.1 s at p95 without the pause)."""

    def pages(ids: list[str]):
        wanted = set(ids)
        parts: list[list[str]] = []
        metas: list[dict] = []
        got: list[str] = []
        for wid, msgs in eventlog.texts.indexed_windows():
            if wid not in wanted:
                continue
            got.append(wid)
            parts.append(matchable(m.body for m in msgs))
            metas.append({"room_id": msgs[0].room_id, "corpus": CORPUS_CHAT})
            if len(got) >= page:
                yield got, parts, metas
                parts, metas, got = [], [], []
        refs = [i for i in ids if i in wanted and i.startswith("r")]
        texts = eventlog.texts.ref_texts(refs)
        for cid in refs:
            if cid in texts:
                got.append(cid)
                parts.append(matchable([texts[cid]]))
                metas.append({"room_id": "", "corpus": CORPUS_REFERENCE})
        if got:
            yield got, parts, metas

    def build() -> None:
        took = stopwatch()
        try:
            complete = terms.build(
                sorted(eventlog.window_ids()) + eventlog.texts.ref_chunk_ids(),
                pages,
                turns.pause_for_queries if turns is not None else lambda: None,
            )
        except Exception as e:  # the leg keeps scanning the event log; search works
            log.error("term_index_failed", exc_info=True, extra={"error": type(e).__name__})
            return
        log.info(
            "term_index_ready",
            extra={**terms.stats(), "complete": complete, "seconds": round(took(), 1)},
        )
        if on_ready is not None:
            on_ready()

    threading.Thread(target=build, name="term-index", daemon=True).start()
    return terms
