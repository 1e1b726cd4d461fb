"""The event log and Chroma's metadata read into the OS page cache once searches are served.

After a reboot every page of them is on disk, and the first minute's searches fetched
them one random read at a time: a search's keyword postings and its hits' text from the
event log, each hit's metadata from its segment's chroma.sqlite3. At a million windows
(bench/scale.py --cold) the first 20 `!sources` of one text took 130 to 313 ms in the bot
against 97 to 177 warm. The kernel reads the files ahead instead, in large sequential
reads (posix_fadvise WILLNEED, as pg_prewarm's `prefetch` mode does): page cache, not this
process's memory, and given back by the kernel under pressure (2.7 GB of event log read
in 3 s here, 0.7 s of it in the calls). Only when the files fit in
a quarter of the memory available, so a small machine never trades its working set for
them; only where the OS has the call (Linux).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..config import Config
from .eventlog.db import location_of

SHARE_OF_AVAILABLE = 0.25
CHUNK = 1 << 20


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo; None where there is none."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def files_of(cfg: Config) -> list[Path]:
    """The event log's file (SQLite) and every generation's chroma.sqlite3 (embedded
    Chroma; the HNSW files are read into memory by the first search already)."""
    location = location_of(cfg.database)
    eventlog = location.path if location.kind == "sqlite" else None
    chroma = Path(cfg.chroma.path) if cfg.chroma.mode == "embedded" else None
    out = [Path(eventlog)] if eventlog is not None and Path(eventlog).is_file() else []
    if chroma is not None and chroma.is_dir():
        out += sorted(chroma.rglob("chroma.sqlite3"))
    return out


def read_ahead(paths: Iterable[Path], available: int | None = None) -> int:
    """Ask the kernel to read `paths` into the page cache; the bytes asked for (0 if
    they do not fit, or the OS cannot)."""
    try:
        advise = os.posix_fadvise
    except AttributeError:  # not Linux
        return 0
    paths = list(paths)
    sizes = []
    for p in paths:
        try:
            sizes.append(p.stat().st_size)
        except OSError:
            sizes.append(0)
    room = available_bytes() if available is None else available
    if room is None or sum(sizes) > room * SHARE_OF_AVAILABLE:
        return 0
    asked = 0
    for p, size in zip(paths, sizes):
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            # One call a chunk: Linux reads at most the device's readahead window (128
            # KiB to a few MiB) for one call, whatever length it is given.
            for offset in range(0, size, CHUNK):
                advise(fd, offset, CHUNK, os.POSIX_FADV_WILLNEED)
            asked += size
        except OSError:
            pass
        finally:
            os.close(fd)
    return asked
