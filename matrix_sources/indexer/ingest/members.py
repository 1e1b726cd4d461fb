"""Whom a message names, among the room's members at the time it is admitted.

A message addressed "dana: ..." to `@u8f3k2` named "Dana Whitfield" says so only
through a display name, which neither the event log nor the chunker keeps. So it is
resolved here, while the room's member list is the one the message was sent into, and
the user found is added to the message's mentions (stored with it; the chunker and the
answer linkage follow mentions). Only the user id is kept, never the display name. A
name that is, or starts, the user id's own (`quinn:` for `@quinn`, whatever their
display name) adds nothing: the text says it already, and the linkage calls it an
address.

A name fits the members whose localpart names (addressing.names) or display name
(whole or its first word, folded: invisibles dropped, look-alikes read as what they look
like) it is, or starts (at least MIN_PREFIX long). One member fits: them. Several: a
display name is anyone's to take, so a newcomer calling herself `Dani` must not take
the answers meant for Danielle. Of those who fit, in turn:

    a name set after the question it would take over does not count for it
        (a member who fits asked within RECENT_MS, under that name: whoever took a
        name that fits after that question is out)
    whoever asked a question (within RECENT_MS) the line may answer
    whoever spoke within RECENT_MS
    whoever has the name whole (of several, who has had it longest), unless a member
        it only starts has had theirs longer: then those
    one left: them; else nobody

A name's age is its member event's (RoomFacts.since): a localpart's, when the member
joined; a display name's, when they took it.
"""

from __future__ import annotations

import bisect
import re
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from ..records import Message, RoomID, UserID
from .addressing import MIN_PREFIX, address_words, display_forms, names
from .events import MAX_MENTIONS
from .roomfacts import RoomFacts

RECENT_MS = 30 * 60 * 1000  # as the chunker's default gap: who is talking now
SPEAKERS_KEPT = 64  # per room, the most recent senders
# A question mark that ends a sentence, not a URL's query string.
_ASKS = re.compile(r"\?(?:\s|$)")


@dataclass(frozen=True, slots=True)
class Fit:
    """How a name fits one member: whole or by its start, and since when (ms) they have
    had the name it fits."""

    whole: bool
    since: int


def _by_localpart(name: str, user: UserID) -> bool:
    """Whether `name` is, or starts, one of the user id's own names: the chunker and
    the linkage read those from the text themselves (as an address, not a mention)."""
    return any(n.startswith(name) for n in names(user))


class MemberIndex:
    """One room's members by the names they may be addressed by (folded)."""

    def __init__(self, facts: RoomFacts) -> None:
        # name -> {member: since}; a localpart's name is as old as the membership, a
        # display name's as the member event that set it.
        by_name: dict[str, dict[UserID, int]] = {}
        for user in facts.members:
            joined, named = facts.since.get(user, (0, 0))
            forms = dict.fromkeys(names(user), joined)  # ASCII already: folded as they are
            display = facts.display_names.get(user)
            if display:
                for n in display_forms(display):
                    forms[n] = min(forms.get(n, named), named)
            for n, since in forms.items():
                by_name.setdefault(n, {})[user] = since
        self.by_name = by_name
        self.sorted = sorted(by_name)

    def fitting(self, name: str) -> dict[UserID, Fit]:
        """The members named `name`, whole or (at least MIN_PREFIX long) by its start."""
        out: dict[UserID, Fit] = {u: Fit(True, s) for u, s in self.by_name.get(name, {}).items()}
        if len(name) < MIN_PREFIX:
            return out
        i = bisect.bisect_left(self.sorted, name)
        while i < len(self.sorted) and self.sorted[i].startswith(name):
            for u, since in self.by_name[self.sorted[i]].items():
                fit = out.get(u)
                if fit is None or (not fit.whole and since < fit.since):
                    out[u] = Fit(False, since)
            i += 1
        return out


@dataclass(frozen=True, slots=True)
class _Spoke:
    at: int  # their last message (ms)
    asked: int | None  # their last question, if they asked one


def choose(fits: dict[UserID, Fit], spoke: dict[UserID, _Spoke], ts: int) -> UserID | None:
    """The one member of several who fit a name that a line sent at `ts` stands for, or
    None (the rules are the module's)."""
    if len(fits) <= 1:
        return next(iter(fits), None)
    recent = {u: s for u, s in spoke.items() if u in fits and 0 <= ts - s.at <= RECENT_MS}
    asked = {
        u: s.asked
        for u, s in recent.items()
        if s.asked is not None and 0 <= ts - s.asked <= RECENT_MS and fits[u].since <= s.asked
    }
    # Out: whoever took the name after another's question it fits (never all of them:
    # the first asker had theirs before asking).
    people = {u for u in fits if all(fits[u].since <= q for v, q in asked.items() if v != u)}
    if people & set(asked):
        people &= set(asked)
    if len(people) > 1 and people & set(recent):
        people &= set(recent)
    whole = {u for u in people if fits[u].whole}
    if len(people) > 1 and whole:
        first = min(fits[u].since for u in whole)
        start = min((fits[u].since for u in people - whole), default=None)
        if start is None or first <= start:
            people = {u for u in whole if fits[u].since == first}
        else:  # whoever has it whole came after a member it only starts
            people -= whole
    return next(iter(people)) if len(people) == 1 else None


@dataclass
class Addressees:
    """Resolves the names a message's text addresses to members' user ids (ingest)."""

    _index: dict[RoomID, tuple[RoomFacts, MemberIndex]] = field(default_factory=dict)
    _speakers: dict[RoomID, OrderedDict[UserID, _Spoke]] = field(default_factory=dict)

    def resolve(self, m: Message, facts: RoomFacts | None) -> Message:
        """`m` with the members its text names by display name added to its mentions
        (before those its client sent); the sender counts as a recent speaker after."""
        found: list[UserID] = []
        words = address_words(m.body) if facts is not None and facts.display_names else []
        if words and facts is not None:  # (words come from its display names)
            index = self._room_index(m.room_id, facts)
            spoke: dict[UserID, _Spoke] = self._speakers.get(m.room_id, {})
            for w in words:
                fits = index.fitting(w)
                fits.pop(m.sender, None)  # nobody addresses themselves
                u = choose(fits, spoke, m.ts)
                if u is not None and not _by_localpart(w, u):
                    found.append(u)
        self._spoke(m)
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

    def _spoke(self, m: Message) -> None:
        spoke = self._speakers.setdefault(m.room_id, OrderedDict())
        before = spoke.get(m.sender)
        asked = m.ts if _ASKS.search(m.body) else before.asked if before else None
        spoke[m.sender] = _Spoke(m.ts, asked)
        spoke.move_to_end(m.sender)
        while len(spoke) > SPEAKERS_KEPT:
            spoke.popitem(last=False)
