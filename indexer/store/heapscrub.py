"""Freed memory is overwritten before this process can reuse it, so no library writes
what it held into a file.

Chroma's HNSW index (hnswlib) allocates its vector array for a capacity (100 slots for
a new collection, then 1.2 times more at each resize) with malloc, and writes the whole
array to `data_level0.bin`, unused slots included. What those slots held is whatever
this process freed there before: a loop of copies like a compaction's (a collection
written, a point deleted, the rest copied into a new collection) found a deleted vector
of an earlier collection in a new collection's `data_level0.bin` in 33 of 100 rounds
here, none of 100 with this on (tests/test_heapscrub.py). SQLite writes its page
buffers whole too. That was the rare privacy flake of earlier sessions: a new
generation's files holding a superseded vector, or text, of an old one.

`matrix-sources run` and `import` re-execute themselves with glibc's perturb tunable
(appservice/homeserver/heap.py, which also turns off the per-thread cache and caps the
arenas), but nothing else did: the tests, which build stores in their own process (that
is where the flake showed), and `backfill`, `ref`, `forget`, `verify --index`.

glibc's M_PERTURB (mallopt) makes every free() fill the block with one byte and every
malloc() hand out a block filled with its complement: with 0xFF, freed blocks hold 0xFF
and new ones 0x00, whatever they held before. It is set when indexer.store is first
imported, before any Chroma client exists, in every process that opens the store. The
per-thread cache's chunks (up to 1,032 bytes) are not overwritten by it and mallopt
cannot turn that cache off; they are only ever handed out again for allocations as
small, never inside the large arrays and pages that are written whole. Python's small
objects live in its own arenas, which no C library is given. Measured: no change in
Chroma's insert or query times beyond this machine's noise (docs/storage.md).
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_PERTURB = -6  # glibc malloc.h
PERTURB_BYTE = 0xFF  # free() fills with 0xFF, malloc() with 0x00


def scrub_freed_memory() -> bool:
    """True once freed memory is overwritten from now on (glibc); False where the C
    library has no such switch (musl, macOS), logged."""
    try:
        ok = ctypes.CDLL(None).mallopt(M_PERTURB, PERTURB_BYTE) == 1
    except (AttributeError, OSError):
        ok = False
    if not ok:
        log.warning("heap_scrub_unavailable: freed memory may reach Chroma's files "
                    "(docs/storage.md)")
    return ok


SCRUBBED = scrub_freed_memory()
