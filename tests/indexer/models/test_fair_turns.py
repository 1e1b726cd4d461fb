"""Searches never starve indexing (issue 44 item 8): with the API's rate limit off, 50
clients searching kept a query waiting or running at every moment, and a message sent
meanwhile waited 28.9 s, until the flood ended. Searches still go first, but a
background turn that has waited BACKGROUND_WAIT_S goes before the next search.

Real threads on ModelTurns, a fake clock that moves only inside a search's turn: who
takes the model next is decided when a turn ends, so the order is deterministic."""

from __future__ import annotations

import threading
import time

from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.models.turns import BACKGROUND_WAIT_S, ModelTurns


class Now:
    """Seconds, moved only by the test; each thread's readings kept (`read`)."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.read: dict[int, list[float]] = {}

    def __call__(self) -> float:
        self.read.setdefault(threading.get_ident(), []).append(self.t)
        return self.t


def until(condition, seconds: float = 10.0) -> None:
    """Yield (never sleep) until `condition()` holds."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0)  # a yield, not a wait


class Held:
    """A thread in one turn (a search's, or indexing's), held until `go`."""

    def __init__(self, turns: ModelTurns, name: str, order: list[str], query: bool) -> None:
        self.entered, self.go = threading.Event(), threading.Event()

        def run() -> None:
            with turns.query() if query else turns.background():
                order.append(name)
                self.entered.set()
                assert self.go.wait(30)

        self.thread = threading.Thread(target=run, name=name, daemon=True)
        self.thread.start()

    def release(self) -> None:
        self.go.set()
        self.thread.join(10)


def test_a_background_turn_that_waited_its_share_goes_before_the_next_search():
    now, order = Now(), []
    turns = ModelTurns(Clock(now=now))
    held = []
    try:
        s1 = Held(turns, "search 1", order, query=True)
        held.append(s1)
        assert s1.entered.wait(10)
        index = Held(turns, "index", order, query=False)
        held.append(index)
        until(lambda: turns.background_waiting == 1)
        s2 = Held(turns, "search 2", order, query=True)
        held.append(s2)
        until(lambda: turns.queries_waiting == 2)
        # Indexing has not waited long: the waiting search goes first.
        now.t += BACKGROUND_WAIT_S / 2
        s1.release()
        assert s2.entered.wait(10)
        s3 = Held(turns, "search 3", order, query=True)
        held.append(s3)
        until(lambda: turns.queries_waiting == 2)
        # Now it has: it goes before search 3, which was waiting first.
        now.t += BACKGROUND_WAIT_S / 2
        s2.release()
        assert index.entered.wait(10), f"indexing still waits behind searches: {order}"
        assert order == ["search 1", "search 2", "index"]
        # Its next pass asks at once: the waiting search goes first again.
        again = Held(turns, "index again", order, query=False)
        held.append(again)
        until(lambda: turns.background_waiting == 1)
        index.release()
        assert s3.entered.wait(10)
        assert order == ["search 1", "search 2", "index", "search 3"]
        s3.release()
        assert again.entered.wait(10)  # no search waits: at once
    finally:
        for h in held:
            h.go.set()
        for h in held:
            h.thread.join(10)


def test_under_a_flood_of_searches_each_forward_pass_waits_a_bounded_time():
    """Two searchers that never stop, the next search waiting before the last ends (a
    search: 0.2 s of fake time; the API's two threads with requests queued), and
    indexing that wants 20 forward passes: each pass waited at most BACKGROUND_WAIT_S
    and the search running then. Before, indexing waited until the searches stopped.
    (That searches still go first is the test above's.)"""
    now = Now()
    turns = ModelTurns(Clock(now=now))
    search_s, passes = 0.2, 20
    waits: list[float] = []
    searches: list[float] = []
    done = threading.Event()

    def searcher() -> None:
        while not done.is_set():
            with turns.query():
                searches.append(now())
                now.t += search_s
                # A flood: the next search waits before this one ends.
                until(lambda: turns.queries_waiting >= 2 or done.is_set())

    def indexing() -> None:
        mine = now.read.setdefault(threading.get_ident(), [])
        for _ in range(passes):
            mine.clear()
            with turns.background():
                # The turn read the clock first when it asked.
                waits.append(now() - mine[0])
        done.set()

    threads = [threading.Thread(target=searcher, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    until(lambda: turns.queries_waiting > 0)
    worker = threading.Thread(target=indexing, daemon=True)
    worker.start()
    worker.join(10)
    finished_in_the_flood = not worker.is_alive()
    done.set()  # (for a failing run: the searches stop, indexing ends)
    for t in threads + [worker]:
        t.join(30)
    assert finished_in_the_flood and len(waits) == passes, "indexing waited for the flood"
    assert max(waits) <= BACKGROUND_WAIT_S + search_s + 1e-9, waits
    assert len(searches) > passes  # the searches went on meanwhile


def test_a_call_takes_one_turn_a_forward_pass_and_no_more():
    """Under a flood every background turn waits its share: the turn that only found
    the passes at their end cost each call of the pipeline BACKGROUND_WAIT_S more."""
    from matrix_sources.indexer.models.embedder import HashEmbedder, encode_in_length_order

    class Counting(ModelTurns):
        taken = 0

        def background(self):
            Counting.taken += 1
            return super().background()

    emb = HashEmbedder()

    def passes(texts):  # as the ONNX embedder runs a call: passes of two texts
        for start in range(0, len(texts), 2):
            part = list(range(start, min(start + 2, len(texts))))
            yield part, emb.encode([texts[i] for i in part])

    emb.passes = passes
    texts = [f"window {i} about the backup" for i in range(5)]
    vectors = encode_in_length_order(emb, texts, 5, Counting())
    assert vectors == emb.encode(texts)
    assert Counting.taken == 3  # 2 + 2 + 1 texts
