"""One reply-fallback stripper (indexer/ingest/replyfallback.py), following the Matrix spec
("Fallbacks for rich replies"): only the fallback block at the top of a reply goes; a
user's own `> quote` stays. Ingest (parse_event) and the normaliser share it."""

from __future__ import annotations

import pytest

from matrix_sources.indexer.derived.normalise import normalise
from matrix_sources.indexer.ingest.events import MessageEvent, parse_event
from matrix_sources.indexer.ingest.replyfallback import strip_reply_fallback


def event(body: str, reply: bool) -> dict:
    content = {"msgtype": "m.text", "body": body}
    if reply:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": "$original"}}
    return {
        "type": "m.room.message",
        "room_id": "!r:example.org",
        "event_id": "$reply",
        "sender": "@bob:example.org",
        "origin_server_ts": 1_700_000_000_000,
        "content": content,
    }


def stored(body: str, reply: bool = True) -> str | None:
    ev = parse_event(event(body, reply))
    return ev.message.body if isinstance(ev, MessageEvent) else None


CASES = [
    # The spec's example: one quoted line, an empty line, the reply.
    (
        "spec example",
        "> <@alice:example.org> This is the original body\n\nThis is where the reply goes",
        "This is where the reply goes",
    ),
    (
        "multi-line original",
        "> <@alice:example.org> first line\n> second line\n>\n"
        "> after a blank quoted line\n\nthe reply",
        "the reply",
    ),
    ("emote original", "> * <@alice:example.org> waves\n\nhello to you too", "hello to you too"),
    (
        "reply of several lines",
        "> <@alice:example.org> q\n\nline one\nline two",
        "line one\nline two",
    ),
    (
        "the user's own quote after the fallback",
        "> <@alice:example.org> how do I rotate it?\n\n> rotate it\nlike this, yes",
        "> rotate it\nlike this, yes",
    ),
    (
        "no fallback (Matrix 1.13): a leading quote is the user's",
        "> the docs say: rotate monthly\n\nis that still true?",
        "> the docs say: rotate monthly\n\nis that still true?",
    ),
    (
        "a quote with no sender head is no fallback",
        "> just a quote\nmy comment",
        "> just a quote\nmy comment",
    ),
    ("a `>` without a space is no prefix", ">not a quote\nreply", ">not a quote\nreply"),
]


@pytest.mark.parametrize("body, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_fallback_block_and_only_it_is_stripped(body, expected):
    assert strip_reply_fallback(body) == expected
    assert stored(body) == expected.strip()


def test_a_message_that_is_no_reply_keeps_even_a_fallback_shaped_top():
    body = "> <@alice:example.org> pasted from a client\n\nmy own words"
    assert stored(body, reply=False) == body


def test_a_reply_of_only_a_fallback_is_empty():
    assert strip_reply_fallback("> <@alice:example.org> something\n") == ""
    assert stored("> <@alice:example.org> something\n") is None  # skipped: empty body


def test_ingest_and_the_normaliser_strip_alike():
    """The derived filter's words of a pasted reply are those of the stored body, and a
    Markdown quote counts as words on both paths."""
    for _, body, _expected in CASES:
        assert normalise(stored(body) or "") == normalise(body)
