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

The postings' build at start (search/termindex.py) takes background turns too: pure
Python for minutes at a million windows, it would hold the GIL a search needs.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class ModelTurns:
    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._busy = False
        self._queries = 0  # waiting or running

    @property
    def queries_waiting(self) -> int:
        return self._queries

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
