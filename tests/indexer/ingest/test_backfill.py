"""Backfill through a fake pager: pages admitted in order, resumable, gate applied."""

from __future__ import annotations

import pytest

from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.backfill import backfill_room
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.history import History
from matrix_sources.indexer.ingest.roomfacts import RoomFacts
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.pipeline import Pipeline
from matrix_sources.indexer.records import ChunkPolicy
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

ROOM = "!room:example.org"
T0 = 1_700_000_000_000


def msg(n: int) -> dict:
    return {
        "type": "m.room.message",
        "room_id": ROOM,
        "sender": "@a:example.org",
        "event_id": f"$m{n}",
        "origin_server_ts": T0 + n * 60_000,
        "content": {"msgtype": "m.text", "body": f"message number {n}"},
    }


class FakePager:
    def __init__(self, events: list[dict], page: int = 10, fail_at: int | None = None):
        self.events, self.size, self.fail_at = events, page, fail_at
        self.calls: list[str | None] = []

    async def token_after(self, room_id, event_id):
        ids = [e["event_id"] for e in self.events]
        return str(ids.index(event_id) + 1) if event_id in ids else None

    async def page(self, room_id, from_token, limit):
        self.calls.append(from_token)
        start = int(from_token or 0)
        if self.fail_at is not None and start >= self.fail_at:
            raise ConnectionError("homeserver went away")
        chunk = self.events[start : start + self.size]
        end = start + len(chunk)
        return chunk, (str(end) if chunk else None)

    async def reach_back(self, room_id, horizon_ts):
        return None, 0  # the homeserver holds the room's whole history


class RemotePager(FakePager):
    """A room on another homeserver, as Synapse serves it to the bot: forward from no
    token it starts at its own join (`joined_at`); paging backwards fetches the older
    events from the other servers (back to the horizon), then a forward read from the
    token it returns gives them."""

    def __init__(self, events: list[dict], joined_at: int, page: int = 10):
        super().__init__(events, page)
        self.joined_at, self.fetched_from = joined_at, joined_at
        self.reached: list[int | None] = []

    async def page(self, room_id, from_token, limit):
        self.calls.append(from_token)
        start = int(from_token) if from_token is not None else self.joined_at
        start = max(start, self.fetched_from)
        chunk = self.events[start : start + self.size]
        return chunk, (str(start + len(chunk)) if chunk else None)

    async def reach_back(self, room_id, horizon_ts):
        self.reached.append(horizon_ts)
        i = self.joined_at
        while i > 0 and (
            horizon_ts is None or self.events[i - 1]["origin_server_ts"] >= horizon_ts
        ):
            i -= 1
        self.fetched_from = i
        return str(i), self.joined_at - i


@pytest.fixture
def ingest(tmp_path):
    log = EventLog(tmp_path / "eventlog.sqlite3")
    ing = Ingest(
        Gate(frozenset({ROOM}), "@bot:example.org"),
        log,
        Journal(tmp_path / "journal.jsonl"),
        history=History(log),
    )
    ing.facts[ROOM] = RoomFacts(join_rule="public")
    return ing


async def test_backfill_reads_every_page_and_resumes_from_its_token(ingest, tmp_path):
    events = [msg(i) for i in range(35)]
    events.insert(
        5,
        {
            "type": "m.room.join_rules",
            "room_id": ROOM,
            "sender": "@a:x",
            "state_key": "",
            "event_id": "$old-state",
            "origin_server_ts": T0,
            "content": {"join_rule": "invite"},
        },
    )  # old state: not replayed
    failing = FakePager(events, fail_at=20)
    with pytest.raises(ConnectionError):
        await backfill_room(ROOM, failing, ingest)
    assert ingest.eventlog.counts() == {"pending": 19}
    resumed = FakePager(events)
    result = await backfill_room(ROOM, resumed, ingest)
    assert resumed.calls[0] == "20"  # picked up after the last page it had admitted
    assert ingest.eventlog.counts() == {"pending": 35}
    assert result.admitted.appended == 16
    pipeline = Pipeline(
        ingest.eventlog,
        HashEmbedder(),
        ChromaStore(path=tmp_path / "c", eventlog=ingest.eventlog),
        ChunkPolicy(),
        admits=ingest.admits,
    )
    assert pipeline.process_all() == 35
    held = [e for w in pipeline.store.get() for e in w.event_ids]
    assert sorted(held) == sorted(f"$m{i}" for i in range(35))


async def test_backfill_starts_after_the_cursor(ingest, tmp_path):
    events = [msg(i) for i in range(12)]
    ingest.admit(events[:5])
    Pipeline(
        ingest.eventlog,
        HashEmbedder(),
        ChromaStore(path=tmp_path / "c", eventlog=ingest.eventlog),
        ChunkPolicy(),
        admits=ingest.admits,
    ).process_all()
    pager = FakePager(events)
    result = await backfill_room(ROOM, pager, ingest)
    assert pager.calls[0] == "5" and result.admitted.appended == 7


async def test_backfill_applies_the_gate_and_the_horizon(ingest):
    events = [msg(i) for i in range(10)]
    events.append(
        {
            "type": "m.room.encrypted",
            "room_id": ROOM,
            "sender": "@a:example.org",
            "event_id": "$enc",
            "origin_server_ts": T0 + 10 * 60_000,
            "content": {"ciphertext": "x"},
        }
    )
    result = await backfill_room(ROOM, FakePager(events), ingest, horizon_ts=T0 + 5 * 60_000)
    assert result.admitted.appended == 5  # messages 5..9
    assert ingest.eventlog.status_of("$m4") is None
    assert result.admitted.refused["encrypted_event"] == 1


async def test_a_restart_does_not_grow_the_refusal_count(tmp_path):
    """What was pushed live (the bot's answers among it) is read again by the next
    start's backfill. The answers are skipped silently and a refusal already in the
    journal is not written again, so `!sources status` shows the same count each start."""
    from matrix_sources.appservice.bot.status import render_status

    bot = "@bot:example.org"
    events = [msg(i) for i in range(6)] + [
        {**msg(6), "sender": bot, "event_id": "$answer"},
        {
            "type": "m.room.encrypted",
            "room_id": ROOM,
            "sender": "@a:example.org",
            "event_id": "$enc",
            "origin_server_ts": T0 + 7 * 60_000,
            "content": {},
        },
    ]

    class Rereading(FakePager):  # the worst overlap: every start reads it all again
        async def page(self, room_id, from_token, limit):
            self.calls.append(from_token)
            return (self.events, f"t{len(self.calls)}") if len(self.calls) == 1 else ([], None)

    counts = []
    for start in range(3):  # a new process on the same files each time
        log = EventLog(tmp_path / "eventlog.sqlite3")
        ing = Ingest(
            Gate(frozenset({ROOM}), bot),
            log,
            Journal(tmp_path / "journal.jsonl"),
            history=History(log),
        )
        ing.facts[ROOM] = RoomFacts(join_rule="public")
        if start == 0:
            ing.admit(events)  # pushed live
        result = await backfill_room(ROOM, Rereading(events, page=100), ing)
        assert result.admitted.skipped["own_message"] == 1
        assert result.pages >= 1 and result.events == len(events)
        counts.append(render_status([(ROOM, "")], log, ing.journal).body.rsplit(", ", 1)[1])
        log.close()
    assert counts == ["1 refusals"] * 3  # the encrypted event, once; the answer, never
    lines = (tmp_path / "journal.jsonl").read_text().splitlines()
    assert len(lines) == 1 and "own_message" not in lines[0]


def _visibility(n: int, value: str) -> dict:
    return {
        "type": "m.room.history_visibility",
        "room_id": ROOM,
        "sender": "@a:example.org",
        "event_id": f"$hv{n}",
        "state_key": "",
        "origin_server_ts": T0 + n * 60_000 + 1,
        "content": {"history_visibility": value},
    }


async def test_backfill_judges_each_message_by_the_visibility_of_its_time(ingest):
    """Issue 21: the room is `joined` now (its state fetched at join), but it was
    `shared` until message 4: what was said then is readable by anyone who joins, what
    came after is not. Other old state (a join rule of years ago) is still not replayed."""
    ingest.facts[ROOM] = RoomFacts(join_rule="public", history_visibility="joined")
    old_rule = {
        "type": "m.room.join_rules",
        "room_id": ROOM,
        "sender": "@a:example.org",
        "event_id": "$jr",
        "state_key": "",
        "origin_server_ts": T0,
        "content": {"join_rule": "invite"},
    }
    events = (
        [old_rule, _visibility(-1, "shared")]
        + [msg(i) for i in range(5)]
        + [_visibility(4, "joined")]
        + [msg(i) for i in range(5, 10)]
    )
    result = await backfill_room(ROOM, FakePager(events, page=4), ingest)
    assert result.admitted.appended == 5
    assert ingest.eventlog.status_of("$m4") is not None
    assert ingest.eventlog.status_of("$m5") is None
    assert result.admitted.refused == {"history_not_shared": 5}
    assert ingest.facts[ROOM].history_visibility == "joined"
    assert ingest.facts[ROOM].join_rule == "public"


def _create() -> dict:
    return {
        "type": "m.room.create",
        "room_id": ROOM,
        "sender": "@a:other.org",
        "state_key": "",
        "event_id": "$create",
        "origin_server_ts": T0 - 1,
        "content": {"room_version": "12"},
    }


async def test_a_remote_room_is_reached_back_for_what_was_said_before_the_join(ingest):
    """Issue 50: on the bot's homeserver a remote room begins at the join; backfill
    pages back first (the homeserver fetches the history over federation), then reads
    forward from the oldest point reached: every message, once."""
    events = [_create(), *[msg(i) for i in range(30)]]
    pager = RemotePager(events, joined_at=25)
    result = await backfill_room(ROOM, pager, ingest)
    assert pager.reached == [None]
    assert ingest.eventlog.counts() == {"pending": 30}
    assert result.admitted.appended == 30
    # Read again from its token: no second reach back.
    await backfill_room(ROOM, pager, ingest)
    assert pager.reached == [None]


async def test_reaching_back_stops_at_the_horizon(ingest):
    events = [_create(), *[msg(i) for i in range(30)]]
    pager = RemotePager(events, joined_at=25)
    horizon_ts = T0 + 10 * 60_000  # message 10 and later
    await backfill_room(ROOM, pager, ingest, horizon_ts)
    assert pager.reached == [horizon_ts]
    assert ingest.eventlog.counts() == {"pending": 20}


async def test_a_room_the_homeserver_holds_from_its_creation_is_not_reached_back(ingest):
    pager = RemotePager([_create(), *[msg(i) for i in range(12)]], joined_at=0)
    await backfill_room(ROOM, pager, ingest)
    assert pager.reached == []
    assert ingest.eventlog.counts() == {"pending": 12}
