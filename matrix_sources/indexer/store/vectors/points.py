"""A point of the collection: the metadata Chroma keeps of a window or a reference
chunk (no text: the event log's), written by `point_metadata` and read by `stored`, the
one writer and the one reader of its format."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...records import EventID, RefSource, RoomID, UserID, Window, WindowID


@dataclass(frozen=True, slots=True)
class StoredWindow:
    """A point's metadata as Chroma holds it: no text (the event log's)."""

    window_id: WindowID
    room_id: RoomID
    room_label: str
    corpus: str
    event_ids: tuple[EventID, ...]
    senders: tuple[UserID, ...]
    ts_first: int
    ts_last: int
    ref: RefSource | None = None  # corpus reference: corpus name, file, heading path


@dataclass(frozen=True, slots=True)
class Neighbour:
    window_id: WindowID
    similarity: float  # cosine similarity, 1 - cosine distance
    window: StoredWindow | None = None  # its record, when asked for


def point_metadata(
    room_id: str,
    room_label: str,
    corpus: str,
    event_ids: Sequence[str],
    senders: Sequence[str],
    ts_first: int,
    ts_last: int,
    **extra: Any,
) -> dict[str, Any]:
    """The metadata of one point of the collection, chat window or reference chunk: the
    one writer of the format `_stored` reads. Chroma keeps scalars, so lists are JSON.
    `extra`: a reference chunk's ref_* keys."""
    return {
        "room_id": room_id,
        "room_label": room_label,
        "corpus": corpus,
        "event_ids": json.dumps(list(event_ids)),
        "first_event_id": event_ids[0] if event_ids else "",
        "last_event_id": event_ids[-1] if event_ids else "",
        "senders": json.dumps(list(senders)),
        "ts_first": ts_first,
        "ts_last": ts_last,
        "n_events": len(event_ids),
        **extra,
    }


def window_metadata(w: Window) -> dict[str, Any]:
    return point_metadata(
        w.room_id, w.room_label, w.corpus, w.event_ids, w.senders, w.ts_first, w.ts_last
    )


def stored(wid: str, meta: dict[str, Any] | None) -> StoredWindow:
    meta = meta or {}
    return StoredWindow(
        window_id=WindowID(wid),
        room_id=RoomID(meta.get("room_id", "")),
        room_label=str(meta.get("room_label", "")),
        corpus=str(meta.get("corpus", "")),
        event_ids=tuple(json.loads(meta.get("event_ids", "[]"))),
        senders=tuple(json.loads(meta.get("senders", "[]"))),
        ts_first=int(meta.get("ts_first", 0)),
        ts_last=int(meta.get("ts_last", 0)),
        ref=(
            RefSource(
                str(meta["ref_corpus"]),
                str(meta.get("ref_file", "")),
                str(meta.get("ref_heading", "")),
            )
            if meta.get("ref_corpus")
            else None
        ),
    )
