"""The rows the event log hands across its boundary, and takes: records with named fields.

Each is a NamedTuple: a row read by name where it is used (`dirty.redacted`, not
`dirty[2]`), and still unpacked where a caller takes it whole (`event_ids, windows =
history.forget_sender(...)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ...records import EventID, Message, RoomID, UserID, WindowID

# The columns `message_of` reads, in its order: what every read of messages selects.
MESSAGE_COLUMNS = "event_id, room_id, sender, ts, body, reply_to, mentions"


def message_of(r: Sequence[Any]) -> Message:
    """A Message from a row of MESSAGE_COLUMNS (mentions: user ids joined by spaces)."""
    return Message(
        EventID(r[0]),
        RoomID(r[1]),
        UserID(r[2]),
        r[3],
        r[4] or "",
        EventID(r[5]) if r[5] else None,
        tuple(UserID(u) for u in (r[6] or "").split()),
    )


class DirtyWindow(NamedTuple):
    """A stored window to re-chunk: an edit or a redaction changed one of its messages
    (eventlog/history.py)."""

    window_id: WindowID
    room_id: RoomID
    redacted: bool  # a redaction made it dirty: its old vector must leave the files too


class WindowMove(NamedTuple):
    """A dirty window re-chunked: its events now sit in `new` (None: it held nothing)."""

    old: WindowID
    new: WindowID | None


class BlockStart(NamedTuple):
    """Where a timeline's last block of conversation starts: its next re-chunk does."""

    thread_root: EventID | None  # None: the room's main timeline
    first_event: EventID


class Withdrawn(NamedTuple):
    """Messages whose text went by the redaction path (a forget, retention)."""

    event_ids: list[EventID]
    windows: int  # windows marked dirty


class Forgotten(NamedTuple):
    """A forget's messages: those whose text went now, and the whole forget's count."""

    event_ids: list[EventID]
    windows: int  # windows marked dirty
    total: int  # messages removed by every run since the user was last forgotten anew


class RoomFigures(NamedTuple):
    """One room's figures for `!sources status`."""

    indexed: int  # messages indexed
    windows: int  # windows holding them
    pending: int  # messages waiting for the pipeline


class EventState(NamedTuple):
    """Where one stored event stands."""

    status: str  # an EventStatus value
    window_id: WindowID | None  # the window it is in, if indexed


class Quarantined(NamedTuple):
    """A stored event whose timestamp no calendar prints: its text dropped."""

    event_id: EventID
    room_id: RoomID


class EventText(NamedTuple):
    """A message whose text is still there, as a reply quotes it."""

    sender: UserID
    ts: int
    body: str


class DerivedMark(NamedTuple):
    """A message judged to quote an artifact (derived/filter.py), as the event log
    records it: the event stays, its text never reaches a window."""

    event_id: EventID
    artifact: str
    kind: str
    score: float
    threshold: float
