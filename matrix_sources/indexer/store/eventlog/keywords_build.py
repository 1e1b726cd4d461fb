"""The keyword index's one-off build for an event log from before it (keywords.py), at
the service's first start: in a background thread, a page of windows a transaction,
resumable, its progress on stderr (a log line every PROGRESS_EVERY windows) and in
/health (`state`). Searches meanwhile scan the text as before (search/lexical.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ...clock import stopwatch
from . import keywords
from .keyword_reads import KeywordIndex
from .keywords import Database

log = logging.getLogger(__name__)

PROGRESS_EVERY = 20_000  # windows between two progress lines


class KeywordBuild:
    """The build's state, for /health: ready, or windows done of the total."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.done = threading.Event()
        self.state: dict[str, Any] = {"ready": KeywordIndex(db).ready()}
        if self.state["ready"]:
            self.done.set()

    def start(
        self, pause: Callable[[], None] = lambda: None, on_ready: Callable[[], None] | None = None
    ) -> KeywordBuild:
        """Build in a background thread if the index is not ready; `pause()` before each
        page (a search waiting goes first), `on_ready()` once built (at once when it
        was already)."""
        if self.done.is_set():
            log.info("keyword_index_ready", extra={"windows": 0, "seconds": 0.0})
            if on_ready is not None:
                on_ready()
            return self
        threading.Thread(
            target=self.run, args=(pause, on_ready), name="keyword-index", daemon=True
        ).start()
        return self

    def run(
        self, pause: Callable[[], None] = lambda: None, on_ready: Callable[[], None] | None = None
    ) -> None:
        took = stopwatch()
        said = [0]

        def progress(done: int, total: int) -> None:
            self.state = {"ready": False, "windows_done": done, "windows_total": total}
            if done - said[0] >= PROGRESS_EVERY or done == total:
                said[0] = done
                log.info("keyword_index_progress", extra={"done": done, "total": total})

        log.info("keyword_index_building", extra={})
        try:
            n = keywords.build(self.db, progress, pause)
        except Exception as e:  # search keeps scanning the text; the next start resumes
            log.error("keyword_index_failed", exc_info=True, extra={"error": type(e).__name__})
            self.state = {**self.state, "failed": type(e).__name__}
            return
        self.state = {"ready": True}
        self.done.set()
        log.info("keyword_index_ready", extra={"windows": n, "seconds": round(took(), 1)})
        if on_ready is not None:
            on_ready()
