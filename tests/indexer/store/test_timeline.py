"""The timeline reads linkage looks through (store/eventlog/timeline.py), on SQLite and
PostgreSQL alike."""

from __future__ import annotations

from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, WindowID
from matrix_sources.indexer.store.eventlog.log import EventLog

ROOM, OTHER = RoomID("!r:example.org"), RoomID("!o:example.org")
T0 = 1_700_000_000_000


def who(name: str) -> UserID:
    return UserID(f"@{name}:example.org")


def test_senders_before_are_those_of_the_last_messages_of_that_timeline(eventlog_db):
    log = EventLog(eventlog_db)
    said = [
        (ROOM, "old", 0, None),
        (ROOM, "carol", 10, None),
        (ROOM, "dave", 20, None),
        (ROOM, "erin", 30, "$root"),  # in a thread: not the main timeline
        (OTHER, "frank", 35, None),  # another room
        (ROOM, "alice", 40, None),  # at the bound: not before it
    ]
    log.append(
        [
            (Message(EventID(f"${n}"), room, who(n), T0 + minute * 60_000, "hi"), thread)
            for room, n, minute, thread in said
        ]
    )
    for room in (ROOM, OTHER):
        mine = [(n, minute) for r, n, minute, _ in said if r == room]
        last = Message(EventID(f"${mine[-1][0]}"), room, who(mine[-1][0]), 0, "hi")
        log.mark_indexed(room, {EventID(f"${n}"): WindowID(f"w-{n}") for n, _ in mine}, last)
    reads = log.timeline
    assert reads.senders_before(ROOM, None, T0, T0 + 40 * 60_000, 10) == {
        who("old"),
        who("carol"),
        who("dave"),
    }
    assert reads.senders_before(ROOM, None, T0, T0 + 40 * 60_000, 2) == {who("carol"), who("dave")}
    assert reads.senders_before(ROOM, None, T0 + 60_000, T0 + 40 * 60_000, 10) == {
        who("carol"),
        who("dave"),
    }
    assert reads.senders_before(ROOM, EventID("$root"), T0, T0 + 40 * 60_000, 10) == {who("erin")}
    log.close()
