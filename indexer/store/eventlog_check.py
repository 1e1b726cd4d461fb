"""Is the event log whole? Asked by `doctor`, and by `run` before it opens anything.

The event log is the only copy of the text and of what the collection should hold, so a
damaged one must stop the service with how to recover, not crash it in a restart loop
(systemd restarts a crash every 5 s) or, worse, be taken for an empty one.

    missing             fine for a data dir that never ran; damage if the collection holds
                        windows (the text they cite is gone)
    zero length         damage: EventLog writes its schema at once, so a real one never is
    not a database, or PRAGMA quick_check finds anything -> damage
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# What to do about a damaged event log; `run` and `doctor` print it.
RECOVER = ("stop the service and restore {path} from a backup (docs/deployment.md); or "
           "salvage what SQLite can still read: `sqlite3 {path} .recover | sqlite3 "
           "recovered.sqlite3`, then move recovered.sqlite3 into its place; or start over: "
           "move {path} and the Chroma folder aside and start, and backfill reads the "
           "rooms' history again (index.backfill_days)")


@dataclass(frozen=True)
class LogHealth:
    state: str  # "ok", "missing", "damaged"
    detail: str

    @property
    def damaged(self) -> bool:
        return self.state == "damaged"


def check_eventlog(path: Path, max_errors: int = 5) -> LogHealth:
    path = Path(path)
    if not path.exists():
        return LogHealth("missing", f"{path} does not exist")
    if path.is_dir():
        return LogHealth("damaged", f"{path} is a folder")
    if path.stat().st_size == 0:
        return LogHealth("damaged", f"{path} is empty (zero bytes): truncated")
    try:
        # mode=rw: never create it, never leave a new empty file behind.
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
        try:
            rows = [r[0] for r in db.execute(f"PRAGMA quick_check({max_errors})")]
            tables = {r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        return LogHealth("damaged", f"{path}: {e}")
    if rows != ["ok"]:
        return LogHealth("damaged", f"{path}: quick_check: {'; '.join(rows)[:300]}")
    if "events" not in tables:
        return LogHealth("damaged", f"{path} is an SQLite file without an events table")
    return LogHealth("ok", f"{path}: quick_check ok")


def recovery(path: Path) -> str:
    return RECOVER.format(path=path)


def start_refusal(path: Path, windows: Callable[[], int]) -> str:
    """Why the service must not start on this event log ('' if it may). `windows`
    counts the collection, asked only when the event log is missing."""
    health = check_eventlog(path)
    if health.damaged:
        return (f"the event log is damaged ({health.detail}); matrix-sources will not "
                f"start on it. To recover: {recovery(path)}")
    if health.state == "missing":
        n = windows()
        if n:
            return (f"the event log {path} is missing while the collection holds {n} "
                    "windows: the text they cite is gone. Restore it from a backup; or, "
                    "to start over, move the Chroma folder aside too and start: backfill "
                    "reads the rooms' history again (index.backfill_days)")
    return ""
