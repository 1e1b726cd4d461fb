"""Which Chroma collection is live, and how a compaction replaces it.

A redaction or a purge deletes points, but Chroma 1.5 keeps what it deleted in its
files: a deleted id's vector stays in the HNSW segment's `data_level0.bin` until its
slot is reused, queued upserts sit in `embeddings_queue`, and Chroma's SQLite runs
without `secure_delete`, so freed pages keep their bytes. `delete_collection` does not
even remove the segment's folder (chroma#5520). So a compaction (store.compact) copies
the live points, vectors and metadata as they are, into a fresh *generation*, records
it as live in the event log (one row of its `meta` table: the atomic swap), and drops
the old one:

    generation n        embedded: folder ROOT/g<n> (a client of its own), collection BASE-g<n>
                        server:   collection BASE-g<n> on the server
    generation 0        what the previous release wrote: ROOT itself, collection BASE
    drop (embedded)     the old client is stopped and its folder deleted: every byte goes
    drop (server)       delete_collection: the points leave every query; what the server
                        keeps of them in its own files is removed when its folder is
                        reachable (server_files.py; else see docs/storage.md)

A crash before the swap keeps the old generation live; the half-made one is swept the
next time the writer opens the store (`sweep`). Nothing here reads or writes Chroma's
private tables.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Protocol

from .server_files import ServerFiles

log = logging.getLogger(__name__)

META_KEY = "chroma_generation"
_GEN_DIR = re.compile(r"g(\d+)")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
LEGACY_FILES = ("chroma.sqlite3", "chroma.sqlite3-wal", "chroma.sqlite3-shm",
                "chroma.sqlite3-journal")


class Catalog(Protocol):
    """Where the live generation is recorded: the event log's meta table."""

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...


class MemoryCatalog:
    """For a store opened without an event log (tests, benchmarks)."""

    def __init__(self) -> None:
        self._meta: dict[str, str] = {}

    def get_meta(self, key: str) -> str | None:
        return self._meta.get(key)

    def set_meta(self, key: str, value: str) -> None:
        self._meta[key] = value


def _settings():
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False)


class Generations:
    def __init__(self, root: Path | None, host: str | None, port: int | None, base: str,
                 catalog: Catalog, server_files: ServerFiles | None = None) -> None:
        self.root = None if host else root
        self.host, self.port, self.base, self.catalog = host, port, base, catalog
        self.server_files = server_files if host else None
        self._server = None

    # -- naming ---------------------------------------------------------------------

    def name(self, n: int) -> str:
        return self.base if n == 0 else f"{self.base}-g{n}"

    def folder(self, n: int) -> Path:
        assert self.root is not None
        return self.root if n == 0 else self.root / f"g{n}"

    def live(self) -> int:
        got = self.catalog.get_meta(META_KEY)
        if got is not None:
            return int(got)
        n = self._discover()
        self.catalog.set_meta(META_KEY, str(n))
        return n

    def _discover(self) -> int:
        """No record yet: a data dir of the previous release (generation 0), else the
        newest generation there is (a store reopened without an event log), else 1."""
        if self.root is None:
            names = {c.name for c in self._server_client().list_collections()}
            return 0 if self.base in names else 1
        if (self.root / LEGACY_FILES[0]).exists():
            return 0
        found = [int(m.group(1)) for p in self.root.glob("g*")
                 if (m := _GEN_DIR.fullmatch(p.name)) and p.is_dir()]
        return max(found, default=1)

    # -- clients and collections ------------------------------------------------------

    def _server_client(self):
        if self._server is None:
            import chromadb

            self._server = chromadb.HttpClient(host=self.host, port=self.port or 8000,
                                               settings=_settings())
        return self._server

    def client(self, n: int):
        if self.root is None:
            return self._server_client()
        import chromadb

        folder = self.folder(n)
        folder.mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(path=str(folder), settings=_settings())

    def open(self, n: int, metadata: dict | None = None):
        """(client, collection) of generation n, created if missing."""
        client = self.client(n)
        # embedding_function=None on every call, or Chroma reaches for a model download.
        col = client.get_or_create_collection(
            self.name(n), embedding_function=None, metadata=metadata or None,
            configuration={"hnsw": {"space": "cosine"}})
        return client, col

    def fresh(self, metadata: dict | None = None):
        """(n, client, collection): an empty generation after every one there is."""
        n = max([self.live(), *self._others()]) + 1
        self.drop(n)  # nothing should be there; never build on leftovers
        client, col = self.open(n, metadata)
        return n, client, col

    def swap(self, n: int) -> None:
        self.catalog.set_meta(META_KEY, str(n))

    # -- dropping -------------------------------------------------------------------

    def drop(self, n: int, client=None) -> None:
        """Remove generation n entirely (embedded: its folder; server: its collection)."""
        if self.root is None:
            c = self._server_client()
            if self.name(n) in {x.name for x in c.list_collections()}:
                c.delete_collection(self.name(n))
                if self.server_files is not None:
                    self.server_files.clean()
            return
        if client is not None:
            stop_client(client)
        folder = self.folder(n)
        if n == 0:  # the previous release's files, beside the generation folders
            for f in LEGACY_FILES:
                (folder / f).unlink(missing_ok=True)
            for p in folder.iterdir() if folder.exists() else ():
                if p.is_dir() and _UUID.fullmatch(p.name):
                    shutil.rmtree(p)
        elif folder.exists():
            shutil.rmtree(folder)

    def _others(self) -> list[int]:
        """Generations present besides the live one (leftovers of a crash)."""
        live = self.live()
        if self.root is None:
            pat = re.compile(re.escape(self.base) + r"-g(\d+)")
            names = [c.name for c in self._server_client().list_collections()]
            found = [int(m.group(1)) for x in names if (m := pat.fullmatch(x))]
            found += [0] if self.base in names else []
        else:
            found = [int(m.group(1)) for p in (self.root.glob("g*") if self.root.exists()
                                                else ())
                     if (m := _GEN_DIR.fullmatch(p.name)) and p.is_dir()]
            found += [0] if (self.root / LEGACY_FILES[0]).exists() else []
        return sorted(n for n in set(found) if n != live)

    def sweep(self) -> list[int]:
        """Drop every generation but the live one (a compaction that crashed)."""
        gone = self._others()
        for n in gone:
            self.drop(n)
            log.warning("chroma_generation_swept", extra={"generation": n})
        return gone


class Live:
    """The generation a store reads and writes: its number, client and collection, and,
    while a compaction copies it, the ids written meanwhile (the copy catches them up
    before the swap). One per store, shared with its compactor (chroma_compaction.py);
    a swap replaces the collection every later call of the store reads."""

    def __init__(self, gens: Generations, after_swap: Callable[[], None] | None = None) -> None:
        """`after_swap`: called once the old generation is dropped (the event log's WAL
        truncated: its pages held the old generation's record)."""
        self.gens = gens
        self.after_swap = after_swap
        self.n = gens.live()
        self.client, self.collection = gens.open(self.n)
        self.written: set[str] | None = None

    def follow(self) -> bool:
        """Open the generation the catalog names now, if another process swapped it."""
        n = self.gens.live()
        if n == self.n:
            return False
        self.n = n
        self.client, self.collection = self.gens.open(n)
        return True

    def reopen(self) -> None:
        """Open the live generation's folder afresh (embedded: a stale vector index)."""
        stop_client(self.client)
        self.client, self.collection = self.gens.open(self.n)

    def wrote(self, ids) -> None:
        """Ids written while a compaction copies (caught up before its swap)."""
        written = self.written
        if written is not None:
            written.update(ids)

    def swap(self, n: int, client: Any, collection: Any) -> None:
        """Make generation n live (one row of the event log: the atomic step), then drop
        the one it replaces."""
        old_n, old_client = self.n, self.client
        self.gens.swap(n)
        self.n, self.client, self.collection = n, client, collection
        self.gens.drop(old_n, old_client)
        if self.after_swap is not None:
            self.after_swap()


def stop_client(client) -> None:
    """Stop an embedded client so that nothing of it writes its folder again. chromadb
    caches one system per path; stopping it closes its files."""
    from chromadb.api.client import SharedSystemClient

    system = SharedSystemClient._identifier_to_system.pop(getattr(client, "_identifier", ""),
                                                          None)
    if system is not None:
        try:
            system.stop()
        except Exception as e:  # noqa: BLE001 - the folder goes anyway
            log.warning("chroma_client_stop_failed", extra={"error": type(e).__name__})
