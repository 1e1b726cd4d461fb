"""Edits and redactions as ingest hands them to the event log: the events parsed from
Matrix become the event log's operations (eventlog/history.py, which holds the
rules and their SQL), applied by `EventLog.append` inside its transaction."""

from __future__ import annotations

from collections.abc import Sequence

from ..records import RoomID
from ..store.eventlog.history import Applied, Edit, Redaction
from ..store.eventlog.log import EventLog
from ..store.eventlog.rows import DirtyWindow
from .events import EditEvent, RedactionEvent

__all__ = ["Applied", "History", "operations"]


def operations(events: Sequence[EditEvent | RedactionEvent]) -> list[Edit | Redaction]:
    """The event log's operations for these events, in their order."""
    return [
        Redaction(e.target, e.room_id, e.ts, e.event_id)
        if isinstance(e, RedactionEvent)
        else Edit(e.target, e.room_id, e.sender, e.body, e.ts, e.event_id)
        for e in events
    ]


class History:
    def __init__(self, eventlog: EventLog) -> None:
        self.eventlog = eventlog

    def apply(self, events: Sequence[EditEvent | RedactionEvent]) -> Applied:
        """Apply edits and redactions in their own transaction (tests, tools); ingest
        passes them to `EventLog.append` with its messages, atomic with them."""
        applied = Applied()
        self.eventlog.append([], history=operations(events), applied=applied)
        return applied

    def dirty(self, room_id: RoomID | None = None) -> list[DirtyWindow]:
        """The windows an edit or a redaction left to re-chunk."""
        return self.eventlog.history.dirty(room_id)
