"""The model taken in turns, people first: a `!sources` never queues behind indexing,
and indexing never waits for the searches to stop.

    search (query turn)     waits only for the turn running now, then goes first
    pipeline (background)   one forward pass of the model (its batch_size texts) per
                            turn, taken while no query waits or runs, or, once it has
                            waited BACKGROUND_WAIT_S, as the next turn whoever waits

A plain lock does not do it: the pipeline releases it between calls and takes it again
at once, before the query's thread wakes, so under a steady ingest a query waited for
call after call (bench/live.py). Here a waiting
query holds the pipeline back at its next call, and a query turn covers the whole
search (its question and the lines it ranks both go through the model), so the
pipeline's calls never cut in between.

Searches first, only, starved indexing: with the API's rate limit off, 50 clients kept
a search waiting or running at every moment, and a message sent meanwhile waited until
the flood ended (bench/flood.py). So indexing gets a bounded share: a pass waits at most
BACKGROUND_WAIT_S and the search running then; a search, at most one pass besides the
searches ahead of it, as before. Who goes next is decided when a turn ends (the clock is
injected: tests/indexer/models/test_fair_turns.py).

The keyword index's one-off build (store/eventlog/keywords_build.py: an event log from
before it) does not use the model, but it is Python for minutes at a million windows
and holds the GIL a search needs: it waits
before each page while a search waits or runs (`pause_for_queries`). It takes no turn:
a turn is exclusive, and the pipeline's forward passes, which let go of the GIL, run
beside it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..clock import REAL, Clock

# How long a background turn (one forward pass) waits behind searches at most, before it
# goes next: a message sent while 50 clients searched was searchable within 4.8 s (the
# 1 s debounce included; bench/flood.py), and searches lose at most a pass per 0.5 s.
BACKGROUND_WAIT_S = 0.5


class ModelTurns:
    def __init__(self, clock: Clock = REAL, background_wait: float = BACKGROUND_WAIT_S) -> None:
        self._cv = threading.Condition()
        self._busy = False
        self._queries = 0  # waiting or running
        self._pausing = 0
        self._now = clock.now
        self._background_wait = background_wait
        self._background_since: list[float] = []  # when each waiting background turn asked

    @property
    def queries_waiting(self) -> int:
        return self._queries

    @property
    def background_waiting(self) -> int:
        return len(self._background_since)

    def _background_due(self) -> bool:
        """A background turn has waited its share: it goes before the next search."""
        since = self._background_since
        return bool(since) and self._now() - min(since) >= self._background_wait

    @property
    def pausing(self) -> int:
        """Threads in `pause_for_queries`, waiting for searches to end."""
        return self._pausing

    def pause_for_queries(self) -> None:
        """Return once no search waits or runs."""
        with self._cv:
            self._pausing += 1
            try:
                self._cv.wait_for(lambda: not self._queries)
            finally:
                self._pausing -= 1

    @contextmanager
    def query(self) -> Iterator[None]:
        with self._cv:
            self._queries += 1
            self._cv.wait_for(lambda: not self._busy and not self._background_due())
            self._busy = True
        try:
            yield
        finally:
            with self._cv:
                self._busy = False
                self._queries -= 1
                self._cv.notify_all()

    @contextmanager
    def background(self) -> Iterator[None]:
        with self._cv:
            asked = self._now()
            self._background_since.append(asked)
            try:
                self._cv.wait_for(
                    lambda: not self._busy and (not self._queries or self._background_due())
                )
            finally:
                self._background_since.remove(asked)
            self._busy = True
        try:
            yield
        finally:
            with self._cv:
                self._busy = False
                self._cv.notify_all()
