"""What a clean stop vouches for at the next start: the collection agrees with the event log.

The start's collection check (pipeline/rebuild.py, check_collection) reads every id of
both and repairs the gaps a crash or a restored backup left: 6.5 to 8.7 s at a million
windows, beside the first searches (bench/scale.py). A run whose check passed (or was itself
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

import numpy as np

from ..config import Config
from .vectors.idmap import IdMapByGeneration

SUFFIX = ".clean"
MAP_SUFFIX = ".idmap.npz"


def local_files(cfg: Config) -> tuple[Path | None, Path | None]:
    """(the Chroma folder, the event log's file), each None where it lives in a server."""
    database = cfg.database
    eventlog = database.path if database.kind == "sqlite" else None
    chroma = cfg.chroma.path if cfg.chroma.mode == "embedded" else None
    return (
        Path(chroma) if chroma is not None else None,
        Path(eventlog) if eventlog is not None else None,
    )


def pair(cfg: Config) -> tuple[Path | None, Path | None]:
    """local_files, or Nones if either lives in a server."""
    chroma, eventlog = local_files(cfg)
    return (chroma, eventlog) if chroma is not None and eventlog is not None else (None, None)


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


def _map_path(chroma: Path) -> Path:
    return chroma.with_name(chroma.name + MAP_SUFFIX)


def mark(chroma: Path | None, eventlog: Path | None, id_map: IdMapByGeneration | None) -> None:
    """After a clean stop whose collection was checked: the pair's files stamped, and
    the map of which segment holds each id (Segments.map_by_generation) kept beside, so
    the next start need not read every id to make it again (2 to 3 s at a million
    windows). Window ids only: no text, no vector."""
    if chroma is None or eventlog is None or not chroma.is_dir() or not eventlog.exists():
        return
    if Path(str(eventlog) + "-wal").exists():  # not closed: the next start checks
        return
    state = _state(chroma, eventlog)
    if id_map is not None:
        keys, gens, other = id_map
        path = _map_path(chroma)
        part = path.with_name(path.name + ".part")
        with part.open("wb") as f:
            np.savez(
                f,
                keys=keys,
                gens=gens,
                other_ids=np.asarray(list(other), dtype=str),
                other_gens=np.asarray(list(other.values()), dtype=np.uint32),
            )
        part.replace(path)
        state["id_map"] = _stat(path)
    _stamp_path(chroma).write_text(json.dumps(state), encoding="utf-8")


def _kept(chroma: Path) -> dict[str, object] | None:
    try:
        kept = json.loads(_stamp_path(chroma).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return kept if isinstance(kept, dict) else None


def unchanged(chroma: Path | None, eventlog: Path | None) -> bool:
    """True if the last run stopped cleanly and nothing wrote either since."""
    if chroma is None or eventlog is None:
        return False
    kept = _kept(chroma)
    if kept is None:
        return False
    kept.pop("id_map", None)
    try:
        return bool(kept == _state(chroma, eventlog))
    except OSError:
        return False


def id_map(chroma: Path | None) -> IdMapByGeneration | None:
    """The map the last clean stop kept, if its file is as that stop left it (ask only
    once `unchanged` said yes)."""
    if chroma is None:
        return None
    kept = _kept(chroma)
    path = _map_path(chroma)
    try:
        if kept is None or kept.get("id_map") != _stat(path):
            return None
        with np.load(path, allow_pickle=False) as f:
            other = dict(zip(f["other_ids"].tolist(), f["other_gens"].tolist()))
            return f["keys"], f["gens"], other
    except (OSError, ValueError, KeyError):
        return None


def clear(chroma: Path | None) -> None:
    """At start, before anything opens the pair."""
    if chroma is not None:
        _stamp_path(chroma).unlink(missing_ok=True)
        _map_path(chroma).unlink(missing_ok=True)
