"""`matrix-sources verify --index`: every window must come back when queried by its own
vector, and the collection must hold exactly the windows the event log says it does.

Upstream Chroma bug chroma#7758: after many deletes and upserts some live records stop
coming back from query() while get() still has them; edits and redactions are exactly
that churn. Repairs:
    unreachable window          -> deleted and added again (same id, vector, document)
    in the event log, not store -> its events set pending: the pipeline rebuilds it
    an event its window's record does not list -> the window deleted, its events set
                                   pending
    in the store, not the log   -> deleted (chat windows only; reference sections are
                                   the reference corpora's)
After repairs, every window is checked again; anything still unreachable fails.

Deleting is refused when the event log cannot be the judge: it holds no indexed window
while the collection has some, or it disowns most of the collection (a lost, truncated
or stale event log would otherwise have every window deleted as "orphaned"). The caller
refuses outright when the event log is missing or damaged (eventlog/check.py).
`repair=False` is the dry run: what would be done, nothing done.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ..records import CORPUS_CHAT, CORPUS_REFERENCE, EventID, WindowID
from ..store.eventlog.log import EventLog
from ..store.vectors.chroma import ChromaStore

log = logging.getLogger(__name__)

PAGE = 500
PROBE_K = 10  # a window must be among the nearest PROBE_K of its own vector


@dataclass
class IndexReport:
    windows: int = 0
    log_windows: int = 0
    unreachable: list[WindowID] = field(default_factory=list)
    missing: list[WindowID] = field(default_factory=list)  # in the log, not the store
    orphans: list[WindowID] = field(default_factory=list)  # in the store, not the log
    # Indexed events their window's record does not list (their windows redone).
    outside: list[EventID] = field(default_factory=list)
    still_unreachable: list[WindowID] = field(default_factory=list)
    dry_run: bool = False
    refused: str = ""  # why the orphans were not deleted

    @property
    def ok(self) -> bool:
        if self.dry_run:
            return not (self.unreachable or self.missing or self.orphans or self.outside)
        return not self.still_unreachable and not self.refused

    def lines(self) -> list[str]:
        would = "would be " if self.dry_run else ""
        deleted = "kept: see below" if self.refused else f"{would}deleted"
        out = [
            f"index: {self.windows} windows in the store, {self.log_windows} in the event log"
            + (" (dry run: nothing changed)" if self.dry_run else ""),
            f"  unreachable by their own vector: {len(self.unreachable)}"
            + (
                f" ({would}repaired)"
                if self.unreachable and (self.dry_run or not self.still_unreachable)
                else ""
            ),
            f"  missing from the store: {len(self.missing)} (events {would}set pending)",
            f"  messages their window does not list: {len(self.outside)} "
            f"(windows {would}deleted, events {would}set pending)",
            f"  orphaned in the store: {len(self.orphans)} ({deleted})",
        ]
        if self.refused:
            out.append(f"FAIL deleting refused: {self.refused}")
        if self.dry_run:
            out.append("ok: nothing to repair" if self.ok else "run without --dry-run to repair")
        elif self.still_unreachable:
            out.append(f"FAIL {len(self.still_unreachable)} windows stay unreachable:")
            out += [f"  {w}" for w in self.still_unreachable[:50]]
        elif not self.refused:
            out.append("ok: every window is reachable")
        return out


def deletion_refusal(chat_windows: int, log_windows: int, orphans: int) -> str:
    """Why orphans must not be deleted ('' if they may be): the event log cannot judge."""
    if orphans and log_windows == 0:
        return (
            f"the event log has no indexed window while the collection holds "
            f"{chat_windows}; it is empty or not this collection's. Restore the event "
            "log, or rebuild: move the Chroma folder aside and start the service"
        )
    if orphans * 2 > chat_windows:
        return (
            f"the event log disowns {orphans} of the collection's {chat_windows} chat "
            "windows, most of it: it is stale or not this collection's. Check "
            "index.eventlog in the config, or restore the event log from a backup"
        )
    return ""


def unreachable_windows(
    store: ChromaStore,
    ids: list[WindowID] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[WindowID]:
    """Windows that do not come back among the nearest of their own vector."""
    bad: list[WindowID] = []
    for page in store.pages_with_vectors(PAGE, ids):
        vectors = [v for _, v in page]
        results = [{nb.window_id for nb in lst} for lst in store.nearest(vectors, PROBE_K)]
        bad += [wid for (wid, _), got in zip(page, results) if wid not in got]
        if progress:
            progress(len(page))
    return bad


def verify_index(
    store: ChromaStore,
    eventlog: EventLog,
    repair: bool = True,
    progress: Callable[[int], None] | None = None,
) -> IndexReport:
    report = IndexReport()
    stored = {w.window_id: w.corpus for w in store.iter_windows()}
    chat = {w for w, corpus in stored.items() if corpus != CORPUS_REFERENCE}
    logged = eventlog.window_ids()
    report.windows, report.log_windows = len(stored), len(logged)
    report.missing = sorted(logged - set(stored))
    report.orphans = sorted(chat - logged)
    report.outside = events_outside_windows(store, eventlog)
    report.unreachable = unreachable_windows(store, None, progress)
    report.refused = deletion_refusal(len(chat), len(logged), len(report.orphans))
    if not repair:
        report.dry_run = True
        report.still_unreachable = list(report.unreachable)
        return report
    if report.orphans and not report.refused:
        store.delete(report.orphans)
    if report.missing:
        eventlog.requeue_windows(report.missing)
    if report.outside:
        # Their whole windows: a pending event that starts a window still stored would
        # be re-cut into a window of the same id, overwriting the record of the others.
        redo = sorted(eventlog.status.windows_of(report.outside))
        store.delete(redo)
        eventlog.requeue_windows(redo)
    if report.unreachable:
        store.readd([w for w in report.unreachable if w not in set(report.orphans)])
        report.still_unreachable = unreachable_windows(
            store, [w for w in report.unreachable if w not in set(report.orphans)]
        )
    return report


@dataclass(frozen=True)
class Gaps:
    """Where the collection and the event log disagree on chat windows."""

    missing: list[WindowID]  # events marked indexed in them; not in the collection
    orphans: list[WindowID]  # in the collection; no indexed event is in them
    refused: str = ""  # why the orphans are kept (deletion_refusal)


def index_gaps(
    store: ChromaStore,
    eventlog: EventLog,
    logged: set[WindowID] | None = None,
    held: set[WindowID] | None = None,
) -> Gaps:
    """Window ids only: cheap enough for every writer's start (rebuild.ensure_meta).
    `logged`, `held`: the event log's indexed window ids and the collection's chat ids,
    if read already."""
    if logged is None:
        logged = eventlog.window_ids()
    if held is None:
        held = store.ids(CORPUS_CHAT)
    orphans = sorted(held - logged)
    return Gaps(
        sorted(logged - held), orphans, deletion_refusal(len(held), len(logged), len(orphans))
    )


def repair_gaps(
    store: ChromaStore,
    eventlog: EventLog,
    logged: set[WindowID] | None = None,
    held: set[WindowID] | None = None,
) -> tuple[Gaps, int]:
    """The start-up check: a window the event log holds indexed events in but the
    collection lacks (a crash between a re-chunk's delete and its re-point, a lost
    write) has its events set pending, so the pipeline indexes them again; a window no
    indexed event is in (a crash after an upsert whose re-point never came, then a
    re-chunk cutting otherwise) is deleted, unless the event log cannot judge. Returns
    the gaps and how many events were set pending. Call it before the pipeline runs.
    `logged`, `held`: as index_gaps takes them, read under the same lock of the
    pipeline."""
    gaps = index_gaps(store, eventlog, logged, held)
    requeued = eventlog.requeue_windows(gaps.missing) if gaps.missing else 0
    if gaps.orphans and not gaps.refused:
        store.delete(gaps.orphans)
    if gaps.missing or gaps.orphans:
        log.warning(
            "index_gaps_repaired",
            extra={
                "missing_windows": len(gaps.missing),
                "events_requeued": requeued,
                "orphans": len(gaps.orphans),
                "orphans_deleted": not gaps.refused,
            },
        )
    return gaps, requeued


def events_outside_windows(
    store: ChromaStore, eventlog: EventLog, page: int = PAGE
) -> list[EventID]:
    """Events marked indexed that the record of their window does not list (or whose
    window is not in the collection): doctor's check, every record's metadata read."""
    assigned = eventlog.status.indexed_events()
    held: dict[str, set[str]] = {}
    ids = sorted(set(assigned.values()))
    for i in range(0, len(ids), page):
        res = store.records(("metadatas",), ids[i : i + page])
        for wid, meta in zip(res["ids"], res["metadatas"]):
            held[wid] = set(json.loads((meta or {}).get("event_ids", "[]")))
    return sorted(e for e, w in assigned.items() if e not in held.get(w, ()))
