"""`matrix-sources verify --index`: every window must come back when queried by its own
vector, and the collection must hold exactly the windows the event log says it does.

Upstream Chroma bug chroma#7758: after many deletes and upserts some live records stop
coming back from query() while get() still has them; edits and redactions are exactly
that churn. Repairs:
    unreachable window          -> deleted and added again (same id, vector, document)
    in the event log, not store -> its events set pending: the pipeline rebuilds it
    in the store, not the log   -> deleted (chat windows only; reference sections are
                                   the reference corpora's)
After repairs, every window is checked again; anything still unreachable fails.

Deleting is refused when the event log cannot be the judge: it holds no indexed window
while the collection has some, or it disowns most of the collection (a lost, truncated
or stale event log would otherwise have every window deleted as "orphaned"). The caller
refuses outright when the event log is missing or damaged (eventlog_check.py).
`repair=False` is the dry run: what would be done, nothing done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..store.eventlog import EventLog
from ..records import CORPUS_REFERENCE, WindowID
from ..store.chroma import ChromaStore

PAGE = 500
PROBE_K = 10  # a window must be among the nearest PROBE_K of its own vector


@dataclass
class IndexReport:
    windows: int = 0
    log_windows: int = 0
    unreachable: list[WindowID] = field(default_factory=list)
    missing: list[WindowID] = field(default_factory=list)  # in the log, not the store
    orphans: list[WindowID] = field(default_factory=list)  # in the store, not the log
    still_unreachable: list[WindowID] = field(default_factory=list)
    dry_run: bool = False
    refused: str = ""  # why the orphans were not deleted

    @property
    def ok(self) -> bool:
        if self.dry_run:
            return not (self.unreachable or self.missing or self.orphans)
        return not self.still_unreachable and not self.refused

    def lines(self) -> list[str]:
        would = "would be " if self.dry_run else ""
        deleted = "kept: see below" if self.refused else f"{would}deleted"
        out = [f"index: {self.windows} windows in the store, {self.log_windows} in the event log"
               + (" (dry run: nothing changed)" if self.dry_run else ""),
               f"  unreachable by their own vector: {len(self.unreachable)}"
               + (f" ({would}repaired)" if self.unreachable and (
                   self.dry_run or not self.still_unreachable) else ""),
               f"  missing from the store: {len(self.missing)} (events {would}set pending)",
               f"  orphaned in the store: {len(self.orphans)} ({deleted})"]
        if self.refused:
            out.append(f"FAIL deleting refused: {self.refused}")
        if self.dry_run:
            out.append("ok: nothing to repair" if self.ok else
                       "run without --dry-run to repair")
        elif self.still_unreachable:
            out.append(f"FAIL {len(self.still_unreachable)} windows stay unreachable:")
            out += [f"  {w}" for w in self.still_unreachable[:50]]
        elif not self.refused:
            out.append("ok: every window is reachable")
        return out


def deletion_refusal(chat_windows: int, log_windows: int, orphans: int) -> str:
    """Why orphans must not be deleted ('' if they may be): the event log cannot judge."""
    if orphans and log_windows == 0:
        return (f"the event log has no indexed window while the collection holds "
                f"{chat_windows}; it is empty or not this collection's. Restore the event "
                "log, or rebuild: move the Chroma folder aside and start the service")
    if orphans * 2 > chat_windows:
        return (f"the event log disowns {orphans} of the collection's {chat_windows} chat "
                "windows, most of it: it is stale or not this collection's. Check "
                "index.eventlog in the config, or restore the event log from a backup")
    return ""


def unreachable_windows(store: ChromaStore, ids: list[WindowID] | None = None,
                        progress: Callable[[int], None] | None = None) -> list[WindowID]:
    """Windows that do not come back among the nearest of their own vector."""
    bad: list[WindowID] = []
    for page in store.pages_with_vectors(PAGE, ids):
        vectors = [v for _, v in page]
        results = [{nb.window_id for nb in lst}
                   for lst in store.nearest(vectors, PROBE_K)]
        bad += [wid for (wid, _), got in zip(page, results) if wid not in got]
        if progress:
            progress(len(page))
    return bad


def verify_index(store: ChromaStore, eventlog: EventLog, repair: bool = True,
                 progress: Callable[[int], None] | None = None) -> IndexReport:
    report = IndexReport()
    stored = {w.window_id: w.corpus for w in store.iter_windows()}
    chat = {w for w, corpus in stored.items() if corpus != CORPUS_REFERENCE}
    logged = eventlog.window_ids()
    report.windows, report.log_windows = len(stored), len(logged)
    report.missing = sorted(logged - set(stored))
    report.orphans = sorted(chat - logged)
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
    if report.unreachable:
        store.readd([w for w in report.unreachable if w not in set(report.orphans)])
        report.still_unreachable = unreachable_windows(
            store, [w for w in report.unreachable if w not in set(report.orphans)])
    return report
