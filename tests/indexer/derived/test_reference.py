"""Reference corpora: sections by heading (not by `#` lines in code), bounded parts and
chunks, sync that re-embeds only what changed and tombstones what went, and the seed's
trap: manifest entries only after their chunks are committed."""

from __future__ import annotations

import shutil

import pytest

from matrix_sources.indexer.derived.manifest import Manifest
from matrix_sources.indexer.derived.reference import (
    ReferenceError,
    References,
    cut_chunks,
    cut_sections,
    read_files,
)
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.search.searcher import Searcher, SourceQuery
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.paths import FIXTURES
from tests.storekit import open_store

FIXTURE = FIXTURES / "ops-cheatsheet.md"

DOC = """Preamble before any heading.

# Guide

## Install
```bash
# not a heading: a shell comment in a fence
apt install thing
```
## Empty

## Install
second install section, same heading path

### Deep
deep text
"""


def test_sections_follow_headings_outside_fences():
    secs = cut_sections("c", "g.md", DOC)
    assert [s.heading for s in secs] == [
        "",
        "Guide › Install",
        "Guide › Install",
        "Guide › Install › Deep",
    ]
    assert [s.name for s in secs] == [
        "c/g.md",
        "c/g.md#Guide › Install",
        "c/g.md#Guide › Install [2]",
        "c/g.md#Guide › Install › Deep",
    ]
    assert "# not a heading" in secs[1].text and "apt install thing" in secs[1].text


def test_plain_text_is_one_section_and_long_sections_are_cut_into_parts():
    [s] = cut_sections("c", "notes.txt", "# not a heading in .txt\nline two")
    assert s.heading == "" and s.text.startswith("# not a heading")
    long = "# Big\n" + "\n".join(f"line {i} " + "x" * 60 for i in range(300))
    parts = cut_sections("c", "big.md", long, max_bytes=4000)
    assert len(parts) > 1 and all(len(p.text.encode()) <= 4000 for p in parts)
    assert parts[1].name == "c/big.md#Big (part 2)"
    chunks = [c for p in parts for c in cut_chunks(p, 1000)]
    assert all(len(c.text.encode()) <= 1000 for c in chunks)
    assert len({c.chunk_id for c in chunks}) == len(chunks)


def test_read_files_takes_md_and_txt_and_skips_hidden(tmp_path):
    (tmp_path / "a.md").write_text("# A\na")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("b")
    (tmp_path / "c.py").write_text("print()")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "d.md").write_text("# D")
    assert [f for f, _ in read_files(tmp_path)] == ["a.md", "sub/b.txt"]
    with pytest.raises(ReferenceError, match="no such file"):
        read_files(tmp_path / "missing")


class FailingStore:
    """A store whose upserts fail after `ok` calls, as a Chroma server going away."""

    def __init__(self, inner: ChromaStore, ok: int = 0) -> None:
        self.inner, self.ok = inner, ok

    def upsert_references(self, *args):
        if self.ok <= 0:
            raise ConnectionError("chroma unreachable")
        self.ok -= 1
        return self.inner.upsert_references(*args)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def parts(tmp_path):
    store = open_store(tmp_path)
    manifest = Manifest(tmp_path / "artifacts.jsonl", 5)
    embedder = HashEmbedder()
    return tmp_path, store, manifest, embedder


def test_no_manifest_entry_before_its_chunks_are_committed(parts):
    tmp, store, manifest, embedder = parts
    refs = References(tmp, FailingStore(store), manifest, embedder)
    with pytest.raises(ConnectionError):
        refs.add("ops", FIXTURE)
    manifest.refresh()
    assert len(manifest) == 0 and refs.list() == []  # nothing excludes anything
    ok = References(tmp, store, manifest, embedder)
    report = ok.add("ops", FIXTURE)  # running it again finishes the job
    assert report.artifacts_added == report.sections == len(manifest)
    assert {w.ref.corpus_name for w in store.get()} == {"ops"}


def test_sync_reembeds_changed_sections_only_and_tombstones_removed(parts):
    tmp, store, manifest, embedder = parts
    doc = tmp / "docs" / "ops.md"
    doc.parent.mkdir()
    shutil.copy(FIXTURE, doc)
    refs = References(tmp, store, manifest, embedder)
    first = refs.add("ops", doc.parent)
    assert first.embedded == first.chunks and first.deleted == 0
    names = {i.name: i.sha256 for i in manifest.live()}

    text = doc.read_text()
    text = text.replace("Rotate it only\nwhen it leaked", "Rotate it only\nwhen it was leaked")
    text = text[: text.index("## Logs and debugging")]  # the last two sections go
    doc.write_text(text)
    seen = embedder.texts_seen
    report = refs.sync("ops")
    assert report.embedded == 1 and embedder.texts_seen - seen == 1  # Signing keys only
    assert report.deleted == 3  # its old chunk and the two removed sections' chunks
    assert report.artifacts_removed == 3 and report.artifacts_added == 1
    after = {i.name: i.sha256 for i in manifest.live()}
    signing = next(n for n in names if n.endswith("Signing keys"))
    assert after[signing] != names[signing]
    assert not any("Logs and debugging" in n for n in after)
    assert len(store.get(where={"ref_corpus": "ops"})) == first.chunks - 2
    assert refs.sync("ops").embedded == 0  # nothing changed: nothing embedded


def test_reference_hits_are_cited_and_filtered_by_corpus(parts):
    tmp, store, manifest, embedder = parts
    References(tmp, store, manifest, embedder).add("ops", FIXTURE)
    searcher = Searcher(embedder, store)
    [hit] = searcher.search(
        SourceQuery.build(["signing key expired_ts old_signing_keys"], 1, corpus="reference")
    )
    assert hit.corpus == "reference" and hit.ref is not None
    assert (hit.ref.corpus_name, hit.ref.file) == ("ops", "ops-cheatsheet.md")
    assert hit.ref.heading == "Homeserver operations cheatsheet › Signing keys"
    assert hit.to_json()["ref"]["heading"].endswith("Signing keys")
    assert hit.first_event_id == ""
    assert searcher.search(SourceQuery.build(["signing key"], 5, corpus="chat")) == []


def test_add_refuses_a_taken_name_and_rm_an_unknown_one(parts):
    tmp, store, manifest, embedder = parts
    refs = References(tmp, store, manifest, embedder)
    refs.add("ops", FIXTURE)
    with pytest.raises(ReferenceError, match="ref sync ops"):
        refs.add("ops", FIXTURE)
    with pytest.raises(ReferenceError, match="no corpus named nope"):
        refs.rm("nope")
    with pytest.raises(ReferenceError, match="corpus name"):
        refs.add("../evil", FIXTURE)
    assert [c.name for c in refs.list()] == ["ops"]
