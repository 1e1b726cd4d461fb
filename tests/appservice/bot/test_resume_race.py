"""At start the bot answers the commands a crash left unanswered (bot.Bot.resume). The
service serves searches before its start-up ends, so a command taken in between is
kept unanswered while it is under way: resume must leave it to its own answer, not
answer it a second time (seen in bench/scale.py's restart at a million windows)."""

from __future__ import annotations

import asyncio

from matrix_sources.indexer.ingest.events import MessageEvent
from matrix_sources.indexer.records import EventID, Message, UserID
from matrix_sources.indexer.store.commands import CommandLog
from tests.appservice.bot.test_forget_me import CRASH_ROOM, bot_at
from tests.botkit import RecordingMatrix


def command(event_id: str) -> MessageEvent:
    return MessageEvent(
        Message(EventID(event_id), CRASH_ROOM, UserID("@asker:example.org"), 999_000, "!sources x"),
        is_command=True,
    )


async def test_a_command_taken_before_resume_is_answered_once(tmp_path):
    bot, log = bot_at(tmp_path, RecordingMatrix())
    answered: list[str] = []
    release = asyncio.Event()

    async def answer(cmd: MessageEvent) -> None:
        if cmd.message.event_id == "$new":
            await release.wait()  # under way while the start-up ends
        answered.append(cmd.message.event_id)

    bot.responder.answer = answer  # type: ignore[method-assign]
    kept = CommandLog(log)
    # $old: kept by the process before (a crash); $new: kept by this one's transaction.
    kept.keep([(command("$old").message, None), (command("$new").message, None)], 995_000)
    bot.on_commands([command("$new")])
    for _ in range(20):
        await asyncio.sleep(0)
    bot.resume()
    for _ in range(1_000_000):  # resume reads the kept commands in a thread
        if answered == ["$old"]:
            break
        await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(bot.commands.join(), 10)
    assert sorted(answered) == ["$new", "$old"], answered
    await bot.stop()
    log.close()
