"""Question -> answer linkage: which later messages respond to a message.

In slow rooms the answer comes long after the question (in the Gitter dev set, 35 of
65 items have every answer 30+ minutes later, some 100 messages later), so no window
can hold both. A hit holding a question therefore carries the messages that respond
to it, from whichever window they are in. A later message `m` responds to the asker
A's message `q` when, within the horizon (hours and messages after `q`):

    reply      m is a Matrix reply to q (m.in_reply_to)
    thread     m is in the thread q started
    mention    m's m.mentions names A (a pill)
    address    m is addressed to A by text: "A: ...", "@A ...", or Gitter's glued
               "@Aif ..." (the bridge lost the space after the name)
    next       m is the first message by someone else after q, and addresses nobody
               else (the dialogue rule: an unaddressed message right after a
               question answers it)
    more       m follows a response of the same person with nothing by a third
               person between, and addresses nobody else (answers come in bursts)
    aside      any of the above but reply and thread, from one the asker has since
               turned to on their own matter (ASKER_TURNED): cited, not quoted

A back and forth goes on past the horizon: when A answers back to one who responded,
that person's responses to the follow-up are the question's too (conversation.py,
`Conversations._dialogue`).

Only A's own messages are ever answered by these rules; a message by A is never its own answer, and
a Matrix reply answers the message it replies to, no other. Linkage is computed when a hit is
presented, from the event log as it is then: an edit or a redaction of an answer reaches every hit
that carries it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..ingest.addressing import addressed, mentions, names, norm, resolve
from ..records import EventID, Message, UserID
from .lines import thanks

# "@name" anywhere in a message: Gitter's bridge glued it to the words around it
# ("native@raghava", "@anddamWe only show").
_AT = re.compile(r"@([A-Za-z0-9][\w.\-]{1,63})")
MIN_GLUED = 4  # a glued "@nameword" must start with a name this long to count
# One message answers one question (issue 51): once the asker thanked a response, or
# asked anew (a question of theirs, no reply, addressed to no one), and the conversation
# then paused (PAUSE_MINUTES with no line of it: the question, a response, the asker's),
# a later message linked only by naming them (mention, address) is not this question's
# answer. A reply or a thread still links. Until the pause the conversation goes on: a
# thanks for the first answer, or "cheese is a software?", is followed by more answers
# (closing at once cut 64 gold answers off their question on the three dev sets, after
# the pause 7: bench/closing.py, docs/benchmarks.md).
CLOSES = True
# The chunker's default gap between conversations (index.window_gap_seconds); None:
# closing at once.
PAUSE_MINUTES: float | None = 30.0
# A responder's burst ("more": their next lines, unaddressed, go on answering) ends at
# such a pause unless the asker spoke last: the same person talking again after half an
# hour of silence has moved on to their own matter (Gitter's "can docker-machine be
# scripted?": the responder's own new problem, 82 minutes on), while one who comes back
# to the asker's follow-up answers her (the touchaction answer 54 minutes after her
# "i get an error saying not yet implemented").
BURST_ENDS_AT_PAUSE = True
# A burst ends too at a line its sender addresses, by a leading "name:", to someone who
# spoke in the room before the question, hours before: Gitter's "Crizstian: Nice
# article! Some hints for your Dockerfile:", whose hints then are Crizstian's, not the
# asker's answer (the earlier speakers are read only for such a line).
BURST_ENDS_AT_EARLIER = True
# Once the asker turns, by name, to someone who spoke since her question but never named
# her (their own matter: Gitter's answerer telling "@sauga84 try this way"), that
# person's later lines to her answer what she told them, not the question: linked as
# "aside", carried and cited, not quoted (present.py). Linked all the same, so the
# hit's order and the dialogue rules read what they read before.
ASKER_TURNED = True


@dataclass(frozen=True, slots=True)
class Horizon:
    """How far after a question an answer may come."""

    hours: float = 24.0
    messages: int = 150

    @property
    def ms(self) -> int:
        return int(self.hours * 3600 * 1000)


@dataclass(frozen=True, slots=True)
class Link:
    question: EventID
    answer: Message
    rule: str  # reply | thread | mention | address | next | more | aside


def speakers(messages: Iterable[Message]) -> frozenset[str]:
    """The names the senders of these messages may be addressed by: `known` below."""
    return frozenset(n for m in messages for n in names(m.sender))


def addressees(
    m: Message, known: frozenset[str], people: Sequence[frozenset[str]] = ()
) -> frozenset[str]:
    """The names of `known` (normalised names of the people in the room; `people`:
    the same, per person) that a message is addressed to by its text: a leading
    `name:` / `@name` / reply fallback, and every `@name` in it, glued or not, whole or
    shortened to the start of one person's name ("dana:" for dana-7f3; addressing.resolve).
    Only known names count: "hmmm, you could" addresses no one."""
    out: set[str] = set()
    for n in addressed(m.body):
        out.update({n} & known or resolve(n, people))
    for t in _AT.findall(m.body):
        n = norm(t)
        glued = {x for x in known if n == x or (len(x) >= MIN_GLUED and n.startswith(x))}
        out.update(glued or resolve(n, people))
    return frozenset(out)


def _asks_anew(m: Message, known: frozenset[str], people: Sequence[frozenset[str]]) -> bool:
    """The asker's line is a new question: it asks, replies to nothing and names no one."""
    return (
        m.body.rstrip().endswith("?")
        and m.reply_to is None
        and not m.mentions
        and not addressees(m, known, people)
    )


def _addresses_other(m: Message, asker: UserID, to: frozenset[str]) -> bool:
    """Addressed, by text or m.mentions, to someone who is not the asker."""
    mine = names(asker)
    if any(u != asker and u != m.sender for u in m.mentions):
        return not (to & mine)
    return bool(to - mine - names(m.sender))


def _apart(name: str, asker: UserID, since: Sequence[Message]) -> bool:
    """The one called `name` spoke in `since` and never named the asker there."""
    theirs = [x for x in since if name in names(x.sender)]
    mine = names(asker)
    return bool(theirs) and not any(
        asker in x.mentions or mine & set(mentions(x.body)) for x in theirs
    )


def _to_earlier(
    m: Message, asker: UserID, known: frozenset[str], earlier: Callable[[], frozenset[str]] | None
) -> bool:
    """m starts by naming someone `known` lacks, who spoke earlier (`earlier`), and who
    is neither the asker nor m's sender."""
    heads = set(addressed(m.body)) - known
    if not heads or earlier is None:
        return False
    return bool(heads & (earlier() - names(asker) - names(m.sender)))


def responses(
    question: Message,
    later: Sequence[Message],
    horizon: Horizon,
    thread_of: dict[EventID, EventID] | None = None,
    known: frozenset[str] = frozenset(),
    earlier: Callable[[], frozenset[str]] | None = None,
) -> list[Link]:
    """The messages of `later` (the room's messages after `question`, in timeline
    order) that respond to it, within the horizon, in timeline order. `known`: names
    of people who spoke before the question (a "bob: ..." to someone who spoke only
    earlier is addressed to bob, not to nobody); `earlier`: the names of those who spoke
    in the room before that, read when a burst's line names someone `known` lacks."""
    asker = question.sender
    mine = names(asker)
    until = question.ts + horizon.ms
    senders = {m.sender for m in (question, *later[: horizon.messages])}
    known = known | frozenset(n for u in senders for n in names(u))
    people = [names(u) for u in sorted(senders)]
    out: list[Link] = []
    first_other = True  # no message by anyone else yet since the question
    closing = False  # thanked, or asked anew: naming links here only until a pause
    closed = False  # and then paused: for good
    last = question.ts  # the conversation's latest line: the question, a response, hers
    hers_last = True  # that line is the asker's
    pause = None if PAUSE_MINUTES is None else int(PAUSE_MINUTES * 60_000)
    burst: UserID | None = None  # a responder whose messages go on answering
    elsewhere: set[str] = set()  # names the asker turned to, on another matter
    responders: set[UserID] = set()
    for count, m in enumerate(later, start=1):
        if count > horizon.messages or m.ts > until:
            break
        closed = closed or closing and (pause is None or m.ts - last > pause)
        if m.sender == asker:
            if CLOSES and out and (thanks(m.body) or _asks_anew(m, known, people)):
                closing = True
            last, hers_last = m.ts, True
            turned = set(addressees(m, known, people)) - mine if ASKER_TURNED else set()
            if turned:  # rare: read back only then
                turned -= {n for u in responders for n in names(u)}
                elsewhere |= {n for n in turned if _apart(n, asker, later[: count - 1])}
            continue  # the asker's own follow-ups neither answer nor break a burst
        to = addressees(m, known, people)
        rule = None
        if m.reply_to == question.event_id:
            rule = "reply"
        elif m.reply_to is not None:
            pass  # a reply to another message answers that one, not this question
        elif thread_of is not None and thread_of.get(m.event_id) == question.event_id:
            rule = "thread"
        elif asker in m.mentions:
            rule = None if closed else "mention"
        elif to & mine:
            rule = None if closed else "address"
        elif not _addresses_other(m, asker, to):
            if first_other:
                rule = "next"
            elif (
                burst == m.sender
                and (not BURST_ENDS_AT_PAUSE or pause is None or m.ts - last <= pause or hers_last)
                and not (BURST_ENDS_AT_EARLIER and _to_earlier(m, asker, known, earlier))
            ):
                rule = "more"
        first_other = False
        if rule not in (None, "reply", "thread") and names(m.sender) & elsewhere:
            rule = "aside"
        if rule is not None:
            out.append(Link(question.event_id, m, rule))
            responders.add(m.sender)
            last, hers_last = m.ts, False
        burst = m.sender if rule is not None else None  # anyone else's word ends it
    return out
