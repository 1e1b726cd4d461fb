"""The event log and Chroma's metadata read into the OS page cache once searches are served.

After a reboot every page of them is on disk, and the first minute's searches fetched
them one random read at a time: a search's keyword postings and its hits' text from the
event log, each hit's metadata from its segment's chroma.sqlite3. At a million windows
(bench/scale.py --cold) the first 20 `!sources` of one text took 130 to 313 ms in the bot
against 97 to 177 warm. The kernel reads the files ahead instead, in large sequential
reads (posix_fadvise WILLNEED, as pg_prewarm's `prefetch` mode does): page cache, not this
process's memory, and given back by the kernel under pressure (2.7 GB of event log read
in 3 s here). Only when the files fit in a quarter of the memory available, so a small
machine never trades its working set for them; only on Linux.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

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


def files_of(chroma: Path | None, eventlog: Path | None) -> list[Path]:
    """The event log's file and every generation's chroma.sqlite3 (the HNSW files are
    read into memory by the first search already); None: that store is a server."""
    out = [eventlog] if eventlog is not None and eventlog.is_file() else []
    if chroma is not None and chroma.is_dir():
        out += sorted(chroma.rglob("chroma.sqlite3"))
    return out


# Run in a child process: a process that closes any descriptor of a file loses every
# POSIX lock it holds on that file, and SQLite's connections in this process hold such
# locks (found: readers in other processes then missed rows still in the WAL).
_CHILD = """
import os, sys
chunk = int(sys.argv[1])
for path in sys.argv[2:]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        continue
    try:
        size = os.fstat(fd).st_size
        for offset in range(0, size, chunk):
            os.posix_fadvise(fd, offset, chunk, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)
"""


def read_ahead(
    paths: Iterable[Path],
    available: int | None = None,
    run: Callable[[list[str]], int] | None = None,
) -> int:
    """Ask the kernel to read `paths` into the page cache, one call a chunk (Linux reads
    at most the device's readahead window, 128 KiB to a few MiB, for one call, whatever
    length it is given), from a child process (`run`: runs the command, returns its
    exit status). The bytes asked for: 0 if they do not fit, or the OS cannot."""
    if not sys.platform.startswith("linux"):
        return 0
    paths = list(paths)
    sizes = []
    for p in paths:
        try:
            sizes.append(p.stat().st_size)
        except OSError:
            sizes.append(0)
    room = available_bytes() if available is None else available
    if not paths or room is None or sum(sizes) > room * SHARE_OF_AVAILABLE:
        return 0
    command = [sys.executable, "-I", "-c", _CHILD, str(CHUNK), *map(str, paths)]
    status = (run or _run)(command)
    return sum(sizes) if status == 0 else 0


def _run(command: list[str]) -> int:
    return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True).returncode
