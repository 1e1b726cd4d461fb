"""What a clean stop vouches for at the next start: the collection agrees with the event log.

The start's collection check (pipeline/rebuild.py, check_collection) reads every id of
both and repairs the gaps a crash or a restored backup left: 17 s at a million windows,
beside the first searches (bench/scale.py). A run whose check passed (or was itself
vouched for) and that stopped cleanly leaves the two as they agree. Its stamp, written
after the stop, holds the size and mtime of the event log and of every file in the
Chroma folder; the next start skips the id check when every one still matches, so a
file that anything wrote since (a CLI, an embedding worker, a restored backup, a crash
of a later run) means the whole check again. The start removes the stamp before it
opens anything: a crash leaves none.

Only for an embedded Chroma beside an SQLite event log: a Chroma server or PostgreSQL
can change with nothing here seeing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..config import Config
from .eventlog.db import location_of

SUFFIX = ".clean"


def pair(cfg: Config) -> tuple[Path | None, Path | None]:
    """(the Chroma folder, the event log's file), or Nones where either lives in a server."""
    location = location_of(cfg.database)
    if cfg.chroma.mode != "embedded" or location.kind != "sqlite" or location.path is None:
        return None, None
    return Path(cfg.chroma.path), Path(location.path)


def _stamp_path(chroma: Path) -> Path:
    return chroma.with_name(chroma.name + SUFFIX)


def _stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def _files(chroma: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for folder, _, names in os.walk(chroma):
        for name in names:
            path = Path(folder, name)
            out[path.relative_to(chroma).as_posix()] = _stat(path)
    return out


def _state(chroma: Path, eventlog: Path) -> dict[str, object]:
    return {"eventlog": _stat(eventlog), "chroma": _files(chroma)}


def mark(chroma: Path | None, eventlog: Path | None) -> None:
    """After a clean stop whose collection was checked: the pair's files stamped."""
    if chroma is None or eventlog is None or not chroma.is_dir() or not eventlog.exists():
        return
    if Path(str(eventlog) + "-wal").exists():  # not closed: the next start checks
        return
    _stamp_path(chroma).write_text(json.dumps(_state(chroma, eventlog)), encoding="utf-8")


def unchanged(chroma: Path | None, eventlog: Path | None) -> bool:
    """True if the last run stopped cleanly and nothing wrote either since."""
    if chroma is None or eventlog is None:
        return False
    try:
        kept = json.loads(_stamp_path(chroma).read_text(encoding="utf-8"))
        return bool(kept == _state(chroma, eventlog))
    except (OSError, ValueError):
        return False


def clear(chroma: Path | None) -> None:
    """At start, before anything opens the pair."""
    if chroma is not None:
        _stamp_path(chroma).unlink(missing_ok=True)
