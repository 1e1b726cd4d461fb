"""A store over an event log, for tests that write windows straight into the store:
the text search reads lives in the event log, so the windows are recorded there too,
as the pipeline records them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matrix_sources.indexer.records import Window
from matrix_sources.indexer.search.texts import WindowTexts
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore


def open_store(folder: Path, **kw) -> ChromaStore:
    folder.mkdir(parents=True, exist_ok=True)
    return ChromaStore(path=folder / "chroma", eventlog=EventLog(folder / "eventlog.sqlite3"), **kw)


def texts(store: ChromaStore, ids: Sequence[str] | None = None) -> dict[str, str]:
    """Each stored window's (or the given ones') text, as search reads it."""
    windows = store.get(ids)
    return {
        w.window_id: text
        for w, (text, _) in zip(windows, WindowTexts(store.eventlog).read(windows))
    }


def stored_vectors(store: ChromaStore, ids: Sequence[str]) -> dict[str, list[float]]:
    """The vector of each of the given windows that the store holds."""
    return {w.window_id: v for w, v in store.get_with_vectors(ids)}


def index(store: ChromaStore, windows: Sequence[Window], vectors) -> None:
    """Upsert windows and mark their events indexed in them, as the pipeline does."""
    store.upsert(windows, vectors)
    log = store.eventlog
    for w in windows:
        log.append([(m, None) for m in w.messages])
        log.mark_indexed(w.room_id, {m.event_id: w.window_id for m in w.messages}, w.messages[-1])


def edit(store: ChromaStore, window: Window, vectors) -> None:
    """Re-upsert a window whose messages' text changed, the event log first (as an
    edit by each message's sender does)."""
    from matrix_sources.indexer.ingest.events import EditEvent
    from matrix_sources.indexer.ingest.history import History

    History(store.eventlog).apply(
        [
            EditEvent(m.room_id, f"{m.event_id}-edit", m.sender, m.event_id, m.body, m.ts + 1)
            for m in window.messages
        ]
    )
    store.upsert([window], vectors)
