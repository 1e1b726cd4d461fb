"""Who a chat message answers, from its text: what lets the chunker follow a
conversation through an interleaved room.

    "bob: try sudo ..."           addressed to bob (IRC and most Matrix clients)
    "> <@bob:example.org> ...."   a Matrix reply fallback: a reply to bob
    "... as bob said ..."         a mention of bob (weaker: talked about, not to)

A sender's names come from its user id: the localpart, the same with `_xx` hex escapes
decoded (how bridges write IRC nicks: `@irc_stig_5f` is `stig_`), and without a bridge
prefix up to the first `_` or `-` (`@slack-delmy` is `delmy`). Names are compared
lowercased with everything but letters and digits dropped, so "Stig_," and
`@irc_stig_5f:server` meet.

People shorten names: `dana:` for `@dana-7f3`, `rich` for `@richvdh`. A name that is
no one's resolves to the one person among those talking (`resolve`) whose name starts
with it, when it is at least MIN_PREFIX long and only one person's does.

People also address each other by display name, which the user id need not share
(`dana:` for `@u8f3k2` named "Dana Whitfield"). Those are resolved when the message is
admitted, against the room's members and their display names at that moment
(`MemberIndex`, ingest/members.py), and the user found joins the message's mentions.
A display name is read whole and by its first word, folded (`fold`) so that any
script's letters count ("Jürgen", "王伟"), and as a reader sees it: invisible characters
dropped and look-alikes read as what they look like (skeleton.py), so `Da\u200bni` and a
Cyrillic `Dаni` are both "dani", and meet whoever else that fits (members.py decides).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from .skeleton import reader_text

MIN_NAME = 2  # a shorter name would match too much
MIN_MENTION = 3  # a mention anywhere in the text needs a longer name than an address
MIN_PREFIX = 3  # a shortened name: "da" is no one's, "dana" may be dana-7f3's

_HEX = re.compile(r"_([0-9a-f]{2})")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")
# "nick: text", "nick, text", "nick> text", "@nick: text"
_ADDRESS = re.compile(r"^\s*@?([^\s:,>]{1,64})\s*[:,>]\s")
_REPLY_FALLBACK = re.compile(r"^> <(@[^>\s]+)>")
_TOKEN = re.compile(r"[^\s,.:;!?()\"'<>]+")
_AT_NAME = re.compile(r"(?:^|(?<=\s))@(\w[\w.\-]{0,63})")


def norm(name: str) -> str:
    return _NOT_ALNUM.sub("", name.lower())


def fold(name: str) -> str:
    """A name compared across scripts and disguises: NFKC, invisibles and marks dropped,
    confusables read as their prototype, case-folded (skeleton.reader_text), letters and
    digits only. The same as `norm` for ASCII."""
    return "".join(c for c in reader_text(name) if c.isalnum())


def display_forms(display: str) -> frozenset[str]:
    """The names a display name may be addressed by, folded: all of it and its first
    word ("Richard van der Hoff": richardvanderhoff, richard)."""
    words = display.split()
    out = {fold(display), fold(words[0])} if words else set()
    return frozenset(n for n in out if len(n) >= MIN_NAME)


def address_words(body: str, most: int = 4) -> list[str]:
    """The folded names a message names people by in its text: a leading "name:" and
    each "@name" (at most `most` in all), for resolving against display names."""
    out = []
    m = _ADDRESS.match(body)
    if m and not _REPLY_FALLBACK.match(body):
        out.append(fold(m.group(1)))
    out += [fold(t) for t in _AT_NAME.findall(body[:4096])]
    return [n for n in dict.fromkeys(out) if len(n) >= MIN_NAME][:most]


@lru_cache(maxsize=65536)
def names(user_id: str) -> frozenset[str]:
    """The names a sender may be addressed by, normalised."""
    local = user_id[1:].split(":", 1)[0] if user_id.startswith("@") else user_id
    decoded = _HEX.sub(lambda m: chr(int(m.group(1), 16)), local)
    out = {norm(local), norm(decoded)}
    for form in (local, decoded):
        for sep in "_-":
            if sep in form.strip(sep):
                out.add(norm(form.strip(sep).split(sep, 1)[1]))
    return frozenset(n for n in out if len(n) >= MIN_NAME)


def resolve(name: str, known: Iterable[frozenset[str]]) -> frozenset[str]:
    """The names of the one person `name` (normalised) stands for among `known` (each
    person's names): theirs whole, or, if nobody's is, the only person's with a name
    starting with it. Empty when nobody's or several people's."""
    people = [ns for ns in known if name in ns]
    if not people and len(name) >= MIN_PREFIX:
        people = [ns for ns in known if any(n.startswith(name) for n in ns)]
    return people[0] if len(set(people)) == 1 else frozenset()


def addressed(body: str) -> tuple[str, ...]:
    """The normalised names a message is addressed to (one person's, or none), if it
    starts by naming someone or is a reply with a fallback."""
    m = _REPLY_FALLBACK.match(body)
    if m:
        return tuple(sorted(names(m.group(1))))
    m = _ADDRESS.match(body)
    if m:
        n = norm(m.group(1))
        return (n,) if len(n) >= MIN_NAME else ()
    return ()


def mentions(body: str) -> list[str]:
    """Normalised words of the text long enough to be someone's name, in order."""
    out = []
    for tok in _TOKEN.findall(body):
        n = norm(tok)
        if len(n) >= MIN_MENTION:
            out.append(n)
    return out
