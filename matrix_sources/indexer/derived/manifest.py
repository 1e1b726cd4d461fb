"""The artifact manifest: `artifacts.jsonl` in the data dir, what the system emitted.

    {"kind": "answer", "name": "answer:$reply#1", "sha256": "…", "shingles": [...],
     "emitted_at": "2025-01-01T10:00:00.250Z", "k": 5, "sources": ["$quoted", ...]}
    {"kind": "reference", "name": "ops/cheatsheet.md#Disk › Cleanup", "sha256": "…",
     "shingles": [...], "emitted_at": "…", "k": 5, "corpus": "ops"}

Writers: the reply path appends answers, reference sync appends and removes references
(the service and `matrix-sources ref` may be different processes). Appends are O_APPEND
lines, fsynced; a removal rewrites the file atomically (temp file, fsync, rename). Both
hold an exclusive flock on `artifacts.jsonl.lock`; readers take it shared. Every reader
keeps its place in the file and picks up appends (and notices a rewrite by its inode)
on `refresh()`, so the running service sees a corpus added from the CLI.

In memory each artifact is an ordinal in a `ShingleIndex` plus its `ArtifactInfo` (no
shingles). Entries emitted with another shingle size cannot match; they are counted in
`stale` and logged, and `ref sync` re-emits its own.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ..clock import REAL, Clock
from ..records import ARTIFACT_KINDS, Artifact, EventID
from .shingleindex import ShingleIndex

MANIFEST_FILE = "artifacts.jsonl"
_EMPTY = np.empty(0, dtype=np.uint64)
BULK = 64  # new entries read at once from which one bulk merge beats adds to the delta
log = logging.getLogger(__name__)


def manifest_path(data_dir: Path) -> Path:
    return Path(data_dir) / MANIFEST_FILE


def utc_now_iso(clock: Clock = REAL) -> str:
    return datetime.fromtimestamp(clock.wall(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def emitted_iso(ms: int) -> str:
    """An artifact's `emitted_at`, to the millisecond: the derived filter compares it with
    when a message's text arrived (filter.py)."""
    dt = datetime.fromtimestamp(ms / 1000, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def emitted_ms(iso: str) -> int:
    """`emitted_at` back in ms (to the second for entries written before ms were kept,
    which errs towards judging more); 0, before everything, when it cannot be read."""
    try:
        return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    """What the manifest keeps in memory of an artifact: everything but its shingles."""

    ordinal: int
    kind: str
    name: str
    sha256: str
    emitted_at: str
    shingle_size: int
    size: int  # distinct shingles
    corpus: str = ""
    sources: tuple[EventID, ...] = ()
    emitted_ms: int = 0  # emitted_at in ms


def to_json(a: Artifact) -> str:
    entry: dict = {
        "kind": a.kind,
        "name": a.name,
        "sha256": a.sha256,
        "shingles": sorted(a.shingles),
        "emitted_at": a.emitted_at,
        "k": a.shingle_size,
    }
    if a.corpus:
        entry["corpus"] = a.corpus
    if a.sources:
        entry["sources"] = list(a.sources)
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


def _parse(line: bytes, with_shingles: bool = True) -> tuple[dict, np.ndarray] | None:
    """An entry and its shingles as uint64 (8 bytes each, not a list of Python ints:
    loading 100,000 artifacts stays within tens of MB). None for a line to skip."""
    try:
        e = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not (
        isinstance(e, dict)
        and e.get("kind") in ARTIFACT_KINDS
        and isinstance(e.get("name"), str)
        and isinstance(e.get("shingles"), list)
        and isinstance(e.get("k"), int)
    ):
        return None
    if not with_shingles:
        return e, _EMPTY
    try:
        sh = np.array(e.pop("shingles"), dtype=np.uint64)
    except (OverflowError, TypeError, ValueError):
        return None
    return e, sh


class Manifest:
    def __init__(self, path: Path, shingle_size: int) -> None:
        self.path = Path(path)
        self.shingle_size = shingle_size
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._mutex = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        self.index = ShingleIndex()
        self._info: dict[int, ArtifactInfo] = {}
        self._by_key: dict[tuple[str, str], int] = {}  # (kind, name) -> ordinal
        self._answer_sha: dict[str, int] = {}  # answers are deduplicated by content
        self._next = 0
        self._offset = 0
        self._ino: tuple[int, int] | None = None
        self._loaded = False
        self.stale = 0  # entries of another shingle size, which cannot match

    # -- locking ---------------------------------------------------------------------

    @contextmanager
    def _flock(self, exclusive: bool) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    # -- reading ---------------------------------------------------------------------

    def refresh(self) -> None:
        """Catch up with the file: appends since the last look, or all of it after a
        rewrite. A stat and nothing more when nothing changed."""
        with self._mutex:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                if self._loaded and self._info:
                    self._reset()  # the file went away: so did its artifacts
                self._loaded = True
                return
            if self._loaded and (st.st_dev, st.st_ino) == self._ino and st.st_size == self._offset:
                return
            with self._flock(exclusive=False):
                self._read_locked()

    def _read_locked(self) -> None:
        st = os.stat(self.path)
        if (st.st_dev, st.st_ino) != self._ino or st.st_size < self._offset:
            self._reset()  # rewritten (a removal): start again
        self._loaded = True
        self._ino = (st.st_dev, st.st_ino)
        pending: list[tuple[int, np.ndarray]] = []
        stale_before = self.stale
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            for line in f:  # streamed: the file may be hundreds of MB
                if not line.endswith(b"\n"):
                    break  # a torn last line waits for its newline
                self._offset += len(line)
                parsed = _parse(line) if line.strip() else None
                if parsed is not None:
                    ordinal = self._admit(*parsed)
                    if ordinal is not None:
                        pending.append((ordinal, parsed[1]))
        # An entry replaced later in the same read never reaches the index.
        pending = [(o, sh) for o, sh in pending if o in self._info]
        if len(pending) >= BULK:
            self.index.bulk_add(pending)  # one merge for a load or a big append
        else:
            for ordinal, sh in pending:
                self.index.add(ordinal, sh)
        if self.stale > stale_before:
            log.warning(
                "manifest_shingle_size_mismatch",
                extra={"entries": self.stale, "shingle_size": self.shingle_size},
            )

    def _admit(self, e: dict, sh: np.ndarray) -> int | None:
        if e["k"] != self.shingle_size:
            self.stale += 1
            return None
        key = (e["kind"], e["name"])
        if key in self._by_key:  # a later entry of the same name replaces the earlier
            self._drop(self._by_key[key])
        ordinal = self._next
        self._next += 1
        sources = got if isinstance(got := e.get("sources"), list) else []
        emitted = sys.intern(str(e.get("emitted_at", "")))
        info = ArtifactInfo(
            ordinal,
            e["kind"],
            e["name"],
            str(e.get("sha256", "")),
            emitted,
            e["k"],
            int(sh.size),
            sys.intern(str(e.get("corpus", ""))),
            tuple(EventID(s) for s in sources if isinstance(s, str)),
            emitted_ms(emitted),
        )
        self._info[ordinal] = info
        self._by_key[key] = ordinal
        if info.kind == "answer":
            self._answer_sha[info.sha256] = ordinal
        return ordinal

    def _drop(self, ordinal: int) -> None:
        info = self._info.pop(ordinal)
        self._by_key.pop((info.kind, info.name), None)
        if self._answer_sha.get(info.sha256) == ordinal:
            del self._answer_sha[info.sha256]
        self.index.discard(ordinal)

    def __len__(self) -> int:
        with self._mutex:
            return len(self._info)

    def info(self, ordinal: int) -> ArtifactInfo:
        with self._mutex:
            return self._info[ordinal]

    def overlaps(
        self, shingles: Collection[int], min_count: int = 1
    ) -> list[tuple[ArtifactInfo, int]]:
        """Every live artifact sharing at least min_count of these shingles, and how
        many it shares."""
        with self._mutex:
            return [(self._info[o], n) for o, n in self.index.overlaps(shingles, min_count).items()]

    def live(self, kind: str | None = None, corpus: str | None = None) -> list[ArtifactInfo]:
        with self._mutex:
            return [
                i
                for i in self._info.values()
                if (kind is None or i.kind == kind) and (corpus is None or i.corpus == corpus)
            ]

    # -- writing ---------------------------------------------------------------------

    def append(self, artifacts: Sequence[Artifact]) -> int:
        """Append what is not live yet (an answer whose text is live already is the same
        artifact); fsync before returning. Returns how many were written."""
        with self._mutex, self._flock(exclusive=True):
            if self.path.exists():
                self._read_locked()  # others' appends first: our offset stays exact
            else:
                self._loaded = True
            lines, seen = [], set()
            for a in artifacts:
                if a.shingle_size != self.shingle_size:
                    raise ValueError(
                        f"artifact {a.name!r} has shingle size "
                        f"{a.shingle_size}, the manifest {self.shingle_size}"
                    )
                key = (a.kind, a.name, a.sha256)
                live = self._by_key.get((a.kind, a.name))
                if (
                    key in seen
                    or (live is not None and self._info[live].sha256 == a.sha256)
                    or (a.kind == "answer" and a.sha256 in self._answer_sha)
                ):
                    continue
                seen.add(key)
                lines.append(to_json(a) + "\n")
            if not lines:
                return 0
            data = "".join(lines).encode("utf-8")
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size != self._offset:
                    os.write(fd, b"\n")  # end a torn line a crash left, or ours would join it
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._read_locked()
            return len(lines)

    def remove(self, where: Callable[[dict], bool]) -> int:
        """Remove the entries (raw JSON objects: kind, name, corpus, sha256, k, ...) for
        which `where` is true, by rewriting the file atomically; returns how many."""
        with self._mutex, self._flock(exclusive=True):
            if not self.path.exists():
                return 0
            tmp = self.path.with_name(self.path.name + ".tmp")
            removed = 0
            with open(self.path, "rb") as src, open(tmp, "wb") as out:
                for line in src:
                    if not line.endswith(b"\n"):
                        continue  # a torn last line
                    parsed = _parse(line, with_shingles=False) if line.strip() else None
                    if parsed is not None and where(parsed[0]):
                        removed += 1
                        continue
                    out.write(line)
                out.flush()
                os.fsync(out.fileno())
            if not removed:
                tmp.unlink()
                return 0
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._reset()  # as every other reader will: the file is new
            self._read_locked()
            return removed
