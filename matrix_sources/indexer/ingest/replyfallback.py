"""The Matrix reply fallback, and the one function that strips it.

A client replying to a message used to prepend a quote of it to the reply's body (the
spec's "fallbacks for rich replies"; Matrix 1.13 made them optional):

    > <@alice:example.org> the original body, first line
    > its next lines, each prefixed "> " (a blank one as ">")

    the reply itself

An emote's fallback starts `> * <@alice:example.org> `. Stripping, as the spec says:
the lines that start with the prefix, from the top of the body, until the first line
that does not; here also the one empty line that separates them from the reply. The
first line must name the sender as above: a user's own leading `> quote`, in a reply
sent without a fallback or in any other message, is theirs and is kept.
"""

from __future__ import annotations

import re

# `> <@user:server> ` or, for an emote, `> * <@user:server> `.
_HEAD = re.compile(r"> (?:\* )?<@[^<>\s]+>(?: |$)")


def strip_reply_fallback(body: str) -> str:
    """The body without the reply fallback at its top; unchanged if it has none."""
    lines = body.split("\n")
    if not _HEAD.match(lines[0]):
        return body
    i = 1
    while i < len(lines) and (lines[i].startswith("> ") or lines[i] == ">"):
        i += 1
    if i < len(lines) and lines[i].strip() == "":
        i += 1
    return "\n".join(lines[i:])
