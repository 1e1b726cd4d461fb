"""A data dir written by the previous release opens, is migrated and searches without
re-embedding: its window text was in Chroma's documents (and in the event log's
events), its reference sections' text only in Chroma's documents.

The previous release's data dir is built here as it wrote it: the event log with the
events indexed into their windows, and the collection `matrix_sources` in the chroma
folder itself, written with chromadb directly, documents included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import load_config
from matrix_sources.indexer.datadir import init_data_dir
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.chunker import build_windows, document, embed_text
from matrix_sources.indexer.pipeline.rebuild import expected_meta
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID
from matrix_sources.indexer.search.searcher import SourceQuery
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.generations import SEGMENTS_KEY
from matrix_sources.indexer.store.vectors.points import window_metadata
from tests.vectorscan import files_holding

ROOM = RoomID("!legacy:example.org")
LINES = [
    "how do I rotate the signing key",
    "run the rotate-keys job then restart",
    "the disk fills with old logs",
    "set logrotate to keep seven days",
    "grub rescue after the kernel update",
    "boot the live usb and reinstall grub",
]
REF_TEXT = "## Backups\nThe nightly backup canary-ref-77q runs borg at 02:00."
REF_META = {
    "room_id": "",
    "room_label": "ops.md › Backups",
    "corpus": "reference",
    "event_ids": "[]",
    "first_event_id": "",
    "last_event_id": "",
    "senders": "[]",
    "ts_first": 1,
    "ts_last": 1,
    "n_events": 0,
    "ref_corpus": "ops",
    "ref_file": "ops.md",
    "ref_heading": "Backups",
    "ref_section": "ops/ops.md#Backups",
    "ref_chunk": 0,
}


def _indexed_data_dir(root: Path, segments: dict | None = None):
    """A data dir (hash embedder; `segments`: index.chroma.segments) whose event log
    holds LINES, indexed into their windows; the event log is left open."""
    data = root / "data"
    init_data_dir(data, "http://127.0.0.1:8008", "example.org")
    y = YAML()
    raw = y.load((data / "config.yaml").read_text())
    raw["index"]["embedder"] = "hash"
    if segments is not None:
        raw["index"]["chroma"]["segments"] = segments
    with open(data / "config.yaml", "w") as f:
        y.dump(raw, f)
    cfg = load_config(data / "config.yaml")
    msgs = [
        Message(
            EventID(f"$l{i}"),
            ROOM,
            UserID(f"@u{i % 2}:example.org"),
            1_700_000_000_000 + i * 60_000,
            body,
        )
        for i, body in enumerate(LINES)
    ]
    windows = build_windows(msgs, ChunkPolicy(max_bytes=80))
    log = EventLog(cfg.database)
    log.append([(m, None) for m in msgs])
    for w in windows:
        log.mark_indexed(ROOM, {m.event_id: w.window_id for m in w.messages}, w.messages[-1])
    return cfg, windows, log


def previous_release_data_dir(root: Path):
    cfg, windows, log = _indexed_data_dir(root)
    log.close()
    emb = HashEmbedder()
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(
        path=str(cfg.chroma.path), settings=Settings(anonymized_telemetry=False)
    )
    col = client.get_or_create_collection(
        "matrix_sources", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
    )
    col.modify(metadata=expected_meta(emb))
    vectors = emb.encode([embed_text(w) for w in windows] + [REF_TEXT])
    col.upsert(
        ids=[w.window_id for w in windows] + ["rlegacychunk"],
        embeddings=vectors,
        documents=[document(w) for w in windows] + [REF_TEXT],
        metadatas=[window_metadata(w) for w in windows] + [REF_META],
    )
    return cfg, windows, dict(zip([w.window_id for w in windows] + ["rlegacychunk"], vectors))


def folder_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())


def test_a_previous_release_data_dir_is_migrated_and_searched_without_re_embedding(tmp_path):
    cfg, windows, vectors = previous_release_data_dir(tmp_path)
    chroma = cfg.chroma.path
    assert b"rotate-keys job" in folder_bytes(chroma)  # the old release kept text there
    assert b"canary-ref-77q" in folder_bytes(chroma)

    emb = HashEmbedder()
    index = Index.open(cfg, emb)
    assert index.ensure_meta() is False  # same model and chunker: no rebuild
    assert emb.batches == 0  # migrated without embedding anything
    store = index.store
    assert json.loads(index.eventlog.get_meta(SEGMENTS_KEY)) == [{"g": 1, "dirty": False}]
    assert store.count() == len(windows) + 1
    raw = store.records(["documents", "embeddings"])
    assert all(d is None for d in raw["documents"])
    for wid, v in zip(raw["ids"], raw["embeddings"]):
        assert list(v) == pytest.approx(vectors[wid], abs=1e-6)
    # Not a byte of text left in Chroma's folder; the old generation's files are gone.
    after = folder_bytes(chroma)
    assert b"rotate-keys job" not in after and b"canary-ref-77q" not in after
    assert not (chroma / "chroma.sqlite3").exists()
    # The reference section's text moved to the event log.
    assert index.eventlog.texts.ref_texts(["rlegacychunk"]) == {"rlegacychunk": REF_TEXT}

    hits = index.searcher.search(SourceQuery.build(["rotate the signing key"], 3))
    assert hits and "rotate the signing key" in hits[0].text  # text from the event log
    # Searching embeds the query (and the lines it quotes), never a stored window again.
    after_search = store.records(["embeddings"])
    for wid, v in zip(after_search["ids"], after_search["embeddings"]):
        assert list(v) == pytest.approx(vectors[wid], abs=1e-6)
    refs = index.searcher.search(SourceQuery.build(["nightly backup borg"], 3, corpus="reference"))
    assert [h.window_id for h in refs] == ["rlegacychunk"] and refs[0].text == REF_TEXT

    # Opened again: nothing left to migrate, and the vectors are where they were.
    index.close()
    again = Index.open(cfg, emb)
    batches = emb.batches
    assert again.ensure_meta() is False and emb.batches == batches
    assert [s.n for s in again.store.segments.list] == [1]
    some = next(iter(vectors.values()))
    assert files_holding(chroma, some, n=len(some))


def unsegmented_release_data_dir(root: Path, generation: int = 3):
    """A data dir as the release before segments wrote it: text in the event log only
    (reference sections in `ref_chunks`), one live collection `matrix_sources-g<n>` in
    the folder chroma/g<n>, its number in the event log's meta (`chroma_generation`)."""
    # Small segments, so that the first compaction visibly splits the old collection.
    cfg, windows, log = _indexed_data_dir(root, {"hot_windows": 2, "max_windows": 2})
    log.texts.put_ref_texts([("rlegacychunk", "ops", REF_TEXT)])
    log.set_meta("chroma_generation", str(generation))
    log.set_meta("text_home", "eventlog")
    log.close()
    emb = HashEmbedder()
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(
        path=str(cfg.chroma.path / f"g{generation}"), settings=Settings(anonymized_telemetry=False)
    )
    col = client.get_or_create_collection(
        f"matrix_sources-g{generation}",
        embedding_function=None,
        configuration={"hnsw": {"space": "cosine"}},
    )
    col.modify(metadata=expected_meta(emb))
    ids = [w.window_id for w in windows] + ["rlegacychunk"]
    vectors = emb.encode([embed_text(w) for w in windows] + [REF_TEXT])
    col.upsert(
        ids=ids, embeddings=vectors, metadatas=[window_metadata(w) for w in windows] + [REF_META]
    )
    return cfg, windows, dict(zip(ids, vectors))


def test_an_unsegmented_data_dir_opens_as_one_segment_and_its_first_compaction_splits_it(tmp_path):
    """The collection of the release before segments is kept as it is (no copy, no
    re-embedding) as one segment, marked dirty: its deleted points were never tracked.
    The first compaction copies it into segments of at most max_windows; every vector is
    the one stored, and the old folder goes."""
    cfg, windows, vectors = unsegmented_release_data_dir(tmp_path)
    chroma = cfg.chroma.path
    emb = HashEmbedder()
    index = Index.open(cfg, emb)
    assert index.ensure_meta() is False and emb.batches == 0
    store = index.store
    assert json.loads(index.eventlog.get_meta(SEGMENTS_KEY)) == [{"g": 3, "dirty": True}]
    assert not index.eventlog.get_meta("chroma_generation")  # one record of what is live
    assert store.count() == len(windows) + 1
    hits = index.searcher.search(SourceQuery.build(["rotate the signing key"], 3))
    assert hits and "rotate the signing key" in hits[0].text
    before = [h.window_id for h in hits]

    gone = windows[-1].window_id
    store.delete([gone])
    batches = emb.batches
    assert store.compact() == len(windows)
    assert emb.batches == batches  # copied, not embedded
    segs = store.segments
    assert segs.counts() == [2] * (len(windows) // 2) + [1] * (len(windows) % 2)
    assert not (chroma / "g3").exists()
    assert sorted(p.name for p in chroma.iterdir()) == sorted(f"g{s.n}" for s in segs.list)
    raw = store.records(["embeddings"])
    assert sorted(raw["ids"]) == sorted(set(vectors) - {gone})
    for wid, v in zip(raw["ids"], raw["embeddings"]):
        assert list(v) == pytest.approx(vectors[wid], abs=1e-6)  # nothing re-embedded
    again = index.searcher.search(SourceQuery.build(["rotate the signing key"], 3))
    assert [h.window_id for h in again] == [w for w in before if w != gone][: len(again)]
    assert files_holding(tmp_path, vectors[gone], n=len(vectors[gone])) == {}
