"""The ingest gate: one test per rule, and what a refusal leaves behind (a journal line
with ids and the rule, never the text; nothing in the event log)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matrix_sources.indexer.ingest import gate as rules
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.events import StateEvent
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.roomfacts import RoomFacts, apply_state, facts_from_state
from matrix_sources.indexer.records import Refusal, RoomID, UserID
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal

ROOM = RoomID("!public:example.org")
OTHER = RoomID("!elsewhere:example.org")
BOT = UserID("@sourcesbot:example.org")
ALICE = UserID("@alice:example.org")
BOB = UserID("@bob:example.org")
CANARY = "CANARY-7f3a9c-do-not-store"

PUBLIC = RoomFacts(join_rule="public", members=frozenset({ALICE, BOB, BOT}))


def gate(*rooms: str, patterns: tuple[str, ...] | None = None) -> Gate:
    allow = frozenset(RoomID(r) for r in (rooms or (ROOM,)))
    if patterns is None:
        return Gate(allow, BOT)
    return Gate(allow, BOT, patterns)


def judge(facts: RoomFacts | None, sender: str = ALICE, g: Gate | None = None, room: str = ROOM):
    return (g or gate()).judge_message(RoomID(room), "$ev", UserID(sender), facts)


def state(etype: str, content: dict, state_key: str = "", room: str = ROOM) -> StateEvent:
    return StateEvent(RoomID(room), "$s" + etype, ALICE, etype, state_key, content)


# -- one test per rule ------------------------------------------------------------------


def test_public_allowlisted_room_passes():
    assert judge(PUBLIC) is None
    assert gate().judge_room(ROOM, PUBLIC) is None


def test_not_allowlisted():
    r = judge(PUBLIC, room=OTHER)
    assert r is not None and r.rule == rules.NOT_ALLOWLISTED and r.whole_room
    assert gate().judge_room(OTHER, PUBLIC).rule == rules.NOT_ALLOWLISTED


@pytest.mark.parametrize(
    "join_rule", ["invite", "knock", "restricted", "knock_restricted", "private"]
)
def test_not_public(join_rule):
    facts = RoomFacts(join_rule=join_rule, members=frozenset({ALICE, BOB, BOT}))
    r = judge(facts)
    assert r is not None and r.rule == rules.NOT_PUBLIC and r.whole_room


@pytest.mark.parametrize(
    "facts", [None, RoomFacts(), RoomFacts(members=frozenset({ALICE, BOB, BOT}))]
)
def test_unknown_join_rule_is_not_public(facts):
    r = judge(facts)
    assert r is not None and r.rule == rules.NOT_PUBLIC


def test_join_rule_not_a_string_is_unknown():
    facts = apply_state(RoomFacts(), state("m.room.join_rules", {"join_rule": ["public"]}))
    assert judge(facts).rule == rules.NOT_PUBLIC


def test_direct_message_via_is_direct_even_if_public():
    facts = facts_from_state(
        [
            state("m.room.join_rules", {"join_rule": "public"}),
            state("m.room.member", {"membership": "join"}, ALICE),
            state("m.room.member", {"membership": "join", "is_direct": True}, BOB),
            state("m.room.member", {"membership": "join"}, "@carol:example.org"),
        ]
    )
    r = judge(facts)
    assert r is not None and r.rule == rules.DIRECT_MESSAGE and r.whole_room


def test_two_members_in_an_invite_only_room_is_not_public_not_a_dm():
    """Issue 21: the journal names what happened; only is_direct makes a DM."""
    facts = facts_from_state(
        [
            state("m.room.join_rules", {"join_rule": "invite"}),
            state("m.room.member", {"membership": "join"}, ALICE),
            state("m.room.member", {"membership": "join"}, BOT),
        ]
    )
    assert judge(facts).rule == rules.NOT_PUBLIC


def test_two_members_in_a_public_room_is_not_a_dm():
    facts = RoomFacts(join_rule="public", members=frozenset({ALICE, BOT}))
    assert judge(facts) is None


def test_encrypted_room():
    facts = apply_state(PUBLIC, state("m.room.encryption", {"algorithm": "m.megolm.v1.aes-sha2"}))
    r = judge(facts)
    assert r is not None and r.rule == rules.ENCRYPTED_ROOM and r.whole_room


@pytest.mark.parametrize("bridge_type", ["m.bridge", "uk.half-shot.bridge"])
def test_bridged_room(bridge_type):
    facts = apply_state(
        PUBLIC, state(bridge_type, {"protocol": {"id": "discord"}}, state_key="discord/123")
    )
    r = judge(facts)
    assert r is not None and r.rule == rules.BRIDGED_ROOM and r.whole_room


@pytest.mark.parametrize(
    "sender",
    [
        "@_discord_123:example.org",
        "@discord_123:example.org",
        "@_discord_123456789012345678:example.org",
    ],
)
def test_puppet_sender(sender):
    r = judge(PUBLIC, sender=sender)
    assert r is not None and r.rule == rules.PUPPET_SENDER and r.whole_room
    assert CANARY not in r.detail


@pytest.mark.parametrize(
    "sender",
    [
        "@_discord_999:ex.org",
        "@discord_123:x",
        "@_discord_1:example.org.evil.net",
        "@_discord_1:example.org:8448",
    ],
)
def test_a_discord_like_name_on_another_server_is_an_ordinary_user(sender):
    """Anyone can register `@_discord_999` on a server of their own; one message of
    theirs purged an allowlisted room (issue 26). The bridge runs on our server."""
    assert judge(PUBLIC, sender=sender) is None
    member = apply_state(PUBLIC, state("m.room.member", {"membership": "join"}, sender))
    assert judge(member) is None


def test_bridge_servers_name_where_the_puppets_live():
    g = Gate(frozenset({ROOM}), BOT, bridge_servers=("discord.example.org",))
    assert judge(PUBLIC, sender="@_discord_1:discord.example.org", g=g).rule == rules.PUPPET_SENDER
    assert judge(PUBLIC, sender="@_discord_1:example.org", g=g) is None
    assert judge(PUBLIC, sender="@_discord_1:ex.org", g=g) is None


def test_a_bridge_registration_pattern_matches_its_own_server_only():
    g = Gate(frozenset({ROOM}), BOT, bridge_puppets=((r"@telegram_.*", "example.org"),))
    assert judge(PUBLIC, sender="@telegram_42:example.org", g=g).rule == rules.PUPPET_SENDER
    assert judge(PUBLIC, sender="@telegram_42:ex.org", g=g) is None
    assert g.with_allowlist({ROOM}).is_puppet("@telegram_42:example.org")


@pytest.mark.parametrize("sender", ["@discordfan:x", "@alice_discord_1:x", "@discord:x"])
def test_people_with_discord_in_their_name_are_not_puppets(sender):
    assert judge(PUBLIC, sender=sender) is None


@pytest.mark.parametrize("member", ["@_discord_123:example.org", "@discord_123:example.org"])
def test_puppet_member_refuses_the_whole_room(member):
    facts = apply_state(PUBLIC, state("m.room.member", {"membership": "join"}, member))
    r = judge(facts, sender=ALICE)  # a real person speaking in a room with puppets
    assert r is not None and r.rule == rules.PUPPET_SENDER and r.whole_room


def test_puppet_who_left_no_longer_counts():
    facts = facts_from_state(
        [
            state("m.room.join_rules", {"join_rule": "public"}),
            state("m.room.member", {"membership": "join"}, "@discord_1:example.org"),
            state("m.room.member", {"membership": "leave"}, "@discord_1:example.org"),
        ]
    )
    assert judge(facts) is None


def test_puppet_patterns_are_configurable():
    g = gate(patterns=(r"^@telegram_\d+:.*$",))
    assert judge(PUBLIC, sender="@telegram_42:example.org", g=g).rule == rules.PUPPET_SENDER
    assert judge(PUBLIC, sender="@discord_42:example.org", g=g) is None


def test_own_message():
    r = judge(PUBLIC, sender=BOT)
    assert r is not None and r.rule == rules.OWN_MESSAGE


def test_room_rules_win_over_message_rules():
    # The bot speaking in an encrypted room: refused as an encrypted room (whole room).
    facts = RoomFacts(join_rule="public", encrypted=True)
    assert judge(facts, sender=BOT).rule == rules.ENCRYPTED_ROOM


# -- Ingest.admit: what a refusal leaves behind ------------------------------------------


def public_state(room: str = ROOM) -> list[dict]:
    return [
        {
            "type": "m.room.create",
            "room_id": room,
            "event_id": f"$create{room}",
            "sender": ALICE,
            "state_key": "",
            "origin_server_ts": 1,
            "content": {},
        },
        {
            "type": "m.room.join_rules",
            "room_id": room,
            "event_id": f"$jr{room}",
            "sender": ALICE,
            "state_key": "",
            "origin_server_ts": 2,
            "content": {"join_rule": "public"},
        },
        {
            "type": "m.room.member",
            "room_id": room,
            "event_id": f"$ma{room}",
            "sender": ALICE,
            "state_key": ALICE,
            "origin_server_ts": 3,
            "content": {"membership": "join"},
        },
        {
            "type": "m.room.member",
            "room_id": room,
            "event_id": f"$mb{room}",
            "sender": BOB,
            "state_key": BOB,
            "origin_server_ts": 3,
            "content": {"membership": "join"},
        },
        {
            "type": "m.room.member",
            "room_id": room,
            "event_id": f"$mbot{room}",
            "sender": BOT,
            "state_key": BOT,
            "origin_server_ts": 3,
            "content": {"membership": "join"},
        },
    ]


def message(
    event_id: str,
    body: str = f"secret {CANARY} text",
    sender: str = ALICE,
    room: str = ROOM,
    ts: int = 1_700_000_000_000,
) -> dict:
    return {
        "type": "m.room.message",
        "room_id": room,
        "event_id": event_id,
        "sender": sender,
        "origin_server_ts": ts,
        "content": {"msgtype": "m.text", "body": body},
    }


def encrypted(event_id: str, room: str = ROOM) -> dict:
    return {
        "type": "m.room.encrypted",
        "room_id": room,
        "event_id": event_id,
        "sender": ALICE,
        "origin_server_ts": 5,
        "content": {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": CANARY},
    }


@pytest.fixture
def env(tmp_path):
    log = EventLog(tmp_path / "eventlog.sqlite3")
    journal = Journal(tmp_path / "journal.jsonl")
    ingest = Ingest(gate(ROOM), log, journal)
    yield ingest, tmp_path
    log.close()


def disk_bytes(tmp_path: Path) -> bytes:
    """Everything the event log wrote: the database, its WAL and journal files."""
    return b"".join(p.read_bytes() for p in sorted(tmp_path.glob("eventlog.sqlite3*")))


def journal_entries(tmp_path: Path) -> list[dict]:
    p = tmp_path / "journal.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def test_canary_is_detectable_when_stored(env):
    """The check below would see the text if it were written: an accepted message is."""
    ingest, tmp = env
    ingest.admit(public_state() + [message("$ok")])
    assert ingest.eventlog.counts() == {"pending": 1}
    assert CANARY.encode() in disk_bytes(tmp)


REFUSED_CASES = {
    rules.NOT_PUBLIC: [
        {
            "type": "m.room.join_rules",
            "room_id": ROOM,
            "event_id": "$jr",
            "sender": ALICE,
            "state_key": "",
            "origin_server_ts": 1,
            "content": {"join_rule": "invite"},
        },
        {
            "type": "m.room.member",
            "room_id": ROOM,
            "event_id": "$m1",
            "sender": ALICE,
            "state_key": ALICE,
            "origin_server_ts": 1,
            "content": {"membership": "join"},
        },
        {
            "type": "m.room.member",
            "room_id": ROOM,
            "event_id": "$m2",
            "sender": BOB,
            "state_key": BOB,
            "origin_server_ts": 1,
            "content": {"membership": "join"},
        },
        {
            "type": "m.room.member",
            "room_id": ROOM,
            "event_id": "$m3",
            "sender": BOT,
            "state_key": BOT,
            "origin_server_ts": 1,
            "content": {"membership": "join"},
        },
    ],
    rules.DIRECT_MESSAGE: public_state()[:2]
    + [
        {
            "type": "m.room.member",
            "room_id": ROOM,
            "event_id": "$m1",
            "sender": ALICE,
            "state_key": BOT,
            "origin_server_ts": 1,
            "content": {"membership": "invite", "is_direct": True},
        }
    ],
    rules.ENCRYPTED_ROOM: public_state()
    + [
        {
            "type": "m.room.encryption",
            "room_id": ROOM,
            "event_id": "$enc",
            "sender": ALICE,
            "state_key": "",
            "origin_server_ts": 4,
            "content": {"algorithm": "m.megolm.v1.aes-sha2"},
        }
    ],
    rules.BRIDGED_ROOM: public_state()
    + [
        {
            "type": "uk.half-shot.bridge",
            "room_id": ROOM,
            "event_id": "$br",
            "sender": ALICE,
            "state_key": "discord",
            "origin_server_ts": 4,
            "content": {},
        }
    ],
    rules.PUPPET_SENDER: public_state(),  # with a puppet sender below
}


@pytest.mark.parametrize("rule", sorted(REFUSED_CASES))
def test_refused_message_is_journalled_by_id_and_never_stored(env, rule):
    ingest, tmp = env
    sender = {rules.PUPPET_SENDER: "@_discord_123:example.org"}.get(rule, ALICE)
    result = ingest.admit(
        REFUSED_CASES[rule] + [message("$refused", sender=sender)], txn_key="reg:txn1"
    )
    assert result.refused == {rule: 1}
    assert result.appended == 0 and result.accepted == 0
    assert ingest.eventlog.counts() == {}
    assert ingest.eventlog.status_of("$refused") is None
    entries = [e for e in journal_entries(tmp) if e.get("kind") == "refusal"]
    assert len(entries) == 1
    assert entries[0]["rule"] == rule
    assert entries[0]["room_id"] == ROOM
    assert entries[0]["event_id"] == "$refused"
    assert CANARY not in (tmp / "journal.jsonl").read_text()
    assert CANARY.encode() not in disk_bytes(tmp)


def test_encrypted_event_is_journalled_and_its_ciphertext_stored_nowhere(env):
    ingest, tmp = env
    result = ingest.admit(public_state() + [encrypted("$enc1")])
    assert result.refused == {rules.ENCRYPTED_EVENT: 1}
    assert ingest.eventlog.counts() == {}
    [entry] = journal_entries(tmp)
    assert (entry["rule"], entry["room_id"], entry["event_id"]) == (
        rules.ENCRYPTED_EVENT,
        ROOM,
        "$enc1",
    )
    assert CANARY not in (tmp / "journal.jsonl").read_text()
    assert CANARY.encode() not in disk_bytes(tmp)


def test_refused_and_accepted_in_one_batch(env):
    ingest, tmp = env
    result = ingest.admit(
        public_state()
        + [
            message("$a", body="fine words", sender=ALICE),
            message("$b", sender=BOT),
            message("$c", body="more fine words", sender=BOB),
        ]
    )
    assert result.appended == 2 and result.refused == {}
    assert result.skipped == {rules.OWN_MESSAGE: 1}  # counted apart, not a refusal
    assert ingest.eventlog.status_of("$b") is None
    assert ingest.eventlog.status_of("$a") == ("pending", None)
    assert CANARY.encode() not in disk_bytes(tmp)


def test_own_message_is_skipped_silently(env):
    ingest, tmp = env
    result = ingest.admit(public_state() + [message("$mine", sender=BOT)])
    assert result.refused == {} and result.skipped == {rules.OWN_MESSAGE: 1}
    assert ingest.eventlog.status_of("$mine") is None
    assert [e for e in journal_entries(tmp) if e.get("kind") == "refusal"] == []
    assert CANARY.encode() not in disk_bytes(tmp)


def test_a_refusal_is_journalled_once_however_often_it_is_read(env):
    ingest, tmp = env
    ingest.admit(public_state() + [encrypted("$enc1")])
    ingest.admit([encrypted("$enc1")])  # a retried transaction
    restarted = Journal(tmp / "journal.jsonl")  # a new process reads the file
    restarted.refusal(Refusal(rules.ENCRYPTED_EVENT, ROOM, "$enc1"), source="backfill")
    restarted.refusal(Refusal(rules.ENCRYPTED_EVENT, ROOM, "$enc2"), source="backfill")
    assert [e["event_id"] for e in journal_entries(tmp)] == ["$enc1", "$enc2"]


def test_non_allowlisted_room_leaves_no_trace_at_all(env):
    ingest, tmp = env
    events = public_state(OTHER) + [
        message("$x", room=OTHER),
        encrypted("$y", room=OTHER),
        message("$z", room=OTHER, sender="@discord_1:x"),
    ]
    result = ingest.admit(events, txn_key="reg:t")
    assert result.appended == 0 and result.rooms == set()
    assert ingest.eventlog.counts() == {}
    assert not (tmp / "journal.jsonl").exists() or (tmp / "journal.jsonl").read_text() == ""
    assert OTHER not in ingest.facts  # its state was not even read
    assert CANARY.encode() not in disk_bytes(tmp)


def test_non_allowlisted_room_is_not_fetched(env):
    ingest, _ = env
    assert ingest.unknown_rooms([message("$x", room=OTHER), message("$y")]) == {ROOM}


def test_bridge_state_after_messages_refuses_later_messages(env):
    ingest, tmp = env
    ingest.admit(public_state() + [message("$before", body="before the bridge")])
    ingest.admit(
        [
            {
                "type": "m.bridge",
                "room_id": ROOM,
                "event_id": "$br",
                "sender": ALICE,
                "state_key": "x",
                "origin_server_ts": 9,
                "content": {},
            },
            message("$after"),
        ]
    )
    assert ingest.eventlog.status_of("$after") is None
    # The message from before the bridge is purged with its room (see test_purge.py).
    assert ingest.eventlog.status_of("$before") == ("purged", None)
    assert sorted((e["kind"], e["rule"], e.get("event_id")) for e in journal_entries(tmp)) == [
        ("purge", rules.BRIDGED_ROOM, "$br"),
        ("refusal", rules.BRIDGED_ROOM, "$after"),
    ]
