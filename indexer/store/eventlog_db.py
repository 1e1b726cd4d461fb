"""The event log's SQLite connection: one, shared across threads (the pipeline runs in a
worker thread), serialised by a lock, since SQLite writes are serial anyway. Every part
of the event log (eventlog.py and the parts it composes) reads and writes through it."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .eventlog_schema import atomic, migrate


class Database:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.RLock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            # Freed space is zeroed, so a purged body leaves no bytes in the file's pages.
            self._db.execute("PRAGMA secure_delete=ON")
            # The schema, and an event log of an earlier release brought up to it.
            migrate(self._db)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def locked(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, in autocommit mode: a read, or one statement."""
        with self._lock:
            yield self._db

    @contextmanager
    def transaction(self, immediate: bool = True) -> Iterator[sqlite3.Cursor]:
        """One SQLite transaction, under the lock: its cursor. Committed when the block
        ends, rolled back if it raised. `immediate=False` for a consistent read that
        takes no write lock."""
        with self._lock, atomic(self._db, immediate) as cur:
            yield cur

    def truncate_wal(self) -> bool:
        """Checkpoint every WAL frame into the database and truncate the WAL to zero
        bytes. False if a reader in another process kept it from completing (the frames
        then go at the next successful checkpoint)."""
        with self._lock:
            busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return busy == 0

