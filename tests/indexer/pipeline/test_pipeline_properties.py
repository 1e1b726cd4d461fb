"""The pipeline's guarantees, property-tested over generated live rooms: messages
arrive a few at a time (the room's last block is cut into conversations at once), the
store fails now and then, and runs follow each other.

- every accepted message is in exactly one window, and the windows are those that
  chunking everything at once gives;
- a run embeds each window at most once, and only the windows its new messages
  joined or started (the worker runs at most once per debounce interval:
  tests/indexer/pipeline/test_live_debounce.py);
- the cursor moves only after the store acknowledged: after a failed run it is where
  the last acknowledged batch left it.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.chunker import build_windows
from matrix_sources.indexer.pipeline.pipeline import Pipeline
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.strength import examples

ROOM = RoomID("!live:example.org")
T0 = 1_700_000_000_000
PEOPLE = [UserID(f"@{n}:example.org") for n in ("alice", "bob", "carol", "dave")]
WORDS = ["disk", "full", "nfs", "mount", "printer", "queue", "thanks", "try", "restart"]


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def encode(self, texts):
        self.calls.append(list(texts))
        return super().encode(texts)


class FlakyStore:
    """The real store; upsert fails when `failing` is set, as an unreachable server."""

    def __init__(self, inner: ChromaStore) -> None:
        self.inner, self.failing = inner, False

    def upsert(self, windows, vectors):
        if self.failing:
            raise ConnectionError("chroma unreachable")
        return self.inner.upsert(windows, vectors)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@st.composite
def live_room(draw):
    n = draw(st.integers(1, 30))
    msgs, ts = [], T0
    for i in range(n):
        ts += draw(st.sampled_from([1_000, 30_000, 120_000, 40 * 60_000]))
        sender = draw(st.sampled_from(PEOPLE))
        to = draw(st.sampled_from([None, *PEOPLE]))
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8)))
        body = f"{to[1:].split(':')[0]}: {text}" if to and to != sender else text
        msgs.append(Message(EventID(f"$m{i:03d}"), ROOM, sender, ts, body))
    # Arrivals: cut points, and whether the store fails on that run.
    cuts = sorted(set(draw(st.lists(st.integers(1, n), max_size=6))) | {n})
    fails = [draw(st.booleans()) for _ in cuts]
    return msgs, cuts, fails


@settings(max_examples=examples(40), deadline=None, database=None)
@given(live_room(), st.integers(60, 400))
def test_live_pipeline_guarantees(room, max_bytes):
    msgs, cuts, fails = room
    policy = ChunkPolicy(max_bytes=max_bytes, gap_ms=30 * 60_000)
    with tempfile.TemporaryDirectory() as tmp:
        log = EventLog(Path(tmp) / "eventlog.sqlite3")
        store = FlakyStore(ChromaStore(path=Path(tmp) / "chroma"))
        emb = CountingEmbedder()
        p = Pipeline(log, emb, store, policy)
        appended = 0
        acknowledged: str | None = None
        for cut, fail in zip(cuts, fails):
            log.append([(m, None) for m in msgs[appended:cut]])
            appended = cut
            for attempt in (True, False) if fail else (False,):
                store.failing = attempt
                before = {w.window_id: w.event_ids for w in store.get()}
                emb.calls.clear()
                try:
                    p.process_all()
                except ConnectionError:
                    assert store.failing
                    cursor = log.cursor(ROOM)
                    assert (cursor.event_id if cursor else None) == acknowledged
                    assert {w.window_id: w.event_ids for w in store.get()} == before
                    continue
                so_far = msgs[:appended]
                expected = build_windows(so_far, policy)
                stored = {w.window_id: w.event_ids for w in store.get()}
                assert stored == {w.window_id: tuple(w.event_ids) for w in expected}
                counts = Counter(e for ids in stored.values() for e in ids)
                assert set(counts) == {m.event_id for m in so_far}
                assert all(c == 1 for c in counts.values())
                for m in so_far:
                    assert log.status_of(m.event_id)[0] == "indexed"
                # Embedded: each changed window once, and no unchanged one.
                changed = [w for w in expected if before.get(w.window_id) != tuple(w.event_ids)]
                embedded = [t for call in emb.calls for t in call]
                assert len(embedded) == len(changed)
                acknowledged = max(so_far, key=lambda m: m.ts).event_id
                assert log.cursor(ROOM).event_id == acknowledged
        log.close()
