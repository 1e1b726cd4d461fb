"""Forgetting a user (issue 21): their text and every vector made from it leave every
file of the data dir by the redaction path; their future messages are refused until an
undo, which re-admits only what they send afterwards."""

from __future__ import annotations

import json

from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.ingest import gate as rules
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.forget import Forgetting
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from tests.indexer.store.test_history import (
    ALICE,
    BOB,
    T0,
    all_text,
    chroma_bytes,
    db_bytes,
    edit,
    msg,
    world,  # noqa: F401  (world: the fixture)
)
from tests.storekit import stored_vectors
from tests.vectorscan import files_holding


def test_forget_removes_text_and_vectors_from_every_file(world):
    ingest, pipeline, store, log, tmp = world
    clock = [T0 / 1000 + 100]
    forgetting = Forgetting(ingest, clock=Clock(wall=lambda: clock[0]))
    ingest.admit(
        [
            msg(1, "bob asks how to configure the proxy", BOB),
            msg(2, "alice secret canary fz81q answers", ALICE),
            edit(3, 2, "alice secret canary fz81q answers, edited", ALICE),
            msg(4, "bob thanks her for the proxy tip", BOB),
        ]
    )
    pipeline.process_all()
    before = stored_vectors(store, [w.window_id for w in store.get()])
    assert "fz81q" in all_text(store) and before

    report = forgetting.forget_user(ALICE, source="cli")
    assert report.messages == 1 and report.windows == 1 and report.event_ids == ("$m2",)
    pipeline.process_all()
    assert pipeline.run_compaction() is True
    assert "fz81q" not in all_text(store) and "proxy tip" in all_text(store)
    assert b"fz81q" not in db_bytes(tmp, log) + chroma_bytes(tmp)
    for v in before.values():
        assert files_holding(tmp, v, n=len(v)) == {}  # every vector made from her words
    entry = [json.loads(x) for x in (tmp / "journal.jsonl").read_text().splitlines()][-1]
    assert entry["kind"] == "forget" and entry["rule"] == rules.USER_FORGOTTEN
    assert entry["user_id"] == ALICE and entry["messages"] == 1
    assert "fz81q" not in (tmp / "journal.jsonl").read_text()


def test_a_forgotten_users_messages_are_refused_until_undo(world):
    ingest, pipeline, store, log, tmp = world
    clock = [T0 / 1000 + 100]
    forgetting = Forgetting(ingest, clock=Clock(wall=lambda: clock[0]))
    forgetting.forget_user(ALICE)
    assert forgetting.forgotten() == [ALICE]
    result = ingest.admit([{**msg(200, "after the forget"), "origin_server_ts": T0 + 200_000}])
    assert result.refused == {rules.USER_FORGOTTEN: 1} and result.appended == 0
    assert ingest.admit([msg(201, "bob is fine", BOB)]).appended == 1
    # A new process reads the list from the event log.
    again = Ingest(Gate(frozenset(), "@bot:example.org"), log, Journal(tmp / "j2.jsonl"))
    assert again.is_forgotten(ALICE, T0 + 300_000)

    clock[0] += 100
    assert forgetting.unforget_user(ALICE) and forgetting.forgotten() == []
    old = ingest.admit([msg(50, "an old message backfilled")])  # sent before the undo
    assert old.refused == {rules.USER_FORGOTTEN: 1}
    new = ingest.admit([{**msg(400, "hello again"), "origin_server_ts": T0 + 400_000}])
    assert new.appended == 1
    assert not forgetting.unforget_user(BOB)  # never forgotten


def test_forget_survives_without_a_store(tmp_path, eventlog_db):
    """The event log path alone (the CLI with the service stopped opens the same)."""
    log = EventLog(eventlog_db)
    ingest = Ingest(
        Gate(frozenset({"!room:example.org"}), "@bot:example.org"),
        log,
        Journal(tmp_path / "journal.jsonl"),
    )
    ingest.admit(
        [
            {
                "type": "m.room.join_rules",
                "room_id": "!room:example.org",
                "sender": ALICE,
                "state_key": "",
                "event_id": "$jr",
                "origin_server_ts": T0,
                "content": {"join_rule": "public"},
            },
            msg(1, "zz-canary-31 said once"),
        ]
    )
    assert Forgetting(ingest).forget_user(ALICE).messages == 1
    assert log.counts() == {"redacted": 1}
    assert b"zz-canary-31" not in db_bytes(tmp_path, log)
    log.close()


def test_a_running_services_spool_applies_a_forget_request_and_answers(world):
    """The CLI's way in while the service holds the lock: an atomic request file,
    served where the service polls the allowlist; the answer carries counts, no text."""
    from matrix_sources.indexer.ingest.forget import apply_request
    from matrix_sources.indexer.ingest.spool import serve, submit, wait_answer

    ingest, pipeline, store, log, tmp = world
    ingest.admit([msg(1, "alice said sp00l-canary once"), msg(2, "bob stays", BOB)])
    pipeline.process_all()
    forgetting = Forgetting(ingest)
    answer_path = submit(tmp, {"op": "forget", "user_id": ALICE})
    assert wait_answer(answer_path, timeout=0, clock=Clock(sleep_blocking=lambda s: None)) is None
    [served] = serve(tmp, lambda req: apply_request(forgetting, req))
    answer = wait_answer(answer_path, timeout=0, clock=Clock(sleep_blocking=lambda s: None))
    assert answer == served and answer["messages"] == 1 and answer["windows"] == 1
    assert list((tmp / "spool").iterdir()) == []  # request and answer both gone
    pipeline.process_all()
    pipeline.run_compaction()
    assert "sp00l-canary" not in all_text(store) and "bob stays" in all_text(store)
    assert b"sp00l-canary" not in db_bytes(tmp, log) + chroma_bytes(tmp)
    assert apply_request(forgetting, {"op": "list"}) == {"op": "list", "users": [ALICE]}
    assert "error" in apply_request(forgetting, {"op": "forget", "user_id": "alice"})


def test_a_forget_run_again_reports_the_whole_forget(world):
    """Issue 44: a request served again after a crash (the service died between the
    forget and its answer) answers what the whole forget removed, not 0; a forget after
    an undo counts anew."""
    from matrix_sources.indexer.ingest.forget import apply_request

    ingest, _, _, log, _ = world
    forgetting = Forgetting(ingest, clock=Clock(wall=lambda: T0 / 1000 + 100))
    ingest.admit([msg(1, "alice one", ALICE), msg(2, "alice two", ALICE)])
    request = {"op": "forget", "user_id": ALICE}
    assert apply_request(forgetting, request)["messages"] == 2
    assert apply_request(forgetting, request)["messages"] == 2  # served again
    assert forgetting.unforget_user(ALICE)
    ingest.admit([{**msg(3, "alice three", ALICE), "origin_server_ts": T0 + 200_000}])
    assert apply_request(forgetting, request)["messages"] == 1
