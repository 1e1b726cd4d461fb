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
