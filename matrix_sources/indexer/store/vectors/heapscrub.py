"""Freed memory is overwritten before this process can reuse it, so no library writes
what it held into a file.

Chroma's HNSW index (hnswlib) allocates its vector array for a capacity (100 slots for a new
collection, then 1.2 times more at each resize) with malloc, and writes the whole array to
`data_level0.bin`, unused slots included. What those slots held is whatever this process freed there
before: a loop of copies like a compaction's (a collection written, a point deleted, the rest copied
into a new collection) finds a deleted vector of an earlier collection in a new collection's
`data_level0.bin` in some rounds, and in none with this on (bench/heapscrub.py;
tests/indexer/store/test_heapscrub.py). SQLite writes its page buffers whole too: without this, a
new generation's files can hold a superseded vector, or text, of an old one.

glibc's M_PERTURB (mallopt) makes every free() fill the block with one byte and every
malloc() hand out a block filled with its complement: with 0xFF, freed blocks hold 0xFF
and new ones 0x00, whatever they held before. Python's small objects live in its own
arenas, which no C library is given. It is set when indexer.store is first imported,
before any Chroma client exists. Measured: no change in Chroma's insert or query times
within the noise of this machine (bench figures in docs/storage.md).
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
        ok: bool = ctypes.CDLL(None).mallopt(M_PERTURB, PERTURB_BYTE) == 1
    except (AttributeError, OSError):
        ok = False
    if not ok:
        log.warning(
            "heap_scrub_unavailable: freed memory may reach Chroma's files (docs/storage.md)"
        )
    return ok


SCRUBBED = scrub_freed_memory()
