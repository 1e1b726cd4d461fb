"""Legal but hostile input through the transaction endpoint, part two (issue 15): a
flood of commands, a command during an outage, a failing command, and what the journal
and /health say. The endpoint and its event log are those of test_hostile_transactions."""

from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from matrix_sources.appservice.bot.commandpool import CommandPool
from matrix_sources.appservice.bot.responder import RateLimiter, Responder
from matrix_sources.appservice.homeserver.health import (
    PIPELINE_FAILING_RUNS,
    Health,
    appends_problem,
    pipeline_problem,
)
from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.ingest.roomfacts import RoomFacts
from matrix_sources.indexer.search.searcher import MAX_TEXT_BYTES
from tests.appservice.homeserver.test_hostile_transactions import BOT, ROOM_A, env, msg  # noqa: F401 (env: fixture)
from tests.appservice.homeserver.test_transactions import put

# -- commands ------------------------------------------------------------------------------


class SlowSearcher:
    """A search that holds its thread until `release` is set, as a real one on a busy
    machine holds it for a while (never released: a search that never ends)."""

    def __init__(self, held: bool = True) -> None:
        self.release = threading.Event()
        if not held:
            self.release.set()
        self.calls = 0

    def search(self, query):
        self.calls += 1
        self.release.wait(60)
        return []

    floor = None  # no abstain floor to explain

    def search_with_closest(self, query):
        return self.search(query), None


def command(i: int, room: str = ROOM_A) -> dict:
    return msg(f"$cmd{i}", room=room) | {
        "sender": f"@asker{i}:example.org",
        "content": {"msgtype": "m.text", "body": f"!sources question number {i}"},
    }


async def test_100_commands_do_not_delay_the_next_transactions_200(env):
    sent: list[dict] = []

    async def send(room_id, content):
        sent.append(content)
        return f"$reply{len(sent)}"

    searcher = SlowSearcher()
    responder = Responder(searcher, send, BOT, limiter=RateLimiter(0))
    pool = CommandPool(responder.answer)
    env.on_commands = pool.submit
    status, _ = await put(env.client, "t1", {"events": [command(i) for i in range(100)]})
    assert status == 200
    # Every search thread is held: a transaction that waited behind them would never end.
    status, _ = await asyncio.wait_for(put(env.client, "t2", {"events": [msg("$after")]}), 10)
    assert status == 200 and env.status("$after") is not None
    assert searcher.calls < 100 and sent == []  # the flood runs in its own bounded pool
    searcher.release.set()
    await asyncio.wait_for(pool.join(), 60)
    assert len(sent) == 100
    # Replies ping nobody by design: an empty m.mentions, not the quoted senders.
    assert all(c["m.mentions"] == {} for c in sent)
    await pool.stop()
    responder.executor.shutdown()


async def test_a_command_while_the_homeserver_is_down_is_answered_later(env):
    down = [3]
    sent: list[tuple[str, dict]] = []
    waited: list[float] = []

    async def send(room_id, content):
        if down[0]:
            down[0] -= 1
            raise ConnectionError("homeserver down")
        sent.append((room_id, content))
        return "$reply"

    async def sleep(seconds):
        waited.append(seconds)

    responder = Responder(
        SlowSearcher(held=False), send, BOT, limiter=RateLimiter(0), clock=Clock(sleep=sleep)
    )
    pool = CommandPool(responder.answer)
    env.on_commands = pool.submit
    assert (await put(env.client, "t1", {"events": [command(1)]}))[0] == 200
    await asyncio.wait_for(pool.join(), 10)
    assert [room for room, _ in sent] == [ROOM_A] and waited == [1.0, 2.0, 4.0]
    assert sent[0][1]["m.relates_to"]["m.in_reply_to"]["event_id"] == "$cmd1"
    await pool.stop()
    responder.executor.shutdown()


async def test_a_failed_command_gets_a_reply_saying_it_is_logged(env, caplog):
    sent: list[dict] = []

    async def send(room_id, content):
        sent.append(content)
        return "$reply"

    class Broken:
        floor = None

        def search_with_closest(self, query):
            raise RuntimeError("index unreadable")

    responder = Responder(Broken(), send, BOT, limiter=RateLimiter(0))
    pool = CommandPool(responder.answer)
    env.on_commands = pool.submit
    assert (await put(env.client, "t1", {"events": [command(1)]}))[0] == 200
    await asyncio.wait_for(pool.join(), 10)
    [content] = sent
    assert "failed" in content["body"] and "logged" in content["body"]
    [rec] = [r for r in caplog.records if r.message == "answer_failed"]
    assert rec.event_id == "$cmd1" and rec.exc_info is not None
    assert "question number" not in caplog.text  # ids, never what was asked
    await pool.stop()
    responder.executor.shutdown()


# -- journal and health ----------------------------------------------------------------------


async def test_the_journal_names_no_room(env):
    env.facts[ROOM_A] = RoomFacts(join_rule="invite", name="Staff only")
    status, _ = await put(env.client, "t1", {"events": [msg("$staff")]})
    assert status == 200 and env.status("$staff") is None
    [entry] = env.journal()
    assert (entry["rule"], entry["room_id"], entry["event_id"]) == ("not_public", ROOM_A, "$staff")
    assert "Staff only" not in env.ingest.journal.path.read_text()


class Worker:
    consecutive_failures = 0
    last_error = None


async def test_health_is_503_with_a_reason_while_appends_or_the_pipeline_fail(env):
    worker = Worker()
    health = Health(
        store=True,
        model=True,
        homeserver=True,
        problems={
            "appends": appends_problem(lambda: env.handler.append_failures),
            "pipeline": pipeline_problem(
                lambda: worker.consecutive_failures, lambda: worker.last_error
            ),
        },
    )
    app = web.Application()
    app.router.add_get("/health", health.handle)
    client = TestClient(TestServer(app))
    await client.start_server()

    async def get():
        resp = await client.get("/health")
        return resp.status, await resp.json()

    try:
        assert (await get())[0] == 200
        real = env.ingest.eventlog.append
        env.ingest.eventlog.append = lambda *a, **k: (_ for _ in ()).throw(OSError("disk"))
        assert (await put(env.client, "t1", {"events": [msg("$a")]}))[0] == 500
        status, body = await get()
        assert status == 503 and body["status"] == "failing"
        assert body["checks"]["appends"] is False and "appends" in body["detail"]
        env.ingest.eventlog.append = real
        assert (await put(env.client, "t1", {"events": [msg("$a")]}))[0] == 200
        assert (await get())[0] == 200

        worker.consecutive_failures, worker.last_error = PIPELINE_FAILING_RUNS - 1, "OSError"
        assert (await get())[0] == 200  # a failed run is retried; not yet a failing pipeline
        worker.consecutive_failures = PIPELINE_FAILING_RUNS
        status, body = await get()
        assert status == 503 and body["checks"]["pipeline"] is False
        assert "pipeline failing" in body["detail"] and "OSError" in body["detail"]
    finally:
        await client.close()


# -- hostile query texts (issue 26): answered or refused, never silent -------------------------


class RecordingSearcher:
    def __init__(self) -> None:
        self.queries: list = []

    def search(self, query):
        self.queries.append(query)
        return []

    floor = None  # no abstain floor to explain

    def search_with_closest(self, query):
        return self.search(query), None


async def _answer_one(env, body: str) -> tuple[list[dict], RecordingSearcher]:
    sent: list[dict] = []

    async def send(room_id, content):
        sent.append(content)
        return "$reply"

    searcher = RecordingSearcher()
    responder = Responder(searcher, send, BOT, limiter=RateLimiter(0))
    pool = CommandPool(responder.answer)
    env.on_commands = pool.submit
    ev = command(1) | {"content": {"msgtype": "m.text", "body": body}}
    assert (await put(env.client, "t1", {"events": [ev]}))[0] == 200
    await asyncio.wait_for(pool.join(), 10)
    await pool.stop()
    responder.executor.shutdown()
    return sent, searcher


@pytest.mark.parametrize(
    "char", ["\x00", "\x07", "\ud800", "\udc00"], ids=["NUL", "BEL", "surrogate", "low-surrogate"]
)
async def test_a_query_holding_a_control_character_or_lone_surrogate_is_refused(env, char):
    """A lone surrogate made the command a skipped event (no reply at all); NUL and BEL
    went to the search and into a reply quoting them, which could not be sent."""
    sent, searcher = await _answer_one(env, f"!sources rotate the{char} signing key")
    [content] = sent
    assert f"U+{ord(char):04X}" in content["body"] and "not text" in content["body"]
    assert char not in content["body"] and char not in content["formatted_body"]
    assert searcher.queries == []
    assert env.ingest.eventlog.counts() == {}  # a command is never stored


async def test_a_query_of_400_keys_is_refused_by_its_size(env):
    sent, searcher = await _answer_one(env, "!sources " + " ".join(["key"] * 400))
    [content] = sent
    assert f"at most {MAX_TEXT_BYTES} allowed" in content["body"]
    assert searcher.queries == []
