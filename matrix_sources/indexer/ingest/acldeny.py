"""Server ACLs at admission: a spam wave's clean-up.

    an m.room.server_acl state event (pushed, imported), or a room's state learnt anew
    with an ACL other than the one known (at start: one set while the service was down)
        -> what is malformed in it, named in the journal (kind `server_acl`)
        -> the batch's messages from a server it denies are dropped (refused
           `server_denied`, admit.py); later ones are refused by the gate
        -> every stored message of the denied servers' users in that room is withdrawn
           by the redaction path (EventLog.history.withdraw_senders): text zeroed, edits'
           text too, windows re-cut and compacted, the answers that quoted them edited
           (Applied.redacted); journal: one `server_acl` line with the counts

An ACL later relaxed admits what the server's users send from then on. What was withdrawn
stays out, even if backfill or an import reads it again (its row stays, text-less): the
moderators acted against a spam wave, and relaxing the ACL does not say the spam was fine.
"""

from __future__ import annotations

import logging

from ..records import EventID, Message, Refusal, RoomID
from ..store.eventlog.history import Applied
from ..store.eventlog.log import EventLog
from ..store.journal import Journal
from .roomfacts import RoomFacts
from .serveracl import SERVER_DENIED, ServerAcl

Passed = tuple[Message, EventID | None]  # a message that passed the gate, its thread root

log = logging.getLogger(__name__)


def note_problems(
    journal: Journal, room_id: RoomID, acl: ServerAcl, event_id: EventID | None, source: str
) -> None:
    """Name in the journal what is malformed in the ACL, and how it was read."""
    if acl.problems:
        journal.write(
            "server_acl",
            rule=SERVER_DENIED,
            room_id=room_id,
            event_id=event_id,
            source=source,
            detail="; ".join(acl.problems),
        )


def withdraw_denied(
    eventlog: EventLog,
    journal: Journal,
    room_id: RoomID,
    acl: ServerAcl,
    applied: Applied,
    event_id: EventID | None = None,
    source: str = "push",
) -> list[EventID]:
    """Withdraw what the room's stored messages from servers `acl` denies hold; the
    event ids whose text went are added to `applied` (the pipeline re-cuts their windows,
    the bot edits its answers that quoted them)."""
    gone = eventlog.history.withdraw_senders(room_id, lambda sender: not acl.allows_user(sender))
    if gone.event_ids:
        applied.rooms.add(room_id)
        applied.redacted |= set(gone.event_ids)
        journal.write(
            "server_acl",
            rule=SERVER_DENIED,
            room_id=room_id,
            event_id=event_id,
            source=source,
            messages=len(gone.event_ids),
            windows=gone.windows,
        )
        log.warning(
            "server_acl_withdrawn",
            extra={"room_id": room_id, "messages": len(gone.event_ids), "windows": gone.windows},
        )
    return list(gone.event_ids)


def denies(facts: RoomFacts | None, sender: str) -> bool:
    """Whether the room's server ACL denies the sender's server."""
    acl = facts.server_acl if facts is not None else None
    return acl is not None and not acl.allows_user(sender)


def split_denied(
    passed: list[Passed], changed: dict[RoomID, EventID], facts: dict[RoomID, RoomFacts]
) -> tuple[list[Passed], list[Refusal]]:
    """The batch's messages kept, and the refusals of those that passed in a room before
    its ACL changed later in the batch and that the ACL now denies."""
    if not changed:
        return passed, []
    kept, refused = [], []
    for m, root in passed:
        if m.room_id in changed and denies(facts.get(m.room_id), m.sender):
            server = m.sender.partition(":")[2]
            refused.append(Refusal(SERVER_DENIED, m.room_id, m.event_id, f"server {server}"))
        else:
            kept.append((m, root))
    return kept, refused


def withdraw_changed(
    eventlog: EventLog,
    journal: Journal,
    changed: dict[RoomID, EventID],
    facts: dict[RoomID, RoomFacts],
    applied: Applied,
    source: str,
) -> None:
    """Each room whose ACL this batch changed: what its stored messages from the servers
    the ACL now denies hold is withdrawn."""
    for room_id, event_id in changed.items():
        acl = facts[room_id].server_acl
        if acl is not None:
            withdraw_denied(eventlog, journal, room_id, acl, applied, event_id, source)
