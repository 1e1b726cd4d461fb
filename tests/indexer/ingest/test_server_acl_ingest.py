"""Server ACLs at ingest (issue 46): a denied server's users' messages are never indexed,
whether pushed, backfilled, imported or stored before the ACL (withdrawn then, text and
vectors, by the redaction path); a name that merely ends the same is untouched; a
malformed ACL is journalled, never a stall; a relaxed ACL restores nothing withdrawn."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from matrix_sources.indexer.ingest.gate import SERVER_DENIED
from matrix_sources.indexer.ingest.roomfacts import RoomFacts
from matrix_sources.indexer.ingest.serveracl import parse_acl
from tests.indexer.store.test_history import (
    ALICE,
    ROOM,
    T0,
    all_text,
    chroma_bytes,
    db_bytes,
    msg,
    world,  # noqa: F401  (world: the fixture)
)
from tests.storekit import stored_vectors
from tests.strength import examples
from tests.vectorscan import files_holding

SPAM = "@spam:evil.example"
SPAM_PORT = "@wave:evil.example:8448"
FRIEND = "@friend:notevil.example"


def acl(n: int, deny, allow=("*",), **more) -> dict:
    return {
        "type": "m.room.server_acl",
        "room_id": ROOM,
        "sender": ALICE,
        "state_key": "",
        "event_id": f"$acl{n}",
        "origin_server_ts": T0 + n * 1000,
        "content": {"allow": list(allow), "deny": list(deny), **more},
    }


def journal(tmp) -> list[dict]:
    return [json.loads(x) for x in (tmp / "journal.jsonl").read_text().splitlines()]


def test_an_acl_withdraws_what_the_server_said_and_refuses_what_comes_later(world):
    ingest, pipeline, store, log, tmp = world
    ingest.admit(
        [
            msg(1, "how do I rotate the signing key?"),
            msg(2, "buy cheap pills spamcanary-a1 now", SPAM),
            msg(3, "more spamcanary-b2 from the port", SPAM_PORT),
            msg(4, "friendly answer from notevil stays", FRIEND),
        ]
    )
    pipeline.process_all()
    spammy = [w.window_id for w in store.get() if {"$m2", "$m3"} & set(w.event_ids)]
    assert spammy
    before = stored_vectors(store, spammy)
    assert "spamcanary-a1" in all_text(store)

    result = ingest.admit([acl(10, ["evil.example"])])
    assert result.history.redacted == {"$m2", "$m3"}  # the bot edits answers quoting them
    pipeline.process_all()
    assert pipeline.run_compaction() is True
    text = all_text(store)
    assert "spamcanary" not in text
    assert "rotate the signing key" in text and "friendly answer" in text
    log.truncate_wal()
    assert b"spamcanary" not in db_bytes(tmp, log) + chroma_bytes(tmp)
    for v in before.values():
        assert files_holding(tmp, v, n=len(v)) == {}
    [line] = [e for e in journal(tmp) if e["kind"] == "server_acl"]
    assert line["rule"] == SERVER_DENIED and line["messages"] == 2
    assert line["event_id"] == "$acl10"

    # Read again (backfill, an import, Synapse's retry): the withdrawn stay withdrawn,
    # a new message from the server is refused, its friend's admitted.
    again = ingest.admit(
        [
            msg(2, "buy cheap pills spamcanary-a1 now", SPAM),
            msg(5, "spamcanary-c3 the wave goes on", SPAM),
            msg(6, "notevil is still welcome", FRIEND),
        ],
        source="backfill",
    )
    assert again.refused[SERVER_DENIED] == 2 and again.appended == 1
    assert log.status_of("$m2")[0] == "redacted" and log.status_of("$m5") is None
    refusals = [
        e for e in journal(tmp) if e.get("rule") == SERVER_DENIED and e["kind"] == "refusal"
    ]
    assert {e["event_id"] for e in refusals} == {"$m2", "$m5"}
    assert all(e["detail"] == "server evil.example" for e in refusals)
    assert "spamcanary" not in (tmp / "journal.jsonl").read_text()


def test_relaxing_the_acl_admits_new_messages_but_restores_nothing(world):
    ingest, pipeline, store, log, _ = world
    ingest.admit([msg(1, "spamcanary-d4 first wave", SPAM)])
    ingest.admit([acl(2, ["evil.example"])])
    ingest.admit([acl(3, [])])  # the server cleaned up: allowed again
    ingest.admit(
        [msg(1, "spamcanary-d4 first wave", SPAM), msg(4, "evil.example is fine now", SPAM)]
    )
    pipeline.process_all()
    assert log.status_of("$m1")[0] == "redacted"
    assert "fine now" in all_text(store) and "spamcanary" not in all_text(store)


def test_messages_before_the_acl_in_the_same_batch_are_dropped(world):
    """An import holds the spam and, later in the same file, the ACL."""
    ingest, pipeline, store, log, _ = world
    result = ingest.admit(
        [
            msg(1, "spamcanary-e5 before the acl", SPAM),
            msg(2, "a real question", ALICE),
            acl(3, ["*.example"], allow=["*"]),
            msg(4, "spamcanary-f6 after the acl", SPAM),
        ],
        source="import",
    )
    assert result.refused[SERVER_DENIED] == 2 and result.appended == 1
    assert log.status_of("$m1") is None and log.status_of("$m4") is None


def test_edits_from_a_denied_server_are_not_kept(world):
    ingest, _, _, log, tmp = world
    ingest.admit([acl(1, ["evil.example"])])
    edit = {
        **msg(9, "* spamcanary-g7"),
        "sender": SPAM,
        "content": {
            "msgtype": "m.text",
            "body": "* spamcanary-g7",
            "m.new_content": {"msgtype": "m.text", "body": "spamcanary-g7"},
            "m.relates_to": {"rel_type": "m.replace", "event_id": "$later"},
        },
    }
    ingest.admit([edit])
    log.truncate_wal()
    assert b"spamcanary-g7" not in db_bytes(tmp, log)


def test_an_acl_learnt_at_start_withdraws_what_was_stored_before(world):
    """The ACL was sent while the service was down: its state, fetched at start, says so."""
    ingest, pipeline, store, log, _ = world
    ingest.admit([msg(1, "spamcanary-h8 while we slept", SPAM), msg(2, "hello", FRIEND)])
    pipeline.process_all()
    facts = ingest.facts[ROOM]
    from dataclasses import replace

    applied = ingest.learn(
        ROOM, replace(facts, server_acl=parse_acl({"allow": ["*"], "deny": ["evil.example"]}))
    )
    assert applied.redacted == {"$m1"}
    pipeline.process_all()
    assert "spamcanary" not in all_text(store) and "hello" in all_text(store)
    # Learnt again, unchanged: nothing more to do.
    assert ingest.learn(ROOM, ingest.facts[ROOM]).redacted == set()


def test_a_malformed_acl_is_journalled_and_read_as_synapse_reads_it(world):
    ingest, pipeline, store, log, tmp = world
    ingest.admit([msg(1, "spamcanary-i9", SPAM), msg(2, "from a port", FRIEND)])
    result = ingest.admit(
        [
            {
                **acl(3, []),
                "content": {"allow": ["*"], "deny": ["evil.example", 7, "notevil.example:8448"]},
            },
            msg(4, "still here", ALICE),
        ]
    )
    assert result.appended == 1  # no stall: the batch went on
    assert log.status_of("$m1")[0] == "redacted"
    assert log.status_of("$m2")[0] != "redacted"  # the port pattern matches nothing
    [line] = [e for e in journal(tmp) if e["kind"] == "server_acl" and "detail" in e]
    assert "deny[1] is not a string" in line["detail"]
    assert "deny[2] names a port" in line["detail"]
    assert line["room_id"] == ROOM and line["event_id"] == "$acl3"


def test_an_acl_without_allow_denies_every_server_as_the_spec_says(world):
    ingest, _, _, log, tmp = world
    ingest.admit([msg(1, "anyone at all", ALICE)])
    ingest.admit([{**acl(2, []), "content": {"deny": ["evil.example"]}}])
    assert log.status_of("$m1")[0] == "purged"  # the bot's own server denied too: all
    assert ingest.gate.judge_room(ROOM, ingest.facts[ROOM]).rule == SERVER_DENIED
    assert any("allow is empty" in e.get("detail", "") for e in journal(tmp))


def test_the_facts_fold_only_the_rooms_own_acl():
    from matrix_sources.indexer.ingest.events import StateEvent
    from matrix_sources.indexer.ingest.roomfacts import apply_state

    ev = StateEvent(ROOM, "$a", ALICE, "m.room.server_acl", "not-empty", {"allow": []})
    assert apply_state(RoomFacts(), ev).server_acl is None  # the spec's state key is ""


def test_a_denied_servers_questions_leave_the_moderators_report(world):
    from matrix_sources.indexer.store.eventlog.feedback import Asked

    ingest, _, _, log, tmp = world
    for n, asker in ((1, SPAM), (2, ALICE)):
        log.feedback.record(
            Asked(f"$q{n}", ROOM, asker, T0 + n, f"$a{n}", 0, f"questioncanary-{n} buy pills")
        )
    ingest.admit([acl(3, ["evil.example"])])
    assert [u.event_id for u in log.feedback.unanswered(ROOM, 0)] == ["$q2"]
    log.truncate_wal()
    assert b"questioncanary-1" not in db_bytes(tmp, log)


SERVERS = ("evil.example", "notevil.example", "example.org", "spam.evil.example")


@settings(max_examples=examples(40), deadline=None, database=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("msg"), st.sampled_from(SERVERS)),
            st.tuples(
                st.just("acl"),
                st.lists(
                    st.sampled_from(("evil.example", "*.example", "*evil*", "x?.org")), max_size=2
                ),
            ),
        ),
        max_size=14,
    ),
    batch=st.integers(1, 4),
)
def test_no_text_of_a_server_the_final_acl_denies_stays_stored(tmp_path_factory, steps, batch):
    """Over any interleaving of messages and ACL changes, cut into batches of any size:
    once it is all admitted, no message of a server the room's ACL denies has text."""
    from matrix_sources.indexer.ingest.admit import Ingest
    from matrix_sources.indexer.ingest.gate import Gate
    from matrix_sources.indexer.store.eventlog.log import EventLog
    from matrix_sources.indexer.store.journal import Journal
    from tests.indexer.store.test_history import join_rules

    tmp = tmp_path_factory.mktemp("acl")
    log = EventLog(tmp / "eventlog.sqlite3")
    ingest = Ingest(Gate(frozenset({ROOM}), "@bot:example.org"), log, Journal(tmp / "j.jsonl"))
    events = [join_rules()]
    for n, (kind, arg) in enumerate(steps, start=1):
        events.append(msg(n, f"said {n}", f"@u{n}:{arg}") if kind == "msg" else acl(n, arg))
    for i in range(0, len(events), batch):
        ingest.admit(events[i : i + batch])
    final = ingest.facts[ROOM].server_acl
    with log.transaction(immediate=False) as cur:
        rows = cur.execute("SELECT sender FROM events WHERE body IS NOT NULL").fetchall()
    log.close()
    assert final is None or all(final.allows_user(s) for (s,) in rows)


def test_an_acl_denying_the_bots_own_server_withdraws_the_whole_room(world):
    """A remote room's moderators shut the bot's homeserver out: its server still reads
    the room (the ACL binds what the others accept from it), so the room is handled as
    one the bot was banned from: everything leaves, later messages are refused. Lifting
    the ACL admits the room again."""
    ingest, pipeline, store, log, tmp = world
    ingest.admit([msg(1, "the shutcanary-c3 mirror is up"), msg(2, "friendly", FRIEND)])
    pipeline.process_all()
    assert "shutcanary-c3" in all_text(store)

    result = ingest.admit([acl(10, ["example.org"]), msg(11, "shutcanary-c3 again")])
    assert result.refused[SERVER_DENIED] == 1
    pipeline.process_all()
    pipeline.run_compaction()
    log.truncate_wal()
    assert "shutcanary" not in all_text(store) and "friendly" not in all_text(store)
    assert b"shutcanary" not in db_bytes(tmp, log) + chroma_bytes(tmp)
    [purge] = [e for e in journal(tmp) if e["kind"] == "purge"]
    assert purge["rule"] == SERVER_DENIED and "bot's homeserver example.org" in purge["detail"]

    ingest.admit([acl(20, ["evil.example"]), msg(21, "the room is back", FRIEND)])
    pipeline.process_all()
    assert "the room is back" in all_text(store)
