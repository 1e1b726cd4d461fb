"""A remote room right after the bot's join (issue 50): Synapse's partial-state join
knows only part of the members, and its `/state` waits until it knows all. The gate
decides nothing from the partial view: events pushed meanwhile are held back, not judged
on facts folded from what was pushed; once the full state comes, a puppet among the
members (omitted from the partial state) refuses the room, and nothing of it is stored.

The homeserver here is a stand-in for the one request the service makes (`/state`, read
by the real fetch_room_facts); the transaction endpoint, ingest and event log are real.
The two-Synapse test of the same (tests/e2e/test_federation_e2e.py) cannot hold
Synapse's resync open: over loopback it completes within milliseconds."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from matrix_sources.appservice.homeserver import transactions
from matrix_sources.appservice.homeserver.roomstate import fetch_room_facts
from matrix_sources.appservice.homeserver.transactions import TransactionHandler
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.backfill import backfill_room
from matrix_sources.indexer.ingest.gate import PUPPET_SENDER, Gate
from matrix_sources.indexer.records import RoomID, UserID
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from tests.appservice.homeserver.test_transactions import HS_TOKEN, put
from tests.fakeclock import FakeClock

REMOTE = "other.org:8448"
ROOM = RoomID("!v12remote")
BOT = UserID("@sourcesbot:home.org:8448")
PUPPET = f"@tg_42:{REMOTE}"


def state(type_: str, content: dict, key: str = "", sender: str = f"@ann:{REMOTE}") -> dict:
    return {
        "type": type_,
        "room_id": ROOM,
        "sender": sender,
        "state_key": key,
        "event_id": f"${type_}-{key}",
        "origin_server_ts": 1_700_000_000_000,
        "content": content,
    }


def member(user: str) -> dict:
    return state("m.room.member", {"membership": "join"}, user, sender=user)


def said(event_id: str, sender: str = f"@ann:{REMOTE}") -> dict:
    return {
        "type": "m.room.message",
        "room_id": ROOM,
        "sender": sender,
        "event_id": event_id,
        "origin_server_ts": 1_700_000_100_000,
        "content": {"msgtype": "m.text", "body": f"{event_id}: the relay is down again"},
    }


FULL_STATE = [
    state("m.room.create", {"room_version": "12"}),
    state("m.room.join_rules", {"join_rule": "public"}),
    state("m.room.history_visibility", {"history_visibility": "shared"}),
    member(f"@ann:{REMOTE}"),
    member(PUPPET),  # an ordinary member: the partial state leaves it out
    member(BOT),
]


class PartialStateHomeserver:
    """`GET /rooms/{id}/state` as Synapse answers it in a partial-state room: only once
    the full state is there (`resynced`)."""

    def __init__(self) -> None:
        self.resynced = asyncio.Event()
        self.asked = 0

    async def request(self, method, path, **kwargs):
        self.asked += 1
        await self.resynced.wait()
        return FULL_STATE


class Waiting:
    """The handler's retry: the rooms whose state it could not have in time."""

    def __init__(self) -> None:
        self.rooms: list[str] = []
        self.waiting: set[str] = set()

    def add(self, room_id: str) -> None:
        self.rooms.append(room_id)


class Pager:
    async def token_after(self, room_id, event_id):
        return None

    async def page(self, room_id, from_token, limit):
        return [said("$before")], None

    async def reach_back(self, room_id, horizon_ts):
        return None, 0


@pytest.fixture
async def remote_room(tmp_path):
    ingest = Ingest(
        Gate(frozenset({ROOM}), BOT, ("^@tg_.*",), bridge_servers=(REMOTE,)),
        EventLog(tmp_path / "eventlog.sqlite3"),
        Journal(tmp_path / "journal.jsonl"),
    )
    hs, retry, clock = PartialStateHomeserver(), Waiting(), FakeClock(1_000.0)

    async def learn(room_id: str) -> None:  # as Rooms.learn does
        facts = await fetch_room_facts(hs, room_id)
        if facts is not None:
            ingest.learn(RoomID(room_id), facts)

    handler = TransactionHandler(
        HS_TOKEN, "matrix-sources", ingest, learn, lambda *a: None, retry, clock=clock.clock
    )
    app = web.Application()
    app.router.add_put("/_matrix/app/v1/transactions/{transaction_id}", handler.handle)
    client = TestClient(TestServer(app))
    await client.start_server()
    yield ingest, hs, retry, clock, client, learn
    await client.close()
    ingest.eventlog.close()


async def test_nothing_is_judged_from_a_partial_state_and_the_omitted_puppet_refuses_the_room(
    remote_room,
):
    ingest, hs, retry, clock, client, learn = remote_room
    # Pushed right after the join, while the bot's server knows only part of the room:
    # the bot's own join, one member, and a message.
    answer = asyncio.create_task(
        put(client, "t1", {"events": [member(BOT), member(f"@ann:{REMOTE}"), said("$early")]})
    )
    while not (hs.asked and clock.sleeping):
        await asyncio.sleep(0)
    await clock.advance(transactions.STATE_FETCH_SECONDS)  # the state fetch's deadline
    status, _ = await asyncio.wait_for(answer, 10)
    assert status == 200
    assert ROOM not in ingest.facts  # no facts folded from the partial view
    assert ingest.eventlog.status_of("$early") is None  # held back, not judged
    assert retry.rooms == [ROOM]

    hs.resynced.set()  # the full state: the puppet among the members
    await learn(ROOM)  # StateRetry's fetch
    assert PUPPET in ingest.facts[ROOM].members
    refusal = ingest.gate.judge_room(ROOM, ingest.facts[ROOM])
    assert refusal is not None and refusal.rule == PUPPET_SENDER

    # The history read then (what was held back among it) and what comes later: refused.
    await backfill_room(ROOM, Pager(), ingest)
    status, _ = await put(client, "t2", {"events": [said("$later")]})
    assert status == 200
    assert ingest.eventlog.counts() == {}
    rules = {(e.get("event_id"), e.get("rule")) for e in ingest.journal.read(kind="refusal")}
    assert ("$later", PUPPET_SENDER) in rules
