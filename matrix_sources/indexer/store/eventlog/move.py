"""Moving a data dir's SQLite event log to PostgreSQL (`matrix-sources eventlog migrate`).

    source (SQLite, brought to the latest schema first) --pages of rows, by rowid-->
        target (its schema made by the same migrations), each page one transaction,
        INSERT ... ON CONFLICT DO NOTHING: a move stopped anywhere is run again and
        copies what is missing, never a row twice
    then: the target's identity sequence set past the copied `seq`s, and every table's
        row count compared with the source's; a difference fails the move, naming it
    then: the keyword index (eventlog/keywords.py) built in the target from the copied
        text, a page of windows a transaction, resumable like the copy: its tables and
        its `meta` rows are not copied (a WITHOUT ROWID table has no rowid to page by,
        and building it is one pass over the text the copy just wrote)

Every table moves as it is, `meta` included: the Chroma collection's live generation,
the embedder's record and the cursors come along, so the collection stays valid and
nothing is embedded again. The source is left as it was; it still holds every message's
text, so the operator removes it once the service runs on the target (the command says
how).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...config import Database as Location
from . import keywords
from .db import Database

PAGE = 5000  # rows per read and per target transaction


@dataclass
class MoveReport:
    tables: dict[str, int] = field(default_factory=dict)  # table -> rows in the source
    copied: int = 0  # rows the target did not have yet
    mismatched: dict[str, tuple[int, int]] = field(default_factory=dict)  # (source, target)

    @property
    def ok(self) -> bool:
        return not self.mismatched


def _tables(db: Database) -> list[str]:
    """The tables a move copies: not the keyword index's, which the target builds."""
    with db.transaction(immediate=False) as cur:
        return sorted(
            t
            for t in db.dialect.tables(cur)
            if t != "schema_version" and not t.startswith(("sqlite_", "kw_"))
        )


# The keyword index's own state in `meta` (keywords.READY, AFTER): the target's own.
_NOT_COPIED = " WHERE key NOT LIKE 'keywords%'"


def _where(table: str) -> str:
    return _NOT_COPIED if table == "meta" else ""


def _columns_in_order(db: Database, table: str) -> list[str]:
    with db.locked() as conn:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _count(db: Database, table: str) -> int:
    with db.locked() as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}{_where(table)}").fetchone()[0])


def row_counts(source: Path) -> dict[str, int]:
    """Rows per table of the source, read without writing it (the total to move)."""
    db = Database(source, read_only=True)
    try:
        return {t: _count(db, t) for t in _tables(db)}
    finally:
        db.close()


def move_eventlog(
    source: Path,
    target: Location | str,
    progress: Callable[[int], None] | None = None,
    indexing: Callable[[int, int], None] | None = None,
) -> MoveReport:
    """Copy every row of the SQLite event log at `source` into `target`; see the module
    docstring. `progress(n)`: n more source rows handled; `indexing(done, total)`: the
    keyword index's build, windows done of the total."""
    src = Database(source)  # brought up to the latest schema: the target's
    dst = Database(target)
    report = MoveReport()
    try:
        if _count(dst, "events") == 0:  # a new target: its index (empty, ready) goes
            with dst.transaction() as cur:
                keywords.reset(cur)
        wanted = set(_tables(dst))
        for table in _tables(src):
            if table not in wanted:
                continue
            report.tables[table] = _count(src, table)
            report.copied += _copy_table(src, dst, table, progress)
        with dst.transaction() as cur:
            if dst.dialect.postgresql:  # new events get a seq past every copied one
                cur.execute(
                    "SELECT setval(pg_get_serial_sequence('events', 'seq'),"
                    " COALESCE((SELECT MAX(seq) FROM events), 0) + 1, false)"
                )
        for table, n in report.tables.items():
            held = _count(dst, table)
            if held != n:
                report.mismatched[table] = (n, held)
        if report.ok:
            keywords.build(dst, indexing)
    finally:
        src.close()
        dst.close()
    return report


def _copy_table(
    src: Database, dst: Database, table: str, progress: Callable[[int], None] | None
) -> int:
    columns = _columns_in_order(src, table)
    names = ", ".join(columns)
    insert = (
        f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})"
        " ON CONFLICT DO NOTHING"
    )
    after, copied = -1, 0
    while True:
        with src.locked() as conn:
            rows = conn.execute(
                f"SELECT rowid, {names} FROM {table} WHERE rowid > ?"
                f"{_where(table).replace(' WHERE ', ' AND ')} ORDER BY rowid LIMIT ?",
                (after, PAGE),
            ).fetchall()
        if not rows:
            return copied
        after = rows[-1][0]
        with dst.transaction() as cur:
            copied += cur.executemany(insert, [r[1:] for r in rows]).rowcount
        if progress is not None:
            progress(len(rows))
