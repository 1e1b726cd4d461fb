"""One contract for every store: embedded Chroma in a temp dir and a Chroma server
(`chroma run` on 127.0.0.1, started here). The same behaviour is required of both."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from indexer.chunker import ChunkPolicy, build_windows
from indexer.embedder import HashEmbedder
from indexer.records import EventID, Message, RoomID, UserID
from indexer.store import ChromaStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory):
    exe = shutil.which("chroma") or str(Path(sys.executable).parent / "chroma")
    port = _free_port()
    path = tmp_path_factory.mktemp("chroma-server")
    log = open(path / "server.log", "wb")
    proc = subprocess.Popen([exe, "run", "--path", str(path / "data"), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat",
                                        timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("chroma run did not start:\n" + (path / "server.log").read_text())
        time.sleep(0.2)
    yield port
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(params=["embedded", "server"])
def store(request, tmp_path):
    name = f"contract_{request.node.name.replace('[', '_').replace(']', '')}"[:60]
    if request.param == "embedded":
        return ChromaStore(path=tmp_path / "chroma", collection=name)
    port = request.getfixturevalue("chroma_server")
    return ChromaStore(host="127.0.0.1", port=port, collection=name)


def windows(n: int, room: str = "!r:example.org", offset: int = 0):
    msgs = [Message(EventID(f"$e{room[1:3]}{i}"), RoomID(room), UserID(f"@u{i % 3}:example.org"),
                    1_700_000_000_000 + i * 1000, f"message {i} about topic {i % 5} words")
            for i in range(offset, offset + n)]
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
    [res] = store.query(emb.encode([a[0].messages[0].body]), 3)
    assert res[0].window.window_id == a[0].window_id and res[0].similarity > 0.99
    assert [n.similarity for n in res] == sorted((n.similarity for n in res), reverse=True)
    [only_b] = store.query(emb.encode(["message"]), 50, where={"room_id": "!b:example.org"})
    assert only_b and all(n.window.room_id == "!b:example.org" for n in only_b)


def test_query_asking_for_more_than_stored_returns_what_there_is(store):
    """The store asks Chroma for n results without counting first (a count costs more
    than the query at 100,000 windows): an empty store or a short one must answer."""
    emb = HashEmbedder()
    assert store.query(emb.encode(["anything", "else"]), 5) == [[], []]
    ws = windows(3)
    store.upsert(ws, emb.encode([w.messages[0].body for w in ws]))
    [res] = store.query(emb.encode(["message"]), 50)
    assert sorted(n.window.window_id for n in res) == sorted(w.window_id for w in ws)


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
    [got] = store.query_ids([pages[0][0][1]], 3)
    assert pages[0][0][0] in got


def test_matching_finds_documents_by_the_lexical_pattern(store):
    """The lexical leg's fallback (no postings yet, the CLI): Chroma's regex filter over
    the stored documents, with the room filter; the same on a server."""
    from indexer.lexical import pattern

    emb = HashEmbedder()
    a, b = windows(5, "!a:example.org"), windows(5, "!b:example.org", offset=50)
    store.upsert(a + b, emb.encode([w.messages[0].body for w in a + b]))
    topic3 = {w.window_id for w in a + b if any("topic 3 " in m.body for m in w.messages)}
    assert topic3 and set(store.matching(pattern("topic"))) == {w.window_id for w in a + b}
    assert set(store.matching(r"(?i)topic 3\b")) == topic3
    only_b = set(store.matching(pattern("words"), {"room_id": "!b:example.org"}))
    assert only_b == {w.window_id for w in b}
    # Sender ids are not bodies: "u1" is a sender's localpart only.
    assert store.matching(pattern("u1")) == []
