"""The event log's database connection, SQLite or PostgreSQL (`store.database`). Every
part of the event log (log.py and the parts it composes) reads and writes through
it, in SQL both accept (sqldialect.py says what differs).

    SQLite       one connection, shared across threads (the pipeline runs in a worker
                 thread), serialised by a lock, since SQLite writes are serial anyway;
                 WAL, synchronous=FULL, secure_delete (freed pages zeroed)
    PostgreSQL   a pool (psycopg_pool): a thread takes a connection for a block and
                 gives it back; blocks nested in one thread share it. Broken
                 connections (a restarted server) are replaced when next taken.

`transaction()` blocks nested in one thread join the outermost: it alone commits, or
rolls back if anything inside raised. `read_only`: no schema written, no write allowed
(doctor, metrics, tests reading beside a running service).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from threading import local
from typing import TYPE_CHECKING, Any

from ...config import Database as Location
from .schema import migrate
from .sqldialect import POSTGRESQL, SQLITE, Cursor, PgConnection, configure_pg

if TYPE_CHECKING:
    import psycopg

PG_POOL_MAX = 8  # connections per process: the threads that touch the event log at once


def location_of(where: Location | Path | str) -> Location:
    """A Path or `sqlite:`-less string is an SQLite file; a postgresql:// URL a database."""
    if isinstance(where, Location):
        return where
    text = str(where)
    if text.startswith(("postgresql://", "postgres://")):
        return Location("postgresql", dsn=text)
    return Location("sqlite", path=Path(text.removeprefix("sqlite:")))


class _OpenBlock(local):
    """This thread's open block: its pooled connection (PostgreSQL), and its transaction's
    cursor and depth (0: none). Each thread sees these defaults until it sets its own."""

    conn: PgConnection | None = None
    cursor: Cursor | None = None
    depth: int = 0


class Database:
    def __init__(
        self, where: Location | Path | str, read_only: bool = False, upgrade: bool = True
    ) -> None:
        """`upgrade`: bring the schema up to date (eventlog_schema.migrate) at once."""
        self.location = location_of(where)
        self.read_only = read_only
        self._local = _OpenBlock()
        if self.location.kind == "sqlite":
            self.dialect = SQLITE
            self._open_sqlite()
        else:
            self.dialect = POSTGRESQL
            self._open_pg()
        if upgrade and not read_only:
            # The schema, and an event log of an earlier release brought up to it.
            migrate(self)

    @property
    def path(self) -> Path | None:
        """The SQLite file; None on PostgreSQL."""
        return self.location.path

    def _open_sqlite(self) -> None:
        path = self.location.path
        assert path is not None
        self._lock = threading.RLock()
        if self.read_only:
            self._db = sqlite3.connect(
                f"file:{path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
            )
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            # Freed space is zeroed, so a purged body leaves no bytes in the file's pages.
            self._db.execute("PRAGMA secure_delete=ON")

    def _open_pg(self) -> None:
        from psycopg_pool import ConnectionPool

        read_only = self.read_only

        def configure(conn: psycopg.Connection[Any]) -> None:
            configure_pg(conn)
            if read_only:
                conn.execute("SET default_transaction_read_only = on")

        assert self.location.dsn is not None  # a postgresql location always has one
        self._pool = ConnectionPool(
            self.location.dsn,
            min_size=1,
            max_size=PG_POOL_MAX,
            open=False,
            kwargs={"autocommit": True},
            configure=configure,
            check=ConnectionPool.check_connection,
            name="eventlog",
        )
        # Fails now, naming the server, rather than at the first append.
        self._pool.open(wait=True, timeout=30)

    def close(self) -> None:
        if self.location.kind == "sqlite":
            with self._lock:
                self._db.close()
        else:
            self._pool.close()

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """This thread's connection for the block: SQLite's under its lock; a pooled
        PostgreSQL one, the same for blocks nested in it."""
        if self.location.kind == "sqlite":
            with self._lock:
                yield self._db
            return
        held = self._local.conn
        if held is not None:
            yield held
            return
        with self._pool.connection() as raw:
            self._local.conn = PgConnection(raw)
            try:
                yield self._local.conn
            finally:
                self._local.conn = None

    @contextmanager
    def locked(self) -> Iterator[Any]:
        """A connection (`execute`, `executemany`) in autocommit mode, for a read or one
        statement; inside a transaction() block of this thread, that transaction's."""
        with self._connection() as conn:
            yield conn

    @contextmanager
    def transaction(self, immediate: bool = True) -> Iterator[Cursor]:
        """One transaction: its cursor. Committed when the outermost block of this
        thread ends, rolled back if it raised. `immediate=False`: a consistent read that
        takes SQLite's write lock only if it writes."""
        with self._connection() as conn:
            depth = self._local.depth
            if depth:
                outer = self._local.cursor
                assert outer is not None  # set with the depth
                self._local.depth = depth + 1
                try:
                    yield outer
                finally:
                    self._local.depth = depth
                return
            cur = conn.cursor()
            cur.execute(self.dialect.begin(immediate))
            self._local.depth, self._local.cursor = 1, cur
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                _rollback(cur)
                raise
            finally:
                self._local.depth, self._local.cursor = 0, None

    def truncate_wal(self) -> bool:
        """SQLite: checkpoint every WAL frame into the database and truncate the WAL to
        zero bytes; False if a reader in another process kept it from completing (the
        frames then go at the next successful checkpoint; also False inside a transaction
        of this thread, which must end first). PostgreSQL: nothing to do
        here; what its WAL and dead rows keep, and until when, is docs/storage.md's."""
        if self.location.kind != "sqlite" or self.read_only:
            return True
        if self._local.depth:
            return False  # inside a transaction SQLite cannot: the caller's next one will
        with self._lock:
            busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return bool(busy == 0)


@contextmanager
def reader(where: Location | Path | str) -> Iterator[Any]:
    """A read-only connection of its own, opened and closed in the calling thread (a
    scrape's figures, doctor beside a running service): in SQLite's WAL it waits for no
    writer and holds up none; in PostgreSQL it is one short session, not a pool.
    Raises FileNotFoundError for an SQLite file that is not there (never creates one)."""
    location = location_of(where)
    if location.kind == "sqlite":
        if location.path is None or not location.path.exists():
            raise FileNotFoundError(str(location.path))
        db = sqlite3.connect(f"file:{location.path}?mode=ro", uri=True)
        try:
            yield db
        finally:
            db.close()
        return
    import psycopg

    assert location.dsn is not None  # a postgresql location always has one
    with psycopg.connect(location.dsn, autocommit=True, connect_timeout=10) as raw:
        configure_pg(raw)
        raw.execute("SET default_transaction_read_only = on")
        yield PgConnection(raw)


def _rollback(cur: Cursor) -> None:
    try:
        cur.execute("ROLLBACK")
    except Exception:  # the connection itself is gone: the server rolled back
        pass
