"""Room upgrades and spaces read from state (indexer/ingest/roomlinks.py, roomfacts.py):
both shapes of `predecessor` (room version 12 leaves `event_id` out), a tombstone naming
its own room, and chains walked with a bound, loops included."""

from __future__ import annotations

from matrix_sources.indexer.ingest.events import StateEvent
from matrix_sources.indexer.ingest.roomfacts import RoomFacts, apply_state, facts_from_state
from matrix_sources.indexer.ingest.roomlinks import (
    MAX_CHAIN,
    Lineage,
    predecessor_of,
    successor_of,
    verified,
)
from matrix_sources.indexer.records import EventID, RoomID, UserID


def state(room: str, etype: str, content: dict, key: str = "") -> StateEvent:
    return StateEvent(RoomID(room), EventID(f"$e{etype}"), UserID("@a:x"), etype, key, content)


def test_predecessor_with_and_without_event_id():
    assert predecessor_of({"predecessor": {"room_id": "!old:x", "event_id": "$t"}}) == "!old:x"
    assert predecessor_of({"predecessor": {"room_id": "!old"}}) == "!old"  # version 12
    for bad in (
        {},
        {"predecessor": "!old"},
        {"predecessor": {"room_id": 5}},
        {"predecessor": {"room_id": "old"}},
        {"predecessor": {"room_id": "!a\nb"}},
    ):
        assert predecessor_of(bad) is None, bad


def test_only_a_create_naming_the_room_back_verifies_it():
    assert verified("!old", {"predecessor": {"room_id": "!old"}})
    assert not verified("!old", {"predecessor": {"room_id": "!other"}})
    assert not verified("!old", {"room_version": "12"})


def test_a_tombstone_naming_its_own_room_names_no_successor():
    assert successor_of({"replacement_room": "!new"}, "!old") == "!new"
    assert successor_of({"replacement_room": "!old"}, "!old") is None
    assert successor_of({"body": "gone"}, "!old") is None


def test_facts_fold_create_tombstone_and_topic():
    facts = facts_from_state(
        [
            state("!s", "m.room.create", {"type": "m.space", "predecessor": {"room_id": "!p"}}),
            state("!s", "m.room.topic", {"topic": "all about backups"}),
        ]
    )
    assert facts.is_space and facts.predecessor == "!p" and facts.topic == "all about backups"
    facts = apply_state(facts, state("!s", "m.room.tombstone", {"replacement_room": "!n"}))
    assert facts.successor == "!n"
    # A create with a state key is not the room's create.
    odd = apply_state(RoomFacts(), state("!r", "m.room.create", {"type": "m.space"}, key="x"))
    assert not odd.is_space


def test_a_loop_is_refused_and_never_walked():
    lineage = Lineage()
    assert lineage.link(RoomID("!a"), RoomID("!b"))
    assert not lineage.link(RoomID("!b"), RoomID("!a"))  # A -> B -> A
    assert not lineage.link(RoomID("!a"), RoomID("!a"))
    assert lineage.chain("!b") == ["!b", "!a"]
    assert lineage.whole_chain("!a") == ["!a", "!b"] == lineage.whole_chain("!b")


def test_a_long_chain_is_walked_to_a_bound():
    rooms = [f"!r{i}" for i in range(MAX_CHAIN * 2)]
    lineage = Lineage(zip(rooms, rooms[1:]))
    assert len(lineage.chain(rooms[-1])) == MAX_CHAIN
    assert len(lineage.whole_chain(rooms[0])) <= MAX_CHAIN
