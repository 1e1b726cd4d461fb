"""A room the bot could not join waits for its next try, twice as long each time, kept
across restarts in joins.json; new via servers, or a join that works, end the wait."""

from __future__ import annotations

import json
import logging

from matrix_sources.appservice.homeserver.joinbackoff import CAP_S, FILE, FIRST_S, JoinBackoff
from tests.fakeclock import FakeClock

ROOM, OTHER = "!gone:example.org", "!other:example.org"


def test_a_failed_join_waits_twice_as_long_each_time_up_to_the_cap(tmp_path):
    fake = FakeClock(1_800_000_000.0)
    b = JoinBackoff(tmp_path, fake.clock)
    assert b.due(ROOM, ())
    waits = []
    for _ in range(9):
        b.record(ROOM, (), joined=False)
        assert not b.due(ROOM, ()) and b.waiting([ROOM, OTHER]) == [ROOM]
        waits.append(b.failed[ROOM].next_at - fake.now)
        fake.now = b.failed[ROOM].next_at - 1
        assert not b.due(ROOM, ())
        fake.now += 1
        assert b.due(ROOM, ()) and b.waiting([ROOM]) == []
    assert waits[:4] == [FIRST_S, 2 * FIRST_S, 4 * FIRST_S, 8 * FIRST_S]
    assert waits[-1] == CAP_S and max(waits) == CAP_S


def test_new_via_servers_or_a_join_end_the_wait(tmp_path):
    fake = FakeClock(1_800_000_000.0)
    b = JoinBackoff(tmp_path, fake.clock)
    b.record(ROOM, ("a.org",), joined=False)
    assert not b.due(ROOM, ("a.org",))
    assert b.due(ROOM, ("b.org",))  # the admin gave it a server that may let the bot in
    b.record(ROOM, ("b.org",), joined=True)
    assert ROOM not in b.failed and b.due(ROOM, ("a.org",))


def test_kept_across_restarts_and_rooms_taken_off_dropped(tmp_path):
    fake = FakeClock(1_800_000_000.0)
    b = JoinBackoff(tmp_path, fake.clock)
    b.record(ROOM, ("a.org",), joined=False)
    b.record(OTHER, (), joined=False)
    b.save([ROOM])  # OTHER is no longer listed
    again = JoinBackoff(tmp_path, fake.clock)
    assert set(again.failed) == {ROOM} and not again.due(ROOM, ("a.org",))
    assert again.failed[ROOM].via == ("a.org",) and again.failed[ROOM].tries == 1
    assert set(json.loads((tmp_path / FILE).read_text())) == {ROOM}


def test_an_unreadable_file_is_said_and_every_room_tried(tmp_path, caplog):
    (tmp_path / FILE).write_text('{"!x:y": {"tries": "many"}}')
    with caplog.at_level(logging.WARNING):
        b = JoinBackoff(tmp_path, FakeClock(1.0).clock)
    assert b.failed == {} and b.due("!x:y", ())
    assert any(r.message == "joins_file_unreadable" for r in caplog.records)
    (tmp_path / FILE).write_text("[not json")
    assert JoinBackoff(tmp_path, FakeClock(1.0).clock).failed == {}
