"""Reference corpora: Markdown and plain-text documents, searchable beside the chat.

    ref add NAME PATH   PATH: one file, or a folder (every .md, .markdown, .txt in it)
    ref sync NAME       read PATH again: changed sections re-embedded, gone ones tombstoned
    ref rm NAME         manifest entries, then chunks, then the registry entry
    ref list

    file --headings--> sections (heading path; a long section split into parts)
         --lines-->    chunks of at most chunk_bytes: the text in the event log's
                       `ref_chunks`, the vector in the collection (corpus "reference";
                       ref_corpus, ref_file, ref_heading), no text in Chroma

Every section is one `reference` artifact of the manifest. The order of a sync is the
point (the seed's trap): an entry leaves the manifest before its chunks leave the
collection, and is appended only after its chunks were upserted. The manifest never
holds a section the collection does not, so a failed sync cannot leave entries that
exclude evidence for a corpus that is not there. Running it again finishes the job.

A chunk's id hashes corpus, file, section, position and text: an unchanged section
keeps its ids and is not embedded again; a changed one gets new ids, the old deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..clock import REAL, Clock
from ..models.embedder import Embedder
from ..records import ARTIFACT_REFERENCE, CORPUS_REFERENCE, Artifact, ChunkPolicy
from ..store.vectors.chroma import ChromaStore
from ..store.vectors.points import point_metadata
from .manifest import Manifest, emitted_iso, utc_now_iso
from .normalise import sha256_normalised, text_shingles

log = logging.getLogger(__name__)

REGISTRY_FILE = "references.json"
SUFFIXES = (".md", ".markdown", ".txt")
MAX_SECTION_BYTES = 8000  # a longer section is cut into parts, each its own artifact
EMBED_BATCH = 64
# A chunk is at most as long as a chat window (the model reads 256 word pieces and drops
# the rest); the data dir's `index.window_max_bytes` when opened through
# components.open_references, which `ref add|sync` and the rebuild's resync both use.
CHUNK_BYTES = ChunkPolicy().max_bytes
CORPUS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
SEP = " › "


class ReferenceError(ValueError):
    """A `ref` command the admin must fix; the message says how."""


@dataclass(frozen=True, slots=True)
class Section:
    corpus: str
    file: str
    heading: str  # heading path, "Disk › Cleanup"; "" before any heading
    name: str  # the artifact name: corpus/file#heading path
    text: str


@dataclass(frozen=True, slots=True)
class Chunk:
    chunk_id: str
    section: Section
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class SyncReport:
    corpus: str
    files: int
    sections: int
    chunks: int
    embedded: int  # chunks embedded and upserted now (new or changed)
    deleted: int  # chunks tombstoned
    artifacts_added: int
    artifacts_removed: int


@dataclass(frozen=True, slots=True)
class CorpusInfo:
    name: str
    path: str
    synced_at: str
    sections: int  # live manifest entries
    chunks: int  # records in the collection


def read_files(path: Path) -> list[tuple[str, str]]:
    """(path relative to the corpus root, text) of every document, sorted."""
    if path.is_file():
        return [(path.name, path.read_text(encoding="utf-8", errors="replace"))]
    if not path.is_dir():
        raise ReferenceError(f"{path}: no such file or folder")
    out = []
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path)
        if (
            p.is_file()
            and p.suffix.lower() in SUFFIXES
            and not any(part.startswith(".") for part in rel.parts)
        ):
            out.append((rel.as_posix(), p.read_text(encoding="utf-8", errors="replace")))
    if not out:
        raise ReferenceError(f"{path}: no {', '.join(SUFFIXES)} files in it")
    return out


def _parts(lines: list[str], max_bytes: int) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    size = 0
    for line in lines:
        n = len(line.encode("utf-8")) + 1
        if parts[-1] and size + n > max_bytes:
            parts.append([])
            size = 0
        parts[-1].append(line)
        size += n
    return parts


def cut_sections(
    corpus: str, file: str, text: str, max_bytes: int = MAX_SECTION_BYTES
) -> list[Section]:
    """Sections by ATX heading (`#` lines inside code fences are not headings), named by
    heading path; a plain-text file is one section. Empty sections are skipped."""
    markdown = not file.lower().endswith(".txt")
    blocks: list[tuple[str, list[str]]] = []  # (heading path, lines incl. the heading)
    stack: list[tuple[int, str]] = []
    current: list[str] = []
    fence: str | None = None
    for line in text.replace("\r\n", "\n").split("\n"):
        if markdown and fence is None and (m := _HEADING.match(line)):
            blocks.append((SEP.join(t for _, t in stack), current))
            level = len(m.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, (m.group(2) or "").strip()))
            current = [line]
            continue
        current.append(line)
        if markdown and (f := _FENCE.match(line)):
            mark = f.group(1)
            if fence is None:
                fence = mark
            elif (
                mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip(mark[0] + " \t")
            ):
                fence = None
    blocks.append((SEP.join(t for _, t in stack), current))

    sections: list[Section] = []
    seen: dict[str, int] = {}
    for heading, lines in blocks:
        body = lines[1:] if lines and markdown and _HEADING.match(lines[0]) else lines
        if not any(line.strip() for line in body):
            continue
        base = f"{corpus}/{file}#{heading}" if heading else f"{corpus}/{file}"
        seen[base] = seen.get(base, 0) + 1
        if seen[base] > 1:
            base += f" [{seen[base]}]"
        for i, part in enumerate(_parts(lines, max_bytes), start=1):
            name = base if i == 1 else f"{base} (part {i})"
            sections.append(Section(corpus, file, heading, name, "\n".join(part).strip("\n")))
    return sections


def cut_chunks(section: Section, max_bytes: int) -> list[Chunk]:
    """Pieces of at most max_bytes, cut at line ends (a longer line at spaces)."""
    lines: list[str] = []
    for line in section.text.split("\n"):
        while len(line.encode("utf-8")) > max_bytes:
            cut = line.rfind(" ", 0, max_bytes)
            cut = cut if cut > 0 else max_bytes
            lines.append(line[:cut])
            line = line[cut:].lstrip()
        lines.append(line)
    chunks: list[Chunk] = []
    for part in _parts(lines, max_bytes):
        text = "\n".join(part).strip("\n")
        if text.strip():
            i = len(chunks)
            key = "\0".join((section.corpus, section.file, section.name, str(i), text))
            cid = "r" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:31]
            chunks.append(Chunk(cid, section, i, text))
    return chunks


def chunk_metadata(c: Chunk, now_ms: int) -> dict:
    s = c.section
    return point_metadata(
        "",
        f"{s.file}{SEP}{s.heading}" if s.heading else s.file,
        CORPUS_REFERENCE,
        (),
        (),
        now_ms,
        now_ms,
        ref_corpus=s.corpus,
        ref_file=s.file,
        ref_heading=s.heading,
        ref_section=s.name,
        ref_chunk=c.index,
    )


class References:
    def __init__(
        self,
        data_dir: Path,
        store: ChromaStore,
        manifest: Manifest,
        embedder: Embedder | None = None,
        chunk_bytes: int = CHUNK_BYTES,
        clock: Clock = REAL,
    ) -> None:
        """`clock`: its wall clock dates the registry, the chunks and the artifacts."""
        self.registry_path = Path(data_dir) / REGISTRY_FILE
        self.store, self.manifest, self.embedder = store, manifest, embedder
        self.chunk_bytes, self.clock = chunk_bytes, clock

    # -- the registry: name -> path, kept beside the config ---------------------------

    def _registry(self) -> dict:
        try:
            data = json.loads(self.registry_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError as e:
            raise ReferenceError(f"{self.registry_path}: not valid JSON ({e})") from None
        return data.get("corpora", {}) if isinstance(data, dict) else {}

    def _save(self, corpora: dict) -> None:
        tmp = self.registry_path.with_name(self.registry_path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"corpora": corpora}, f, indent=2, sort_keys=True, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.registry_path)

    # -- commands --------------------------------------------------------------------

    def add(self, name: str, path: Path) -> SyncReport:
        if not CORPUS_NAME.fullmatch(name):
            raise ReferenceError(
                f"{name!r}: a corpus name is letters, digits, '.', '_' "
                "and '-', at most 64, starting with a letter or digit"
            )
        corpora = self._registry()
        if name in corpora:
            raise ReferenceError(
                f"corpus {name} exists (from {corpora[name]['path']}): "
                f"`ref sync {name}` reads it again, `ref rm {name}` removes it"
            )
        root = Path(path).expanduser().resolve()
        report = self._sync(name, root)
        now = utc_now_iso(self.clock)
        corpora[name] = {"path": str(root), "added_at": now, "synced_at": now}
        self._save(corpora)
        return report

    def sync(self, name: str) -> SyncReport:
        corpora = self._registry()
        if name not in corpora:
            raise ReferenceError(f"no corpus named {name}; `ref list` shows them")
        report = self._sync(name, Path(corpora[name]["path"]))
        corpora[name]["synced_at"] = utc_now_iso(self.clock)
        self._save(corpora)
        return report

    def rm(self, name: str) -> tuple[int, int]:
        """Remove a corpus: (manifest entries removed, chunks deleted). Exclusions made
        earlier stay as they are, in the journal and the event log."""
        corpora = self._registry()
        chunk_ids = [w.window_id for w in self.store.get(where={"ref_corpus": name})]
        self.manifest.refresh()
        if name not in corpora and not chunk_ids and not self.manifest.live(corpus=name):
            raise ReferenceError(f"no corpus named {name}; `ref list` shows them")
        # Entries first: chunks without entries are visible (and `rm` again removes
        # them); entries without chunks would exclude evidence unseen.
        removed = self.manifest.remove(
            lambda e: e.get("kind") == ARTIFACT_REFERENCE and e.get("corpus") == name
        )
        self.store.delete(chunk_ids)
        corpora.pop(name, None)
        self._save(corpora)
        log.info(
            "reference_removed",
            extra={"corpus": name, "artifacts": removed, "chunks": len(chunk_ids)},
        )
        return removed, len(chunk_ids)

    def list(self) -> list[CorpusInfo]:
        corpora = self._registry()
        self.manifest.refresh()
        chunks: dict[str, int] = {}
        for w in self.store.get(where={"corpus": CORPUS_REFERENCE}):
            if w.ref:
                chunks[w.ref.corpus_name] = chunks.get(w.ref.corpus_name, 0) + 1
        sections: dict[str, int] = {}
        for i in self.manifest.live(kind=ARTIFACT_REFERENCE):
            sections[i.corpus] = sections.get(i.corpus, 0) + 1
        names = sorted(set(corpora) | set(chunks) | set(sections))
        return [
            CorpusInfo(
                n,
                corpora.get(n, {}).get("path", "(not registered)"),
                corpora.get(n, {}).get("synced_at", ""),
                sections.get(n, 0),
                chunks.get(n, 0),
            )
            for n in names
        ]

    # -- the sync itself ---------------------------------------------------------------

    def _sync(self, name: str, root: Path) -> SyncReport:
        if self.embedder is None:
            raise ReferenceError("no embedder: reference sync embeds chunks")
        recorded = self.store.meta().get("embedder")
        if recorded and recorded != self.embedder.name:
            raise ReferenceError(
                f"the collection was embedded with {recorded}, the config "
                f"says {self.embedder.name}: set index.embedder back"
            )
        files = read_files(root)
        sections = [s for f, text in files for s in cut_sections(name, f, text)]
        chunks = [c for s in sections for c in cut_chunks(s, self.chunk_bytes)]
        k = self.manifest.shingle_size
        wanted = {s.name: (sha256_normalised(s.text), s) for s in sections}
        existing = {w.window_id for w in self.store.get(where={"ref_corpus": name})}
        self.manifest.refresh()
        live = {i.name: i for i in self.manifest.live(kind=ARTIFACT_REFERENCE, corpus=name)}
        stale = {n for n, i in live.items() if n not in wanted or wanted[n][0] != i.sha256}

        # 1. Entries of changed or removed sections leave before their chunks do.
        removed = (
            self.manifest.remove(
                lambda e: (
                    e.get("kind") == ARTIFACT_REFERENCE
                    and e.get("corpus") == name
                    and (e.get("name") in stale or e.get("k") != k)
                )
            )
            if stale or self.manifest.stale
            else 0
        )
        # 2. New and changed chunks embedded and upserted; chunks no longer cut, deleted.
        new = [c for c in chunks if c.chunk_id not in existing]
        now_ms = self.clock.now_ms()
        for start in range(0, len(new), EMBED_BATCH):
            batch = new[start : start + EMBED_BATCH]
            vectors = self.embedder.encode(
                [f"{c.section.heading}\n{c.text}" if c.section.heading else c.text for c in batch]
            )
            self.store.upsert_references(
                [c.chunk_id for c in batch],
                vectors,
                [c.text for c in batch],
                [chunk_metadata(c, now_ms) for c in batch],
            )
        gone = sorted(existing - {c.chunk_id for c in chunks})
        self.store.delete(gone)
        # 3. Only now, with every chunk committed, the sections become artifacts.
        emitted = emitted_iso(self.clock.now_ms())
        added = self.manifest.append(
            [
                Artifact(
                    ARTIFACT_REFERENCE, n, sha, text_shingles(s.text, k), emitted, k, corpus=name
                )
                for n, (sha, s) in wanted.items()
                if n not in live or n in stale
            ]
        )
        log.info(
            "reference_synced",
            extra={
                "corpus": name,
                "files": len(files),
                "sections": len(sections),
                "embedded": len(new),
                "deleted": len(gone),
                "artifacts": added,
            },
        )
        return SyncReport(
            name, len(files), len(sections), len(chunks), len(new), len(gone), added, removed
        )
