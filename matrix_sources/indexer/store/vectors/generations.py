"""Where Chroma's collections are, and which are live: the segments' catalog.

The collection is split into segments (segments.py), each one Chroma collection of its
own *generation*. A redaction or a purge deletes points, but Chroma 1.5 keeps what it
deleted in its files: a deleted id's vector stays in the HNSW segment's
`data_level0.bin` until its slot is reused, queued upserts sit in `embeddings_queue`,
and Chroma's SQLite runs without `secure_delete`, so freed pages keep their bytes.
`delete_collection` does not even remove the segment's folder (chroma#5520). So a
compaction (vectors/compactor.py) copies a segment's live points, vectors and metadata
as they are, into a fresh generation, records it live in the event log (one row of its
`meta` table, the catalog: the atomic swap), and drops the old one:

    generation n        embedded: folder ROOT/g<n> (a client of its own), collection BASE-g<n>
                        server:   collection BASE-g<n> on the server
    generation 0        what the release before generations wrote: ROOT itself, collection BASE
    catalog             event log meta SEGMENTS_KEY: the live generations in write order,
                        oldest first (the last is the hot segment), each marked dirty once
                        it holds a deleted or overwritten point
    drop (embedded)     the old client is stopped and its folder deleted: every byte goes
    drop (server)       delete_collection: the points leave every query; what the server
                        keeps of them in its own files is removed when its folder is
                        reachable (server_files.py; else see docs/storage.md)

Generation numbers are never reused while a folder or collection of that number is
there. A crash before a swap keeps the old generations live; whatever the catalog does
not name is swept the next time the writer opens the store (`sweep`). The release
before segments recorded one live generation (LEGACY_KEY): it is read as a catalog of
one segment. Nothing here reads or writes Chroma's private tables.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .server_files import ServerFiles

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection
    from chromadb.config import Settings

log = logging.getLogger(__name__)

SEGMENTS_KEY = "chroma_segments"
LEGACY_KEY = "chroma_generation"  # the one live generation, before segments
_GEN_DIR = re.compile(r"g(\d+)")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
LEGACY_FILES = (
    "chroma.sqlite3",
    "chroma.sqlite3-wal",
    "chroma.sqlite3-shm",
    "chroma.sqlite3-journal",
)


class Catalog(Protocol):
    """Where the live generations are recorded: the event log's meta table."""

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


@dataclass(frozen=True, slots=True)
class Entry:
    """One segment as the catalog records it."""

    n: int  # its live generation
    dirty: bool  # it holds a deleted or overwritten point (in its files): copy it


def _settings() -> Settings:
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False)


class Generations:
    def __init__(
        self,
        root: Path | None,
        host: str | None,
        port: int | None,
        base: str,
        catalog: Catalog,
        server_files: ServerFiles | None = None,
    ) -> None:
        self.root = None if host else root
        self.host, self.port, self.base, self.catalog = host, port, base, catalog
        self.server_files = server_files if host else None
        self._server: ClientAPI | None = None
        self._made = 0  # the highest generation made by this process

    # -- naming ---------------------------------------------------------------------

    def name(self, n: int) -> str:
        return self.base if n == 0 else f"{self.base}-g{n}"

    def folder(self, n: int) -> Path:
        assert self.root is not None
        return self.root if n == 0 else self.root / f"g{n}"

    # -- the catalog ----------------------------------------------------------------

    def entries(self) -> list[Entry]:
        """The live segments, oldest first. No catalog yet: the unsegmented release's
        one generation (dirty: its deleted points were never tracked), else what is
        there (a store reopened without an event log), else one empty segment."""
        got = self.catalog.get_meta(SEGMENTS_KEY)
        if got:
            return [Entry(int(e["g"]), bool(e["dirty"])) for e in json.loads(got)]
        legacy = self.catalog.get_meta(LEGACY_KEY)
        if legacy:
            found = [Entry(int(legacy), True)]
        else:
            found = [Entry(n, True) for n in self.present()] or [Entry(1, False)]
        self.record(found)
        return found

    def record(self, entries: Iterable[Entry]) -> None:
        """The swap: one write of the event log's meta table."""
        self.catalog.set_meta(
            SEGMENTS_KEY, json.dumps([{"g": e.n, "dirty": e.dirty} for e in entries])
        )
        if self.catalog.get_meta(LEGACY_KEY):
            self.catalog.set_meta(LEGACY_KEY, "")  # one record of what is live

    # -- clients and collections ------------------------------------------------------

    def _server_client(self) -> ClientAPI:
        if self._server is None:
            import chromadb

            # Server mode: a store given no folder is given a host (ChromaStore).
            assert self.host is not None

            self._server = chromadb.HttpClient(
                host=self.host, port=self.port or 8000, settings=_settings()
            )
        return self._server

    def client(self, n: int) -> ClientAPI:
        if self.root is None:
            return self._server_client()
        import chromadb

        folder = self.folder(n)
        folder.mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(path=str(folder), settings=_settings())

    def open(self, n: int, metadata: dict[str, Any] | None = None) -> tuple[ClientAPI, Collection]:
        """(client, collection) of generation n, created if missing."""
        client = self.client(n)
        # embedding_function=None on every call, or Chroma reaches for a model download.
        col = client.get_or_create_collection(
            self.name(n),
            embedding_function=None,
            metadata=metadata or None,
            configuration={"hnsw": {"space": "cosine"}},
        )
        return client, col

    def fresh(self, metadata: dict[str, Any] | None = None) -> tuple[int, ClientAPI, Collection]:
        """(n, client, collection): an empty generation after every one there is."""
        recorded = [e.n for e in self.entries()]
        n = max([self._made, *recorded, *self.present()]) + 1
        self._made = n
        self.drop(n)  # nothing should be there; never build on leftovers
        client, col = self.open(n, metadata)
        return n, client, col

    # -- what is there, and dropping ------------------------------------------------

    def present(self) -> list[int]:
        """Every generation there is, live or not, in order."""
        if self.root is None:
            pat = re.compile(re.escape(self.base) + r"-g(\d+)")
            names = [c.name for c in self._server_client().list_collections()]
            found = [int(m.group(1)) for x in names if (m := pat.fullmatch(x))]
            found += [0] if self.base in names else []
        else:
            found = [
                int(m.group(1))
                for p in (self.root.glob("g*") if self.root.exists() else ())
                if (m := _GEN_DIR.fullmatch(p.name)) and p.is_dir()
            ]
            found += [0] if (self.root / LEGACY_FILES[0]).exists() else []
        return sorted(set(found))

    def drop(self, n: int, client: ClientAPI | None = None) -> None:
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
        if n == 0:  # the first release's files, beside the generation folders
            for f in LEGACY_FILES:
                (folder / f).unlink(missing_ok=True)
            for p in folder.iterdir() if folder.exists() else ():
                if p.is_dir() and _UUID.fullmatch(p.name):
                    shutil.rmtree(p)
        elif folder.exists():
            shutil.rmtree(folder)

    def sweep(self) -> list[int]:
        """Drop every generation the catalog does not name (a compaction that crashed)."""
        live = {e.n for e in self.entries()}
        gone = [n for n in self.present() if n not in live]
        for n in gone:
            self.drop(n)
            log.warning("chroma_generation_swept", extra={"generation": n})
        return gone


def stop_client(client: object) -> None:
    """Stop an embedded client so that nothing of it writes its folder again. chromadb
    caches one system per path; stopping it closes its files."""
    from chromadb.api.client import SharedSystemClient

    system = SharedSystemClient._identifier_to_system.pop(getattr(client, "_identifier", ""), None)
    if system is not None:
        try:
            system.stop()
        except Exception as e:  # noqa: BLE001 - the folder goes anyway
            log.warning("chroma_client_stop_failed", extra={"error": type(e).__name__})
