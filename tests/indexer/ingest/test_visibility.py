"""History visibility (issue 21): a message is indexed only if the visibility in force
when it was sent lets a stranger who joins later read it."""

from __future__ import annotations

import pytest

from matrix_sources.indexer.ingest import gate as rules
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from tests.indexer.ingest.test_gate import (
    ALICE,
    BOT,
    CANARY,
    ROOM,
    disk_bytes,
    journal_entries,
    message,
    public_state,
)


def visibility(value, event_id: str = "$hv", ts: int = 4) -> dict:
    return {
        "type": "m.room.history_visibility",
        "room_id": ROOM,
        "event_id": event_id,
        "sender": ALICE,
        "state_key": "",
        "origin_server_ts": ts,
        "content": {"history_visibility": value},
    }


@pytest.fixture
def make(tmp_path):
    opened = []

    def build(world_readable_only: bool = False) -> Ingest:
        log = EventLog(tmp_path / "eventlog.sqlite3")
        opened.append(log)
        g = Gate(frozenset({ROOM}), BOT, require_world_readable=world_readable_only)
        return Ingest(g, log, Journal(tmp_path / "journal.jsonl"))

    yield build
    for log in opened:
        log.close()


def test_no_visibility_event_is_shared_and_indexed(make):
    ingest = make()
    assert ingest.admit(public_state() + [message("$a")]).appended == 1


@pytest.mark.parametrize("value", ["shared", "world_readable"])
def test_shared_and_world_readable_are_indexed(make, value):
    ingest = make()
    assert ingest.admit(public_state() + [visibility(value), message("$a")]).appended == 1


@pytest.mark.parametrize("value", ["joined", "invited", "bogus", None, 7])
def test_members_only_or_unknowable_visibility_stores_nothing(make, tmp_path, value):
    ingest = make()
    result = ingest.admit(public_state() + [visibility(value), message("$a")])
    assert result.appended == 0 and result.refused == {rules.HISTORY_NOT_SHARED: 1}
    assert ingest.eventlog.counts() == {}
    assert CANARY.encode() not in disk_bytes(tmp_path)
    refusals = [e for e in journal_entries(tmp_path) if e.get("event_id") == "$a"]
    assert refusals and refusals[0]["rule"] == rules.HISTORY_NOT_SHARED
    assert CANARY not in (tmp_path / "journal.jsonl").read_text()


def test_a_switch_to_joined_stops_new_messages_and_keeps_what_was_sent(make, tmp_path):
    ingest = make()
    ingest.admit(public_state() + [message("$before", body="said before")])
    result = ingest.admit([visibility("joined", "$switch", ts=10), message("$after", ts=11)])
    assert result.appended == 0 and result.refused == {rules.HISTORY_NOT_SHARED: 1}
    assert ingest.eventlog.counts() == {"pending": 1}  # $before kept: not purged
    assert ingest.eventlog.status_of("$before")[0] == "pending"
    change = [e for e in journal_entries(tmp_path) if e["kind"] == "history_visibility"]
    assert len(change) == 1 and change[0]["event_id"] == "$switch"
    assert change[0]["rule"] == rules.HISTORY_NOT_SHARED
    # Switched back: what is sent from then on is stored again.
    assert ingest.admit([visibility("shared", "$back"), message("$later")]).appended == 1


def test_in_one_batch_each_message_is_judged_by_the_visibility_before_it(make):
    ingest = make()
    result = ingest.admit(public_state() + [message("$a"), visibility("joined"), message("$b")])
    assert result.appended == 1 and ingest.eventlog.status_of("$b") is None


def test_require_world_readable_refuses_shared(make):
    ingest = make(world_readable_only=True)
    assert ingest.admit(public_state() + [message("$a")]).refused == {rules.HISTORY_NOT_SHARED: 1}
    assert ingest.admit([visibility("world_readable"), message("$b")]).appended == 1
