"""Votes on the bot's answers (issue 47 item 1), through the service's transaction
endpoint as Synapse sends them: 👍 and 👎 folded over skin tones and variation
selectors, ✅ from the asker alone, a redaction withdrawing a vote or a question, and
every other reaction ignored."""

from __future__ import annotations

import time

import pytest

from matrix_sources.indexer.ingest.events import ReactionEvent, Skipped, parse_event
from matrix_sources.indexer.ingest.reactions import vote_of
from matrix_sources.indexer.store.eventlog.feedback import RoomFigures, Vote
from tests.moderationkit import (
    ALICE,
    BOB,
    BOT,
    CAROL,
    DAVE,
    DM,
    ROOM,
    T0,
    close_moderated,
    make_data_dir,
    message,
    open_moderated,
    reaction,
    redaction,
)

UP, DOWN, DONE = "\N{THUMBS UP SIGN}", "\N{THUMBS DOWN SIGN}", "\N{WHITE HEAVY CHECK MARK}"
SINCE = T0 - 1


@pytest.fixture
async def moderated(tmp_path):
    m = await open_moderated(make_data_dir(tmp_path))
    yield m
    await close_moderated(m)


@pytest.mark.parametrize(
    "key, vote",
    [
        (UP, Vote.UP),
        (UP + "\ufe0f", Vote.UP),
        (UP + "\U0001f3fd", Vote.UP),
        (UP + "\U0001f3ff\ufe0f", Vote.UP),
        (" " + UP + " ", Vote.UP),
        (DOWN, Vote.DOWN),
        (DOWN + "\U0001f3fb", Vote.DOWN),
        (DOWN + "\ufe0e", Vote.DOWN),
        (DONE, Vote.SOLVED),
        (DONE + "\ufe0f", Vote.SOLVED),
        ("\u2764\ufe0f", None),
        (UP + UP, None),
        (":+1:", None),
        ("+1", None),
        ("\U0001f3fd", None),
        ("\N{HEAVY CHECK MARK}", None),
        ("x", None),
    ],
)
def test_reaction_keys_fold_to_three_votes(key, vote):
    assert vote_of(key) == vote


def test_a_reaction_is_parsed_and_a_malformed_one_skipped():
    raw = reaction("$v", "$a", UP, BOB)
    assert parse_event(raw) == ReactionEvent(ROOM, "$v", BOB, "$a", UP)
    for relates in (
        {"rel_type": "m.reference", "event_id": "$a", "key": UP},
        {"rel_type": "m.annotation", "key": UP},
        {"rel_type": "m.annotation", "event_id": "$a"},
        {"rel_type": "m.annotation", "event_id": "$a", "key": "x" * 65},
        "not an object",
    ):
        bad = raw | {"content": {"m.relates_to": relates}}
        assert parse_event(bad) == Skipped("bad_reaction", ROOM, "$v")


async def test_votes_on_the_bots_answers_are_counted_folded_and_withdrawn(moderated):
    m = moderated
    [said] = m.say("rotate the signing key with the rotate-key command, then restart")
    answered = await m.ask("$ask1", "how do I rotate the signing key", ALICE)
    unanswered = await m.ask("$ask2", "kestrel mirror outage yesterday evening", BOB)
    assert m.feedback.figures(ROOM, SINCE) == RoomFigures(
        ROOM, asked=2, answered=1, nothing_matched=1
    )
    assert (
        await m.put(
            [
                reaction("$v1", answered, UP + "\U0001f3fd", BOB),
                reaction("$v2", answered, UP + "\ufe0f", CAROL),
                reaction("$v3", unanswered, DOWN, BOB),
                reaction("$v4", answered, DONE, ALICE),  # the asker: solved
                reaction("$v5", answered, DONE, CAROL),  # not the asker: ignored
                reaction("$v6", answered, "\u2764\ufe0f", BOB),  # not a vote
                reaction("$v7", said, UP, DAVE),  # not the bot's
                reaction("$v8", answered, UP, BOT),  # the bot's own
                reaction("$v9", answered, UP + "\U0001f3fb", BOB),  # bob's thumb again: one vote
            ]
        )
        == 200
    )
    await m.bot.idle()
    assert m.feedback.figures(ROOM, SINCE) == RoomFigures(
        ROOM, asked=2, answered=1, nothing_matched=1, up=2, down=1, solved=1
    )
    assert m.service.eventlog.counts() == {"indexed": 1}  # reactions are never events

    assert await m.put([redaction("$r1", "$v2", CAROL), redaction("$r2", "$ask2", BOB)]) == 200
    await m.bot.idle()
    assert m.feedback.figures(ROOM, SINCE) == RoomFigures(
        ROOM, asked=1, answered=1, up=1, solved=1
    )  # bob's two thumbs still one vote
    assert m.feedback.unanswered(ROOM, SINCE) == []
    await m.put([redaction("$r3", "$v1", BOB), redaction("$r4", "$v9", BOB)])
    await m.bot.idle()
    assert m.feedback.figures(ROOM, SINCE).up == 0


async def test_a_search_where_the_index_reads_nothing_leaves_no_feedback(moderated):
    """A DM or a private room: the bot answers, the report never hears of it."""
    m = moderated
    reply = await m.ask("$dm-ask", "kestrel mirror outage", ALICE, room=DM)
    await m.put([reaction("$dm-vote", reply, UP, ALICE, room=DM)])
    await m.bot.idle()
    assert m.feedback.rooms(0) == []


async def test_ten_thousand_votes_in_a_minute_are_counted_without_stalling_indexing(
    moderated, monkeypatch
):
    """100 transactions of 100 votes (Synapse's most per transaction), each with a
    message: every one answered 200, the votes written a batch per transaction off the
    event loop, and the messages indexed as if no vote had come."""
    m = moderated
    answer = await m.ask("$ask", "how do I rotate the signing key", ALICE)
    batches = []
    real = m.feedback.react
    monkeypatch.setattr(m.feedback, "react", lambda rs: batches.append(len(rs)) or real(rs))
    started = time.monotonic()
    for t in range(100):
        events = [
            reaction(f"$v{t}-{i}", answer, UP, f"@voter{t}-{i}:example.org") for i in range(100)
        ]
        assert await m.put(events + [message(f"$m{t}", f"message {t} about backups")]) == 200
    await m.bot.idle()
    m.service.pipeline.process_all()
    elapsed = time.monotonic() - started
    assert m.feedback.figures(ROOM, SINCE).up == 10_000
    assert batches == [100] * 100
    assert m.service.eventlog.counts() == {"indexed": 100}
    assert elapsed < 60, f"{elapsed:.1f} s for 10,000 votes"


async def test_a_room_that_turns_private_takes_its_questions_and_votes(moderated):
    """Even a room where nothing but questions was said: purged, its report goes."""
    m = moderated
    answer = await m.ask("$ask", "kestrel mirror outage yesterday evening", BOB)
    await m.put([reaction("$v1", answer, UP, ALICE)])
    await m.bot.idle()
    assert m.feedback.rooms(0) == [ROOM]
    assert (
        await m.put(
            [
                {
                    "type": "m.room.join_rules",
                    "room_id": ROOM,
                    "sender": ALICE,
                    "state_key": "",
                    "event_id": "$private",
                    "origin_server_ts": T0 + 1,
                    "content": {"join_rule": "invite"},
                }
            ]
        )
        == 200
    )
    assert m.feedback.rooms(0) == [] and m.feedback.unanswered(ROOM, 0) == []
