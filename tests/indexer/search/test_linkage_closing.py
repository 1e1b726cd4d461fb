"""When the asker's thanks or new question closes her question to messages that only
name her (linkage.py, issue 51): once the conversation paused, not at once. Pure
linkage over hand-made timelines: no model, no store."""

from __future__ import annotations

import pytest

from matrix_sources.indexer.records import EventID, Message, RoomID, UserID
from matrix_sources.indexer.search import linkage
from matrix_sources.indexer.search.linkage import Horizon, responses

ROOM = RoomID("!chat:example.org")
ALICE, BOB, CAROL, DAVE = (UserID(f"@{n}:example.org") for n in ("alice", "bob", "carol", "dave"))
T0 = 1_700_000_000_000


def m(eid, who, minute, body, reply_to=None, mentions=()):
    return Message(
        EventID(eid),
        ROOM,
        who,
        T0 + int(minute * 60_000),
        body,
        EventID(reply_to) if reply_to else None,
        tuple(mentions),
    )


def linked(question, later):
    return [link.answer.event_id for link in responses(question, later, Horizon())]


QUESTION = m("$q", ALICE, 0, "how do I get my usb webcam to show a picture?")


@pytest.mark.parametrize(
    "closer",
    [
        "thx",  # a thanks for the first answer
        "cheese is a software?",  # a question of hers on what she was told
    ],
)
def test_answers_after_a_thanks_or_a_new_question_link_while_the_conversation_goes_on(closer):
    """bob answers, alice thanks him (or asks about his answer), carol adds another
    answer naming her two minutes on: the conversation goes on, carol's line answers
    the question. With closing at once (PAUSE_MINUTES None) it did not."""
    later = [
        m("$a", BOB, 1, "alice: try cheese, it shows the picture"),
        m("$c", ALICE, 2, closer),
        m("$b", CAROL, 4, "alice: lsusb gives its id, then look for the gspca driver"),
    ]
    assert linked(QUESTION, later) == ["$a", "$b"]
    linkage.PAUSE_MINUTES, saved = None, linkage.PAUSE_MINUTES
    try:
        assert linked(QUESTION, later) == ["$a"]
    finally:
        linkage.PAUSE_MINUTES = saved


def test_a_message_naming_her_after_the_pause_answers_nothing_she_closed():
    """After the thanks the room is quiet past the pause: a message naming alice an
    hour later (stuffed with her words) is not this question's answer; a reply to it
    still is."""
    pause = linkage.PAUSE_MINUTES
    assert pause is not None
    later = [
        m("$a", BOB, 1, "alice: try cheese, it shows the picture"),
        m("$t", ALICE, 2, "thanks bob!"),
        m("$s", CAROL, 3 + pause, "alice: usb webcam picture usb webcam", mentions=[ALICE]),
        m("$r", DAVE, 4 + pause, "cheese needs the uvc module", reply_to="$q"),
    ]
    assert linked(QUESTION, later) == ["$a", "$r"]
    # Within the pause the same message still goes on with the conversation.
    later[2] = m("$s", CAROL, 3, "alice: usb webcam picture usb webcam", mentions=[ALICE])
    assert "$s" in linked(QUESTION, later)


def test_a_closed_question_stays_closed_when_she_speaks_again():
    """alice's first question was answered and thanked; hours later she asks another,
    and a message naming her a minute on answers the new one only: her speaking again
    does not reopen the old one."""
    q2 = m("$q2", ALICE, 180, "how do I rotate the signing key?")
    later = [
        m("$a", BOB, 1, "alice: try cheese, it shows the picture"),
        m("$t", ALICE, 2, "thanks bob!"),
        q2,
        m("$s", CAROL, 181, "alice: webcam picture and the signing key", mentions=[ALICE]),
    ]
    assert linked(QUESTION, later) == ["$a"]
    assert linked(q2, later[3:]) == ["$s"]


def test_a_responders_burst_ends_at_a_pause_unless_the_asker_spoke_last(monkeypatch):
    """bob answers; 82 minutes of silence later he writes about a problem of his own,
    unaddressed: no answer of alice's question, though his lines right after his
    answer go on answering (linkage.BURST_ENDS_AT_PAUSE). Where alice followed up
    meanwhile, bob coming back after the pause answers her."""
    pause = linkage.PAUSE_MINUTES
    assert pause is not None
    answer = m("$a", BOB, 4, "you can write a shell script which runs it")
    more = m("$a2", BOB, 5, "a loop over the hosts does it")
    own = m("$o", BOB, 5 + pause + 52, "i cannot pull an image on a machine i made with it")
    own2 = m("$o2", BOB, 6 + pause + 52, "can anyone advise?")
    assert linked(QUESTION, [answer, more, own, own2]) == ["$a", "$a2"]
    follow_up = m("$f", ALICE, 10, "i get an error saying not yet implemented")
    back = m("$b", BOB, 10 + pause + 24, "the touch action class works for me on ios")
    assert linked(QUESTION, [answer, follow_up, back]) == ["$a", "$b"]
    monkeypatch.setattr(linkage, "BURST_ENDS_AT_PAUSE", False)
    assert linked(QUESTION, [answer, more, own, own2]) == ["$a", "$a2", "$o", "$o2"]


def test_a_responders_burst_ends_where_he_turns_to_someone_who_spoke_before_the_question(
    monkeypatch,
):
    """bob answers alice, then writes "dave: Nice article! Some hints:" to dave, who
    spoke hours before her question and not since, and goes on with his hints: those
    are dave's, not hers (linkage.BURST_ENDS_AT_EARLIER). The earlier speakers are read
    only for such a line; a "Note:" that names no one who spoke goes on answering."""
    answer = m("$a", BOB, 4, "alice: move the USER statement behind your RUN")
    turn = m("$t", BOB, 9, "dave: Nice article! Some hints for your Dockerfile:")
    hint = m("$h", BOB, 10, "use the alpine image")
    reads: list[int] = []

    def earlier() -> frozenset[str]:
        reads.append(1)
        return frozenset({"dave"})

    def linked_with(later):
        return [
            link.answer.event_id for link in responses(QUESTION, later, Horizon(), earlier=earlier)
        ]

    assert linked_with([answer, turn, hint]) == ["$a"]
    assert reads
    note = m("$n", BOB, 9, "note: the image must be rebuilt after that")
    assert linked_with([answer, note, hint]) == ["$a", "$n", "$h"]
    reads.clear()
    assert linked_with([answer, hint]) == ["$a", "$h"] and not reads
    monkeypatch.setattr(linkage, "BURST_ENDS_AT_EARLIER", False)
    assert linked_with([answer, turn, hint]) == ["$a", "$t", "$h"]


def test_what_answers_the_asker_turning_to_someone_elses_matter_is_an_aside(monkeypatch):
    """After alice's question, dave asks the room his own question, never naming her;
    she turns to him ("dave: try this way"), and his lines to her then answer what she
    told him: linked as "aside" (cited, not quoted; linkage.ASKER_TURNED), not as
    answers of her question. bob, who named her before she turned to him, still
    answers it, and so does a reply."""
    bob = m("$b", BOB, 2, "alice: plug it into another port")
    own = m("$d", DAVE, 3, "got a quick question on entrypoint, how do i reference it?")
    turn = m("$t", ALICE, 5, "dave: try this way in docker-compose.yml")
    to_bob = m("$tb", ALICE, 6, "bob: which port?")
    back = m("$db", DAVE, 7, "alice: but i dont need to specify my command")
    more = m("$dm", DAVE, 8, "also the entrypoint is in the dockerfile already")
    bob2 = m("$b2", BOB, 9, "alice: the one on the left")
    reply = m("$r", DAVE, 10, "is it a uvc webcam?", reply_to="$q")
    later = [bob, own, turn, to_bob, back, more, bob2, reply]
    rules = {link.answer.event_id: link.rule for link in responses(QUESTION, later, Horizon())}
    assert rules == {
        "$b": "address",
        "$db": "aside",
        "$dm": "aside",
        "$b2": "address",
        "$r": "reply",
    }
    monkeypatch.setattr(linkage, "ASKER_TURNED", False)
    rules = {link.answer.event_id: link.rule for link in responses(QUESTION, later, Horizon())}
    assert rules["$db"] == "address" and rules["$dm"] == "more"
