"""The conversation a hit's matched question is in: the timeline after its window,
read to the answer horizon, and the messages that respond to the asker there
(linkage.py's rules), followed past the horizon while the asker answers back."""

from __future__ import annotations

from dataclasses import dataclass

from ..ingest.addressing import names
from ..records import EventID, Hit, Message, UserID
from ..store.eventlog.log import EventLog
from .lines import asks_back, only_thanks, thanks
from .linkage import Horizon, addressees, speakers
from .linkage import responses as linked_after

# A back and forth is followed this many follow-ups of the asker's past the question.
DIALOGUE_HOPS = 3
# Of the asker's later lines in the window, only those that go on with the matched
# question are answered (issue 51: bob's next topic's reply was quoted under his first).
FOLLOW_UPS_ONLY = True
IMPLICIT = ("next", "more")  # linkage rules that link by place alone
# A stranger's first message after the question that the asker later thanks by name is
# an answer ("@mydigitalself Thanks for confirming"), though no rule linked it (it came
# after the asker's fourth follow-up, past the dialogue's partners).
THANKED_BY_NAME = True
# The asker's later line that only thanks (lines.only_thanks) is no question, so nothing
# is linked to it: read as one, it linked the next stranger's own problem by its place,
# and lines naming her past the pause that closed her question (linkage.CLOSES). A
# thanks that goes on ("thanks, but it still fails") is still answered.
THANKS_ASK_NOTHING = True
# A thanked person's first message that is a question put to the room, naming no one,
# is their own problem, not the answer the thanks is for ("... Is there a way to solve
# this right issue?", thanked by name by an asker who confused two people).
THANKED_NOT_ASKING = True


@dataclass(slots=True)
class Plan:
    hit: Hit
    window: list[Message]
    later: list[Message]  # the timeline after the window's first message, as read
    thread_of: dict[EventID, EventID]
    root: EventID | None  # the thread the window is in
    until: int  # what `later` was read to (ms), unless `full`
    full: bool  # `later` stopped at its count, not at `until`
    # The names of those who spoke in the horizon before the window, once read.
    earlier: frozenset[str] | None = None


@dataclass
class Conversations:
    eventlog: EventLog
    horizon: Horizon = Horizon()

    def plan(self, hit: Hit, window: list[Message]) -> Plan:
        """The hit's window and the timeline after it, to the horizon."""
        root = self.eventlog.timeline.thread_root_of(window[0].event_id)
        limit = len(window) + 2 * self.horizon.messages
        timeline = self.eventlog.timeline.timeline_after(
            hit.room_id,
            root,
            window[0].ts,
            window[-1].ts + self.horizon.ms,
            limit,
            roots=tuple(m.event_id for m in window),
        )
        return Plan(
            hit,
            window,
            [m for m, _ in timeline],
            {m.event_id: t for m, t in timeline if t is not None},
            root,
            window[-1].ts + self.horizon.ms,
            len(timeline) >= limit,
        )

    def responses(self, p: Plan, anchor: int) -> list[tuple[Message, str]]:
        """The responses to the asker's lines of the window from the matched question
        on, in the window or after it, in timeline order: (message, rule)."""
        asker = p.window[anchor].sender
        known = speakers(p.later)
        position = {m.event_id: i for i, m in enumerate(p.later)}
        found: dict[EventID, tuple[Message, str]] = {}
        for at, q in enumerate(p.window[anchor:], start=anchor):
            i = position.get(q.event_id)
            if q.sender != asker or i is None:
                continue
            if FOLLOW_UPS_ONLY and at > anchor and not self.follows_up(p, anchor, at, found, known):
                continue  # the asker's next topic: its responses are not this question's
            if THANKS_ASK_NOTHING and at > anchor and only_thanks(q.body):
                continue
            for link in linked_after(
                q, p.later[i + 1 :], self.horizon, p.thread_of, known, lambda: self._earlier(p)
            ):
                found.setdefault(link.answer.event_id, (link.answer, link.rule))
        if self._dialogue(p, asker, known, found, position):  # it read further
            position = {m.event_id: i for i, m in enumerate(p.later)}
            known = speakers(p.later)
        if THANKED_BY_NAME:
            _thanked_by_name(p, anchor, known, found, position)
        return sorted(found.values(), key=lambda a: position[a[0].event_id])

    @staticmethod
    def follows_up(
        p: Plan,
        anchor: int,
        at: int,
        found: dict[EventID, tuple[Message, str]],
        known: frozenset[str],
    ) -> bool:
        """The asker's window line `at` goes on with the matched question: said before
        anyone else spoke since it, or answering back to one who responded (a reply,
        a pill, their name)."""
        if all(m.sender == p.window[anchor].sender for m in p.window[anchor:at]):
            return True
        # Only those who surely responded: the next speaker may have started a topic.
        sure = {e: mr for e, mr in found.items() if mr[1] not in IMPLICIT}
        partners = {m.sender for m, _ in sure.values()}
        theirs = {n for u in partners for n in names(u)}
        return bool(partners) and _answers_back(p.window[at], partners, theirs, sure, known)

    def _dialogue(
        self,
        p: Plan,
        asker: UserID,
        known: frozenset[str],
        found: dict[EventID, tuple[Message, str]],
        position: dict[EventID, int],
    ) -> bool:
        """The conversation goes on past the horizon when the asker answers back: a
        later message of the asker's addressed to one who responded (by name, pill or
        reply) is the same question followed up, and that person's responses to it
        are responses too, each within the horizon of the follow-up it answers (a
        day-long back and forth in a slow room). Only those people's: the first
        stranger after a follow-up is not taken for an answer to it. The timeline is
        read further only for a follow-up whose horizon passes what was read. True if
        it was (`position` then misses what was read since)."""
        start = max((position[e] for e in found), default=None)
        read = False
        for _ in range(DIALOGUE_HOPS):
            if start is None:
                break
            sure = {
                e: mr for e, mr in found.items() if not FOLLOW_UPS_ONLY or mr[1] not in IMPLICIT
            }
            partners = {m.sender for m, _ in sure.values()}
            theirs = {n for u in partners for n in names(u)}
            follow = next(
                (
                    i
                    for i in range(start + 1, len(p.later))
                    if p.later[i].sender == asker
                    and _answers_back(p.later[i], partners, theirs, sure, known)
                ),
                None,
            )
            if follow is None:  # past what was read: the asker's own lines only
                bound = p.window[-1].ts + (1 + DIALOGUE_HOPS) * self.horizon.ms
                ahead = (
                    self.eventlog.timeline.said_by(
                        p.hit.room_id,
                        p.root,
                        asker,
                        p.later[-1].ts,
                        bound,
                        DIALOGUE_HOPS * self.horizon.messages,
                    )
                    if p.later and (p.full or p.until < bound)
                    else []
                )
                back = next(
                    (
                        m
                        for m in ahead
                        if m.event_id not in position
                        and _answers_back(m, partners, theirs, sure, known)
                    ),
                    None,
                )
                if back is None:
                    break
                read = self._read_on(p, back.ts, back.ts + self.horizon.ms) or read
                position = {m.event_id: i for i, m in enumerate(p.later)}
                follow = position.get(back.event_id)
                if follow is None:
                    break
            elif self._read_on(p, p.later[-1].ts, p.later[follow].ts + self.horizon.ms):
                read = True
                position = {m.event_id: i for i, m in enumerate(p.later)}
            start = follow  # if no one answered that one, look past it
            for link in linked_after(
                p.later[follow],
                p.later[follow + 1 :],
                self.horizon,
                p.thread_of,
                known,
                lambda: self._earlier(p),
            ):
                if link.answer.sender in partners and link.answer.event_id not in found:
                    found[link.answer.event_id] = (link.answer, link.rule)
                    start = max(start, position[link.answer.event_id])
        return read

    def _earlier(self, p: Plan) -> frozenset[str]:
        """linkage's `earlier`: who spoke in the horizon before the window, read once."""
        if p.earlier is None:
            first = p.window[0].ts
            senders = self.eventlog.timeline.senders_before(
                p.hit.room_id, p.root, first - self.horizon.ms, first, self.horizon.messages
            )
            p.earlier = frozenset(n for u in senders for n in names(u))
        return p.earlier

    def _read_on(self, p: Plan, since: int, until: int) -> bool:
        """Extend the plan's timeline from `since` to `until` (ms), when it stopped
        before `until`. True if it read."""
        if not (p.later and (p.full or p.until < until)):
            return False
        timeline = self.eventlog.timeline.timeline_after(
            p.hit.room_id,
            p.root,
            since,
            until,
            2 * self.horizon.messages,
            roots=tuple(m.event_id for m in p.window),
        )
        seen = {m.event_id for m in p.later}
        for m, t in timeline:
            if m.event_id not in seen:
                p.later.append(m)
                if t is not None:
                    p.thread_of[m.event_id] = t
        p.until = max(p.until, until)
        p.full = len(timeline) >= 2 * self.horizon.messages
        return True


def _thanked_by_name(
    p: Plan,
    anchor: int,
    known: frozenset[str],
    found: dict[EventID, tuple[Message, str]],
    position: dict[EventID, int],
) -> None:
    """Link, as "thanked", the first message after the question of each person whom a
    later thanks of the asker's names or pills, and to whom nothing was linked yet
    (THANKED_BY_NAME); until she puts her next question to the room."""
    q = p.window[anchor]
    at = position.get(q.event_id)
    if at is None:
        return
    after = p.later[at + 1 :]
    if not any(m.sender == q.sender and thanks(m.body) for m in after):
        return  # most questions: no thanks to read the others' lines for
    linked = {m.sender for m, _ in found.values()}
    mine = names(q.sender)
    first: dict[UserID, Message] = {}
    for m in after:
        if m.sender != q.sender:
            # Not one who already answered (the thanks is for that), nor a line
            # addressed to someone else (their talk with another).
            if m.sender not in first and m.sender not in linked:
                if THANKED_NOT_ASKING and _asks_room(m, known):
                    linked.add(m.sender)  # their own question: none of theirs answers
                elif not (addressees(m, known) - mine):
                    first[m.sender] = m
            continue
        named = addressees(m, known)
        if asks_back(m.body) < 1 and not named and not m.mentions and m.reply_to is None:
            break  # her next question, put to the room: what follows is its conversation
        if not thanks(m.body):
            continue
        for u, x in first.items():
            if u in m.mentions or names(u) & named:
                found[x.event_id] = (x, "thanked")


def _asks_room(m: Message, known: frozenset[str]) -> bool:
    """m is a question put to the room: it asks, replies to nothing and names no one."""
    return (
        asks_back(m.body) < 1 and not m.mentions and m.reply_to is None and not addressees(m, known)
    )


def _answers_back(
    m: Message,
    partners: set[UserID],
    their: set[str],
    found: dict[EventID, tuple[Message, str]],
    known: frozenset[str],
) -> bool:
    """m (the asker's) speaks to one of the people who responded: a reply to one of
    their responses, a pill of theirs, or their name leading or @-ed."""
    if m.reply_to is not None:
        return m.reply_to in found
    return bool(set(m.mentions) & partners) or bool(addressees(m, known) & their)
