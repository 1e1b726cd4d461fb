"""Scrubbing deleted windows' text out of an embedded Chroma's SQLite file.

`collection.delete` is not enough for a purge: Chroma 1.5 (embedded) keeps

- every upsert, document and metadata included, in its write-ahead log table
  `embeddings_queue` until the HNSW segment persists (up to `sync_threshold` = 1000
  operations later), and
- the bytes of deleted rows in the free space of their pages (its SQLite does not
  run with `secure_delete`), and the deleted documents' terms in the FTS5 index
  until its segments merge.

So after a purge deleted a room's windows (`scrub_room`), or after edits and redactions
re-upserted windows without the old text (`scrub_windows`), this:

1. blanks the metadata (which holds the document) of the room's queued upserts that a
   later queued delete of the same id supersedes (for re-upserted windows: any later
   queued write of the same id, each of which carries the window's whole metadata).
   Replaying the log gives the same final state: the upsert still carries its vector,
   and the delete or the newer upsert still follows it. The latest write of an id is
   never touched;
2. merges the full-text index (`optimize`), dropping the deleted documents' terms;
3. `VACUUM`s the file, rewriting every page without the freed bytes.

Checked against chromadb 1.5 (pinned in pyproject.toml); a schema it does not know is
reported, not guessed at. VACUUM rewrites the whole file under an exclusive lock:
readers (a search) wait for it. Purges are rare, and privacy wins over that pause.

It runs in a child process (`scrub_room_isolated`). Chroma's Rust core links its own
copy of SQLite; a second copy (Python's) on the same file in the same process breaks
SQLite's POSIX locking (locks are per process, and closing either copy's descriptor
drops the other's), which showed here as "disk I/O error" in a VACUUM racing a query.
Across processes the locks work: readers wait, nothing is corrupted.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(f"matrix_sources.{__name__}")

DB_FILE = "chroma.sqlite3"
DELETE_OP = 3  # chromadb's Operation.DELETE as stored in embeddings_queue.operation
FTS_TABLE = "embedding_fulltext_search"
BUSY_TIMEOUT_S = 60.0


class ScrubError(RuntimeError):
    pass


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


# Queued upserts (or updates) whose text a later queued write of the same id supersedes.
_BLANK = ("UPDATE embeddings_queue SET metadata = '{}'"
          " WHERE operation != :delete AND metadata IS NOT NULL AND metadata != '{}' AND %s"
          " AND EXISTS (SELECT 1 FROM embeddings_queue d WHERE d.id = embeddings_queue.id"
          "   AND d.topic = embeddings_queue.topic AND d.seq_id > embeddings_queue.seq_id%s)")


def scrub_room(chroma_dir: Path, room_id: str) -> int:
    """Scrub the deleted windows of `room_id` from the Chroma folder; returns how many
    queued upserts were blanked. Call only after the room's windows were deleted and
    while nothing writes to the collection (the purge holds the pipeline's lock)."""
    sql = _BLANK % ("json_valid(metadata) AND json_extract(metadata, '$.room_id') = :arg",
                    " AND d.operation = :delete")
    return _scrub(chroma_dir, sql, room_id)


def scrub_windows(chroma_dir: Path, window_ids: list[str]) -> int:
    """Scrub the superseded versions of re-upserted windows (edits, redactions) from the
    Chroma folder; returns how many queued upserts were blanked. Same conditions as
    `scrub_room`: nothing may write to the collection meanwhile."""
    if not window_ids:
        return 0
    sql = _BLANK % ("id IN (SELECT value FROM json_each(:arg))", "")
    return _scrub(chroma_dir, sql, json.dumps(list(window_ids)))


def _scrub(chroma_dir: Path, blank_sql: str, arg: str) -> int:
    path = Path(chroma_dir) / DB_FILE
    if not path.exists():
        return 0
    db = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        tables = _tables(db)
        if "embeddings_queue" not in tables:
            raise ScrubError(f"{path}: no embeddings_queue table; unknown Chroma schema")
        blanked = db.execute(blank_sql, {"delete": DELETE_OP, "arg": arg}).rowcount
        _optimize_and_vacuum(db, tables)
    finally:
        db.close()
    return blanked


def _optimize_and_vacuum(db: sqlite3.Connection, tables: set[str]) -> None:
    if FTS_TABLE in tables:
        try:
            db.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('optimize')")
        except sqlite3.OperationalError as e:  # e.g. no trigram tokenizer here
            print(f"chroma_fts_optimize_failed: {str(e)[:200]}", file=sys.stderr)
    db.execute("VACUUM")


def scrub_room_isolated(chroma_dir: Path, room_id: str,
                        timeout: float = 10 * BUSY_TIMEOUT_S) -> int:
    """`scrub_room` in a child process (see the module docstring)."""
    return _isolated([str(chroma_dir), "--room", room_id], None, timeout)


def scrub_windows_isolated(chroma_dir: Path, window_ids: list[str],
                           timeout: float = 10 * BUSY_TIMEOUT_S) -> int:
    """`scrub_windows` in a child process; the ids go through its stdin."""
    return _isolated([str(chroma_dir), "--windows"], json.dumps(list(window_ids)), timeout)


def _isolated(args: list[str], stdin: str | None, timeout: float) -> int:
    chroma_dir = args[0]
    proc = subprocess.run([sys.executable, "-m", __name__, *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ScrubError(f"scrub of {chroma_dir} failed ({proc.returncode}): "
                         + proc.stderr.strip()[-500:])
    if proc.stderr.strip():  # e.g. the full-text index could not be merged
        log.warning("chroma_scrub_warnings", extra={"stderr": proc.stderr.strip()[-500:]})
    return int(proc.stdout.strip() or 0)


def main(argv: list[str]) -> int:
    chroma_dir, mode, *rest = argv
    if mode == "--room":
        print(scrub_room(Path(chroma_dir), rest[0]))
    elif mode == "--windows":
        print(scrub_windows(Path(chroma_dir), json.loads(sys.stdin.read())))
    else:
        raise SystemExit(f"usage: {__name__} DIR --room ROOM | --windows < ids.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
