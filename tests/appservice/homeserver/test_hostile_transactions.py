"""Legal but hostile input, each finding of issue 15 through the transaction endpoint (a
real aiohttp server, a real SQLite event log): big transactions, poison timestamps,
deep JSON, overflowing integers, forged ids, a room whose state cannot be had, a flood
of commands, and what the journal and /health say meanwhile (those last in
test_hostile_commands.py)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import resource

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from mautrix.errors import MatrixStandardRequestError

from matrix_sources.appservice.homeserver import transactions
from matrix_sources.appservice.homeserver.roomstate import StateRetry
from matrix_sources.appservice.homeserver.startup import raise_fd_limit
from matrix_sources.appservice.homeserver.transactions import TransactionHandler
from matrix_sources.appservice.logs import KeyValueFormatter
from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.backfill import backfill_room
from matrix_sources.indexer.ingest.events import MAX_TS_MS
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.roomfacts import RoomFacts
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.pipeline import Pipeline
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.appservice.homeserver.test_transactions import HS_TOKEN, auth, message, put
from tests.fakeclock import FakeClock

ROOM_A = RoomID("!a-first:example.org")  # sorts before ROOM_B
ROOM_B = RoomID("!b-second:example.org")
BOT = UserID("@sourcesbot:example.org")


class Env:
    """A transaction handler over a real event log, with what its callbacks saw."""

    def __init__(self, tmp_path) -> None:
        self.ingest = Ingest(
            Gate(frozenset({ROOM_A, ROOM_B}), BOT),
            EventLog(tmp_path / "eventlog.sqlite3"),
            Journal(tmp_path / "journal.jsonl"),
        )
        self.facts = {ROOM_A: RoomFacts(join_rule="public"), ROOM_B: RoomFacts(join_rule="public")}
        self.fetch_errors: dict[str, Exception] = {}
        self.admitted: list = []
        self.unavailable: list[str] = []  # rooms handed to the retry
        self.waiting: set[str] = set()
        self.on_commands = None
        self.clock = FakeClock(1_000.0)  # a room's state fetch times out on it
        self.handler = TransactionHandler(
            HS_TOKEN,
            "matrix-sources",
            self.ingest,
            self.fetch_state,
            self.on_admitted,
            self,
            clock=self.clock.clock,
        )

    def add(self, room_id: str) -> None:  # the handler's Retry
        self.unavailable.append(room_id)

    async def fetch_state(self, room_id: str) -> None:
        if room_id in self.fetch_errors:
            raise self.fetch_errors[room_id]
        self.ingest.facts[RoomID(room_id)] = self.facts[RoomID(room_id)]

    def on_admitted(self, events, result, routed) -> None:
        self.admitted.append(result)
        if self.on_commands is not None:
            for cmd in routed.commands:
                self.on_commands(cmd)

    def journal(self) -> list[dict]:
        return list(self.ingest.journal.read())

    def status(self, event_id: str):
        return self.ingest.eventlog.status_of(event_id)


@pytest.fixture
async def env(tmp_path):
    e = Env(tmp_path)
    app = web.Application()
    app.router.add_put("/_matrix/app/v1/transactions/{transaction_id}", e.handler.handle)
    app.router.add_post("/_matrix/app/v1/ping", e.handler.ping)
    e.client = TestClient(TestServer(app))
    await e.client.start_server()
    yield e
    await e.client.close()
    e.ingest.eventlog.close()


def msg(event_id: str, room: str = ROOM_A, **fields) -> dict:
    return message(event_id, room=room) | fields


# -- size --------------------------------------------------------------------------------


async def test_100_events_of_11_kb_in_one_transaction_are_stored(env):
    """Over aiohttp's default 1 MiB: it answered 413, and Synapse resends forever."""
    events = [
        msg(f"$big{i}", body=None)
        | {"content": {"msgtype": "m.text", "body": f"{i} " + "x" * 11_000}}
        for i in range(100)
    ]
    assert len(json.dumps({"events": events})) > 1 << 20
    status, _ = await put(env.client, "t1", {"events": events})
    assert status == 200
    assert env.ingest.eventlog.counts() == {"pending": 100}


async def test_a_body_over_what_synapse_may_send_is_413(env, monkeypatch):
    monkeypatch.setattr(transactions, "MAX_TRANSACTION_BYTES", 10_000)
    events = [msg(f"$e{i}") for i in range(60)]
    status, body = await put(env.client, "t1", {"events": events})
    assert status == 413 and body["errcode"] == "M_TOO_LARGE"
    assert env.ingest.eventlog.counts() == {}


# -- poison values -----------------------------------------------------------------------


async def test_deep_json_is_400(env):
    deep = '{"events": [' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "]}"
    status, body = await put(env.client, "t1", deep)
    assert status == 400 and body["errcode"] == "M_NOT_JSON"
    assert (await put(env.client, "t2", {"events": [msg("$ok")]}))[0] == 200


@pytest.mark.parametrize("ts", [2**63, 2**64 + 5, -1, 1.5e12])
async def test_an_overflowing_timestamp_is_skipped_and_its_neighbour_stored(env, ts):
    """ts >= 2^63 made SQLite raise inside the append: the whole transaction was a 500,
    retried forever, and the valid event beside it was lost."""
    status, _ = await put(
        env.client, "t1", {"events": [msg("$bad", origin_server_ts=ts), msg("$ok")]}
    )
    assert status == 200
    assert env.status("$ok") == ("pending", None) and env.status("$bad") is None


async def test_a_poison_timestamp_is_quarantined_by_id_and_rule(env):
    poison = 10**15  # year 33658: legal canonical JSON, past what datetime can print
    assert poison > MAX_TS_MS
    status, _ = await put(
        env.client,
        "t1",
        {"events": [msg("$poison", origin_server_ts=poison), msg("$ok", room=ROOM_B)]},
    )
    assert status == 200
    assert env.status("$poison") is None and env.status("$ok") == ("pending", None)
    [entry] = [e for e in env.journal() if e["kind"] == "quarantine"]
    assert (entry["rule"], entry["room_id"], entry["event_id"]) == (
        "timestamp_out_of_range",
        ROOM_A,
        "$poison",
    )
    assert "rotate" not in json.dumps(entry)  # ids and rule, never text


def pipeline_over(ingest: Ingest, tmp_path) -> Pipeline:
    return Pipeline(
        ingest.eventlog,
        HashEmbedder(),
        ChromaStore(path=tmp_path / "chroma"),
        ChunkPolicy(),
        admits=ingest.admits,
    )


async def test_a_poison_event_does_not_stop_another_rooms_indexing(env, tmp_path):
    """The issue's case: origin_server_ts 1e15 in the room that sorts first."""
    status, _ = await put(
        env.client,
        "t1",
        {
            "events": [
                msg("$poison", origin_server_ts=10**15),
                msg("$a-ok", room=ROOM_A),
                msg("$b-ok", room=ROOM_B),
            ]
        },
    )
    assert status == 200
    pipeline = pipeline_over(env.ingest, tmp_path)
    assert await asyncio.to_thread(pipeline.process_all) == 2
    assert env.status("$a-ok")[0] == "indexed" and env.status("$b-ok")[0] == "indexed"


async def test_a_poison_already_in_an_old_event_log_stalls_only_its_room(env, tmp_path, caplog):
    """An event log written before the parse checked timestamps: the poisoned timeline
    fails (logged with its room id and a traceback), every other one is indexed."""
    env.ingest.eventlog.append(
        [
            (
                Message(
                    EventID("$old-poison"), ROOM_A, UserID("@m:x"), 10**15, "from before the fix"
                ),
                None,
            )
        ]
    )
    env.ingest.facts[ROOM_A] = RoomFacts(join_rule="public")
    assert (await put(env.client, "t1", {"events": [msg("$b-ok", room=ROOM_B)]}))[0] == 200
    pipeline = pipeline_over(env.ingest, tmp_path)
    for _ in range(2):  # and again at the next run: never the other rooms
        await asyncio.to_thread(pipeline.process_all)
    assert env.status("$b-ok")[0] == "indexed"
    assert env.status("$old-poison")[0] == "pending"
    assert list(pipeline.failing) == [(ROOM_A, None)]
    [rec] = {r.room_id: r for r in caplog.records if r.message == "timeline_failed"}.values()
    assert rec.room_id == ROOM_A and rec.exc_info is not None


async def test_a_poison_in_an_old_event_log_is_quarantined_at_start(env, tmp_path):
    """What the service does at start: the poisoned room's other messages index too."""
    env.ingest.eventlog.append(
        [
            (
                Message(
                    EventID("$old-poison"), ROOM_A, UserID("@m:x"), 10**15, "from before the fix"
                ),
                None,
            )
        ]
    )
    env.ingest.facts[ROOM_A] = RoomFacts(join_rule="public")
    assert (await put(env.client, "t1", {"events": [msg("$a-ok")]}))[0] == 200
    assert await asyncio.to_thread(env.ingest.quarantine_stored_poison) == 1
    pipeline = pipeline_over(env.ingest, tmp_path)
    assert await asyncio.to_thread(pipeline.process_all) == 1
    assert env.status("$a-ok")[0] == "indexed" and env.status("$old-poison")[0] == "purged"
    assert pipeline.failing == {}
    [entry] = [e for e in env.journal() if e["kind"] == "quarantine"]
    assert (entry["event_id"], entry["rule"]) == ("$old-poison", "timestamp_out_of_range")
    assert "from before the fix" not in (tmp_path / "journal.jsonl").read_text()


# -- ids that would forge lines ------------------------------------------------------------


async def test_a_newline_in_the_transaction_id_forges_no_log_line(env):
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(KeyValueFormatter())
    logger = logging.getLogger("matrix_sources")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        resp = await env.client.put(
            "/_matrix/app/v1/transactions/t1%0A2026-01-01T00:00:00Z%20INFO%20forged",
            data=json.dumps({"events": [msg("$ok")]}),
            headers=auth(),
        )
        assert resp.status == 200
    finally:
        logger.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert lines and all(" INFO matrix_sources." in line for line in lines)
    assert not any(line.startswith("2026-01-01") for line in lines)
    assert '"t1\\n2026-01-01T00:00:00Z INFO forged"' in out.getvalue()


@pytest.mark.parametrize(
    "field,value",
    [
        ("sender", "@mallory:example.org\n> [2026-01-01 00:00] @admin:example.org: run this"),
        ("sender", "@mallory:example.org\u2028forged"),
        ("event_id", "$x\r\nforged"),
        ("room_id", ROOM_A + "\n"),
    ],
)
async def test_an_id_with_a_control_character_is_skipped(env, field, value):
    """A sender with a newline forged a quoted line "from admin" in the bot's replies."""
    status, _ = await put(
        env.client, "t1", {"events": [msg("$forged") | {field: value}, msg("$ok")]}
    )
    assert status == 200
    assert env.ingest.eventlog.counts() == {"pending": 1}
    assert env.status("$ok") == ("pending", None)


# -- auth and ping -----------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
async def test_the_bearer_scheme_in_any_case_is_accepted(env, scheme):
    status, _ = await put(
        env.client,
        "t1",
        {"events": [msg("$ok")]},
        headers={"Authorization": f"{scheme} {HS_TOKEN}"},
    )
    assert status == 200 and env.status("$ok") is not None


@pytest.mark.parametrize(
    "body,expected",
    [("[1, 2]", 400), ('"ping"', 400), ("{bad", 400), ('{"transaction_id": "p1"}', 200)],
)
async def test_a_ping_with_a_body_not_an_object_is_400(env, body, expected):
    resp = await env.client.post("/_matrix/app/v1/ping", data=body, headers=auth())
    assert resp.status == expected
    resp = await env.client.post("/_matrix/app/v1/ping", data=body, headers=auth("wrong"))
    assert resp.status == 403


async def test_1200_idle_connections_do_not_exhaust_file_descriptors(env):
    """systemd's default soft limit is 1,024 descriptors: about 1,000 idle connections
    were enough to stop every later transaction. The service raises its soft limit to
    the hard one at start (the unit raises the hard one: LimitNOFILE)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 4000:
        pytest.skip(f"hard limit {hard}: too low to show it")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # systemd's default
    writers = []
    try:
        assert raise_fd_limit() == (hard, hard)
        server = env.client.server
        for _ in range(1200):  # two descriptors each here: client and server side
            _, w = await asyncio.open_connection(server.host, server.port)
            writers.append(w)
        status, _ = await put(env.client, "t1", {"events": [msg("$after-idle")]})
        assert status == 200 and env.status("$after-idle") is not None
    finally:
        for w in writers:
            w.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- one room's state ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "error,outage",
    [
        (ConnectionError("homeserver down"), True),
        (TimeoutError(), True),
        (MatrixStandardRequestError(502, "bad gateway"), True),
        (MatrixStandardRequestError(500, "state too big"), False),
        (RuntimeError("a bug reading that room's state"), False),
    ],
)
async def test_outage_is_503_one_rooms_state_is_200_for_the_rest(env, error, outage):
    env.fetch_errors[ROOM_B] = error
    events = [msg("$a1"), msg("$b1", room=ROOM_B), msg("$b2", room=ROOM_B), msg("$a2")]
    status, _ = await put(env.client, "t1", {"events": events})
    if outage:  # Synapse retries the transaction; nothing of it is stored yet
        assert status == 503 and env.ingest.eventlog.counts() == {}
        assert env.unavailable == [] and env.journal() == []
        return
    assert status == 200
    assert env.status("$a1")[0] == env.status("$a2")[0] == "pending"
    assert env.status("$b1") is None and env.status("$b2") is None
    assert env.unavailable == [ROOM_B]
    entries = [e for e in env.journal() if e["rule"] == "state_unavailable"]
    assert [(e["room_id"], e["event_id"]) for e in entries] == [(ROOM_B, "$b1"), (ROOM_B, "$b2")]
    assert all(set(e) <= {"ts", "kind", "rule", "room_id", "event_id", "source"} for e in entries)


async def test_a_room_whose_state_hangs_holds_back_nothing(env):
    fetched = []
    real = env.fetch_state

    async def fetch_state(room_id):
        fetched.append(room_id)
        if room_id == ROOM_B:
            await asyncio.Event().wait()  # a room so big its state never comes in time
        await real(room_id)

    env.handler._fetch_state = fetch_state
    answer = asyncio.create_task(
        put(env.client, "t1", {"events": [msg("$a1"), msg("$b1", room=ROOM_B)]})
    )
    while not (ROOM_B in fetched and env.clock.sleeping):
        await asyncio.sleep(0)
    await env.clock.advance(transactions.STATE_FETCH_SECONDS)  # the fetch's deadline
    status, _ = await asyncio.wait_for(answer, 10)
    assert status == 200
    assert env.status("$a1") is not None and env.status("$b1") is None
    assert env.unavailable == [ROOM_B]
    # While the retry has it, later transactions do not wait for that room again.
    env.waiting.add(ROOM_B)
    status, _ = await put(env.client, "t2", {"events": [msg("$a2"), msg("$b2", room=ROOM_B)]})
    assert status == 200 and fetched == [ROOM_A, ROOM_B]
    assert env.status("$a2") is not None and env.status("$b2") is None


async def test_a_room_the_homeserver_does_not_show_yet_holds_its_messages(env):
    """A push racing the bot's join: the room's state is not shown to the bot yet, and
    what came alone (the bot's own join) gave no join rule. Its messages are held and
    read again once the state is had, not refused as a room of unknown join rule; the
    state events still count; the status counts no refusal once they are in."""
    from matrix_sources.appservice.bot.status import render_status

    shown = False
    real = env.fetch_state

    async def fetch_state(room_id):
        if shown or room_id != ROOM_B:
            await real(room_id)  # else the homeserver answers 403: nothing learned

    env.handler._fetch_state = fetch_state
    join = {
        "type": "m.room.member",
        "room_id": ROOM_B,
        "event_id": "$join",
        "sender": BOT,
        "state_key": BOT,
        "origin_server_ts": 1_700_000_000_000,
        "content": {"membership": "join"},
    }
    assert (await put(env.client, "t1", {"events": [join, msg("$b1", room=ROOM_B)]}))[0] == 200
    assert BOT in env.ingest.facts[ROOM_B].members  # the state event counted
    assert env.status("$b1") is None and env.unavailable == [ROOM_B]
    assert [(e["rule"], e["event_id"]) for e in env.journal()] == [("state_unavailable", "$b1")]
    # Known but not settled: the next transaction asks the homeserver again.
    shown = True
    assert (await put(env.client, "t2", {"events": [msg("$b2", room=ROOM_B)]}))[0] == 200
    assert env.status("$b2") is not None
    assert not [e for e in env.journal() if e["rule"] == "not_public"]
    await backfill_room(ROOM_B, Pager([msg("$b1", room=ROOM_B)]), env.ingest)
    assert env.status("$b1") is not None
    status = render_status([(ROOM_B, "B")], env.ingest.eventlog, env.ingest.journal).body
    assert status.endswith("0 refusals"), status


class Pager:
    def __init__(self, events: list[dict]) -> None:
        self.events = events

    async def token_after(self, room_id, event_id):
        return None

    async def page(self, room_id, from_token, limit):
        return ([e for e in self.events if e["room_id"] == room_id], None)

    async def reach_back(self, room_id, horizon_ts):
        return None, 0  # the homeserver holds the room's whole history


async def test_a_room_whose_state_failed_is_fetched_again_and_backfilled(env):
    env.fetch_errors[ROOM_B] = RuntimeError("state unreadable for now")
    events = [msg("$a1"), msg("$b1", room=ROOM_B)]
    assert (await put(env.client, "t1", {"events": events}))[0] == 200
    assert env.status("$b1") is None
    backfilled = asyncio.Event()

    async def backfill(room_id: str) -> None:
        await backfill_room(RoomID(room_id), Pager(events), env.ingest)
        backfilled.set()

    async def no_wait(_seconds):
        await asyncio.sleep(0)

    attempts = []

    async def fetch(room_id):
        attempts.append(room_id)
        if len(attempts) == 2:  # the homeserver gives the room's state at the 2nd retry
            env.fetch_errors.pop(ROOM_B)
        await env.fetch_state(room_id)

    retry = StateRetry(
        fetch, lambda r: asyncio.ensure_future(backfill(r)), clock=Clock(sleep=no_wait)
    )
    for room in env.unavailable:
        retry.add(room)
    await asyncio.wait_for(backfilled.wait(), 5)
    assert attempts == [ROOM_B, ROOM_B]
    assert env.status("$b1") == ("pending", None)
