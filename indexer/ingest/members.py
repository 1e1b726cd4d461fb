"""Whom a message names, among the room's members at the time it is admitted.

A message addressed "dana: ..." to `@u8f3k2` named "Dana Whitfield" says so only
through a display name, which neither the event log nor the chunker keeps. So it is
resolved here, while the room's member list is the one the message was sent into, and
the user found is added to the message's mentions (stored with it; the chunker and the
answer linkage follow mentions). Only the user id is kept, never the display name. A
name that is, or starts, the user id's own (`quinn:` for `@quinn`, whatever their
display name) adds nothing: the text says it already, and the linkage calls it an
address.

A name resolves to the one member whose localpart names (addressing.names) or display
name (whole or its first word) it is, else whose one of those starts with it
(at least MIN_PREFIX long). When several members fit, the one of them who spoke in the
room in the last RECENT_MS wins; otherwise nobody.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from ..records import Message, RoomID, UserID
from .addressing import MIN_PREFIX, address_words, display_forms, names
from .events import MAX_MENTIONS
from .roomfacts import RoomFacts

RECENT_MS = 30 * 60 * 1000  # as the chunker's default gap: who is talking now
SPEAKERS_KEPT = 64  # per room, the most recent senders


def _by_localpart(name: str, user: UserID) -> bool:
    """Whether `name` is, or starts, one of the user id's own names: the chunker and
    the linkage read those from the text themselves (as an address, not a mention)."""
    return any(n.startswith(name) for n in names(user))


class MemberIndex:
    """One room's members by the names they may be addressed by (folded)."""

    def __init__(self, facts: RoomFacts) -> None:
        by_name: dict[str, set[UserID]] = {}
        for user in facts.members:
            forms = set(names(user))  # ASCII already: folded as they are
            display = facts.display_names.get(user)
            if display:
                forms |= display_forms(display)
            for n in forms:
                by_name.setdefault(n, set()).add(user)
        self.by_name = by_name
        self.sorted = sorted(by_name)

    def fitting(self, name: str) -> set[UserID]:
        """The members named `name` exactly, else those with a name starting with it."""
        exact = self.by_name.get(name)
        if exact:
            return set(exact)
        if len(name) < MIN_PREFIX:
            return set()
        out: set[UserID] = set()
        i = bisect.bisect_left(self.sorted, name)
        while i < len(self.sorted) and self.sorted[i].startswith(name):
            out |= self.by_name[self.sorted[i]]
            i += 1
        return out


@dataclass
class Addressees:
    """Resolves the names a message's text addresses to members' user ids (ingest)."""

    _index: dict[RoomID, tuple[RoomFacts, MemberIndex]] = field(default_factory=dict)
    _speakers: dict[RoomID, OrderedDict[UserID, int]] = field(default_factory=dict)

    def resolve(self, m: Message, facts: RoomFacts | None) -> Message:
        """`m` with the members its text names by display name added to its mentions
        (before those its client sent); the sender counts as a recent speaker after."""
        found: list[UserID] = []
        words = address_words(m.body) if facts is not None and facts.display_names else []
        if words and facts is not None:  # (words come from its display names)
            index = self._room_index(m.room_id, facts)
            recent = self._recent(m.room_id, m.ts)
            for w in words:
                fits = index.fitting(w)
                if len(fits) > 1:
                    fits &= recent
                if len(fits) == 1 and (u := fits.pop()) != m.sender and not _by_localpart(w, u):
                    found.append(u)
        self._spoke(m.room_id, m.sender, m.ts)
        if not found:
            return m
        mentions = tuple(dict.fromkeys((*found, *m.mentions)))[:MAX_MENTIONS]
        return replace(m, mentions=mentions)

    def forget_room(self, room_id: RoomID) -> None:
        self._index.pop(room_id, None)
        self._speakers.pop(room_id, None)

    def _room_index(self, room_id: RoomID, facts: RoomFacts) -> MemberIndex:
        # Rebuilt when the room's facts changed (a member joined, left or was renamed):
        # facts are replaced, never changed in place.
        cached = self._index.get(room_id)
        if cached is None or cached[0] is not facts:
            cached = (facts, MemberIndex(facts))
            self._index[room_id] = cached
        return cached[1]

    def _recent(self, room_id: RoomID, ts: int) -> set[UserID]:
        spoke: dict[UserID, int] = self._speakers.get(room_id, {})
        return {u for u, at in spoke.items() if 0 <= ts - at <= RECENT_MS}

    def _spoke(self, room_id: RoomID, user: UserID, ts: int) -> None:
        spoke = self._speakers.setdefault(room_id, OrderedDict())
        spoke[user] = ts
        spoke.move_to_end(user)
        while len(spoke) > SPEAKERS_KEPT:
            spoke.popitem(last=False)
