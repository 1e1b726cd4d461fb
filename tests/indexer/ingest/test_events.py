"""`indexer.ingest.events.parse_event` on every odd shape a homeserver or a JSONL file can hand
us: it classifies, it never raises, and what it lets through can be stored."""

from __future__ import annotations

import json

import pytest

from matrix_sources.indexer.ingest.events import (
    COMMAND_PREFIX,
    MAX_BODY_BYTES,
    EditEvent,
    EncryptedEvent,
    MessageEvent,
    RedactionEvent,
    Skipped,
    StateEvent,
    parse_event,
)

ROOM = "!room:example.org"


def msg(body: object = "hello there", **over) -> dict:
    ev = {
        "type": "m.room.message",
        "room_id": ROOM,
        "event_id": "$ev1",
        "sender": "@alice:example.org",
        "origin_server_ts": 1_700_000_000_000,
        "content": {"msgtype": "m.text", "body": body},
    }
    ev.update(over)
    return ev


def skipped_reason(raw: object) -> str:
    ev = parse_event(raw)
    assert isinstance(ev, Skipped), ev
    return ev.reason


def test_plain_message_is_a_message():
    ev = parse_event(msg("how do we rotate the key"))
    assert isinstance(ev, MessageEvent)
    m = ev.message
    assert (m.event_id, m.room_id, m.sender, m.ts, m.body) == (
        "$ev1",
        ROOM,
        "@alice:example.org",
        1_700_000_000_000,
        "how do we rotate the key",
    )
    assert ev.thread_root is None and not ev.is_command


@pytest.mark.parametrize("raw", [None, 1, 1.5, "event", b"event", [], [msg()], True])
def test_not_a_dict_is_skipped(raw):
    assert skipped_reason(raw) == "not_an_object"


@pytest.mark.parametrize("key", ["room_id", "event_id", "sender", "type"])
@pytest.mark.parametrize("value", ["<missing>", None, "", 42, ["$x"]])
def test_missing_or_bad_ids_are_skipped(key, value):
    raw = msg()
    if value == "<missing>":
        del raw[key]
    else:
        raw[key] = value
    assert skipped_reason(raw) == "missing_ids"


def test_missing_ids_keep_what_ids_there_are():
    raw = msg()
    del raw["sender"]
    ev = parse_event(raw)
    assert isinstance(ev, Skipped)
    assert (ev.room_id, ev.event_id) == (ROOM, "$ev1")


@pytest.mark.parametrize("content", [None, "body", 3, ["body"], True])
def test_content_not_a_dict_is_skipped(content):
    assert skipped_reason(msg(content=content)) == "content_not_object"


def test_content_missing_is_skipped():
    raw = msg()
    del raw["content"]
    assert skipped_reason(raw) == "content_not_object"


@pytest.mark.parametrize("body", [None, 5, 1.5, ["hi"], {"text": "hi"}, True])
def test_body_not_a_string_is_skipped(body):
    assert skipped_reason(msg(body)) == "body_not_string"


def test_no_body_is_skipped():
    raw = msg()
    del raw["content"]["body"]
    assert skipped_reason(raw) == "body_not_string"


def test_huge_body_is_skipped():
    assert skipped_reason(msg("a" * (MAX_BODY_BYTES + 1))) == "body_too_large"
    # Counted in UTF-8 bytes, not characters.
    assert skipped_reason(msg("é" * (MAX_BODY_BYTES // 2 + 1))) == "body_too_large"


def test_body_at_the_limit_is_kept():
    ev = parse_event(msg("a" * MAX_BODY_BYTES))
    assert isinstance(ev, MessageEvent)


@pytest.mark.parametrize("body", ["", "   ", "\n\t\n"])
def test_empty_body_is_skipped(body):
    assert skipped_reason(msg(body)) == "empty_body"


def test_body_is_stripped():
    ev = parse_event(msg("  spaced out \n"))
    assert isinstance(ev, MessageEvent) and ev.message.body == "spaced out"


@pytest.mark.parametrize("etype", ["org.example.custom", "m.sticker"])
def test_unknown_type_is_skipped(etype):
    assert skipped_reason(msg(type=etype)) == "unhandled_type"


@pytest.mark.parametrize("msgtype", ["m.image", "m.file", None, 7, "m.location"])
def test_non_text_msgtype_is_skipped(msgtype):
    raw = msg()
    raw["content"]["msgtype"] = msgtype
    assert skipped_reason(raw) == "not_text"


@pytest.mark.parametrize("msgtype", ["m.text", "m.notice", "m.emote"])
def test_text_msgtypes_are_messages(msgtype):
    raw = msg()
    raw["content"]["msgtype"] = msgtype
    assert isinstance(parse_event(raw), MessageEvent)


@pytest.mark.parametrize(
    "content", [{"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEnAC..."}, None, "garbage"]
)
def test_encrypted_event_is_encrypted_whatever_its_content(content):
    ev = parse_event(msg(type="m.room.encrypted", content=content))
    assert isinstance(ev, EncryptedEvent)
    assert (ev.room_id, ev.event_id) == (ROOM, "$ev1")
    assert not hasattr(ev, "content")  # the ciphertext is not even carried along


def test_state_event():
    raw = {
        "type": "m.room.join_rules",
        "room_id": ROOM,
        "event_id": "$s",
        "sender": "@admin:example.org",
        "state_key": "",
        "origin_server_ts": 1,
        "content": {"join_rule": "public"},
    }
    ev = parse_event(raw)
    assert isinstance(ev, StateEvent)
    assert (ev.type, ev.state_key, ev.content) == ("m.room.join_rules", "", {"join_rule": "public"})


def test_state_event_with_message_type_is_state_not_a_message():
    ev = parse_event(msg(state_key=""))
    assert isinstance(ev, StateEvent)


def test_state_key_not_a_string_is_not_state():
    assert isinstance(parse_event(msg(state_key=5)), MessageEvent)


def test_reply_fallback_is_stripped():
    body = "> <@bob:example.org> the old question\n> second quoted line\n\nthe actual answer"
    raw = msg(body)
    raw["content"]["m.relates_to"] = {"m.in_reply_to": {"event_id": "$q"}}
    ev = parse_event(raw)
    assert isinstance(ev, MessageEvent)
    assert ev.message.body == "the actual answer"


def test_a_reply_carries_the_event_it_replies_to():
    raw = msg("apt install unrar")  # no fallback: clients dropped it (Matrix 1.13)
    raw["content"]["m.relates_to"] = {"m.in_reply_to": {"event_id": "$question"}}
    ev = parse_event(raw)
    assert isinstance(ev, MessageEvent) and ev.message.reply_to == "$question"
    assert parse_event(msg("no relation")).message.reply_to is None


@pytest.mark.parametrize(
    "reply",
    [{"event_id": 5}, {"event_id": "not-an-id"}, {}, {"event_id": "$" + "x" * 300}, "$q", ["$q"]],
)
def test_a_malformed_reply_relation_is_no_reply(reply):
    raw = msg("still a message")
    raw["content"]["m.relates_to"] = {"m.in_reply_to": reply}
    ev = parse_event(raw)
    assert isinstance(ev, MessageEvent) and ev.message.reply_to is None


def test_mentions_are_the_user_ids_of_m_mentions_but_the_senders():
    raw = msg("have a look at this")
    raw["content"]["m.mentions"] = {
        "user_ids": [
            "@bob:example.org",
            raw["sender"],
            7,
            "not-a-user",
            "@bob:example.org",
            "@carol:example.org",
        ]
    }
    assert parse_event(raw).message.mentions == ("@bob:example.org", "@carol:example.org")


@pytest.mark.parametrize(
    "mentions",
    [
        None,
        "@bob:x",
        {"user_ids": "@bob:x"},
        {"room": True},
        {"user_ids": [f"@u{i}:x" for i in range(21)]},
    ],
)
def test_odd_or_crowded_mentions_are_none(mentions):
    raw = msg("hello everyone")
    raw["content"]["m.mentions"] = mentions
    ev = parse_event(raw)
    assert isinstance(ev, MessageEvent) and ev.message.mentions == ()


def test_quote_without_reply_relation_is_kept():
    body = "> a quote I typed\nand my comment"
    ev = parse_event(msg(body))
    assert isinstance(ev, MessageEvent) and ev.message.body == body


def test_reply_with_only_fallback_is_empty():
    raw = msg("> <@bob:example.org> something\n")
    raw["content"]["m.relates_to"] = {"m.in_reply_to": {"event_id": "$q"}}
    assert skipped_reason(raw) == "empty_body"


def test_thread_message_carries_its_root():
    raw = msg("in the thread")
    raw["content"]["m.relates_to"] = {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$root"},
    }
    ev = parse_event(raw)
    assert isinstance(ev, MessageEvent)
    assert ev.thread_root == "$root" and ev.message.body == "in the thread"
    assert ev.message.reply_to is None  # a thread's fallback reply is no reply
    raw["content"]["m.relates_to"]["is_falling_back"] = False  # a real reply in a thread
    assert parse_event(raw).message.reply_to == "$root"


@pytest.mark.parametrize(
    "relates",
    [
        {"rel_type": "m.thread"},  # no root
        {"rel_type": "m.thread", "event_id": 5},
        "m.thread",
        ["m.thread"],
    ],
)
def test_malformed_thread_relation_is_no_thread(relates):
    raw = msg()
    raw["content"]["m.relates_to"] = relates
    ev = parse_event(raw)
    assert isinstance(ev, MessageEvent) and ev.thread_root is None


def test_edit_carries_the_new_content_and_its_target():
    raw = msg("* fixed")
    raw["content"]["m.relates_to"] = {"rel_type": "m.replace", "event_id": "$orig"}
    raw["content"]["m.new_content"] = {"msgtype": "m.text", "body": " fixed text "}
    ev = parse_event(raw)
    assert isinstance(ev, EditEvent)
    assert (ev.target, ev.body, ev.sender) == ("$orig", "fixed text", raw["sender"])


@pytest.mark.parametrize(
    "new,reason",
    [
        (None, "edit_not_text"),
        ({"msgtype": "m.image", "body": "x"}, "edit_not_text"),
        ({"msgtype": "m.text", "body": 5}, "edit_not_text"),
        ({"msgtype": "m.text", "body": "  "}, "empty_body"),
    ],
)
def test_odd_edits_are_skipped(new, reason):
    raw = msg("* fixed")
    raw["content"]["m.relates_to"] = {"rel_type": "m.replace", "event_id": "$orig"}
    if new is not None:
        raw["content"]["m.new_content"] = new
    assert skipped_reason(raw) == reason


@pytest.mark.parametrize("where", ["top", "content"])
def test_redaction_target_from_either_place(where):
    raw = msg(type="m.room.redaction")
    raw["content"] = {"reason": "spam"}
    if where == "top":
        raw["redacts"] = "$gone"
    else:
        raw["content"]["redacts"] = "$gone"
    ev = parse_event(raw)
    assert isinstance(ev, RedactionEvent) and ev.target == "$gone"


def test_redaction_without_target_is_skipped():
    raw = msg(type="m.room.redaction")
    raw["content"] = {}
    assert skipped_reason(raw) == "bad_redaction"


@pytest.mark.parametrize(
    "body,expected",
    [
        (COMMAND_PREFIX, True),
        (f"{COMMAND_PREFIX} how do I rotate the key", True),
        (f"  {COMMAND_PREFIX} padded  ", True),
        (f"{COMMAND_PREFIX}\nfirst\nsecond", True),
        (f"{COMMAND_PREFIX} help", True),
        (f"{COMMAND_PREFIX}please", False),
        (f"I typed {COMMAND_PREFIX} mid-sentence", False),
        ("!Sources capitalised", True),
        ("  !SOURCES shouting", True),
        ("\t!sources\ttabbed", True),
        ("!Sourcesplease", False),
        ("sources", False),
    ],
)
def test_command_detection(body, expected):
    ev = parse_event(msg(body))
    assert isinstance(ev, MessageEvent)
    assert ev.is_command is expected


def test_command_in_a_reply_is_detected_after_the_fallback():
    raw = msg(f"> <@bob:example.org> hi\n\n{COMMAND_PREFIX} signing key")
    raw["content"]["m.relates_to"] = {"m.in_reply_to": {"event_id": "$q"}}
    ev = parse_event(raw)
    assert isinstance(ev, MessageEvent) and ev.is_command


@pytest.mark.parametrize(
    "ts", [True, False, -1, -1_700_000_000_000, 1.5e12, "1700000000000", None, "<missing>"]
)
def test_bad_timestamps_are_skipped(ts):
    raw = msg()
    if ts == "<missing>":
        del raw["origin_server_ts"]
    else:
        raw["origin_server_ts"] = ts
    assert skipped_reason(raw) == "bad_timestamp"


def test_zero_timestamp_is_fine():
    ev = parse_event(msg(origin_server_ts=0))
    assert isinstance(ev, MessageEvent) and ev.message.ts == 0


@pytest.mark.parametrize("field", ["body", "event_id", "room_id", "sender"])
def test_lone_surrogates_never_reach_storage(field):
    """JSON may carry a lone surrogate (`"\\ud800"`); SQLite and Chroma cannot store it.
    Whatever parse_event lets through must be storable, or the event log append fails
    and the whole transaction is retried forever."""
    raw = msg()
    if field == "body":
        raw["content"]["body"] = json.loads('"bad \\ud800 text"')
    else:
        raw[field] = raw[field] + json.loads('"\\udfff"')
    ev = parse_event(raw)
    assert isinstance(ev, Skipped)
    assert ev.reason == ("body_not_utf8" if field == "body" else "missing_ids")
    # What is skipped carries no id that could not be written to the journal either.
    json.dumps({"room_id": ev.room_id, "event_id": ev.event_id}, ensure_ascii=False).encode()


ODD = [
    {},
    {"type": None},
    {"type": "m.room.message", "content": {"body": "x"}},
    msg(content={"msgtype": "m.text", "body": "x", "m.relates_to": None}),
    msg(content={"msgtype": "m.text", "body": "x", "m.relates_to": {"m.in_reply_to": "$x"}}),
    msg(
        content={
            "msgtype": "m.text",
            "body": "> only\n> quotes",
            "m.relates_to": {"m.in_reply_to": {}},
        }
    ),
    msg(unsigned=None, redacts=5, state_key=None),
    {
        "type": "m.room.member",
        "room_id": ROOM,
        "event_id": "$m",
        "sender": "@a:x",
        "state_key": "@a:x",
        "content": {"membership": ["join"]},
    },
]


@pytest.mark.parametrize("raw", ODD)
def test_odd_events_never_raise(raw):
    assert isinstance(parse_event(raw), (MessageEvent, StateEvent, EncryptedEvent, Skipped))
