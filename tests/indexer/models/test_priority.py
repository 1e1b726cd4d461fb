"""A `!sources` never queues behind indexing (issue 26 item 6): the model is taken in
turns, searches first (indexer/models/turns.py). Real threads, a real pipeline
over a real event log and Chroma; the embedder holds its calls until the test lets
them go, so the order is the gate's, not the scheduler's."""

from __future__ import annotations

import threading

from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.models.turns import ModelTurns
from matrix_sources.indexer.pipeline import pipeline as pipeline_mod
from matrix_sources.indexer.pipeline.pipeline import Pipeline
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID
from matrix_sources.indexer.search.searcher import Searcher, SourceQuery
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

ROOM = RoomID("!ops:example.org")
T0 = 1_700_000_000_000
HOUR = 3_600_000


class HeldEmbedder(HashEmbedder):
    """Each pipeline call waits for `go`; the calls are recorded in the order they ran."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.go = threading.Semaphore(0)
        self.in_call = threading.Event()

    def encode(self, texts):
        who = "query" if texts[0].startswith("where is") else "pipeline"
        self.calls.append(who)
        if who == "pipeline":
            self.in_call.set()
            assert self.go.acquire(timeout=30)
        return super().encode(texts)


def _indexing(tmp_path, emb, turns, monkeypatch):
    monkeypatch.setattr(pipeline_mod, "EMBED_CALL", 1)  # one window a call: 4 calls
    log = EventLog(tmp_path / "eventlog.sqlite3")
    store = ChromaStore(path=tmp_path / "chroma", eventlog=log)
    # Four windows: messages hours apart.
    log.append(
        [
            (
                Message(
                    EventID(f"$m{i}"),
                    ROOM,
                    UserID("@a:example.org"),
                    T0 + i * HOUR,
                    f"window {i} on the backup",
                ),
                None,
            )
            for i in range(4)
        ]
    )
    pipeline = Pipeline(log, emb, store, ChunkPolicy(), turns=turns)
    return log, store, threading.Thread(target=pipeline.process_all)


def _ask(emb, store, turns):
    return threading.Thread(
        target=Searcher(emb, store, turns=turns).search,
        args=(SourceQuery.build(["where is the backup"]),),
    )


def _search_meanwhile(emb, store, turns, indexing) -> bool:
    """While the pipeline's first model call (or pass) is held, ask; let that one call
    go. True if the search then ran to its end before the pipeline's next call was let
    go; then let the pipeline finish."""
    assert emb.in_call.wait(30)  # the pipeline's first call holds the model
    asking = _ask(emb, store, turns)
    asking.start()
    while not turns.queries_waiting:
        threading.Event().wait(0.001)
    assert emb.calls == ["pipeline"]  # it waits: no search inside an embedding call
    emb.go.release()  # the first call ends; the next one would be held
    asking.join(3)
    searched = not asking.is_alive()
    for _ in range(3):
        emb.go.release()
    asking.join(30)
    indexing.join(30)
    return searched


def test_a_search_goes_before_the_pipelines_next_embedding_call(tmp_path, monkeypatch):
    """The search waits for the call running when it came, and no longer: one call is
    let go, and the search runs to its end while the pipeline's next call waits. (On a
    plain lock the pipeline's thread takes the model back first and its next call,
    held, keeps the search waiting: the join below times out.)"""
    emb, turns = HeldEmbedder(), ModelTurns()
    log, store, indexing = _indexing(tmp_path, emb, turns, monkeypatch)
    indexing.start()
    assert _search_meanwhile(emb, store, turns, indexing)
    assert emb.calls[:3] == ["pipeline", "query", "pipeline"]
    assert log.counts() == {"indexed": 4}
    log.close()


def test_a_search_waits_for_one_forward_pass_not_a_whole_call(tmp_path, monkeypatch):
    """The pipeline's call of four windows is taken a forward pass (one text here) a
    turn: the search goes after the first pass. (Taken a call a turn, the search came
    after all four windows: calls[:2] == pipeline, pipeline.)"""
    emb, turns = HeldEmbedder(), ModelTurns()
    sizes: list[int] = []

    def passes(texts):  # as the ONNX embedder runs a call: a pass at a time, here of one
        for i, text in enumerate(texts):
            sizes.append(1)
            yield [i], emb.encode([text])

    emb.passes = passes
    log, store, indexing = _indexing(tmp_path, emb, turns, monkeypatch)
    monkeypatch.setattr(pipeline_mod, "EMBED_CALL", 4)  # the four windows in one call
    indexing.start()
    assert _search_meanwhile(emb, store, turns, indexing)
    assert emb.calls[:3] == ["pipeline", "query", "pipeline"]
    assert len(sizes) == 4  # every window in a pass of its own
    assert log.counts() == {"indexed": 4}
    log.close()
