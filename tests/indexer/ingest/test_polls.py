"""Polls (issue 46): the stable `m.poll.start` and the unstable MSC3381 shape clients still
send are indexed as their sender's message, cited by the poll's event id; votes and
results are never stored; an edit or redaction of a poll behaves as for a message; a poll
of 1,000 answers is bounded, one with none or a malformed shape is skipped, journalled."""

from __future__ import annotations

import json

from matrix_sources.indexer.ingest.events import EditEvent, MessageEvent, Skipped, parse_event
from matrix_sources.indexer.ingest.polls import MAX_ANSWERS, POLL_ANSWERS_BOUNDED, POLL_MALFORMED
from tests.indexer.store.test_history import (
    ALICE,
    BOB,
    ROOM,
    T0,
    all_text,
    db_bytes,
    redact,
    world,  # noqa: F401  (world: the fixture)
)


def stable(
    question="Which database should the bridge use?", answers=("PostgreSQL", "SQLite"), n=1, **over
):
    ev = {
        "type": "m.poll.start",
        "room_id": ROOM,
        "sender": ALICE,
        "event_id": f"$m{n}",
        "origin_server_ts": T0 + n * 1000,
        "content": {
            "m.poll": {
                "kind": "m.disclosed",
                "max_selections": 1,
                "question": {"m.text": [{"body": question}]},
                "answers": [
                    {
                        "m.id": f"a{i}",
                        "m.text": [{"mimetype": "text/html", "body": f"<b>{a}</b>"}, {"body": a}],
                    }
                    for i, a in enumerate(answers)
                ],
            },
            "m.text": [{"body": "fallback text"}],
        },
    }
    ev.update(over)
    return ev


def unstable(question="When is the next release?", answers=("Friday", "Monday"), n=2):
    return {
        "type": "org.matrix.msc3381.poll.start",
        "room_id": ROOM,
        "sender": BOB,
        "event_id": f"$m{n}",
        "origin_server_ts": T0 + n * 1000,
        "content": {
            "org.matrix.msc3381.poll.start": {
                "kind": "org.matrix.msc3381.poll.disclosed",
                "max_selections": 1,
                "question": {
                    "org.matrix.msc1767.text": question,
                    "body": question,
                    "msgtype": "m.text",
                },
                "answers": [
                    {"id": f"a{i}", "org.matrix.msc1767.text": a} for i, a in enumerate(answers)
                ],
            },
            "org.matrix.msc1767.text": "fallback",
            "body": "fallback",
        },
    }


def vote(kind: str, n: int, key: str) -> dict:
    return {
        "type": kind,
        "room_id": ROOM,
        "sender": BOB,
        "event_id": f"$v{n}",
        "origin_server_ts": T0 + n * 1000,
        "content": {
            "m.relates_to": {"rel_type": "m.reference", "event_id": "$m1"},
            key: {"answers": ["a0"]},
            "m.text": [{"body": "The poll has ended. Top answer: votecanary-3x"}],
        },
    }


def test_both_shapes_read_as_the_question_then_numbered_answers():
    ev = parse_event(stable())
    assert isinstance(ev, MessageEvent) and ev.message.event_id == "$m1"
    assert ev.message.body == "Which database should the bridge use?\n1. PostgreSQL\n2. SQLite"
    assert ev.message.sender == ALICE and not ev.is_command
    ev = parse_event(unstable())
    assert isinstance(ev, MessageEvent)
    assert ev.message.body == "When is the next release?\n1. Friday\n2. Monday"
    # The newer extensible-events blocks under the unstable name are read too.
    blocks = unstable()
    blocks["content"]["org.matrix.msc3381.poll.start"]["question"] = {
        "org.matrix.msc1767.text": [{"body": "Blocks?", "mimetype": "text/plain"}]
    }
    assert parse_event(blocks).message.body.startswith("Blocks?\n1. Friday")


def test_votes_and_results_are_skipped():
    for kind, key in [
        ("m.poll.response", "m.selections"),
        ("org.matrix.msc3381.poll.response", "org.matrix.msc3381.poll.response"),
        ("m.poll.end", "m.poll.results"),
        ("org.matrix.msc3381.poll.end", "org.matrix.msc3381.poll.end"),
    ]:
        assert parse_event(vote(kind, 5, key)) == Skipped("poll_vote", ROOM, "$v5")


def test_a_thousand_answers_are_bounded_and_none_or_odd_shapes_skipped():
    many = parse_event(stable(answers=[f"option {i}" for i in range(1000)]))
    assert isinstance(many, MessageEvent) and many.bounded == 1000 - MAX_ANSWERS
    assert many.message.body.count("\n") == MAX_ANSWERS and "option 20" not in many.message.body
    odd = [
        stable(answers=()),
        stable(question=""),
        stable(content={"m.poll": "not an object"}),
        stable(
            content={"m.poll": {"question": {"m.text": "a string, not blocks?"}, "answers": "x"}}
        ),
        stable(content={"m.poll": {"question": {"m.text": [{"body": 5}]}, "answers": [{}]}}),
        stable(
            content={
                "m.poll": {"question": {"m.text": [{"body": "q"}]}, "answers": [{"m.text": [7]}]}
            }
        ),
        stable(content={}),
    ]
    for raw in odd:
        assert parse_event(raw) == Skipped(POLL_MALFORMED, ROOM, "$m1"), raw["content"]
    assert parse_event(stable(origin_server_ts="soon")) == Skipped("bad_timestamp", ROOM, "$m1")


def test_an_edit_of_a_poll_is_an_edit():
    edit = stable(n=3, question="Which database, really?", answers=("PostgreSQL",))
    new = edit["content"]
    edit["content"] = {
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": "$m1"},
        **new,
    }
    ev = parse_event(edit)
    assert isinstance(ev, EditEvent) and ev.target == "$m1"
    assert ev.body == "Which database, really?\n1. PostgreSQL"


def test_polls_are_indexed_cited_edited_redacted_and_votes_never_stored(world):
    ingest, pipeline, store, log, tmp = world
    result = ingest.admit([stable(), unstable(), vote("m.poll.response", 4, "m.selections")])
    assert result.appended == 2 and result.skipped["poll_vote"] == 1
    pipeline.process_all()
    assert log.status_of("$m1")[0] == "indexed" and log.status_of("$m2")[0] == "indexed"
    [w] = [w for w in store.get() if "$m1" in w.event_ids]
    assert "Which database should the bridge use?" in all_text(store)

    edit = stable(n=3, question="Which database, really?", answers=("PostgreSQL",))
    edit["content"] = {
        "m.new_content": edit["content"],
        "m.relates_to": {"rel_type": "m.replace", "event_id": "$m1"},
    }
    assert ingest.admit([edit]).history.edited == {"$m1"}
    pipeline.process_all()
    assert "Which database, really?" in all_text(store)

    assert ingest.admit([redact(6, 2)]).history.redacted == {"$m2"}
    pipeline.process_all()
    assert "next release" not in all_text(store)
    log.truncate_wal()
    assert b"votecanary" not in db_bytes(tmp, log)


def test_bounded_and_malformed_polls_are_journalled_by_id(world):
    ingest, _, _, _, tmp = world
    ingest.admit([stable(answers=[f"opt {i}" for i in range(1000)]), stable(n=7, answers=())])
    lines = [json.loads(x) for x in (tmp / "journal.jsonl").read_text().splitlines()]
    bounded = [e for e in lines if e.get("rule") == POLL_ANSWERS_BOUNDED]
    assert bounded == [
        {**bounded[0], "event_id": "$m1", "left_out": 980, "room_id": ROOM, "kind": "poll"}
    ]
    skipped = [e for e in lines if e.get("rule") == POLL_MALFORMED]
    assert [(e["kind"], e["event_id"]) for e in skipped] == [("skip", "$m7")]
    assert "opt 1" not in (tmp / "journal.jsonl").read_text()
