"""The transaction endpoint through aiohttp's test client: tokens, bad bodies, replays
(also after a restart), and the status codes that make Synapse retry."""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from matrix_sources.appservice.homeserver.transactions import TransactionHandler, fingerprint
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.roomfacts import RoomFacts
from matrix_sources.indexer.records import RoomID, UserID
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal

HS_TOKEN = "hs-token-0123456789abcdef"
ROOM = RoomID("!public:example.org")
BOT = UserID("@sourcesbot:example.org")
PATH = "/_matrix/app/v1/transactions/{}"


def message(event_id: str, body: str = "how do we rotate the key", room: str = ROOM) -> dict:
    return {
        "type": "m.room.message",
        "room_id": room,
        "event_id": event_id,
        "sender": "@alice:example.org",
        "origin_server_ts": 1_700_000_000_000,
        "content": {"msgtype": "m.text", "body": body},
    }


class Recorder:
    def __init__(self) -> None:
        self.admitted: list = []
        self.fetched: list[str] = []
        self.fetch_error: Exception | None = None

    async def fetch_state(self, room_id: str) -> None:
        self.fetched.append(room_id)
        if self.fetch_error:
            raise self.fetch_error
        self.ingest.facts[RoomID(room_id)] = RoomFacts(join_rule="public")

    def on_admitted(self, events, result, routed) -> None:
        self.admitted.append((events, result))


def make_ingest(tmp_path) -> Ingest:
    return Ingest(
        Gate(frozenset({ROOM}), BOT),
        EventLog(tmp_path / "eventlog.sqlite3"),
        Journal(tmp_path / "journal.jsonl"),
    )


async def start(ingest: Ingest, rec: Recorder) -> tuple[TestClient, TransactionHandler]:
    rec.ingest = ingest
    handler = TransactionHandler(
        HS_TOKEN, "matrix-sources", ingest, rec.fetch_state, rec.on_admitted
    )
    app = web.Application()
    app.router.add_put("/_matrix/app/v1/transactions/{transaction_id}", handler.handle)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client, handler


@pytest.fixture
async def service(tmp_path):
    ingest = make_ingest(tmp_path)
    rec = Recorder()
    client, handler = await start(ingest, rec)
    yield client, handler, ingest, rec
    await client.close()
    ingest.eventlog.close()


def auth(token: str = HS_TOKEN) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def put(client: TestClient, txn: str, body, headers=None, params=None):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    resp = await client.put(
        PATH.format(txn), data=data, headers=auth() if headers is None else headers, params=params
    )
    return resp.status, await resp.json()


async def test_valid_transaction_is_stored_and_answered_200(service):
    client, handler, ingest, rec = service
    status, body = await put(client, "t1", {"events": [message("$a"), message("$b")]})
    assert (status, body) == (200, {})
    assert ingest.eventlog.counts() == {"pending": 2}
    assert rec.fetched == [ROOM]
    assert len(rec.admitted) == 1 and rec.admitted[0][1].appended == 2


async def test_missing_token_is_401(service):
    client, _, ingest, rec = service
    status, body = await put(client, "t1", {"events": [message("$a")]}, headers={})
    assert status == 401 and body["errcode"] == "M_UNAUTHORIZED"
    assert ingest.eventlog.counts() == {} and rec.admitted == []


@pytest.mark.parametrize("how", ["header", "query", "not bearer", "empty bearer"])
async def test_wrong_token_is_403_and_nothing_stored(service, how):
    client, _, ingest, rec = service
    headers, params = {}, None
    if how == "header":
        headers = auth("wrong-token")
    elif how == "query":
        params = {"access_token": "wrong-token"}
    elif how == "not bearer":
        headers = {"Authorization": HS_TOKEN}
    else:
        headers = {"Authorization": "Bearer "}
    status, body = await put(
        client, "t1", {"events": [message("$a")]}, headers=headers, params=params
    )
    assert status == 403 and body["errcode"] == "M_FORBIDDEN"
    assert ingest.eventlog.counts() == {} and rec.admitted == [] and rec.fetched == []
    assert no_txns(ingest)


async def test_token_in_query_string_is_accepted(service):
    client, _, ingest, _ = service
    status, _ = await put(
        client, "t1", {"events": [message("$a")]}, headers={}, params={"access_token": HS_TOKEN}
    )
    assert status == 200 and ingest.eventlog.counts() == {"pending": 1}


@pytest.mark.parametrize("raw", ["{not json", "", b"\xff\xfe\x00garbage"])
async def test_malformed_json_is_400(service, raw):
    client, _, ingest, rec = service
    status, body = await put(client, "t1", raw)
    assert status == 400 and body["errcode"] == "M_NOT_JSON"
    assert rec.admitted == [] and no_txns(ingest)


@pytest.mark.parametrize("payload", [[], [message("$a")], json.dumps("events"), 5, None])
async def test_body_not_an_object_is_400(service, payload):
    client, _, ingest, _ = service
    status, body = await put(client, "t1", payload)
    assert status == 400 and body["errcode"] == "M_BAD_JSON"
    assert ingest.eventlog.counts() == {}


@pytest.mark.parametrize("events", [{"$a": message("$a")}, "x", 5, None])
async def test_events_not_a_list_is_400(service, events):
    client, _, ingest, rec = service
    status, body = await put(client, "t1", {"events": events})
    assert status == 400 and body["errcode"] == "M_BAD_JSON"
    assert ingest.eventlog.counts() == {} and rec.admitted == []
    assert no_txns(ingest)


async def test_replayed_transaction_is_processed_once(service):
    client, handler, ingest, rec = service
    txn = {"events": [message("$a"), message("$b")]}
    assert (await put(client, "t1", txn))[0] == 200
    assert (await put(client, "t1", txn))[0] == 200
    assert len(rec.admitted) == 1
    assert ingest.eventlog.counts() == {"pending": 2}
    assert handler.replayed == 1
    # A different transaction id is a different transaction.
    assert (await put(client, "t2", {"events": [message("$c")]}))[0] == 200
    assert len(rec.admitted) == 2


async def test_replay_after_a_restart_is_processed_once(tmp_path):
    txn = {"events": [message("$a"), message("$b")]}
    ingest, rec = make_ingest(tmp_path), Recorder()
    client, _ = await start(ingest, rec)
    assert (await put(client, "t1", txn))[0] == 200
    await client.close()
    ingest.eventlog.close()

    # A new process: new handler, reopened event log, empty memory.
    ingest2, rec2 = make_ingest(tmp_path), Recorder()
    client2, handler2 = await start(ingest2, rec2)
    try:
        assert (await put(client2, "t1", txn))[0] == 200
        assert rec2.admitted == [] and handler2.replayed == 1
        assert ingest2.eventlog.counts() == {"pending": 2}
    finally:
        await client2.close()
        ingest2.eventlog.close()


async def test_failed_append_is_500_and_retry_succeeds(service):
    client, _, ingest, rec = service
    real_append = ingest.eventlog.append
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk full")
        return real_append(*args, **kwargs)

    ingest.eventlog.append = failing
    txn = {"events": [message("$a")]}
    status, body = await put(client, "t1", txn)
    assert status == 500 and body["errcode"] == "M_UNKNOWN"
    assert rec.admitted == [] and no_txns(ingest)
    # Synapse retries the same transaction: now it goes through, once.
    assert (await put(client, "t1", txn))[0] == 200
    assert ingest.eventlog.counts() == {"pending": 1} and len(rec.admitted) == 1


async def test_unreachable_homeserver_for_room_state_is_503(service):
    client, _, ingest, rec = service
    rec.fetch_error = ConnectionError("homeserver down")
    status, body = await put(client, "t1", {"events": [message("$a")]})
    assert status == 503
    assert ingest.eventlog.counts() == {} and rec.admitted == []
    assert no_txns(ingest)
    rec.fetch_error = None
    assert (await put(client, "t1", {"events": [message("$a")]}))[0] == 200
    assert ingest.eventlog.counts() == {"pending": 1}


async def test_odd_events_in_a_valid_transaction_are_skipped(service):
    client, _, ingest, rec = service
    events = [
        5,
        "x",
        None,
        [],
        {},
        {"room_id": ROOM},
        {"room_id": 5, "type": "m.room.message"},
        message("$bad-body") | {"content": {"msgtype": "m.text", "body": 3}},
        message("$ok"),
    ]
    status, _ = await put(client, "t1", {"events": events})
    assert status == 200
    assert ingest.eventlog.counts() == {"pending": 1}
    assert ingest.eventlog.status_of("$ok") == ("pending", None)
    assert len(rec.admitted) == 1


def no_txns(ingest) -> bool:
    with ingest.eventlog.transaction(immediate=False) as cur:
        return cur.execute("SELECT COUNT(*) FROM txns").fetchone()[0] == 0


async def test_reused_txn_id_with_other_events_is_processed(service):
    """Synapse on SQLite restarts its transaction ids at 1 after a restart."""
    client, _, ingest, rec = service
    assert (await put(client, "1", {"events": [message("$first")]}))[0] == 200
    assert (await put(client, "1", {"events": [message("$first")]}))[0] == 200
    assert len(rec.admitted) == 1
    assert (await put(client, "1", {"events": [message("$second")]}))[0] == 200
    assert len(rec.admitted) == 2
    assert ingest.eventlog.status_of("$second") is not None


async def test_missing_events_key_is_an_empty_transaction(service):
    client, _, ingest, rec = service
    status, _ = await put(client, "t1", {"ephemeral": []})
    assert status == 200 and ingest.eventlog.counts() == {}
    assert ingest.eventlog.has_txn(f"matrix-sources:t1:{fingerprint([])}")


async def test_events_of_other_rooms_fetch_no_state(service):
    client, _, ingest, rec = service
    status, _ = await put(client, "t1", {"events": [message("$x", room="!dm:example.org")]})
    assert status == 200 and rec.fetched == [] and ingest.eventlog.counts() == {}


async def gap_service(tmp_path, asked: list[int]):
    from matrix_sources.appservice.homeserver.txngaps import TransactionGaps
    from matrix_sources.indexer.clock import Clock
    from tests.fakeclock import FakeClock

    ingest = make_ingest(tmp_path)
    rec = Recorder()
    rec.ingest = ingest
    fake = FakeClock(1000.0)

    async def backfill() -> None:
        asked.append(1)

    gaps = TransactionGaps(backfill, grace=10, clock=Clock(fake, fake.sleep))
    handler = TransactionHandler(
        HS_TOKEN, "matrix-sources", ingest, rec.fetch_state, rec.on_admitted, gaps=gaps
    )
    app = web.Application()
    app.router.add_put("/_matrix/app/v1/transactions/{transaction_id}", handler.handle)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client, ingest, gaps, fake


async def test_a_numbered_transaction_that_never_comes_asks_for_a_backfill(tmp_path):
    """Synapse can leave a transaction stored and never sent (txngaps.py): 41 and 43
    answered, 42 never; after the grace the service is asked to read the rooms again,
    once. A transaction answered late (44 after 45) closes its gap in time."""
    asked: list[int] = []
    client, ingest, gaps, clock = await gap_service(tmp_path, asked)
    try:
        assert (await put(client, "41", {"events": [message("$a")]}))[0] == 200
        assert (await put(client, "43", {"events": [message("$c")]}))[0] == 200
        assert (await put(client, "43", {"events": [message("$c")]}))[0] == 200  # a replay
        assert gaps.missing == [42]
        await clock.advance(11)
        assert asked == [1] and gaps.missing == []
        assert (await put(client, "45", {"events": [message("$e")]}))[0] == 200
        assert (await put(client, "44", {"events": [message("$d")]}))[0] == 200
        await clock.advance(11)
        assert asked == [1]  # 44 came in time
    finally:
        await gaps.stop()
        await client.close()
        ingest.eventlog.close()


async def test_thirty_gapped_transactions_start_one_backfill(tmp_path):
    """The storm of the adversarial round: 30 empty transactions 5000, 5002 ... 5058 (one
    missing between each, each PUT a second apart) made 23 backfills of every room. Now
    the gaps are merged into one, and a jump of 999 is one range, not 998 entries."""
    asked: list[int] = []
    client, ingest, gaps, clock = await gap_service(tmp_path, asked)
    try:
        for n in range(5000, 5060, 2):
            assert (await put(client, str(n), {"events": []}))[0] == 200
            await clock.advance(1)
        await clock.advance(60)
        assert asked == [1]
        assert (await put(client, str(5058 + 999), {"events": []}))[0] == 200
        assert gaps.open_ranges == 1
        await clock.advance(11)
        assert asked == [1]  # at most one backfill a minute
        await clock.advance(60)
        assert asked == [1, 1]
    finally:
        await gaps.stop()
        await client.close()
        ingest.eventlog.close()
