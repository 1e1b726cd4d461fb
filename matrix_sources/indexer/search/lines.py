"""What a chat line says, read from its text and its place: a question back, an echo
of the question, a thanks, a link's explanation, a line stuffed with search words.
The presenter (present.py) weighs and orders the lines it quotes by these."""

from __future__ import annotations

import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from ..ingest.addressing import addressed, names
from ..records import EventID, Message, UserID
from .tokens import is_word, keys, tokens

NOVELTY_FLOOR = 0.5  # the weight left to a line made only of the query's words
# A line whose own words are at most this share of it echoes the question: it is quoted
# only when nothing else responds, like "yes". Under a third: "Cast it to android
# driver", a third of its words new, answers in the question's own terms.
ECHO = NOVELTY_FLOOR + (1 - NOVELTY_FLOOR) * 0.3
# A response that is itself a question ("what's the URL?") asks back more often than it
# answers: its score is weighed down this much (docs/benchmarks.md: shown@1 on the
# three dev sets; 0.85 to 0.9 gained, 0.8 and below cost Slack).
ASKS_BACK = 0.9
# A line that opens asking ("can you post appium logs") asks back without its question
# mark, which chat often drops (Gitter shown@1 up, nothing else; docs/benchmarks.md).
OPENS_ASKING = True
_TO = r"\s*(?:@[\w.\-]+[:,]?\s+|[\w.\-]+[:,]\s*)?"  # the name a line is addressed to, if any
_ASKS_OPEN = re.compile(_TO + r"(can|could|would|will|do|does|did|have|has|are)\s+(you|u)\b", re.I)
TAG_WORDS = 2  # "..., no?", "..., right?": a statement with a tag, not a question
_THANKS = re.compile(r"\b(thanks?|thank you|thx|ty|cheers|that's what i needed)\b", re.I)
_LINK = re.compile(r"https?://", re.I)
STUFFED_WORDS, STUFFED_DISTINCT = 6, 0.5  # 6+ words, under half of them distinct
_WORDY = re.compile(r"\w", re.UNICODE)
MIN_LINE_CHARS = 12  # shorter lines are quoted only when nothing longer responds
_AT_NAME = re.compile(r"@[\w.\-]+")
_WORDS = re.compile(r"\w+", re.UNICODE)


def said_before(window: Sequence[Message], anchor: int) -> list[int]:
    """When the matched line is a link that asks nothing (no "?"), the lines its sender
    wrote just before it, no one else between: the link ends an answer, and they are
    its explanation (a link matches by the words of its URL, its explanation by
    meaning). Not for other lines: a question's own lines before or after its matched
    one then crowded out the answers (docs/benchmarks.md)."""
    if "?" in window[anchor].body or not _LINK.search(window[anchor].body):
        return []
    out, i = [], anchor - 1
    while i >= 0 and window[i].sender == window[anchor].sender:
        out.append(i)
        i -= 1
    return out[::-1]


def thanks(body: str) -> bool:
    """The line thanks someone."""
    return bool(_THANKS.search(body))


def only_thanks(body: str) -> bool:
    """The line thanks and says little else: no question, and what is left without
    the thanks and the names it is addressed to is too short to say something ("Oops
    thanks@priyankshah217 :)", "bob: thanks, that was it!"; not "thanks, but it still
    fails with the same error")."""
    if not thanks(body) or "?" in body:
        return False
    rest = _AT_NAME.sub(" ", _THANKS.sub(" ", body))
    for name in addressed(body):
        rest = re.sub(rf"(?i)\b{re.escape(name)}\b", " ", rest, count=1)
    return len(" ".join(_WORDS.findall(rest))) < MIN_LINE_CHARS


def thanked(asker: UserID, later: Sequence[Message]) -> set[EventID]:
    """The messages the asker thanked: the last line of each other person before a
    thanks of the asker's that names them or no one ("@Monserrate thanks! that's what
    I needed" after "you want -f": an answer too short to be near the question)."""
    out: set[EventID] = set()
    last: dict[UserID, Message] = {}
    for m in later:
        if m.sender != asker:
            last[m.sender] = m
            continue
        if not _THANKS.search(m.body) or not last:
            continue
        named = [u for u in last if names(u) & set(addressed(m.body))]
        whom = named or (
            [max(last.values(), key=lambda x: x.ts).sender] if not addressed(m.body) else []
        )
        out.update(last[u].event_id for u in whom)
    return out


def said_after(lines: Sequence[Message], scores: Sequence[float], ratio: float) -> set[EventID]:
    """The lines asking back whose sender said more later among `lines`, not asking,
    scoring at least `ratio` of theirs: what they asked was answered, and what they
    said then is the answer."""
    said = [(m, sc) for m, sc in zip(lines, scores) if asks_back(m.body) == 1.0]
    return {
        m.event_id
        for m, sc in zip(lines, scores)
        if asks_back(m.body) != 1.0
        and any(x.sender == m.sender and x.ts > m.ts and xs >= ratio * sc for x, xs in said)
    }


def asks_back(body: str) -> float:
    """ASKS_BACK for a line that is itself a question, else 1. A statement closed by a
    tag ("..., no?", "..., right?") states: it is not a question back."""
    text = body.rstrip()
    if not text.endswith("?"):
        return ASKS_BACK if OPENS_ASKING and _ASKS_OPEN.match(text) else 1.0
    head, comma, tag = text.rpartition(",")
    return (
        1.0
        if comma and len(tag.split()) <= TAG_WORDS and len(head.split()) > TAG_WORDS
        else ASKS_BACK
    )


def novelty(body: str, asked: AbstractSet[str]) -> float:
    """1 for a line of its own words, down to NOVELTY_FLOOR for one that only repeats
    the query's and the question's: repeating the words asked is not answering them
    (a keyword-stuffed line scores high on meaning alone)."""
    own = tokens(body)
    if not own:
        return 1.0
    new = sum(1 for t in own if t not in asked) / len(own)
    return NOVELTY_FLOOR + (1 - NOVELTY_FLOOR) * new


def says_something(m: Message, asked: AbstractSet[str] = frozenset()) -> bool:
    """Long enough to say something, and not an echo of the words asked."""
    body = m.body.strip()
    return (
        len(body) >= MIN_LINE_CHARS
        and bool(_WORDY.search(body))
        and not (stuffed(body) or asked and novelty(body, asked) <= ECHO)
    )


def stuffed(body: str) -> bool:
    """The same few words over and over: written for a search engine, not a person."""
    words = [k for k in keys(body) if is_word(k)]
    return len(words) >= STUFFED_WORDS and len(set(words)) / len(words) < STUFFED_DISTINCT


_YES_NO_ASKED = re.compile(
    _TO + r"(is|are|can|could|does|do|did|will|would|has|have|should|was|were)\b", re.I
)
_YES_NO_SAID = re.compile(_TO + r"(no|nope|nah|yes|yep|yeah|yup|sure|of course)\b", re.I)


def asks_yes_no(body: str) -> bool:
    """The line opens a yes/no question ("Is there a way ...", "bob: can I ...")."""
    return bool(_YES_NO_ASKED.match(body))


def says_yes_no(body: str) -> bool:
    """The line opens with yes or no ("No, ...", "@alice nope"), after the name it is
    addressed to, if any."""
    return bool(_YES_NO_SAID.match(body))
