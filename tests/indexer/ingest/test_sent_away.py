"""A bot sent away (issue 21 item 2): kicked or banned by the room's moderators, the room
is purged, refused and not joined again, across restarts, until someone invites the bot
back. The allowlist stays the admin's."""

from __future__ import annotations

import pytest

from matrix_sources.appservice.bot.status import render_status
from matrix_sources.indexer.ingest import gate as rules
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.sentaway import sent_away_at
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from tests.indexer.ingest.test_gate import (
    ALICE,
    BOB,
    BOT,
    CANARY,
    ROOM,
    disk_bytes,
    journal_entries,
    message,
    public_state,
)

MOD = "@mod:example.org"


def bot_member(membership: str, sender: str = MOD, event_id: str = "$kick") -> dict:
    return {
        "type": "m.room.member",
        "room_id": ROOM,
        "event_id": event_id,
        "sender": sender,
        "state_key": BOT,
        "origin_server_ts": 5,
        "content": {"membership": membership},
    }


@pytest.fixture
def make(tmp_path):
    opened = []

    def build() -> Ingest:
        log = EventLog(tmp_path / "eventlog.sqlite3")
        opened.append(log)
        return Ingest(Gate(frozenset({ROOM}), BOT), log, Journal(tmp_path / "journal.jsonl"))

    yield build
    for log in opened:
        log.close()


@pytest.mark.parametrize("membership", ["leave", "ban"])
def test_a_kicked_or_banned_bot_purges_the_room_and_keeps_it_refused(make, tmp_path, membership):
    ingest = make()
    assert ingest.admit(public_state() + [message("$a")]).appended == 1
    ingest.admit([bot_member(membership)])
    assert not ingest.eventlog.has_text(ROOM)  # purged: the text is gone
    assert CANARY.encode() not in disk_bytes(tmp_path)
    removed = [e for e in journal_entries(tmp_path) if e.get("kind") == "bot_removed"]
    assert removed and removed[0]["by"] == MOD and removed[0]["membership"] == membership
    result = ingest.admit([message("$b", sender=BOB)])
    assert result.appended == 0 and result.refused == {rules.BOT_REMOVED: 1}
    # A restart remembers it (the service then does not join the room: rooms.py).
    ingest.eventlog.close()
    again = make()
    assert ROOM in again.sent_away and ROOM in sent_away_at(tmp_path / "eventlog.sqlite3")
    assert again.admit([message("$c")]).appended == 0
    assert again.gate.judge_room(ROOM, None).rule == rules.BOT_REMOVED


def test_an_invite_back_admits_the_room_again(make):
    ingest = make()
    assert ingest.admit(public_state() + [message("$a")]).appended == 1
    ingest.admit([bot_member("ban")])
    assert ingest.eventlog.status_of("$a")[0] == "purged"
    ingest.admit([bot_member("invite", sender=ALICE, event_id="$inv")])
    assert ROOM not in ingest.sent_away
    assert ingest.admit([message("$b")]).appended == 1
    # Read again from its start (issue 44): what the purge took is stored anew.
    assert ingest.admit([message("$a")], source="backfill").appended == 1
    assert ingest.eventlog.status_of("$a")[0] == "pending"


def test_the_bot_leaving_by_itself_is_not_being_sent_away(make):
    ingest = make()
    ingest.admit(public_state() + [message("$a"), bot_member("leave", sender=BOT)])
    assert ROOM not in ingest.sent_away and ingest.eventlog.has_text(ROOM)


def test_status_says_why_a_room_is_not_indexed(make):
    ingest = make()
    ingest.admit(public_state() + [message("$a"), bot_member("ban")])
    reply = render_status(
        [(ROOM, "#ops:example.org")], ingest.eventlog, ingest.journal, ingest.sent_away.rooms
    )
    assert "not indexed: the bot was banned by @mod:example.org" in reply.body
