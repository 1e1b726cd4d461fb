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
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable

MIN_NAME = 2  # a shorter name would match too much
MIN_MENTION = 3  # a mention anywhere in the text needs a longer name than an address
MIN_PREFIX = 3  # a shortened name: "da" is no one's, "dana" may be dana-7f3's

_HEX = re.compile(r"_([0-9a-f]{2})")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")
# "nick: text", "nick, text", "nick> text", "@nick: text"
_ADDRESS = re.compile(r"^\s*@?([^\s:,>]{1,64})\s*[:,>]\s")
_REPLY_FALLBACK = re.compile(r"^> <(@[^>\s]+)>")
_TOKEN = re.compile(r"[^\s,.:;!?()\"'<>]+")


def norm(name: str) -> str:
    return _NOT_ALNUM.sub("", name.lower())


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
