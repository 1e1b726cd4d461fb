"""`!sources forget me` / `index me` (issue 21 item 4): the sender's own words leave the
index by the redaction path and their future messages are refused; nobody can forget
someone else through the bot."""

from __future__ import annotations

from types import SimpleNamespace

from appservice.bot.bot import Bot
from appservice.bot.commands import ForgetMeCommand, parse_command
from indexer.config.sections import ModerationSettings
from indexer.ingest import gate as rules
from indexer.ingest.events import MessageEvent
from indexer.records import EventID, Message, RoomID, UserID
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
