"""Moderators see what the bot answers and what it cannot (issue 47), through a real
Synapse and `matrix-sources run` with the real model: votes as reactions on the bot's
answers, a moderator's `!sources report` and a member refused, `matrix-sources report
--json`, and `!sources forget me` taking a person's questions and votes out of the
report and their question's text out of every file of the data dir."""

from __future__ import annotations

import asyncio
import json

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient
from matrix_sources.indexer.store.eventlog.db import reader
from tests.harness import Stack, gone_from_every_file, wait_for

pytestmark = [pytest.mark.synapse, pytest.mark.model]

UP, DOWN, DONE = "\N{THUMBS UP SIGN}", "\N{THUMBS DOWN SIGN}", "\N{WHITE HEAVY CHECK MARK}"
CANARY = "kestrel-pete-7e2a"  # in pete's question that nothing answers


def votes(stack: Stack) -> int:
    with reader(stack.database) as db:
        return db.execute("SELECT COUNT(*) FROM feedback_votes").fetchone()[0]


def asked_by(stack: Stack, user: str) -> int:
    with reader(stack.database) as db:
        return db.execute(
            "SELECT COUNT(*) FROM feedback_questions WHERE asker = ?", (user,)
        ).fetchone()[0]


def report(stack: Stack, room: str) -> dict:
    res = stack.cli("report", "--json", "--room", room)
    assert res.returncode == 0, res.stderr
    [entry] = json.loads(res.stdout)["rooms"]
    return entry


async def react(client: ChatClient, room: str, answer: str, key: str) -> str:
    return await client.send_event(
        room,
        "m.reaction",
        {"m.relates_to": {"rel_type": "m.annotation", "event_id": answer, "key": key}},
    )


async def test_votes_the_moderators_report_and_forget_me(stack):
    bot = stack.bot
    mona, mona_token = stack.synapse.register_user("mona", "mona-password")
    pete, pete_token = stack.synapse.register_user("pete", "pete-password")
    async with (
        ChatClient(stack.synapse.url, mona, mona_token) as m,
        ChatClient(stack.synapse.url, pete, pete_token) as p,
    ):
        room = await m.create_room("Help desk", public=True)  # mona: its creator
        stack.allowlist_add(room)
        await m.wait_for_member(room, bot)
        await p.join(room)
        said = await m.send(
            room,
            "to rotate the signing key run the rotate-key command, "
            "then restart the homeserver so it picks the new key up",
        )
        stack.wait_indexed([said])

        answered = await p.ask(room, "!sources how do I rotate the signing key", bot)
        assert "Nothing matches" not in answered["content"]["body"]
        pete_q = await p.send(room, f"!sources is the {CANARY} mirror down today")
        unanswered = await p.wait_for_reply(room, pete_q, bot)
        mona_q1 = await m.send(room, "!sources where do the wiki backups go at night")
        await m.wait_for_reply(room, mona_q1, bot)
        mona_q2 = await m.send(room, "!sources where are the wiki's nightly backups kept")
        await m.wait_for_reply(room, mona_q2, bot)

        await react(m, room, answered["event_id"], UP + "\U0001f3fd")
        await react(p, room, answered["event_id"], DONE)  # the asker: solved
        await react(m, room, answered["event_id"], DONE)  # not the asker: no vote
        await react(m, room, unanswered["event_id"], DOWN)
        await react(p, room, said, UP)  # not the bot's: no vote
        await asyncio.to_thread(wait_for, "three votes counted", lambda: votes(stack) == 3)

        # A moderator (the room's creator) asks for the room's report; a member cannot.
        notice = (await m.ask(room, "!sources report", bot))["content"]["body"]
        assert "4 asked, 1 answered, 3 nothing matches" in notice
        assert f"{UP} 1 {DOWN} 1 {DONE} 1" in notice
        assert "2x where do the wiki backups go at night" in notice
        assert f"1x is the {CANARY} mirror down today" in notice
        refused = (await p.ask(room, "!sources report", bot))["content"]["body"]
        assert refused.startswith("Sorry, `!sources report` is for this room's moderators")

        entry = report(stack, room)
        assert {
            k: entry[k] for k in ("asked", "answered", "nothing_matched", "up", "down", "solved")
        } == {"asked": 4, "answered": 1, "nothing_matched": 3, "up": 1, "down": 1, "solved": 1}
        assert [(u["count"], u["event_ids"]) for u in entry["unanswered"]] == [
            (2, [mona_q1, mona_q2]),
            (1, [pete_q]),
        ]

        # Pete forgets himself: his questions, his votes and those on his answers go.
        done = (await p.ask(room, "!sources forget me", bot))["content"]["body"]
        assert done.startswith("Done:")
        await asyncio.to_thread(
            wait_for, "pete's questions forgotten", lambda: asked_by(stack, pete) == 0
        )
        entry = report(stack, room)
        assert {
            k: entry[k] for k in ("asked", "answered", "nothing_matched", "up", "down", "solved")
        } == {"asked": 2, "answered": 0, "nothing_matched": 2, "up": 0, "down": 0, "solved": 0}
        assert [u["event_ids"] for u in entry["unanswered"]] == [[mona_q1, mona_q2]]
        await gone_from_every_file(stack, CANARY)
    assert CANARY not in stack.service.log_path.read_text(errors="replace")
