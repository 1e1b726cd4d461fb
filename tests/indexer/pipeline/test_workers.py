"""Embedding workers (issue 25 item 2), in one process with parts as separate as separate
processes have them: each worker its own event log connection, claims and pipeline; a
purge with its own lock. Claims on rooms, leases taken over after a fake clock passes
them, a stale worker's batch dropped, a purge revoking a batch in flight, a compaction
by the service followed by the workers' store. On SQLite and on PostgreSQL."""

from __future__ import annotations

from collections import Counter

import pytest

from matrix_sources.indexer.ingest.history import History
from matrix_sources.indexer.ingest.purge import Purger
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.claims import RoomClaims
from matrix_sources.indexer.pipeline.pipeline import EMBED_CALL, Pipeline
from matrix_sources.indexer.pipeline.standalone import Worker, WorkerLoop
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, Refusal, RoomID, UserID
from matrix_sources.indexer.store.compaction import Compaction
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.fakeclock import FakeClock

ROOMS = [RoomID(f"!room{i}:example.org") for i in range(4)]
T0 = 1_700_000_000_000
POLICY = ChunkPolicy(max_bytes=120, gap_ms=30 * 60_000)
LEASE = 30.0


def messages(room: RoomID, n: int) -> list[tuple[Message, None]]:
    return [
        (
            Message(
                EventID(f"${room[1:6]}-{i:03d}"),
                room,
                UserID("@a:example.org"),
                T0 + i * 60_000,
                f"message {i} of {room[1:6]} about topic {i % 4}",
            ),
            None,
        )
        for i in range(n)
    ]


@pytest.fixture
def world(tmp_path, eventlog_db):
    service_log = EventLog(eventlog_db)
    for room in ROOMS:
        service_log.append(messages(room, 12))
    store = ChromaStore(path=tmp_path / "chroma", eventlog=service_log)
    clock = FakeClock(1_000_000.0)
    logs = [service_log]

    def worker(name: str, embedder=None, group: int = EMBED_CALL) -> Pipeline:
        log = EventLog(eventlog_db)  # a process of its own: its own connection(s)
        logs.append(log)
        return Pipeline(
            log,
            embedder or HashEmbedder(),
            store,
            POLICY,
            history=History(log),
            compaction=Compaction(log, store, fenced=True),
            claims=RoomClaims(log, LEASE, worker=name, clock=clock.clock),
            embed_group=group,
        )

    yield service_log, store, clock, worker
    for log in logs:
        log.close()


def held(store: ChromaStore) -> Counter:
    return Counter(e for w in store.get() for e in w.event_ids)


def every_message_once(store: ChromaStore, log: EventLog) -> None:
    got = held(store)
    want = {m.event_id for room in ROOMS for m, _ in messages(room, 12)}
    assert set(got) == want and set(got.values()) == {1}
    assert log.counts() == {"indexed": len(want)}


def test_a_claim_is_one_workers_until_released_or_its_lease_runs_out(eventlog_db):
    log = EventLog(eventlog_db)
    room = ROOMS[0]
    t1 = log.claims.claim(room, "a", now_ms=0, lease_ms=1000)
    assert t1 is not None
    assert log.claims.claim(room, "b", now_ms=999, lease_ms=1000) is None  # a holds it
    assert log.claims.renew("a", {room: t1}, now_ms=900, lease_ms=1000) == set()
    assert log.claims.claim(room, "b", now_ms=1500, lease_ms=1000) is None  # renewed
    t2 = log.claims.claim(room, "b", now_ms=2000, lease_ms=1000)  # a stopped renewing
    assert t2 is not None and t2 > t1
    assert log.claims.renew("a", {room: t1}, now_ms=2001, lease_ms=1000) == {room}
    with log.claims.fenced("a", {room: t1}) as lost:
        assert lost == {room}  # a's batch would be dropped
    with log.claims.fenced("b", {room: t2}) as lost:
        assert lost == set()
    log.claims.release("b", {room: t2})
    t3 = log.claims.claim(room, "a", now_ms=2002, lease_ms=1000)  # released: free at once
    with log.transaction() as cur:
        log.claims.revoke(cur, room)  # a purge
    with log.claims.fenced("a", {room: t3}) as lost:
        assert lost == {room}
    assert log.claims.claim(room, "c", now_ms=2003, lease_ms=1000) > t3  # tokens never repeat
    log.close()


def test_two_workers_share_the_rooms_and_never_build_one_at_once(world):
    log, store, clock, worker = world
    a_rooms, b_rooms = [], []

    class Watching(HashEmbedder):
        def __init__(self, mine, other):
            super().__init__()
            self.mine, self.other = mine, other

        def encode(self, texts):
            # While a embeds, b runs a whole pass: it must skip every room a holds.
            if self.other is not None:
                held_by_a = set(a.claims.held())
                b.process_all()
                self.other.append(held_by_a)
                self.other = None
            return super().encode(texts)

    # A group of one room's windows: a claims a room, embeds it, then the next.
    a = worker("a", Watching(a_rooms, b_rooms), group=4)
    b = worker("b", group=4)
    a.process_all()
    assert b_rooms == [{ROOMS[0]}]  # a held its first room while b ran...
    assert b.stats.messages == 36 and a.stats.messages == 12  # ...and b built the others
    every_message_once(store, log)
    assert log.claims.holders(int(clock.now * 1000)) == {}  # all released


def test_a_killed_workers_rooms_are_taken_over_after_the_lease(world):
    log, store, clock, worker = world
    dead = worker("dead")
    for room in ROOMS[:2]:
        assert dead.claims.take(room)  # it claimed, then was SIGKILLed: never released
    b = worker("b")
    b.process_all()
    assert {w.room_id for w in store.get()} == set(ROOMS[2:])  # not the dead one's rooms
    clock.now += LEASE - 1
    assert b.process_all() == 0  # the lease still runs
    clock.now += 2
    assert b.process_all() == 24
    every_message_once(store, log)


def test_a_stalled_workers_batch_is_dropped_after_a_takeover(world):
    """a stalls while embedding (a GC pause, SIGSTOP) past its lease; b takes the room
    over and indexes it, with a message that came meanwhile and joins a's last window;
    a wakes up and commits: its token is stale, so its older copy of that window does
    not overwrite b's."""
    log, store, clock, worker = world
    room = ROOMS[0]
    extra = messages(room, 14)[12:]  # the 13th starts a window the 14th joins
    log.append(extra[:1])

    class Stalling(HashEmbedder):
        def encode(self, texts):
            if self.batches == 0:
                log.append(extra[1:])
                clock.now += LEASE + 1
                b.process_all()
            return super().encode(texts)

    a = worker("a", Stalling(), group=4)
    b = worker("b")
    a.process_all()
    got = held(store)
    want = {m.event_id for r in ROOMS for m, _ in messages(r, 12)} | {m.event_id for m, _ in extra}
    assert set(got) == want and set(got.values()) == {1}
    assert log.counts() == {"indexed": len(want)}
    assert b.stats.messages == 50  # everything: a's first room was taken over


def test_a_purge_in_another_process_revokes_a_batch_in_flight(world, tmp_path):
    log, store, clock, worker = world
    room = ROOMS[0]

    class Purging(HashEmbedder):
        def encode(self, texts):
            if self.batches == 0:  # the service purges the room meanwhile (its own lock)
                Purger(log, Journal(tmp_path / "journal.jsonl"), store).purge(
                    Refusal("join_rule_not_public", room, whole_room=True)
                )
            return super().encode(texts)

    a = worker("a", Purging())
    a.process_all()
    assert room not in {w.room_id for w in store.get()}
    assert log.counts(room) == {"purged": 12}
    assert {w.room_id for w in store.get()} == set(ROOMS[1:])


def test_workers_follow_a_compaction_the_service_ran(eventlog_db, chroma_server):
    """Chroma as a server, as workers need it: the service compacts (a new generation
    is live, the old one dropped); a worker's store, opened before, writes the next
    batch into the live generation."""
    import uuid

    name = f"workers_{uuid.uuid4().hex[:8]}"
    log = EventLog(eventlog_db)
    service_store = ChromaStore(
        host="127.0.0.1", port=chroma_server.port, collection=name, eventlog=log
    )
    wlog = EventLog(eventlog_db)
    worker_store = ChromaStore(
        host="127.0.0.1", port=chroma_server.port, collection=name, eventlog=wlog
    )
    a = Pipeline(
        wlog,
        HashEmbedder(),
        worker_store,
        POLICY,
        history=History(wlog),
        compaction=Compaction(wlog, worker_store, fenced=True),
        claims=RoomClaims(wlog, LEASE, worker="a"),
    )
    log.append(messages(ROOMS[0], 6))
    assert a.process_all() == 6
    assert Compaction(log, service_store, fenced=True).now("test")  # a new generation
    log.append(
        [
            (
                Message(
                    EventID("$late"),
                    ROOMS[0],
                    UserID("@a:example.org"),
                    T0 + 99 * 60_000,
                    "a late message after the compaction",
                ),
                None,
            )
        ]
    )
    assert a.process_all() == 1
    live = {e for w in service_store.get() for e in w.event_ids}
    assert "$late" in live and len(live) == 7
    log.close()
    wlog.close()


def test_the_loop_waits_when_idle_and_backs_off_on_failure(world):
    log, store, clock, worker = world
    waits: list[float] = []
    pipeline = worker("a")
    loop = WorkerLoop(Worker(pipeline.eventlog, store, pipeline), poll=0.5, wait=waits.append)
    loop.run(max_runs=2)
    assert loop.indexed == 48 and waits == [0.5]  # one pass with work, one idle look
    calls = []

    def broken():
        calls.append(1)
        raise ConnectionError("chroma unreachable")

    loop.worker.run_once = broken
    loop.run(max_runs=loop.runs + 1) if False else None
    loop.stop.clear()
    waits.clear()

    def stop_after_three(delay):
        waits.append(delay)
        if len(waits) == 3:
            loop.stop.set()

    loop.wait = stop_after_three
    loop.run()
    assert waits == [1.0, 2.0, 4.0] and loop.failures == 3


@pytest.mark.parametrize(
    "index, says",
    [
        ({}, "index.pipeline is internal: the service embeds itself"),
        ({"pipeline": "external"}, "workers need Chroma as a server"),
    ],
)
def test_the_worker_command_refuses_a_config_it_cannot_work_with(tmp_path, capsys, index, says):
    import json

    from matrix_sources.appservice.cli.main import main

    (tmp_path / "config.yaml").write_text(
        "homeserver: {url: 'http://127.0.0.1:8008', domain: example.org}\n"
        f"index: {json.dumps(index)}\n"
    )
    assert main(["worker", "-c", str(tmp_path / "config.yaml")]) == 1
    assert says in capsys.readouterr().err
    assert not (tmp_path / "eventlog.sqlite3").exists()  # refused before opening anything
