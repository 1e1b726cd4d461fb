"""Reading raw Matrix events (dicts from a transaction, /messages or a JSONL export).

Every shape a homeserver or a file can hand us is classified here, once: a message
we may index, a state event that changes what we know of a room, an encrypted event
(never stored), or something to skip with a reason. Nothing here raises on odd input.

Hostile but legal input stops here: an id with a newline or another control character
(it would forge lines in logs and replies), a timestamp no calendar can print
(canonical JSON allows 2^53 ms, year 287,396; Python's datetime ends at 9999 and SQLite's
integers at 2^63). Such a message is skipped with a reason; one out of the calendar's
range is quarantined by id (admit.py journals it), never stored to stall the pipeline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from ..records import EventID, Message, RoomID, UserID
from .polls import POLL_MALFORMED, START_TYPES, VOTE_TYPES, poll_text
from .replyfallback import strip_reply_fallback

COMMAND_PREFIX = "!sources"


def command_rest(body: str) -> str | None:
    """What follows the command word if the message is a `!sources` command (matched
    case-insensitively after leading whitespace: phones capitalise `!Sources`), else
    None. A command is never indexed, whatever its case."""
    text = body.lstrip()
    word = text[: len(COMMAND_PREFIX)]
    rest = text[len(COMMAND_PREFIX) :]
    if word.lower() != COMMAND_PREFIX or (rest and not rest[0].isspace()):
        return None
    return rest


TEXT_MSGTYPES = frozenset({"m.text", "m.notice", "m.emote"})
# A Matrix event is at most 64 KiB; a body beyond that is not a real message.
MAX_BODY_BYTES = 65536
MAX_ID_BYTES = 255  # the spec's limit for user, room and event ids
MAX_TS_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last a datetime can hold
TIMESTAMP_OUT_OF_RANGE = "timestamp_out_of_range"
# Skip reasons that name a poison event: journalled by id and rule (admit.py).
QUARANTINED = frozenset({TIMESTAMP_OUT_OF_RANGE})
# Skip reasons journalled by id and rule (admit.py), so a sender's odd event is explained.
JOURNALLED = frozenset({POLL_MALFORMED})


@dataclass(frozen=True, slots=True)
class StateEvent:
    room_id: RoomID
    event_id: EventID
    sender: UserID
    type: str
    state_key: str
    content: dict
    ts: int = 0  # origin_server_ts; 0 when unknown (read as "since ever")


@dataclass(frozen=True, slots=True)
class MessageEvent:
    message: Message
    thread_root: EventID | None = None
    is_command: bool = False
    bounded: int = 0  # a poll's answers past polls.MAX_ANSWERS, left out (journalled)

    @property
    def room_id(self) -> RoomID:
        """The message's room: every parsed event has one (Skipped: None if unknown)."""
        return self.message.room_id


@dataclass(frozen=True, slots=True)
class EditEvent:
    """An `m.replace` of an earlier message: its new text, applied by target event id."""

    room_id: RoomID
    event_id: EventID
    sender: UserID
    target: EventID
    body: str
    ts: int


@dataclass(frozen=True, slots=True)
class RedactionEvent:
    room_id: RoomID
    event_id: EventID
    sender: UserID
    target: EventID
    ts: int


@dataclass(frozen=True, slots=True)
class ReactionEvent:
    """An `m.reaction` (`m.annotation`): `key` on `target`. Never stored as an event; a
    vote on one of the bot's answers is counted (reactions.py, eventlog/feedback.py)."""

    room_id: RoomID
    event_id: EventID
    sender: UserID
    target: EventID
    key: str


@dataclass(frozen=True, slots=True)
class EncryptedEvent:
    room_id: RoomID
    event_id: EventID


@dataclass(frozen=True, slots=True)
class Skipped:
    reason: str  # a short code, never the text
    room_id: RoomID | None = None
    event_id: EventID | None = None


ParsedEvent = (
    StateEvent
    | MessageEvent
    | EditEvent
    | RedactionEvent
    | ReactionEvent
    | EncryptedEvent
    | Skipped
)


def is_utf8(s: str) -> bool:
    """False for a string with lone surrogates (`"\\ud800"` is valid JSON): neither SQLite
    nor Chroma can store it, and a failed append would be retried forever."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def no_nul(body: str) -> str:
    """A NUL character as U+FFFD: PostgreSQL's text refuses NUL, and a body that can never
    be appended would stall its room (store/eventlog/sqldialect.py). Both event logs keep the
    same."""
    return body.replace("\x00", "\ufffd") if "\x00" in body else body


def _str(d: dict, key: str) -> str | None:
    v = d.get(key)
    return v if isinstance(v, str) and v and is_utf8(v) else None


def is_clean_id(s: str) -> bool:
    """An id fit for logs and replies: printable, no whitespace, within the spec's length."""
    return s.isprintable() and " " not in s and len(s.encode("utf-8")) <= MAX_ID_BYTES


def _id(d: dict, key: str) -> str | None:
    v = _str(d, key)
    return v if v is not None and is_clean_id(v) else None


def _ts(raw: dict) -> int | None:
    """origin_server_ts if it is an integer a calendar can print, else None."""
    ts = raw.get("origin_server_ts")
    ok = isinstance(ts, int) and not isinstance(ts, bool) and 0 <= ts <= MAX_TS_MS
    return ts if ok else None


def parse_event(raw: Any) -> ParsedEvent:
    if not isinstance(raw, dict):
        return Skipped("not_an_object")
    room_id, event_id = _id(raw, "room_id"), _id(raw, "event_id")
    etype, sender = _str(raw, "type"), _id(raw, "sender")
    if room_id is None or event_id is None or etype is None or sender is None:
        return Skipped(
            "missing_ids",
            RoomID(room_id) if room_id else None,
            EventID(event_id) if event_id else None,
        )
    rid, eid = RoomID(room_id), EventID(event_id)
    content = raw.get("content")
    if etype == "m.room.encrypted":
        return EncryptedEvent(rid, eid)
    if not isinstance(content, dict):
        return Skipped("content_not_object", rid, eid)
    state_key = raw.get("state_key")
    ts = _ts(raw)
    if isinstance(state_key, str):
        return StateEvent(rid, eid, UserID(sender), etype, state_key, content, ts or 0)
    if etype == "m.room.redaction":
        # Room versions up to 10 put `redacts` at the top level, 11 and later in content.
        target = _id(raw, "redacts") or _id(content, "redacts")
        if target is None or ts is None:
            return Skipped("bad_redaction", rid, eid)
        return RedactionEvent(rid, eid, UserID(sender), EventID(target), ts)
    if etype == "m.reaction":
        return _reaction(rid, eid, UserID(sender), content)
    if etype in VOTE_TYPES:
        return Skipped("poll_vote", rid, eid)  # who chose what: never stored
    if etype in START_TYPES:
        return _poll(rid, eid, UserID(sender), etype, content, ts)
    if etype != "m.room.message":
        return Skipped("unhandled_type", rid, eid)
    body = content.get("body")
    if not isinstance(body, str):
        return Skipped("body_not_string", rid, eid)
    if content.get("msgtype") not in TEXT_MSGTYPES:
        return Skipped("not_text", rid, eid)
    relates = content.get("m.relates_to")
    relates = relates if isinstance(relates, dict) else {}
    if relates.get("rel_type") == "m.replace":
        return _edit(rid, eid, UserID(sender), relates, content, ts)
    if len(body.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        return Skipped("body_too_large", rid, eid)
    if not is_utf8(body):
        if ts is not None and command_rest(body.strip()) is not None:
            # A command is never stored, so it can be answered: with a refusal naming the
            # character (appservice/bot/commands.py), not silence.
            return MessageEvent(Message(eid, rid, UserID(sender), ts, body.strip()), None, True)
        return Skipped("body_not_utf8", rid, eid)
    if isinstance(relates.get("m.in_reply_to"), dict):
        body = strip_reply_fallback(body)
    body = body.strip()
    is_command = command_rest(body) is not None
    if not is_command:  # a command holding one is refused by the bot, naming it
        body = no_nul(body)
    if not body:
        return Skipped("empty_body", rid, eid)
    if ts is None:
        raw_ts = raw.get("origin_server_ts")
        if isinstance(raw_ts, int) and not isinstance(raw_ts, bool) and raw_ts > MAX_TS_MS:
            return Skipped(TIMESTAMP_OUT_OF_RANGE, rid, eid)
        return Skipped("bad_timestamp", rid, eid)
    thread_root = None
    if relates.get("rel_type") == "m.thread" and _id(relates, "event_id"):
        thread_root = EventID(relates["event_id"])
    msg = Message(
        eid, rid, UserID(sender), ts, body, _reply_to(relates), _mentions(content, sender)
    )
    return MessageEvent(msg, thread_root, is_command)


def _poll(
    rid: RoomID, eid: EventID, sender: UserID, etype: str, content: dict, ts: int | None
) -> MessageEvent | EditEvent | Skipped:
    """A poll as its sender's message (polls.py); its edit as a message's edit."""
    relates = content.get("m.relates_to")
    relates = relates if isinstance(relates, dict) else {}
    edit = relates.get("rel_type") == "m.replace"
    source = content.get("m.new_content") if edit else content
    text, _, bounded = poll_text(etype, source) if isinstance(source, dict) else (None, "", 0)
    if text is None:
        return Skipped(POLL_MALFORMED, rid, eid)
    if not is_utf8(text):
        return Skipped("body_not_utf8", rid, eid)
    if len(text.encode("utf-8")) > MAX_BODY_BYTES:
        return Skipped("body_too_large", rid, eid)
    text = no_nul(text)
    if ts is None:
        return Skipped("bad_timestamp", rid, eid)
    if edit:
        target = _id(relates, "event_id")
        if target is None:
            return Skipped("bad_edit", rid, eid)
        return EditEvent(rid, eid, sender, EventID(target), text, ts)
    thread_root = None
    if relates.get("rel_type") == "m.thread" and _id(relates, "event_id"):
        thread_root = EventID(relates["event_id"])
    message = Message(eid, rid, sender, ts, text, _reply_to(relates))
    return MessageEvent(message, thread_root, bounded=bounded)


def _reply_to(relates: dict) -> EventID | None:
    """The event a message replies to; not a thread's fallback reply (a client's pointer
    to the thread's latest event, `is_falling_back`), nor anything malformed."""
    reply = relates.get("m.in_reply_to")
    if not isinstance(reply, dict) or relates.get("is_falling_back") is True:
        return None
    target = _id(reply, "event_id")
    return EventID(target) if target and target.startswith("$") else None


MAX_MENTIONS = 20  # more is a ping-all, not a conversation


# A pill: a link to a user in the HTML body (clients send `m.mentions` too, older ones
# and bridges only the link).
_PILL = re.compile(r"""href\s*=\s*["']https://matrix\.to/#/(@[^"'/?]+|%40[^"'/?]+)""", re.I)


def _mentions(content: dict, sender: str) -> tuple[UserID, ...]:
    """The user ids of `m.mentions` and of the pills in `formatted_body`, other than
    the sender's, in order, once each; none if malformed or too many."""
    mentions = content.get("m.mentions")
    ids = mentions.get("user_ids") if isinstance(mentions, dict) else None
    ids = list(ids) if isinstance(ids, list) else []
    html = content.get("formatted_body")
    if isinstance(html, str) and content.get("format") == "org.matrix.custom.html":
        ids += [unquote(u) for u in _PILL.findall(html[:MAX_BODY_BYTES])]
    if len(ids) > MAX_MENTIONS:
        return ()
    ok = [
        u
        for u in ids
        if isinstance(u, str)
        and u.startswith("@")
        and ":" in u
        and is_clean_id(u)
        and is_utf8(u)
        and u != sender
    ]
    return tuple(UserID(u) for u in dict.fromkeys(ok))


def _edit(
    rid: RoomID, eid: EventID, sender: UserID, relates: dict, content: dict, ts: int | None
) -> EditEvent | Skipped:
    target = _id(relates, "event_id")
    new = content.get("m.new_content")
    body = new.get("body") if isinstance(new, dict) else None
    if target is None or ts is None:
        return Skipped("bad_edit", rid, eid)
    if (
        not isinstance(new, dict)
        or not isinstance(body, str)
        or (new.get("msgtype") not in TEXT_MSGTYPES)
    ):
        return Skipped("edit_not_text", rid, eid)
    if len(body.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES or not is_utf8(body):
        return Skipped("edit_body_invalid", rid, eid)
    body = no_nul(body).strip()
    if not body:
        return Skipped("empty_body", rid, eid)
    return EditEvent(rid, eid, sender, EventID(target), body, ts)


MAX_REACTION_KEY_BYTES = 64  # an emoji sequence is a few dozen bytes at most


def _reaction(rid: RoomID, eid: EventID, sender: UserID, content: dict) -> ReactionEvent | Skipped:
    relates = content.get("m.relates_to")
    relates = relates if isinstance(relates, dict) else {}
    target, key = _id(relates, "event_id"), _str(relates, "key")
    if (
        relates.get("rel_type") != "m.annotation"
        or target is None
        or key is None
        or len(key.encode("utf-8")) > MAX_REACTION_KEY_BYTES
    ):
        return Skipped("bad_reaction", rid, eid)
    return ReactionEvent(rid, eid, sender, EventID(target), key)
