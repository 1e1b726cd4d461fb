"""One contract for every store: embedded Chroma in a temp dir and a Chroma server
(`chroma run` on 127.0.0.1: tests/chromaserver.py), each over an SQLite event log and over a
PostgreSQL one (tests/pgkit.py). The same behaviour is required of all four."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.chunker import build_windows, document
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID
from matrix_sources.indexer.search.texts import WindowTexts
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from matrix_sources.indexer.store.vectors.generations import SEGMENTS_KEY
from matrix_sources.indexer.store.vectors.segments import SegmentPolicy
from matrix_sources.indexer.store.vectors.server_files import (
    MARKER_PREFIX,
    ServerFiles,
    ServerFilesError,
)
from tests.paths import ROOT
from tests.pgkit import fresh_schema
from tests.storekit import stored_vectors


def _open(request, tmp_path, eventlog=None, policy=None) -> ChromaStore:
    # Unique per test and variant (a long name cut short would be shared between them).
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:10]
    name = f"contract_{digest}_{re.sub(r'[^A-Za-z0-9]+', '_', request.node.name)}"[:60]
    name = name.rstrip("_")
    if request.param.startswith("embedded"):
        return ChromaStore(
            path=tmp_path / "chroma", collection=name, eventlog=eventlog, policy=policy
        )
    server = request.getfixturevalue("chroma_server")
    # The server's folder is reachable here, as with index.chroma.persist_dir set.
    return ChromaStore(
        host="127.0.0.1",
        port=server.port,
        collection=name,
        eventlog=eventlog,
        server_files=ServerFiles(server.data),
        policy=policy,
    )


@pytest.fixture(params=["embedded", "server", "embedded-postgresql", "server-postgresql"])
def store(request, tmp_path):
    if not request.param.endswith("-postgresql"):
        yield _open(request, tmp_path, EventLog(tmp_path / "eventlog.sqlite3"))
        return
    with fresh_schema() as dsn:
        s = _open(request, tmp_path, EventLog(dsn))
        yield s
        s.eventlog.close()


SMALL = SegmentPolicy(hot=6, fanout=4, cap=24, share=None)  # a segment every 6 points


@pytest.fixture(params=["embedded", "server"])
def segmented(request, tmp_path):
    """The store with small segments: the guarantees hold per segment."""
    return _open(request, tmp_path, EventLog(tmp_path / "eventlog.sqlite3"), SMALL)


@pytest.fixture
def reopen(store):
    """Open the store (again) over the same event log and folder or server."""
    g = store.segments.gens
    return lambda: ChromaStore(
        path=store.path,
        host=g.host,
        port=g.port,
        collection=g.base,
        eventlog=EventLog(store.eventlog.location),
    )


def index(store: ChromaStore, ws) -> None:
    """Upsert windows and record them in the event log, as the pipeline does."""
    log = store.eventlog
    store.upsert(ws, HashEmbedder().encode([w.messages[0].body for w in ws]))
    for w in ws:
        log.append([(m, None) for m in w.messages])
        log.mark_indexed(w.room_id, {m.event_id: w.window_id for m in w.messages}, w.messages[-1])


def windows(n: int, room: str = "!r:example.org", offset: int = 0):
    msgs = [
        Message(
            EventID(f"$e{room[1:3]}{i}"),
            RoomID(room),
            UserID(f"@u{i % 3}:example.org"),
            1_700_000_000_000 + i * 1000,
            f"message {i} about topic {i % 5} words",
        )
        for i in range(offset, offset + n)
    ]
    return build_windows(msgs, ChunkPolicy(max_bytes=80))


def test_upsert_get_count_and_metadata_round_trip(store):
    ws = windows(12)
    emb = HashEmbedder()
    store.upsert(ws, emb.encode([w.messages[0].body for w in ws]))
    assert store.count() == len(ws)
    got = {w.window_id: w for w in store.get()}
    for w in ws:
        g = got[w.window_id]
        assert g.event_ids == tuple(w.event_ids) and g.room_id == w.room_id
        assert g.senders == tuple(w.senders) and (g.ts_first, g.ts_last) == (w.ts_first, w.ts_last)
    store.upsert(ws[:2], emb.encode(["x", "y"]))  # upsert again: no duplicates
    assert store.count() == len(ws)


def test_query_orders_by_similarity_and_filters(store):
    emb = HashEmbedder()
    a = windows(6, "!a:example.org")
    b = windows(6, "!b:example.org", offset=100)
    store.upsert(a + b, emb.encode([w.messages[0].body for w in a + b]))
    [res] = store.nearest(emb.encode([a[0].messages[0].body]), 3)
    assert res[0].window_id == a[0].window_id and res[0].similarity > 0.99
    assert [n.similarity for n in res] == sorted((n.similarity for n in res), reverse=True)
    [only_b] = store.nearest(
        emb.encode(["message"]), 50, where={"room_id": "!b:example.org"}, records=True
    )
    assert only_b and all(n.window.room_id == "!b:example.org" for n in only_b)


def test_query_asking_for_more_than_stored_returns_what_there_is(store):
    """The store asks Chroma for n results without counting first (a count costs more
    than the query at 100,000 windows): an empty store or a short one must answer."""
    emb = HashEmbedder()
    assert store.nearest(emb.encode(["anything", "else"]), 5) == [[], []]
    ws = windows(3)
    store.upsert(ws, emb.encode([w.messages[0].body for w in ws]))
    [res] = store.nearest(emb.encode(["message"]), 50)
    assert sorted(n.window_id for n in res) == sorted(w.window_id for w in ws)


def test_delete_delete_room_reset_and_meta(store):
    emb = HashEmbedder()
    a, b = windows(5, "!a:example.org"), windows(5, "!b:example.org", offset=50)
    store.upsert(a + b, emb.encode(["t"] * len(a + b)))
    store.delete([a[0].window_id])
    assert a[0].window_id not in {w.window_id for w in store.get()}
    store.delete_room("!b:example.org")
    assert {w.room_id for w in store.get()} == {"!a:example.org"}
    store.set_meta({"embedder": "hash-bow", "dim": 64})
    assert store.meta()["embedder"] == "hash-bow"
    store.reset()
    assert store.count() == 0


def test_vectors_pages_and_readd(store):
    emb = HashEmbedder()
    ws = windows(20)
    store.upsert(ws, emb.encode([w.messages[0].body for w in ws]))
    pages = list(store.pages_with_vectors(7))
    assert sum(len(p) for p in pages) == len(ws) and all(len(v) == 64 for p in pages for _, v in p)
    before = {w.window_id: w for w in store.get()}
    store.readd([ws[0].window_id])
    after = {w.window_id: w for w in store.get()}
    assert after[ws[0].window_id] == before[ws[0].window_id]
    [got] = store.nearest([pages[0][0][1]], 3)
    assert pages[0][0][0] in {nb.window_id for nb in got}


def test_matching_finds_windows_by_the_tokenizer(store):
    """The lexical leg's fallback (no postings yet, the CLI): the event log's bodies
    scanned with the tokenizer, with the room filter; the same on a server."""
    from matrix_sources.indexer.search.lexical import matching

    a, b = windows(5, "!a:example.org"), windows(5, "!b:example.org", offset=50)
    index(store, a + b)
    assert set(matching(store, "topic", True)) == {w.window_id for w in a + b}
    only_b = set(matching(store, "words", False, {"room_id": "!b:example.org"}))
    assert only_b == {w.window_id for w in b}
    # Sender ids are not bodies: "u1" is a sender's localpart only.
    assert matching(store, "u1") == []


def test_chroma_holds_no_text_and_the_text_comes_from_the_event_log(store):
    ws = windows(8)
    index(store, ws)
    raw = store.records(["documents", "metadatas"])
    assert raw["ids"] and all(d is None for d in raw["documents"])
    assert not any("message" in str(v) for m in raw["metadatas"] for v in m.values())
    texts = WindowTexts(store.eventlog)
    got = {w.window_id: text for w, (text, _) in zip(store.get(), texts.read(store.get()))}
    assert got == {w.window_id: document(w) for w in ws}
    [res] = store.nearest(HashEmbedder().encode([ws[0].messages[0].body]), 1, records=True)
    [(text, lines)] = texts.read([res[0].window])
    assert text == document(ws[0]) and [line.body for line in lines] == [
        m.body for m in ws[0].messages
    ]
    # Its events no longer in the window (a redaction, a rebuild): no text is read.
    store.eventlog.requeue_windows([ws[0].window_id])
    assert texts.read(store.get([ws[0].window_id])) == [("", ())]


def test_reference_text_lives_in_the_event_log_and_leaves_with_its_chunk(store):
    meta = {
        "room_id": "",
        "corpus": "reference",
        "ref_corpus": "ops",
        "ref_file": "a.md",
        "ref_heading": "Disk",
        "event_ids": "[]",
        "senders": "[]",
    }
    store.upsert_references(
        ["rchunk1"], HashEmbedder().encode(["df -h shows disk"]), ["df -h shows disk"], [meta]
    )
    assert store.records(["documents"])["documents"] == [None]
    [w] = store.get(["rchunk1"])
    assert WindowTexts(store.eventlog).read([w]) == [("df -h shows disk", ())]
    assert w.ref.corpus_name == "ops"
    store.delete(["rchunk1"])
    assert store.eventlog.texts.ref_texts(["rchunk1"]) == {} and store.get(["rchunk1"]) == []


def test_compaction_copies_the_live_points_and_drops_the_old_collection(store, reopen):
    ws = windows(30)
    index(store, ws)
    store.set_meta({"embedder": "hash-bow", "dim": 64})
    store.delete([ws[0].window_id])
    before = stored_vectors(store, [w.window_id for w in ws])
    metas_before = {w.window_id: w for w in store.get()}
    first = store.segments.hot.n
    assert store.compact() == len(ws) - 1
    assert store.segments.hot.n == first + 1
    assert json.loads(store.eventlog.get_meta(SEGMENTS_KEY)) == [  # the swap, recorded
        {"g": first + 1, "dirty": False}
    ]
    after = stored_vectors(store, [w.window_id for w in ws])
    assert after.keys() == before.keys()
    for wid, v in before.items():  # copied as stored: nothing re-embedded
        assert after[wid] == pytest.approx(v, abs=1e-6)
    assert {w.window_id: w for w in store.get()} == metas_before
    assert store.meta()["embedder"] == "hash-bow"
    [res] = store.nearest([before[ws[5].window_id]], 1)
    assert res[0].window_id == ws[5].window_id
    again = reopen()  # the event log says which generation is live
    assert again.segments.hot.n == first + 1 and again.count() == len(ws) - 1
    assert again.sweep() == []
    if store.path is not None:  # embedded: the old generation's folder is gone
        assert [p.name for p in store.path.iterdir()] == [f"g{first + 1}"]


_CRASH = """
import os, signal, sys
from pathlib import Path
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from matrix_sources.indexer.store.vectors.segments import SegmentPolicy
path, host, port, name, log = sys.argv[1:6]
store = ChromaStore(path=Path(path) if path else None, host=host or None,
                    port=int(port) if port else None, collection=name,
                    eventlog=EventLog(log))
store.compact(before_swap=lambda: os.kill(os.getpid(), signal.SIGKILL))
"""

_CRASH_SECOND = """
import os, signal, sys
from pathlib import Path
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from matrix_sources.indexer.store.vectors.segments import SegmentPolicy
path, host, port, name, log = sys.argv[1:6]
store = ChromaStore(path=Path(path) if path else None, host=host or None,
                    port=int(port) if port else None, collection=name,
                    eventlog=EventLog(Path(log)), policy=SegmentPolicy(6, 4, 24, share=None))
swaps = []
store.compact(before_swap=lambda: swaps.append(1) if not swaps
              else os.kill(os.getpid(), signal.SIGKILL))
"""


def test_a_crash_between_copy_and_swap_keeps_the_old_collection(store, reopen):
    ws = windows(20)
    index(store, ws)
    store.delete([ws[0].window_id])  # its segment holds a deleted point: copied
    live = store.segments.hot.n
    gens = store.segments.gens
    args = [
        str(store.path or ""),
        gens.host or "",
        str(gens.port or ""),
        gens.base,
        str(store.eventlog.location),
    ]
    proc = subprocess.run([sys.executable, "-c", _CRASH, *args], capture_output=True, cwd=ROOT)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    again = reopen()
    assert again.segments.hot.n == live and again.count() == len(ws) - 1  # the old one, whole
    assert again.segments.hot.dirty  # and still to be copied
    assert again.sweep() == [live + 1]  # the half-made copy, dropped
    assert again.count() == len(ws) - 1
    assert again.compact() == len(ws) - 1  # and compaction works again


def _persist_dir(store: ChromaStore, request) -> Path:
    return store.path if store.path is not None else request.getfixturevalue("chroma_server").data


def test_a_purged_room_leaves_no_text_and_no_vector_in_the_persist_dir(store, request, tmp_path):
    """Purge (purge.py): the event log zeroes the room's text, its points are deleted,
    the collection is compacted. No file of Chroma's folder, or of the server's
    persist dir, holds the room's text (Chroma never had it) or its vectors."""
    from matrix_sources.indexer.ingest.purge import Purger
    from matrix_sources.indexer.pipeline.pipeline import Pipeline
    from matrix_sources.indexer.records import Refusal
    from matrix_sources.indexer.store.journal import Journal
    from tests.vectorscan import files_holding

    canary = "purge-canary-x7q2"
    secret = [
        Message(
            EventID(f"$s{i}"),
            RoomID("!secret:example.org"),
            UserID("@u:example.org"),
            1_700_000_000_000 + i * 1000,
            f"{canary} line {i} of the secret room",
        )
        for i in range(6)
    ]
    ws = build_windows(secret, ChunkPolicy(max_bytes=80))
    index(store, ws)
    index(store, windows(6, "!clean:example.org"))
    vectors = stored_vectors(store, [w.window_id for w in ws])
    root = _persist_dir(store, request)
    assert all(files_holding(root, v, n=len(v)) for v in vectors.values())  # the check can see them
    log = store.eventlog
    pipeline = Pipeline(log, HashEmbedder(), store)
    report = Purger(
        log, Journal(tmp_path / "journal.jsonl"), store, pipeline.guard, pipeline.compaction
    ).purge(Refusal("join_rule_not_public", RoomID("!secret:example.org"), whole_room=True))
    assert report.windows == len(ws) and report.compacted is True
    assert {w.room_id for w in store.get()} == {"!clean:example.org"}
    files = [p for p in root.rglob("*") if p.is_file()]
    assert not [p for p in files if canary.encode() in p.read_bytes()]
    assert not [p for p in tmp_path.glob("eventlog.sqlite3*") if canary.encode() in p.read_bytes()]
    # A server keeps a dropped collection's segment folder (chroma#5520) and its SQLite
    # free pages; with its folder reachable the store removes both (server_files.py).
    assert {w: files_holding(root, v, n=len(v)) for w, v in vectors.items()} == {
        w: {} for w in vectors
    }


@pytest.mark.parametrize("store", ["server"], indirect=True)
def test_a_persist_dir_that_is_not_the_servers_is_refused(store, tmp_path, request):
    """index.chroma.persist_dir names the server's own folder, or nothing is removed: not
    a folder without Chroma's SQLite, nor a copy of the server's folder, which holds the
    live collection by name while the server writes (and keeps dropped vectors) elsewhere.
    The proof is a marker written through the server and found in the folder."""
    import chromadb

    server = request.getfixturevalue("chroma_server")
    client = chromadb.HttpClient(host="127.0.0.1", port=server.port)
    with pytest.raises(ServerFilesError, match="persist_dir: .* has no chroma.sqlite3"):
        ServerFiles(tmp_path).check(client)
    copy = tmp_path / "copy"
    shutil.copytree(server.data, copy)
    live = store.segments.gens.name(store.segments.hot.n)
    with closing(sqlite3.connect(copy / "chroma.sqlite3")) as con:  # by name it passed
        assert live in {r[0] for r in con.execute("SELECT name FROM collections")}
    with pytest.raises(ServerFilesError) as refused:
        ServerFiles(copy).check(client)
    assert "index.chroma.persist_dir" in str(refused.value)
    assert "is not the folder of the Chroma server" in str(refused.value)
    assert "chroma run --path DIR" in str(refused.value)  # the fix
    with pytest.raises(ServerFilesError, match="is not the folder"):
        ChromaStore(
            host="127.0.0.1",
            port=server.port,
            collection=store.segments.gens.base,
            eventlog=EventLog(store.eventlog.path),
            server_files=ServerFiles(copy),
        )
    ServerFiles(server.data).check(client)  # its own folder: accepted
    assert not [
        c.name for c in client.list_collections() if c.name.startswith(MARKER_PREFIX)
    ]  # the markers are dropped again


@pytest.mark.parametrize("store", ["server"], indirect=True)
def test_a_collection_made_meanwhile_keeps_its_folder_and_orphans_go(store, request):
    """The folders of dropped collections go; a live collection's stays, and the server
    goes on answering and writing after the VACUUM."""
    import chromadb

    server = request.getfixturevalue("chroma_server")
    client = chromadb.HttpClient(host="127.0.0.1", port=server.port)
    import numpy as np

    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((2401, 64)).astype(np.float32)
    other = client.get_or_create_collection("bystander-orphans-test", embedding_function=None)
    other.add(ids=[f"x{i}" for i in range(1200)], embeddings=vectors[:1200])
    dropped = client.get_or_create_collection(
        "dropped-orphans-test",  # past
        embedding_function=None,
    )  # sync_threshold:
    dropped.add(ids=[f"d{i}" for i in range(1200)], embeddings=vectors[1200:2400])  # a folder
    folders = {p.name for p in server.data.iterdir() if p.is_dir()}
    client.delete_collection(dropped.name)
    cleaned = ServerFiles(server.data).clean()
    after = {p.name for p in server.data.iterdir() if p.is_dir()}
    assert cleaned.folders >= 1 and after < folders
    assert other.count() == 1200
    assert other.query(query_embeddings=vectors[7:8], n_results=1)["ids"] == [["x7"]]
    other.add(ids=["x-late"], embeddings=vectors[2400:])
    assert other.count() == 1201
    client.delete_collection(other.name)


def test_points_written_during_the_copy_are_caught_up_before_the_swap(store):
    """The copy runs beside the pipeline: what it writes meanwhile (an upsert, a
    re-upsert with a new vector, a delete) is in the new collection after the swap."""
    import threading

    emb = HashEmbedder()
    ws = windows(20)
    index(store, ws)
    store.delete([ws[1].window_id])  # its segment holds a deleted point: copied
    extra = windows(4, "!late:example.org", offset=500)
    changed = ws[3]
    new_vector = emb.encode(["a brand new vector for this window"])

    def meanwhile():
        store.upsert(extra, emb.encode([w.messages[0].body for w in extra]))
        store.upsert([changed], new_vector)
        store.delete([ws[0].window_id])

    copied = store.compact(lock=threading.RLock(), after_copy=meanwhile)
    assert copied == len(ws) - 2 + len(extra)
    got = stored_vectors(store, [w.window_id for w in ws + extra])
    assert set(got) == {w.window_id for w in ws[2:] + extra}
    assert got[changed.window_id] == pytest.approx(new_vector[0], abs=1e-6)


def _layout(store: ChromaStore) -> list[tuple[int, int, bool]]:
    segs = store.segments
    return [(s.n, c, s.dirty) for s, c in zip(segs.list, segs.counts())]


def test_a_crash_between_two_segments_swaps_keeps_the_first_copied_and_the_second_old(
    segmented, request
):
    """Two dirty segments: the process is killed after the first one's swap, before
    the second's. At the restart the first is its copy, the second its old generation
    (still dirty), the half-made copy is swept, and every point is there."""
    store = segmented
    ws = windows(30)  # 16 windows: segments of 6, 6 and 4
    index(store, ws)
    before = _layout(store)
    assert len(before) >= 3 and [c for _, c, _ in before][:2] == [6, 6]
    first, second = store.get()[0].window_id, store.get()[7].window_id
    store.delete([first, second])
    g = store.segments.gens
    args = [
        str(store.path or ""),
        g.host or "",
        str(g.port or ""),
        g.base,
        str(store.eventlog.path),
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _CRASH_SECOND, *args], capture_output=True, cwd=ROOT
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    again = ChromaStore(
        path=store.path,
        host=g.host,
        port=g.port,
        collection=g.base,
        eventlog=EventLog(store.eventlog.path),
        policy=SMALL,
    )
    after = _layout(again)
    assert after[0][0] > before[-1][0] and not after[0][2]  # the first: swapped
    assert after[1] == (before[1][0], 5, True)  # the second: old, whole, still dirty
    assert after[2:] == before[2:]
    assert len(again.sweep()) == 1  # the second's half-made copy
    assert again.count() == len(ws) - 2
    assert again.compact() == 5 and not any(d for _, _, d in _layout(again))


def test_writes_to_a_segment_during_its_copy_are_caught_up_before_its_swap(segmented):
    """A sealed segment is copied while the pipeline writes to it (an update, a
    delete) and to the hot segment (new points): all of it is in the store after the
    swap, and the copy, which held the updated point's old vector, is dirty."""
    import threading

    store, emb = segmented, HashEmbedder()
    ws = windows(30)  # 16 windows: segments of 6, 6 and 4
    index(store, ws)
    in_first = [w for w in store.get() if w.window_id in {x.window_id for x in ws}][:6]
    store.delete([in_first[0].window_id])  # the first segment is dirty
    changed = next(w for w in ws if w.window_id == in_first[1].window_id)
    new_vector = emb.encode(["a brand new vector for this window"])
    extra = windows(3, "!late:example.org", offset=500)

    def meanwhile():
        store.upsert([changed], new_vector)
        store.delete([in_first[2].window_id])
        store.upsert(extra, emb.encode([w.messages[0].body for w in extra]))

    assert store.compact(lock=threading.RLock(), after_copy=meanwhile) == 4
    got = stored_vectors(store, [w.window_id for w in ws + extra])
    want = {w.window_id for w in ws + extra} - {in_first[0].window_id, in_first[2].window_id}
    assert set(got) == want and store.count() == len(want)
    assert got[changed.window_id] == pytest.approx(new_vector[0], abs=1e-6)
    assert _layout(store)[0][1:] == (4, True)  # the caught-up copy holds an old vector


def test_a_deleted_point_of_a_sealed_segment_leaves_every_file(segmented, request):
    """Per segment: the deleted point's vector is in no file of the folder (embedded)
    or of the server's persist dir after the compaction, which copied its segment
    only."""
    from tests.vectorscan import files_holding

    store = segmented
    # Bodies no other test writes: the server's files hold every test's collections.
    ws = windows(30, "!sealed:example.org", offset=7000)
    index(store, ws)
    victim = store.get()[3].window_id  # the first, sealed segment
    vector = stored_vectors(store, [victim])[victim]
    root = _persist_dir(store, request)
    assert files_holding(root, vector, n=len(vector))
    store.delete([victim])
    before = _layout(store)
    assert store.compact() == 5
    after = _layout(store)
    assert after[1:] == before[1:] and after[0][0] != before[0][0]  # only it was copied
    assert files_holding(root, vector, n=len(vector)) == {}


def test_a_query_that_is_no_unit_vector_gets_its_dot_product(segmented):
    """Chroma's cosine space normalises a query; the store reports the dot product with
    the query as given, from every segment and from a server as from the embedded store
    (a pair of models asks with such vectors: indexer/models/pair_embedder.py)."""
    import numpy as np

    ws = windows(30)
    index(segmented, ws)
    assert len(segmented.segments.list) > 1
    held = stored_vectors(segmented, [w.window_id for w in ws])
    q = np.asarray(HashEmbedder().encode(["message 7 text", "message 21"]), dtype=np.float32)
    scaled = q * np.asarray([[1.7], [0.6]], dtype=np.float32)
    for vector, near in zip(scaled, segmented.nearest(scaled, 8)):
        assert near and [nb.similarity for nb in near] == pytest.approx(
            [float(np.dot(held[nb.window_id], vector)) for nb in near], abs=1e-5
        )
    unit = segmented.nearest(q, 8)
    assert [[nb.window_id for nb in lst] for lst in unit] == [
        [nb.window_id for nb in lst] for lst in segmented.nearest(scaled, 8)
    ]
