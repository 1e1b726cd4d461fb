"""`!sources forget me` / `index me` (issue 21 item 4): the sender's own words leave the
index by the redaction path and their future messages are refused; nobody can forget
someone else through the bot."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from matrix_sources.appservice.bot.bot import Bot
from matrix_sources.appservice.bot.commands import ForgetMeCommand, parse_command
from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.config.sections import ModerationSettings
from matrix_sources.indexer.ingest import gate as rules
from matrix_sources.indexer.ingest.events import MessageEvent
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID
from tests.botkit import RecordingMatrix as Matrix
from tests.indexer.store.test_history import ALICE, BOB, T0, all_text, msg, world  # noqa: F401 (world: fixture)


def test_forget_me_and_index_me_parse_and_nothing_else_does():
    assert parse_command("!sources forget me", "!r") == ForgetMeCommand()
    assert parse_command("!sources Index me", "!r") == ForgetMeCommand(undo=True)
    assert not isinstance(
        parse_command("!sources forget @bob:example.org", "!r"), ForgetMeCommand
    )  # someone else: a search, never a forget
    assert not isinstance(parse_command("!sources forget me\nand bob", "!r"), ForgetMeCommand)


async def test_forget_me_removes_the_senders_words_only(world):
    ingest, pipeline, store, log, tmp = world
    ingest.admit(
        [
            msg(1, "bob asks about the proxy settings", BOB),
            msg(2, "alice secret canary qz93m proxy answer", ALICE),
        ]
    )
    pipeline.process_all()
    assert "qz93m" in all_text(store)
    cfg = SimpleNamespace(
        bot_user="@sourcesbot:example.org",
        homeserver=SimpleNamespace(domain="example.org"),
        search=SimpleNamespace(default_top_k=5, rate_limit_per_minute=0, rrf_k=60, admins=()),
        index=SimpleNamespace(compaction_interval_seconds=60),
        moderation=ModerationSettings(),
    )
    index = SimpleNamespace(
        embedder=None,
        searcher=None,
        record_answer=None,
        answers=None,
        manifest=None,
        commands=None,
        ingest=ingest,
        gate=ingest.gate,
        eventlog=log,
        journal=ingest.journal,
    )
    changed = []
    matrix = Matrix()
    bot = Bot(cfg, index, matrix, index_changed=lambda: changed.append(1))
    ask = MessageEvent(
        Message(
            EventID("$cmd"),
            RoomID(ingest.gate and next(iter(ingest.gate.allowlist))),
            UserID(ALICE),
            T0 + 10,
            "!sources forget me",
        ),
        None,
        True,
    )
    await bot.responder.answer(ask)
    body = matrix.sent[-1][1]["body"]
    assert body.startswith("Done: 1 message of yours removed") and changed == [1]
    pipeline.process_all()
    assert "qz93m" not in all_text(store) and "proxy settings" in all_text(store)
    later = {**msg(3, "alice again", ALICE), "origin_server_ts": T0 + 60_000}
    assert ingest.admit([later]).refused == {rules.USER_FORGOTTEN: 1}
    undo = MessageEvent(
        Message(EventID("$cmd2"), ask.message.room_id, UserID(ALICE), T0 + 20, "!sources index me"),
        None,
        True,
    )
    await bot.responder.answer(undo)
    assert "indexed again" in matrix.sent[-1][1]["body"]
    await bot.stop()


# A bot over the event log at argv[1] whose reply SIGKILLs it: the forget is committed,
# the command is not answered (issue 44: "Done: 0 messages" after the restart).
_DIES_REPLYING = """
import asyncio, os, signal, sys
from tests.appservice.bot.test_forget_me import bot_at, forget_me_command
from tests.botkit import RecordingMatrix

class Dying(RecordingMatrix):
    async def send(self, room_id, content):
        os.kill(os.getpid(), signal.SIGKILL)

bot, log = bot_at(sys.argv[1], Dying())
asyncio.run(bot.responder.answer(forget_me_command()))
"""
CRASH_ROOM = RoomID("!crash:example.org")


def forget_me_command() -> MessageEvent:
    return MessageEvent(
        Message(EventID("$forget"), CRASH_ROOM, UserID(ALICE), T0 + 500_000, "!sources forget me"),
        None,
        True,
    )


def bot_at(folder, matrix, wall=lambda: 1_000.0):
    """A bot over the event log in `folder`, its commands kept there (commands.py)."""
    from pathlib import Path

    from matrix_sources.indexer.ingest.admit import Ingest
    from matrix_sources.indexer.ingest.gate import Gate
    from matrix_sources.indexer.store.commands import CommandLog
    from matrix_sources.indexer.store.eventlog.log import EventLog
    from matrix_sources.indexer.store.journal import Journal

    log = EventLog(Path(folder) / "eventlog.sqlite3")
    ingest = Ingest(
        Gate(frozenset({CRASH_ROOM}), "@sourcesbot:example.org"),
        log,
        Journal(Path(folder) / "journal.jsonl"),
    )
    cfg = SimpleNamespace(
        bot_user="@sourcesbot:example.org",
        homeserver=SimpleNamespace(domain="example.org"),
        search=SimpleNamespace(default_top_k=5, rate_limit_per_minute=0, rrf_k=60, admins=()),
        index=SimpleNamespace(compaction_interval_seconds=60),
        moderation=ModerationSettings(),
    )
    index = SimpleNamespace(
        embedder=None,
        searcher=None,
        record_answer=None,
        answers=None,
        manifest=None,
        ingest=ingest,
        gate=ingest.gate,
        eventlog=log,
        journal=ingest.journal,
        commands=CommandLog(log),
    )

    async def idle(seconds: float) -> None:  # the bot's hourly chores wait out the test
        await asyncio.Event().wait()

    return Bot(cfg, index, matrix, clock=Clock(wall=wall, sleep=idle)), log


async def test_after_a_sigkill_mid_forget_the_resumed_command_reports_the_whole_forget(tmp_path):
    """Issue 44: killed after the forget committed and before its reply, the resumed
    command said "Done: 0 messages of yours removed" when 150 were."""
    import asyncio
    import os
    import signal
    import subprocess
    import sys

    from matrix_sources.indexer.store.commands import CommandLog
    from tests.paths import ROOT

    bot, log = bot_at(tmp_path, Matrix())
    join = {
        "type": "m.room.join_rules",
        "room_id": CRASH_ROOM,
        "sender": ALICE,
        "event_id": "$jr",
        "state_key": "",
        "origin_server_ts": T0,
        "content": {"join_rule": "public"},
    }
    said = [{**msg(n, f"alice line {n}"), "room_id": CRASH_ROOM} for n in range(150)]
    assert bot.index.ingest.admit([join, *said]).appended == 150
    CommandLog(log).keep([(forget_me_command().message, None)], 995_000)  # the 200 given
    await bot.stop()
    log.close()

    child = subprocess.run(
        [sys.executable, "-c", _DIES_REPLYING, str(tmp_path)],
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]

    matrix = Matrix()
    bot, log = bot_at(tmp_path, matrix)  # the restart: the command is 5 s old
    assert log.counts().get("redacted") == 150  # the forget had committed
    bot.resume()
    while not matrix.sent:
        await asyncio.sleep(0)  # threads finish in real time; the test sleeps none
    assert matrix.sent[-1][1]["body"].startswith("Done: 150 messages of yours removed")
    await bot.stop()
    log.close()
