"""Heap hygiene for the commands that write the collection (`run`, `import`).

Chroma (1.5, embedded) persists its HNSW index buffers at full capacity, slots not
yet used included, from memory malloc handed it uninitialised (`length.bin`,
`data_level0.bin`). That memory held whatever the process freed before: a
transaction body with a refused room's messages, a purged room's documents. Found
here: a message's text in `length.bin` of 2 fresh collections out of 5.

glibc can overwrite memory when it is freed (`glibc.malloc.perturb`), except chunks
kept in its per-thread cache, so the cache is turned off too. Tunables are read when
a process starts: the command re-executes itself once with them set. Python's small
objects live in its own arenas, which malloc never hands out. Other C libraries
(musl) are left as they are. `MATRIX_SOURCES_HEAP_HYGIENE=0` opts out.

The same re-exec caps malloc at 2 arenas: the pipeline, Chroma, torch and aiohttp
threads otherwise each grow an arena of their own. Measured with bench/live.py at
200 messages/s for 30 s: peak RSS 809 MiB against 944 with the default (8 per core),
throughput unchanged (docs/benchmarks.md, Performance).
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
from collections.abc import Callable

from matrix_sources.indexer.clock import Clock

TUNABLES = ("glibc.malloc.perturb=165", "glibc.malloc.tcache_count=0", "glibc.malloc.arena_max=2")
MARKER = "MATRIX_SOURCES_HEAP_HYGIENE"


def hygienic_env(env: dict[str, str]) -> dict[str, str] | None:
    """The environment to re-execute with, or None if this one will do."""
    if env.get(MARKER) in ("0", "1") or platform.libc_ver()[0] != "glibc":
        return None
    current = env.get("GLIBC_TUNABLES", "")
    missing = [t for t in TUNABLES if t.split("=")[0] not in current]
    if not missing:
        return None
    return {**env, "GLIBC_TUNABLES": ":".join(filter(None, [current, *missing])), MARKER: "1"}


def ensure_heap_hygiene() -> None:
    """Re-execute this very command with the tunables set, once; call it before the
    command allocates anything of note."""
    env = hygienic_env(dict(os.environ))
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def release_free_memory() -> None:
    """Hand memory freed after one-off work (start-up's checks and reads, a pipeline
    run) back to the system, so the service's resident set does not keep its high-water
    mark for good. glibc only; elsewhere nothing."""
    if platform.libc_ver()[0] != "glibc":
        return
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class IdleTrim:
    """What searches freed goes back to the system once they pause: a search's
    candidates, texts and model buffers are freed when it ends, but glibc keeps the
    pages, so the resident set grew with every `!sources` (2,591 -> 2,697 MiB over 60
    questions at a million windows, bench/scale.py) until the next pipeline run trimmed
    it; 2 s after the last one it was 2,567 MiB. `searched` may be called from any
    thread; the trim runs off the event loop once no search came for `quiet` seconds,
    and between searches once they have come without such a pause for `busy` seconds
    (a trim takes 4 ms at a million windows; the asks of bench/scale.py come for 15 s
    without a pause, and the resident set right after them stood 60 MiB over its
    steady state)."""

    def __init__(
        self,
        clock: Clock,
        quiet: float = 2.0,
        release: Callable[[], None] = release_free_memory,
        busy: float = 5.0,
    ) -> None:
        self.clock, self.quiet, self.release, self.busy = clock, quiet, release, busy
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last = 0.0
        self._untrimmed_since: float | None = None  # the first search since the last trim
        self._timer: asyncio.Task | None = None
        self._trims: set[asyncio.Task] = set()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def trimmed(self) -> None:
        """Returns once the trims under way are done."""
        await asyncio.gather(*list(self._trims))

    def searched(self) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._arm)
        except RuntimeError:  # the loop closed: the service is stopping
            pass

    def _arm(self) -> None:
        self._last = now = self.clock.now()
        if self._untrimmed_since is None:
            self._untrimmed_since = now
        elif now - self._untrimmed_since >= self.busy:
            self._trim()
        if self._timer is None:
            self._timer = self.clock.later(self.quiet, self._due, "idle-trim")

    def _due(self) -> None:
        self._timer = None
        wait = self._last + self.quiet - self.clock.now()
        if wait > 0:  # a search came meanwhile: wait for the pause after it
            self._timer = self.clock.later(wait, self._due, "idle-trim")
            return
        self._trim()

    def _trim(self) -> None:
        self._untrimmed_since = None
        task = asyncio.ensure_future(asyncio.to_thread(self.release))
        self._trims.add(task)
        task.add_done_callback(self._trims.discard)
