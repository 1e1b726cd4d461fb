"""The command pool at stop (bot/commandpool.py): an answer under way may finish for a
grace period, so a reply the homeserver already took is marked answered and not
answered again after the restart; past the grace it is cancelled (kept, answered then);
commands still waiting are left kept. On a fake clock."""

from __future__ import annotations

import asyncio
import logging

from matrix_sources.appservice.bot.commandpool import CommandPool
from matrix_sources.indexer.ingest.events import MessageEvent
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID
from tests.fakeclock import FakeClock

GRACE = 5.0


def command(i: int) -> MessageEvent:
    return MessageEvent(
        Message(
            EventID(f"$cmd{i}"),
            RoomID("!r:example.org"),
            UserID("@asker:example.org"),
            1_700_000_000_000 + i,
            f"!sources question {i}",
        ),
        is_command=True,
    )


class Answers:
    """An answer that sends its reply once `sent` is set, then marks it answered (as
    bot.Bot._answer does); what was started, marked and cancelled."""

    def __init__(self) -> None:
        self.sent = asyncio.Event()
        self.started: list[str] = []
        self.marked: list[str] = []
        self.cancelled: list[str] = []

    async def __call__(self, cmd: MessageEvent) -> None:
        self.started.append(cmd.message.event_id)
        try:
            await self.sent.wait()
        except asyncio.CancelledError:
            self.cancelled.append(cmd.message.event_id)
            raise
        self.marked.append(cmd.message.event_id)


async def _until(cond) -> None:
    for _ in range(100):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


async def test_an_answer_under_way_at_stop_finishes_and_is_marked():
    fake, answers = FakeClock(1000.0), Answers()
    pool = CommandPool(answers, workers=2)
    for i in range(3):
        assert pool.submit(command(i))
    await _until(lambda: len(answers.started) == 2)
    stopping = asyncio.create_task(pool.stop(lambda: fake.clock.sleep(GRACE)))
    await _until(lambda: fake.sleeping == 1)
    assert not stopping.done()  # waits for the two under way
    assert pool.submit(command(9))  # taken while stopping: kept, answered after the restart
    answers.sent.set()
    await asyncio.wait_for(stopping, 5)
    assert answers.marked == ["$cmd0", "$cmd1"] and answers.cancelled == []
    # The waiting command was not started: it stays kept for the next start.
    assert answers.started == ["$cmd0", "$cmd1"]


async def test_an_answer_past_the_grace_is_cancelled(caplog):
    fake, answers = FakeClock(1000.0), Answers()
    pool = CommandPool(answers, workers=2)
    assert pool.submit(command(0))
    await _until(lambda: answers.started == ["$cmd0"])
    caplog.set_level(logging.WARNING)
    stopping = asyncio.create_task(pool.stop(lambda: fake.clock.sleep(GRACE)))
    await _until(lambda: fake.sleeping == 1)
    await fake.advance(GRACE - 0.5)
    assert not stopping.done()
    await fake.advance(0.5)
    await asyncio.wait_for(stopping, 5)
    assert answers.cancelled == ["$cmd0"] and answers.marked == []
    assert any(r.msg == "answers_cut_short" for r in caplog.records)


async def test_a_stop_with_nothing_under_way_does_not_wait():
    fake, answers = FakeClock(1000.0), Answers()
    pool = CommandPool(answers)
    assert pool.submit(command(0))
    answers.sent.set()
    await asyncio.wait_for(pool.join(), 5)
    await asyncio.wait_for(pool.stop(lambda: fake.clock.sleep(GRACE)), 5)
    assert answers.marked == ["$cmd0"] and fake.sleeps == []
