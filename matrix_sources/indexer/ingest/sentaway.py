"""A bot sent away: the room's moderators kicked or banned it.

    m.room.member, state_key = the bot, membership leave/ban, sender someone else
        -> the room recorded as sent away (event log meta: who, when, how), journalled
           (`bot_removed`: the moderator's user id, never text)
        -> the gate refuses the room (rule bot_removed): purged as a room turned
           private is, and never joined again, at start or on an allowlist reload
    m.room.member, state_key = the bot, membership invite (someone in the room asks it
    back)
        -> the record dropped (journal `bot_readmitted`), with the rows the purge left
           and backfill's progress (EventLog.read_again): the bot joins, and backfill
           reads the room again from its start, as for a newly allowlisted room

The allowlist stays the admin's: being sent away changes nothing in allowlist.yaml,
and a room taken off it and put back is still refused until an invite.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..config import Database as Location
from ..records import RoomID, UserID
from ..store.eventlog.log import EventLog
from ..store.eventlog.reports import meta_at
from ..store.journal import Journal
from .events import StateEvent

META_KEY = "bot_sent_away"  # event log meta: JSON {room id: {"by", "membership", "ts"}}


@dataclass(frozen=True, slots=True)
class SentAway:
    room_id: RoomID
    by: UserID
    membership: str  # leave (a kick) or ban
    ts: int  # when the service learned it (ms)

    @property
    def reason(self) -> str:
        how = "banned" if self.membership == "ban" else "kicked"
        return f"{how} by {self.by}; invite the bot back to index the room again"


def _parse(raw: str | None) -> dict[RoomID, SentAway]:
    return {
        RoomID(r): SentAway(
            RoomID(r), UserID(v.get("by", "")), str(v.get("membership")), int(v.get("ts", 0))
        )
        for r, v in json.loads(raw or "{}").items()
    }


def sent_away_at(eventlog: Location | Path) -> dict[RoomID, SentAway]:
    """The rooms the bot was sent away from, read-only (doctor)."""
    return _parse(meta_at(eventlog, META_KEY))


class SentAwayRooms:
    """The rooms the bot was sent away from, kept in the event log (survives restarts)."""

    def __init__(self, eventlog: EventLog, journal: Journal) -> None:
        self.eventlog, self.journal = eventlog, journal
        self.rooms: dict[RoomID, SentAway] = _parse(eventlog.get_meta(META_KEY))

    def __contains__(self, room_id: object) -> bool:
        return room_id in self.rooms

    def get(self, room_id: RoomID) -> SentAway | None:
        return self.rooms.get(room_id)

    def fold(self, ev: StateEvent, bot_user: str, now_ms: int) -> str | None:
        """Apply one membership event of the bot: "removed", "readmitted" or None."""
        if ev.type != "m.room.member" or ev.state_key != bot_user:
            return None
        membership = ev.content.get("membership")
        if membership in ("leave", "ban") and ev.sender != bot_user:
            self.rooms[ev.room_id] = SentAway(ev.room_id, ev.sender, membership, now_ms)
            self._save()
            self.journal.write(
                "bot_removed",
                rule="bot_removed",
                room_id=ev.room_id,
                event_id=ev.event_id,
                by=ev.sender,
                membership=membership,
            )
            return "removed"
        if membership == "invite" and ev.room_id in self.rooms:
            del self.rooms[ev.room_id]
            self._save()
            self.eventlog.read_again(ev.room_id)  # else the purged rows stay purged
            self.journal.write(
                "bot_readmitted", room_id=ev.room_id, event_id=ev.event_id, by=ev.sender
            )
            return "readmitted"
        return None

    def _save(self) -> None:
        self.eventlog.set_meta(
            META_KEY,
            json.dumps(
                {
                    r: {"by": s.by, "membership": s.membership, "ts": s.ts}
                    for r, s in sorted(self.rooms.items())
                }
            ),
        )
