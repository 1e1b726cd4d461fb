"""Is the event log whole? Asked by `doctor`, and by `run` before it opens anything.

The event log is the only copy of the text and of what the collection should hold, so a
damaged one must stop the service with how to recover, not crash it in a restart loop
(systemd restarts a crash every 5 s) or, worse, be taken for an empty one.

    missing             fine for a data dir that never ran; damage if the collection holds
                        windows (the text they cite is gone)
    zero length         damage: EventLog writes its schema at once, so a real one never is
    not a database, or PRAGMA quick_check finds anything -> damage

On PostgreSQL (store.database): the server reached and the schema's version read;
no `events` table is a database the service has not used yet (missing); a server that
cannot be reached is `unreachable`, which stops the service with the error libpq gave.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...config import Database as Location
from .db import location_of, reader
from .schema import LATEST
from .sqldialect import POSTGRESQL

# What to do about a damaged event log; `run` and `doctor` print it.
RECOVER = (
    "stop the service and restore {path} from a backup (docs/deployment.md); or "
    "salvage what SQLite can still read: `sqlite3 {path} .recover | sqlite3 "
    "recovered.sqlite3`, then move recovered.sqlite3 into its place; or start over: "
    "move {path} and the Chroma folder aside and start, and backfill reads the "
    "rooms' history again (index.backfill_days)"
)


@dataclass(frozen=True)
class LogHealth:
    state: str  # "ok", "missing", "damaged", "unreachable" (PostgreSQL)
    detail: str
    version: int | None = None  # the schema's, where it could be read

    @property
    def damaged(self) -> bool:
        return self.state == "damaged"


def check_eventlog(
    where: Location | Path | str, max_errors: int = 5, trust_clean: bool = False
) -> LogHealth:
    """`trust_clean`: a file unchanged since the service's clean stop (mark_clean) is
    opened and its tables read, without quick_check (7 s at a million windows)."""
    location = location_of(where)
    if location.kind == "postgresql":
        return _check_postgresql(location)
    assert location.path is not None  # an sqlite location always has its file
    clean = trust_clean and _clean_since(Path(location.path))
    path = Path(location.path)
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
            rows = (
                ["ok"] if clean else [r[0] for r in db.execute(f"PRAGMA quick_check({max_errors})")]
            )
            tables = {
                r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        return LogHealth("damaged", f"{path}: {e}")
    if rows != ["ok"]:
        return LogHealth("damaged", f"{path}: quick_check: {'; '.join(rows)[:300]}")
    if "events" not in tables:
        return LogHealth("damaged", f"{path} is an SQLite file without an events table")
    if clean:
        return LogHealth("ok", f"{path}: unchanged since the service's clean stop")
    return LogHealth("ok", f"{path}: quick_check ok")


# Beside the SQLite file: its size and mtime when the service stopped cleanly. The next
# start trusts a file that still has them (nothing wrote it since) and skips quick_check;
# a start removes the mark, so after a crash the next start checks the whole file.
CLEAN_SUFFIX = ".clean"


def _mark(path: Path) -> Path:
    return path.with_name(path.name + CLEAN_SUFFIX)


def _stamp(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def mark_clean(where: Location | Path | str) -> None:
    """After a clean stop, the event log closed: its stamp written beside it."""
    location = location_of(where)
    if location.kind == "sqlite" and location.path is not None and Path(location.path).exists():
        path = Path(location.path)
        if not Path(str(path) + "-wal").exists():  # closed: nothing left to checkpoint
            _mark(path).write_text(json.dumps(_stamp(path)), encoding="utf-8")


def clear_clean(where: Location | Path | str) -> None:
    """At start, before anything writes: the next start trusts nothing of this run
    until it stops cleanly."""
    location = location_of(where)
    if location.kind == "sqlite" and location.path is not None:
        _mark(Path(location.path)).unlink(missing_ok=True)


def _clean_since(path: Path) -> bool:
    try:
        return bool(json.loads(_mark(path).read_text(encoding="utf-8")) == _stamp(path))
    except (OSError, ValueError):
        return False


def _check_postgresql(location: Location) -> LogHealth:
    try:
        with reader(location) as db:
            cur = db.cursor()
            tables = POSTGRESQL.tables(cur)
            version = POSTGRESQL.version(cur) if "events" in tables else 0
            server = cur.execute("SHOW server_version").fetchone()[0]
    except Exception as e:  # libpq's message names the host and what failed; no password
        first = " ".join(str(e).split())[:300]
        return LogHealth("unreachable", f"{location}: cannot connect ({type(e).__name__}: {first})")
    if "events" not in tables:
        return LogHealth(
            "missing",
            f"{location}: PostgreSQL {server}, no event log yet "
            "(the service makes its tables when it first starts)",
            0,
        )
    if version > LATEST:
        return LogHealth(
            "ok",
            f"{location}: PostgreSQL {server}, schema version {version},"
            f" newer than this release's {LATEST} (written by a newer "
            "release: upgrade matrix-sources)",
            version,
        )
    note = "" if version == LATEST else f" (brought to {LATEST} when the service starts)"
    return LogHealth(
        "ok", f"{location}: PostgreSQL {server}, schema version {version}{note}", version
    )


def recovery(where: Location | Path | str) -> str:
    location = location_of(where)
    if location.kind == "postgresql":
        return (
            f"restore the database of {location} from its backup (pg_dump or the "
            "server's own), or check that the server is up and the credentials work "
            "(`psql` with the same URL)"
        )
    return RECOVER.format(path=location.path)


def start_refusal(where: Location | Path | str, windows: Callable[[], int]) -> str:
    """Why the service must not start on this event log ('' if it may). `windows`
    counts the collection, asked only when the event log is missing."""
    location = location_of(where)
    health = check_eventlog(location, trust_clean=True)
    if health.state == "unreachable":
        return (
            f"the event log's database cannot be reached: {health.detail}. Is the "
            "server up, and is its password in ~/.pgpass or the file PGPASSFILE "
            "names (docs/deployment.md, PostgreSQL)?"
        )
    path = location.path if location.kind == "sqlite" else location
    if health.damaged:
        return (
            f"the event log is damaged ({health.detail}); matrix-sources will not "
            f"start on it. To recover: {recovery(location)}"
        )
    if health.state == "missing":
        n = windows()
        if n:
            return (
                f"the event log {path} is missing while the collection holds {n} "
                "windows: the text they cite is gone. Restore it from a backup; or, "
                "to start over, move the Chroma folder aside too and start: backfill "
                "reads the rooms' history again (index.backfill_days)"
            )
    return ""
