"""The model taken in turns, people first: a `!sources` never queues behind indexing.

    search (query turn)     waits only for the forward pass running now, then goes first
    pipeline (background)   one forward pass of the model (its batch_size texts) per
                            turn, taken only while no query waits or runs

A plain lock does not do it: the pipeline releases it between calls and takes it again
at once, before the query's thread wakes, so under a steady ingest a query waited for
call after call (issue 26: search p99 11.4 s at 541 messages/s pushed). Here a waiting
query holds the pipeline back at its next call, and a query turn covers the whole
search (its question and the lines it ranks both go through the model), so the
pipeline's calls never cut in between.

The postings' build at start (search/termindex.py) does not use the model, but it is
pure Python for minutes at a million windows and holds the GIL a search needs: it waits
before each page while a search waits or runs (`pause_for_queries`). It takes no turn:
a turn is exclusive, and the pipeline's forward passes, which let go of the GIL, run
beside it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ModelTurns:
    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._busy = False
        self._queries = 0  # waiting or running
        self._pausing = 0

    @property
    def queries_waiting(self) -> int:
        return self._queries

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
            self._cv.wait_for(lambda: not self._busy)
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
            self._cv.wait_for(lambda: not self._busy and not self._queries)
            self._busy = True
        try:
            yield
        finally:
            with self._cv:
                self._busy = False
                self._cv.notify_all()
