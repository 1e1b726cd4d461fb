"""The event log's feedback part (eventlog/feedback.py), on SQLite and PostgreSQL: what the
moderators' report counts, and that a question's text leaves every file of the event
log with a redaction, `forget`, the room's purge, retention and moderation.keep_days."""

from __future__ import annotations

import pytest

from matrix_sources.indexer.records import EventID, RoomID, UserID
from matrix_sources.indexer.store.eventlog.feedback import (
    Asked,
    Reaction,
    RoomFigures,
    Unanswered,
    Vote,
)
from matrix_sources.indexer.store.eventlog.history import Applied, Redaction
from matrix_sources.indexer.store.eventlog.log import EventLog
from tests.indexer.store.test_history import db_bytes

ROOM, OTHER = RoomID("!room:example.org"), RoomID("!other:example.org")
ALICE, BOB, CAROL = (
    UserID("@alice:example.org"),
    UserID("@bob:example.org"),
    UserID("@carol:example.org"),
)
T0 = 1_700_000_000_000
CANARY = "where is the kestrel-feedback-5e1d mirror"


@pytest.fixture
def log(eventlog_db):
    log = EventLog(eventlog_db)
    yield log
    log.close()


def asked(
    n: int,
    hits: int,
    asker: UserID = ALICE,
    room: RoomID = ROOM,
    at: int = T0,
    text: str = "how do I rotate the key",
) -> Asked:
    return Asked(EventID(f"$q{n}"), room, asker, at + n, EventID(f"$a{n}"), hits, text)


def vote(
    n: int, answer: int, sender: UserID, v: Vote, room: RoomID = ROOM, at: int = T0
) -> Reaction:
    return Reaction(EventID(f"$v{n}"), room, sender, EventID(f"$a{answer}"), v, at + n)


def test_counts_and_only_the_unanswered_keep_their_text(log):
    assert log.feedback.record(asked(1, hits=3, text="answered question text"))
    assert log.feedback.record(asked(2, hits=0, text=CANARY))
    assert log.feedback.record(asked(3, hits=0, text="another", room=OTHER))
    assert not log.feedback.record(asked(1, hits=3))  # Synapse sent it again: once
    assert log.feedback.figures(ROOM, T0) == RoomFigures(
        ROOM, asked=2, answered=1, nothing_matched=1
    )
    assert log.feedback.unanswered(ROOM, T0) == [Unanswered(EventID("$q2"), ROOM, CANARY, T0 + 2)]
    assert log.feedback.rooms(T0) == [OTHER, ROOM]
    assert log.feedback.figures(ROOM, T0 + 3) == RoomFigures(ROOM)  # older than the period
    assert log.feedback.unanswered(ROOM, T0 + 3) == []
    with log.transaction(immediate=False) as cur:
        texts = [
            r[0]
            for r in cur.execute("SELECT text FROM feedback_questions ORDER BY command_event_id")
        ]
    assert texts == [None, CANARY, "another"]  # an answered question: counts only


def test_votes_count_once_per_person_and_answer_and_solved_is_the_askers(log):
    log.feedback.record(asked(1, hits=2, asker=ALICE))
    log.feedback.record(asked(2, hits=1, asker=BOB))
    counted = log.feedback.react(
        [
            vote(1, 1, BOB, Vote.UP),
            vote(2, 1, BOB, Vote.UP),  # 👍 and 👍🏽: one vote
            vote(3, 1, CAROL, Vote.UP),
            vote(4, 2, CAROL, Vote.DOWN),
            vote(5, 1, ALICE, Vote.SOLVED),  # the asker
            vote(6, 2, ALICE, Vote.SOLVED),  # not the asker of answer 2: ignored
            vote(7, 9, BOB, Vote.UP),  # no answer of the bot: ignored
            vote(8, 1, BOB, Vote.DOWN, room=OTHER),  # the answer is not in that room
        ]
    )
    assert [r.event_id for r in counted] == ["$v1", "$v2", "$v3", "$v4", "$v5"]
    assert log.feedback.react([vote(1, 1, BOB, Vote.UP)]) == []  # seen before
    assert log.feedback.figures(ROOM, T0) == RoomFigures(
        ROOM, asked=2, answered=2, up=2, down=1, solved=1
    )
    assert log.feedback.figures(OTHER, T0) == RoomFigures(OTHER)


def test_a_redaction_withdraws_a_vote_and_a_question(log, tmp_path):
    log.feedback.record(asked(1, hits=0, text=CANARY))
    log.feedback.record(asked(2, hits=1))
    log.feedback.react(
        [vote(1, 2, BOB, Vote.UP), vote(2, 2, CAROL, Vote.DOWN), vote(3, 1, CAROL, Vote.DOWN)]
    )  # on the answer to $q1: goes with it
    assert log.feedback.withdraw([EventID("$v1"), EventID("$q1"), EventID("$nothing")]) == 3
    assert log.feedback.figures(ROOM, T0) == RoomFigures(ROOM, asked=1, answered=1, down=1)
    assert log.feedback.unanswered(ROOM, T0) == []
    assert CANARY.encode() not in db_bytes(tmp_path, log)


def test_a_redaction_before_its_target_keeps_it_out(log):
    with log.transaction() as cur:  # the history's record of redactions (history.py)
        log.history.apply(
            cur,
            [
                Redaction(EventID("$q1"), ROOM, T0, EventID("$r1")),
                Redaction(EventID("$v1"), ROOM, T0, EventID("$r2")),
            ],
            Applied(),
            T0,
        )
    assert not log.feedback.record(asked(1, hits=0, text=CANARY))
    log.feedback.record(asked(2, hits=1))
    assert log.feedback.react([vote(1, 2, BOB, Vote.UP)]) == []
    assert log.feedback.figures(ROOM, T0) == RoomFigures(ROOM, asked=1, answered=1)


def test_forget_takes_the_persons_questions_and_votes(log, tmp_path):
    log.feedback.record(asked(1, hits=0, asker=BOB, text=CANARY))
    log.feedback.record(asked(2, hits=1, asker=ALICE))
    log.feedback.react([vote(1, 2, BOB, Vote.UP), vote(2, 2, CAROL, Vote.UP)])
    log.history.forget_sender(BOB, T0, "command")
    assert log.feedback.figures(ROOM, T0) == RoomFigures(ROOM, asked=1, answered=1, up=1)
    assert log.feedback.unanswered(ROOM, T0) == []
    assert CANARY.encode() not in db_bytes(tmp_path, log)


def test_a_purged_room_and_retention_take_its_questions(log, tmp_path):
    log.feedback.record(asked(1, hits=0, text=CANARY))
    log.feedback.record(asked(2, hits=0, room=OTHER, text="kestrel-retained-77ab"))
    log.feedback.record(asked(3, hits=0, room=OTHER, at=T0 + 60_000, text="later one"))
    log.feedback.react([vote(1, 1, BOB, Vote.UP)])
    log.purge_room(ROOM)
    assert log.feedback.figures(ROOM, T0) == RoomFigures(ROOM)
    log.history.expire_before(OTHER, T0 + 30_000)
    assert [u.text for u in log.feedback.unanswered(OTHER, T0)] == ["later one"]
    kept = db_bytes(tmp_path, log)
    assert CANARY.encode() not in kept and b"kestrel-retained-77ab" not in kept


def test_keep_days_expires_every_row_and_its_text(log, tmp_path):
    log.feedback.record(asked(1, hits=0, text=CANARY))
    log.feedback.record(asked(2, hits=1, at=T0 + 10_000))
    log.feedback.react([vote(1, 2, BOB, Vote.UP), vote(2, 2, CAROL, Vote.UP, at=T0 + 20_000)])
    assert log.feedback.expire(T0 + 5_000) == 2  # the question asked before, one vote
    assert log.feedback.figures(ROOM, 0) == RoomFigures(ROOM, asked=1, answered=1, up=1)
    assert CANARY.encode() not in db_bytes(tmp_path, log)
