"""`!sources`: parsing the chat command, in one place.

    !sources how do I rotate the signing key
    !sources --top 3 --room here
    how do I rotate the signing key       <- each further line is one more query text
    signing key expired
    !sources help

A mistake raises `CommandError`, whose message is the short reply telling what to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from matrix_sources.indexer.ingest.events import COMMAND_PREFIX, command_rest
from matrix_sources.indexer.search.searcher import MAX_TEXTS, MAX_TOP_K, QueryError, SourceQuery

HELP = f"""\
Search this community's public rooms by meaning:

  {COMMAND_PREFIX} how do I rotate the signing key
      the windows of conversation that answer it, with links
  {COMMAND_PREFIX} --top 3 --room here
  first way to say it
  second way to say it
      several lines: up to {MAX_TEXTS} texts, fused into one ranking
Flags: --top N (1 to {MAX_TOP_K}), --room here|#alias|!roomid, --corpus chat|reference
  {COMMAND_PREFIX} why 1     why hit 1 of your last query ranked where it did
  {COMMAND_PREFIX} status    what the index holds (room moderators)
  {COMMAND_PREFIX} report    what was asked here, answered or not, and the votes on
      the answers, last 7 days (room moderators)
  {COMMAND_PREFIX} forget me    remove everything you said from the index, and index
      nothing you say from now on ({COMMAND_PREFIX} index me undoes the second part)
  {COMMAND_PREFIX} help      this text"""


class CommandError(ValueError):
    """Something the asker must fix; the message is the reply."""


@dataclass(frozen=True)
class SearchCommand:
    query: SourceQuery
    room_alias: str | None = None  # --room #alias: resolved by the responder


@dataclass(frozen=True)
class HelpCommand:
    pass


@dataclass(frozen=True)
class StatusCommand:
    word: ClassVar[str] = "status"


@dataclass(frozen=True)
class ReportCommand:
    """The moderators' report for the room asked in (appservice/bot/report.py)."""

    word: ClassVar[str] = "report"


@dataclass(frozen=True)
class WhyCommand:
    n: int  # 1-based hit number of the asker's last query


@dataclass(frozen=True)
class ForgetMeCommand:
    """The sender's own words out of the index; never anyone else's."""

    undo: bool = False  # `index me`: what they send from now on is indexed again


Command = SearchCommand | HelpCommand | WhyCommand | StatusCommand | ReportCommand | ForgetMeCommand


def parse_command(body: str, room_id: str, default_top_k: int = 5) -> Command:
    rest = command_rest(body.strip())
    if rest is None:
        raise CommandError(f"Commands start with {COMMAND_PREFIX}.")
    bad = _unreadable(rest)
    if bad is not None:
        raise CommandError(
            f"Your query holds the character U+{ord(bad):04X}, which is not text: remove it."
        )
    first, _, more = rest.partition("\n")
    # Plain whitespace split: shlex would eat the apostrophes of "what's the bot's token".
    # Flag values (numbers, `here`, room ids, corpus names) never need quoting.
    words = first.split()
    if words == ["help"] and not more.strip():
        return HelpCommand()
    if words == ["status"] and not more.strip():
        return StatusCommand()
    if words == ["report"] and not more.strip():
        return ReportCommand()
    if [w.lower() for w in words] in (["forget", "me"], ["index", "me"]) and not more.strip():
        return ForgetMeCommand(undo=words[0].lower() == "index")
    if len(words) == 2 and words[0] == "why" and words[1].isdigit() and not more.strip():
        return WhyCommand(int(words[1]))
    top_k: object = default_top_k
    room: str | None = None
    corpus: str | None = None
    unflagged: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("--top", "--room", "--corpus"):
            if i + 1 >= len(words):
                raise CommandError(f"{w} needs a value. Try `{COMMAND_PREFIX} help`.")
            value = words[i + 1]
            if w == "--top":
                try:
                    top_k = int(value)
                except ValueError:
                    raise CommandError(
                        f"--top takes a number from 1 to {MAX_TOP_K}, not {value!r}."
                    ) from None
            elif w == "--room":
                room = room_id if value == "here" else value
            else:
                corpus = value
            i += 2
            continue
        if w.startswith("--"):
            raise CommandError(f"Unknown flag {w}. Try `{COMMAND_PREFIX} help`.")
        unflagged.append(w)
        i += 1
    texts = []
    # The first line's words (after flags) are one text, kept as the user typed them.
    first_text = " ".join(unflagged).strip()
    if first_text:
        texts.append(first_text)
    texts.extend(line.strip() for line in more.split("\n") if line.strip())
    if not texts:
        raise CommandError(
            f"What should I look for? Try `{COMMAND_PREFIX} how do I ...` "
            f"or `{COMMAND_PREFIX} help`."
        )
    alias = None
    if room is not None and room.startswith("#"):
        alias, room = room, None
    elif room is not None and not room.startswith("!"):
        raise CommandError("--room takes `here`, a room alias (#...) or a room id (!...).")
    try:
        return SearchCommand(SourceQuery.build(texts, top_k, room, corpus), alias)
    except QueryError as e:
        raise CommandError(_explain(e)) from None


def _unreadable(text: str) -> str | None:
    """The first character of a command no search should see: a control character other
    than newline, return and tab (NUL, BEL...), or a lone surrogate (valid JSON, not text). Such a
    query is refused naming it: searched, it would get no answer at all, as its reply,
    which quotes the query, could not be sent."""
    for c in text:
        if (c < " " and c not in "\n\r\t") or c == "\x7f" or "\ud800" <= c <= "\udfff":
            return c
    return None


def _explain(e: QueryError) -> str:
    if e.field.startswith("texts["):
        n = int(e.field[6:-1]) + 1
        return f"Line {n} of your query {e.message}: shorten it."
    if e.field == "texts":
        return f"Too many lines: {e.message}."
    if e.field == "top_k":
        return f"--top {e.message}."
    return f"--{e.field} {e.message}."
