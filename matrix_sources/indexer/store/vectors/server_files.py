"""A Chroma server's own files, when this host can reach its persist directory.

Chroma 1.5.9 as a server keeps what a dropped collection held: `delete_collection`
leaves the segment's folder with its vectors (chroma#5520; the fix, PR #7218, is not
released), and its SQLite file runs without `secure_delete`, so the pages it freed keep
the deleted rows' bytes, the vectors of its queued writes among them. The service drops
a generation after every compaction (a redaction, a purge: generations.py), so with
`index.chroma.persist_dir` set (the server's `--path`), after each drop it:

1. lists the segment folders, then reads which segments the server still has (its
   `segments` table, read only). In that order: a folder is made after its segment's
   row, so a folder listed first belongs to a row already there, and a collection
   another client creates meanwhile is never taken for an orphan;
2. removes the folders of no segment;
3. VACUUMs `chroma.sqlite3`, rewriting it without its free pages (what `chroma vacuum`
   does to a stopped server's folder). SQLite's own locking keeps the server's
   connections waiting while it runs; no row changes.

It writes no row of Chroma's and reads two tables: the layout of Chroma's single-node
server (one SQLite file, one folder per vector segment). At start (`check`) it proves
the folder is the server's own, not a copy of it nor another server's: a marker
collection with a random name, made (and dropped) through the server, must show in it.
Without `persist_dir`, purged vectors stay in the server's files (docs/storage.md).
"""

from __future__ import annotations

import logging
import re
import secrets
import shutil
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...clock import stopwatch

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

log = logging.getLogger(__name__)

SQLITE = "chroma.sqlite3"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
BUSY_TIMEOUT_S = 60  # the server's own write in progress: VACUUM waits for it
MARKER_PREFIX = "matrix-sources-persist-dir-check-"  # never a generation's name


class ServerFilesError(RuntimeError):
    """persist_dir is not the folder of the server this service talks to."""


@dataclass(frozen=True)
class Cleaned:
    folders: int  # orphaned segment folders removed
    seconds: float


@dataclass(frozen=True)
class ServerFiles:
    root: Path

    def check(self, client: ClientAPI) -> None:
        """Refuse a folder that is not this server's own. A name found in it proves
        nothing (a copy of the folder holds the same collections): a marker collection
        with a fresh random name is made through the server, must then be in the
        folder's chroma.sqlite3, and is dropped again."""
        db = self.root / SQLITE
        if not db.is_file():
            raise ServerFilesError(
                f"index.chroma.persist_dir: {self.root} has no {SQLITE}; give the folder "
                "the Chroma server was started with (chroma run --path DIR), or leave "
                "persist_dir out"
            )
        marker = f"{MARKER_PREFIX}{secrets.token_hex(8)}"
        client.create_collection(marker, metadata={"purpose": "persist_dir check"})
        try:
            with _read_only(db) as con:
                found = con.execute(
                    "SELECT 1 FROM collections WHERE name = ?", (marker,)
                ).fetchone()
        finally:
            client.delete_collection(marker)
        if found is None:
            raise ServerFilesError(
                f"index.chroma.persist_dir: {self.root} is not the folder of the Chroma "
                "server at index.chroma.host:port (a collection just made through that "
                "server is not in its chroma.sqlite3: a copy of the folder, or another "
                "server's?); give the folder that server was started with (chroma run "
                "--path DIR), or leave persist_dir out"
            )

    def clean(self) -> Cleaned:
        took = stopwatch()
        folders = [p for p in self.root.iterdir() if p.is_dir() and _UUID.fullmatch(p.name)]
        with _read_only(self.root / SQLITE) as con:
            live = {r[0] for r in con.execute("SELECT id FROM segments")}
        orphans = [p for p in folders if p.name not in live]
        for p in orphans:
            shutil.rmtree(p, ignore_errors=True)
        con = sqlite3.connect(self.root / SQLITE, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            con.execute("VACUUM")
            if con.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the old pages' frames
        finally:
            con.close()
        done = Cleaned(len(orphans), round(took(), 3))
        log.info(
            "chroma_server_files_cleaned", extra={"folders": done.folders, "seconds": done.seconds}
        )
        return done


def _read_only(db: Path) -> closing[sqlite3.Connection]:
    return closing(
        sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    )
