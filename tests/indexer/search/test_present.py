"""Linked answers through the presenter (indexer/search/present.py): a real event log, a real
embedded Chroma, the hash embedder (linkage is about who answers whom, not meaning).

A slow room: alice asks, two others chat about something else, and bob's answer comes
two hours later, in another block and so in another window. Each way a message can be
linked to the question (reply, thread, m.mentions, a "name:" address, Gitter's glued
"@nameword") has a test that fails when that path breaks: the same answer without the
link is not carried (the control case). Edits and redactions of a linked answer reach
the hit that carries it.
"""

from __future__ import annotations

import pytest

from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.history import History
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.pipeline import Pipeline
from matrix_sources.indexer.records import ChunkPolicy, Hit
from matrix_sources.indexer.search import conversation, lines, linkage, present
from matrix_sources.indexer.search.present import Presenter
from matrix_sources.indexer.search.searcher import Searcher, SourceQuery
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

ROOM = "!slow:example.org"
ALICE, BOB, CAROL, DAVE = (f"@{n}:example.org" for n in ("alice", "bob", "carol", "dave"))
T0 = 1_700_000_000_000
HOUR = 3600 * 1000
QUESTION = "how do I raise the cache factor of the state cache on a small server"
# It shares "cache factor" with the question: the fake embedder then puts it near it, as
# the model puts an answer near its question (a response must speak to it: ANSWER_FLOOR).
ANSWER = "raise the cache factor: set caches.global_factor to 2.0 in homeserver.yaml"


def event(eid: str, sender: str, ts: int, body: str, **content) -> dict:
    return {
        "type": "m.room.message",
        "room_id": ROOM,
        "sender": sender,
        "event_id": eid,
        "origin_server_ts": ts,
        "content": {"msgtype": "m.text", "body": body, **content},
    }


def question_and_chat() -> list[dict]:
    """alice's question, then chat between carol and dave (addressed to each other,
    so neither is an answer to alice by the dialogue rules)."""
    return [
        event("$q", ALICE, T0, QUESTION),
        event("$f1", CAROL, T0 + 60_000, "dave: did the deploy of the new bridge finish?"),
        event("$f2", DAVE, T0 + 120_000, "carol: yes, an hour ago, all green"),
    ]


# How bob's answer, two hours later, is tied to alice's question.
ANSWERS = {
    "reply": event(
        "$a", BOB, T0 + 2 * HOUR, ANSWER, **{"m.relates_to": {"m.in_reply_to": {"event_id": "$q"}}}
    ),
    "thread": event(
        "$a",
        BOB,
        T0 + 2 * HOUR,
        ANSWER,
        **{"m.relates_to": {"rel_type": "m.thread", "event_id": "$q"}},
    ),
    "mention": event("$a", BOB, T0 + 2 * HOUR, ANSWER, **{"m.mentions": {"user_ids": [ALICE]}}),
    "address": event("$a", BOB, T0 + 2 * HOUR, f"alice: {ANSWER}"),
    "glued": event("$a", BOB, T0 + 2 * HOUR, f"@alice{ANSWER}"),  # Gitter lost the space
}
UNLINKED = event("$a", BOB, T0 + 2 * HOUR, ANSWER)


@pytest.fixture
def world(tmp_path):
    yield from make_world(tmp_path)


@pytest.fixture
def wide_world(tmp_path):
    """The fake embedder at 1,024 dimensions: texts sharing no word come out near 0
    (at 64, hashing noise puts them up to 0.2 apart, above a relevance floor)."""
    yield from make_world(tmp_path, 1024)


def make_world(tmp_path, dim: int = 64):
    log = EventLog(tmp_path / "eventlog.sqlite3")
    store = ChromaStore(path=tmp_path / "chroma")
    ingest = Ingest(
        Gate(frozenset({ROOM}), "@bot:example.org"),
        log,
        Journal(tmp_path / "journal.jsonl"),
        history=History(log),
    )
    embedder = HashEmbedder(dim)
    pipeline = Pipeline(
        log, embedder, store, ChunkPolicy(), admits=ingest.admits, history=ingest.history
    )
    ingest.admit(
        [
            {
                "type": "m.room.join_rules",
                "room_id": ROOM,
                "sender": ALICE,
                "state_key": "",
                "event_id": "$jr",
                "origin_server_ts": T0 - 1,
                "content": {"join_rule": "public"},
            }
        ]
    )
    searcher = Searcher(embedder, store, presenter=Presenter(log, embedder))
    yield ingest, pipeline, searcher, log
    log.close()


def admit(world, events: list[dict]) -> None:
    ingest, pipeline, _, _ = world
    ingest.admit(events)
    pipeline.process_all()


def carrier(world, query: str = QUESTION) -> Hit:
    """The hit holding alice's question."""
    _, _, searcher, _ = world
    hits = searcher.search(SourceQuery.build([query], top_k=10))
    [hit] = [h for h in hits if "$q" in h.event_ids]
    return hit


@pytest.mark.parametrize("path", sorted(ANSWERS))
def test_each_link_path_carries_the_answer_from_a_later_window(world, path):
    admit(world, question_and_chat() + [ANSWERS[path]])
    _, _, _, log = world
    assert log.status_of("$a")[1] != log.status_of("$q")[1]  # two hours later: another window
    hit = carrier(world)
    assert "$a" not in hit.event_ids
    assert [a.event_id for a in hit.answers] == ["$a"]
    assert hit.answers[0].linked == path if path != "glued" else "address"
    j = hit.to_json()
    assert j["answer_event_ids"] == ["$a"] and "$a" in j["event_ids"]
    assert "$a" in j["shown_event_ids"] and "$q" in j["shown_event_ids"]
    [shown] = [s for s in j["shown"] if s["event_id"] == "$a"]
    assert ANSWER in shown["body"]


def test_without_a_link_the_later_answer_is_not_carried(world):
    """The control: the same answer with no reply, thread, mention or address is not
    tied to the question (the dialogue rules do not reach past the others' chat)."""
    admit(world, question_and_chat() + [UNLINKED])
    hit = carrier(world)
    assert hit.answers == ()
    assert "$a" not in hit.to_json()["event_ids"]


def test_a_glued_mention_needs_the_whole_name(world):
    """ "@alicesetting" is alice; "@alsetting" (a name too short to glue) is no one."""
    admit(world, question_and_chat() + [event("$a", BOB, T0 + 2 * HOUR, f"@al{ANSWER}")])
    assert carrier(world).answers == ()


def test_an_address_to_someone_who_spoke_before_the_question_is_not_an_answer(world):
    """bob spoke before alice's question; carol's later "bob: ..." is addressed to bob,
    not an unaddressed reply to alice (the names known are the whole timeline's, not
    only those who spoke after the question)."""
    admit(
        world,
        [
            event("$b0", BOB, T0 - 1000, "morning all, the upgrade went fine"),
            event("$q", ALICE, T0, QUESTION),
            event(
                "$x",
                CAROL,
                T0 + 2 * HOUR,
                "bob: thanks for the upgrade notes, they saved my evening",
            ),
        ],
    )
    assert carrier(world).answers == ()


def test_an_edit_of_a_linked_answer_shows_its_new_text(world):
    admit(world, question_and_chat() + [ANSWERS["address"]])
    new = "alice: raise the cache factor to 4.0 instead, 2.0 was not enough here"
    admit(
        world,
        [
            event(
                "$e",
                BOB,
                T0 + 3 * HOUR,
                f"* {new}",
                **{
                    "m.new_content": {"msgtype": "m.text", "body": new},
                    "m.relates_to": {"rel_type": "m.replace", "event_id": "$a"},
                },
            )
        ],
    )
    hit = carrier(world)
    assert [(a.event_id, a.body) for a in hit.answers] == [("$a", new)]
    [shown] = [s for s in hit.shown if s.event_id == "$a"]
    assert shown.body == new
    assert "2.0 in homeserver.yaml" not in str(hit.to_json())
    # An edit by someone else is ignored.
    admit(
        world,
        [
            event(
                "$e2",
                CAROL,
                T0 + 4 * HOUR,
                "* hijacked",
                **{
                    "m.new_content": {"msgtype": "m.text", "body": "alice: hijacked"},
                    "m.relates_to": {"rel_type": "m.replace", "event_id": "$a"},
                },
            )
        ],
    )
    assert [a.body for a in carrier(world).answers] == [new]


@pytest.mark.parametrize("path", ["reply", "mention", "address"])
def test_a_redacted_linked_answer_is_quoted_nowhere(world, path):
    """Whatever tied it to the question: the presenter reads only what is indexed now,
    so a redacted reply or mention links nothing, even if its relation were kept."""
    admit(world, question_and_chat() + [ANSWERS[path]])
    assert [a.event_id for a in carrier(world).answers] == ["$a"]
    admit(
        world,
        [
            {
                "type": "m.room.redaction",
                "room_id": ROOM,
                "sender": BOB,
                "event_id": "$r",
                "origin_server_ts": T0 + 3 * HOUR,
                "redacts": "$a",
                "content": {},
            }
        ],
    )
    _, _, searcher, _ = world
    for query in (QUESTION, ANSWER):
        for hit in searcher.search(SourceQuery.build([query], top_k=10)):
            j = hit.to_json()
            assert "$a" not in j["event_ids"] and "$a" not in j["answer_event_ids"]
            assert "$a" not in j["shown_event_ids"]
            assert "global_factor" not in str(j), j


def test_a_reply_to_another_of_the_askers_messages_is_not_this_questions_answer():
    """bob's reply to alice's later, different question mentions alice (clients put the
    replied-to sender in m.mentions), but it answers that question, not this one."""
    from matrix_sources.indexer.records import EventID, Message, RoomID, UserID
    from matrix_sources.indexer.search.linkage import Horizon, responses

    room = RoomID(ROOM)
    q = Message(EventID("$q"), room, UserID(ALICE), T0, "how do I free disk space?")
    other = Message(EventID("$q2"), room, UserID(ALICE), T0 + 60_000, "and the meetup?")
    reply = Message(
        EventID("$r"),
        room,
        UserID(BOB),
        T0 + 120_000,
        "second saturday",
        EventID("$q2"),
        (UserID(ALICE),),
    )
    assert [l.answer.event_id for l in responses(q, [other, reply], Horizon())] == []
    assert [l.rule for l in responses(other, [reply], Horizon())] == ["reply"]


def test_shortened_names_glued_forms_and_pills_link_answers():
    """Issue 22: "dana:" answers dana-7f3, Slack's "@Delmy" answers slack-delmy, and a
    pill in formatted_body (no m.mentions) is a mention."""
    from matrix_sources.indexer.ingest.events import parse_event
    from matrix_sources.indexer.records import EventID, Message, RoomID, UserID
    from matrix_sources.indexer.search.linkage import Horizon, responses

    room = RoomID(ROOM)
    dana, delmy = UserID("@dana-7f3:example.org"), UserID("@slack-delmy:example.org")
    q = Message(EventID("$q"), room, dana, T0, "how do I rotate the signing key?")
    noise = Message(EventID("$n"), room, UserID(CAROL), T0 + 1000, "lunch anyone?")
    ans = Message(
        EventID("$a"), room, UserID(BOB), T0 + 2000, "dana: it is in the vault, rotate it yearly"
    )
    assert ("$a", "address") in [
        (l.answer.event_id, l.rule) for l in responses(q, [noise, ans], Horizon())
    ]
    q2 = Message(EventID("$q2"), room, delmy, T0, "how do I put a nbsp in my view?")
    ans2 = Message(EventID("$a2"), room, UserID(BOB), T0 + 2000, "@Delmy use \\u00a0 in text")
    assert ("$a2", "address") in [
        (l.answer.event_id, l.rule) for l in responses(q2, [noise, ans2], Horizon())
    ]
    pill = parse_event(
        event(
            "$p",
            BOB,
            T0 + 3000,
            "dana-7f3: in the vault",
            **{
                "format": "org.matrix.custom.html",
                "formatted_body": '<a href="https://matrix.to/#/@dana-7f3:example.org">dana</a>: '
                "in the vault",
            },
        )
    ).message
    assert pill.mentions == (dana,)
    later = [
        noise,
        Message(pill.event_id, room, pill.sender, pill.ts, "in the vault", None, pill.mentions),
    ]
    assert ("$p", "mention") in [
        (l.answer.event_id, l.rule) for l in responses(q, later, Horizon())
    ]


def test_spam_addressed_to_the_asker_and_stuffed_lines_earn_no_place(wide_world):
    """Issue 26: alice asks three questions hours apart and bob answers each; hours
    later mallory addresses @alice, mentions her, replies to her first question. None
    of it is carried (it speaks to no question), and a line stuffed with the query's
    words is not quoted before the real answer."""
    mallory = "@mallory:example.org"
    qs = [
        "how do I raise the cache factor of the state cache",
        "how do I rotate the signing key of the homeserver",
        "when is the community meetup this month",
    ]
    ans = [
        "alice: raise the cache factor with caches.global_factor in homeserver.yaml",
        "alice: the signing key backup is in the vault, rotate it yearly",
        "alice: the meetup is the second saturday, 2pm",
    ]
    events = []
    for i, (q, a) in enumerate(zip(qs, ans)):
        events += [
            event(f"$q{i}", ALICE, T0 + i * 5 * HOUR, q),
            event(f"$a{i}", BOB, T0 + i * 5 * HOUR + 60_000, a),
        ]
    late = T0 + 12 * HOUR
    events += [
        event("$s1", mallory, late, "@alice cheap watches at spam.example, buy now"),
        event(
            "$s2",
            mallory,
            late + 1000,
            "cheap watches at spam.example",
            **{"m.relates_to": {"m.in_reply_to": {"event_id": "$q0"}}},
        ),
        event(
            "$s3",
            mallory,
            late + 2000,
            "buy cheap watches today",
            **{"m.mentions": {"user_ids": [ALICE]}},
        ),
    ]
    admit(wide_world, events)
    _, _, searcher, _ = wide_world
    for q, a in zip(qs, ("$a0", "$a1", "$a2")):
        hits = searcher.search(SourceQuery.build([q], top_k=5))
        for h in hits:
            if h.event_ids[0].startswith("$q"):  # alice's: carries no spam, quotes none
                j = h.to_json()
                assert not set(j["answer_event_ids"] + j["shown_event_ids"]) & {
                    "$s1",
                    "$s2",
                    "$s3",
                }, q
        assert a in hits[0].to_json()["shown_event_ids"], q
    # Stuffed: the query's words over and over, beside bob's real answer.
    admit(
        wide_world,
        [
            event("$q9", ALICE, late + 5 * HOUR, "how do I purge old remote media"),
            event(
                "$x",
                mallory,
                late + 5 * HOUR + 1000,
                "purge old remote media purge remote media old media purge",
            ),
            event(
                "$a9",
                BOB,
                late + 5 * HOUR + 2000,
                "alice: for old remote media, call the purge_media_cache api",
            ),
            event("$y", CAROL, late + 5 * HOUR + 3000, "lunch anyone? pizza place"),
        ],
    )
    searcher.presenter.shown_lines = 2  # the question and one more line: which one
    [hit, *_] = searcher.search(SourceQuery.build(["purge old remote media"], top_k=5))
    assert [ln.event_id for ln in hit.shown] == ["$q9", "$a9"]


def test_the_question_that_was_answered_comes_before_the_same_question_unanswered(
    wide_world, monkeypatch
):
    """Issue 22: carol later asks exactly what is searched and nobody answers; alice
    asked it in other words and bob answered. The first hit is alice's, carrying the
    answer: the order counts the closest response (`RANK_ANSWER`), not only how near
    the question is. Without that weight carol's unanswered question comes first."""
    q = "how do I raise the cache factor on a small server"
    answered = "so how do I raise the cache factor on a small server"
    answer = "alice: raise the cache factor on a small server with caches.global_factor: 2.0"
    admit(
        wide_world,
        [
            event("$q", ALICE, T0, answered),
            event(
                "$a",
                BOB,
                T0 + 2 * HOUR,
                answer,
                **{"m.relates_to": {"m.in_reply_to": {"event_id": "$q"}}},
            ),
            event("$u", CAROL, T0 + 10 * HOUR, q),
        ],
    )
    _, _, searcher, _ = wide_world
    [first, second, *_] = searcher.search(SourceQuery.build([q], top_k=5))
    assert first.event_ids == ("$q",) and [a.event_id for a in first.answers] == ["$a"]
    assert second.event_ids == ("$u",) and first.similarity < second.similarity
    # Asked for one hit: alice's is still read (it could reach the first place).
    assert searcher.search(SourceQuery.build([q], top_k=1))[0].event_ids == ("$q",)
    monkeypatch.setattr(present, "RANK_ANSWER", 0.0)
    assert searcher.search(SourceQuery.build([q], top_k=5))[0].event_ids == ("$u",)


def test_the_first_hits_are_the_same_whether_few_or_all_are_asked_for(wide_world):
    """The presenter reads the responses only of the hits that could still reach the
    first top_k (a response adds at most RANK_ANSWER); the first three are the same,
    answers and quoted lines too, as when every hit is read."""
    topics = [
        "cache factor of the state cache",
        "signing key of the homeserver",
        "purge of old remote media",
        "federation of a new server",
        "bridge to the irc network",
        "retention of old room history",
    ]
    events = []
    for i, t in enumerate(topics):
        events += [
            event(f"$q{i}", ALICE, T0 + i * 5 * HOUR, f"how do I set up the {t}"),
            event(
                f"$a{i}",
                BOB,
                T0 + i * 5 * HOUR + 2 * HOUR,
                f"alice: the {t} is in homeserver.yaml",
                **{"m.relates_to": {"m.in_reply_to": {"event_id": f"$q{i}"}}},
            ),
        ]
    admit(wide_world, events)
    _, _, searcher, _ = wide_world
    for q in [
        "how do I set up the cache of the homeserver",
        "old media and old history",
        "the irc bridge on a new server",
    ]:
        few = searcher.search(SourceQuery.build([q], top_k=3))
        every = searcher.search(SourceQuery.build([q], top_k=20))[:3]
        assert len(few) == 3
        assert [h.to_json() for h in few] == [h.to_json() for h in every], q


def _quoted_second(world, events: list[dict]) -> str:
    """The line quoted after the question when two lines are quoted."""
    admit(world, events)
    _, _, searcher, _ = world
    searcher.presenter.shown_lines = 2
    [hit, *_] = searcher.search(SourceQuery.build([QUESTION], top_k=3))
    assert hit.shown[0].event_id == "$q"
    return hit.shown[1].event_id


def test_of_two_responses_saying_the_same_the_one_asked_back_is_not_quoted(wide_world, monkeypatch):
    """A response that is itself a question ("...then?") is asking back, not answering:
    `ASKS_BACK` puts it after a response of the same words that says it. The two tie on
    everything else (the hash embedder reads no punctuation), so without the rule the
    earlier one, the question, is quoted."""
    events = [
        event("$q", ALICE, T0, QUESTION),
        event("$r1", BOB, T0 + 60_000, "alice: the global cache factor in homeserver.yaml then?"),
        event(
            "$r2", CAROL, T0 + 120_000, "alice: the global cache factor in homeserver.yaml then."
        ),
    ]
    assert _quoted_second(wide_world, events) == "$r2"
    monkeypatch.setattr(lines, "ASKS_BACK", 1.0)
    assert _quoted_second(wide_world, []) == "$r1"


def test_an_answer_in_the_questions_own_words_is_quoted(wide_world, monkeypatch):
    """ "raise factor higher" names what was asked and adds a word: an answer, not an
    echo of the question (`ECHO`: under 30% words of its own; this one has a third),
    quoted before a line that says less about it. At the earlier 34% it was taken for
    an echo and quoted last."""
    events = [
        event("$q", ALICE, T0, QUESTION),
        event("$r1", CAROL, T0 + 60_000, "raise factor higher"),
        event("$r2", BOB, T0 + 120_000, "alice: my small server was slow for months too"),
    ]
    assert _quoted_second(wide_world, events) == "$r1"
    monkeypatch.setattr(lines, "ECHO", lines.NOVELTY_FLOOR + (1 - lines.NOVELTY_FLOOR) * 0.34)
    assert _quoted_second(wide_world, []) == "$r2"


class CompanyEmbedder(HashEmbedder):
    """Like the int8 model, a text's vector moves with the other texts of its call."""

    def encode(self, texts):
        out = super().encode(texts)
        shift = 0.3 * (len(texts) - 1)
        return [[x + shift for x in v] for v in out]


def test_a_lines_vector_does_not_depend_on_the_cache_or_the_texts_beside_it(tmp_path):
    """The service's warm cache and a fresh CLI process must rank lines alike (the
    search API and `matrix-sources search` give the same hits)."""
    emb = CompanyEmbedder()
    warm = Presenter(None, emb)
    warm._vectors(["gparted resizes it", "unrelated chatter"])
    got = warm._vectors(["unrelated chatter", "reboot into the live usb", "gparted resizes it"])
    fresh = Presenter(None, CompanyEmbedder())._vectors(
        ["unrelated chatter", "reboot into the live usb", "gparted resizes it"]
    )
    assert (got == fresh).all()
    alone = Presenter(None, CompanyEmbedder())._vectors(["reboot into the live usb"])
    assert (got[1] == alone[0]).all()


def test_a_matched_link_brings_the_explanation_its_sender_wrote_before_it(wide_world, monkeypatch):
    """bob explains, then posts the link; the query matches the link's words, not the
    explanation's. The explanation is quoted with it (`_said_before`); without the
    rule it is not quoted at all (nothing responds to bob but a thanks)."""
    link = "https://example.org/synapse/docs/caches/global_factor"
    events = [
        event("$q", ALICE, T0, "my homeserver runs out of memory on a small box"),
        event("$b1", BOB, T0 + 60_000, "alice: lower global_factor, every cache sizes by it"),
        event("$b2", BOB, T0 + 70_000, link),
        event("$d", DAVE, T0 + 120_000, "bob: thanks, I will read it tonight"),
    ]
    admit(wide_world, events)
    _, _, searcher, _ = wide_world

    def quoted() -> list[str]:
        [hit, *_] = searcher.search(SourceQuery.build(["synapse docs caches"], top_k=3))
        return [ln.event_id for ln in hit.shown]

    assert quoted()[:2] == ["$b1", "$b2"]
    monkeypatch.setattr(lines, "said_before", lambda window, anchor: [])
    assert "$b1" not in quoted()


def test_a_back_and_forth_past_the_horizon_carries_the_answer_to_the_follow_up(world, monkeypatch):
    """bob asks back within the hour; alice answers him by name two days later; bob
    answers her the day after (past 24 h from the question, and from bob's first
    response). His answer is the conversation's: carried, and quoted. A stranger's
    line right after alice's follow-up is not (only the people she answers back).
    Without the rule (DIALOGUE_HOPS 0) the answer is not carried at all."""
    events = question_and_chat() + [
        event("$b1", BOB, T0 + HOUR, "alice: which version of synapse is it?"),
        event("$q2", ALICE, T0 + 46 * HOUR, "bob: 1.98, and the cache factor is still 0.5"),
        event("$s", CAROL, T0 + 46 * HOUR + 60_000, "has anyone seen the new bridge docs?"),
        event("$a", BOB, T0 + 66 * HOUR, f"alice: {ANSWER}"),
    ]
    admit(world, events)

    def answers() -> list[str]:
        return [a.event_id for a in carrier(world).answers]

    assert answers() == ["$b1", "$a"]
    assert "$a" in carrier(world).to_json()["shown_event_ids"]
    monkeypatch.setattr(conversation, "DIALOGUE_HOPS", 0)
    assert answers() == ["$b1"]


def test_a_follow_up_to_someone_else_does_not_continue_the_conversation(world):
    """alice's later line is addressed to dave, who never responded: bob's later line
    (past the horizon) is not an answer to her question."""
    events = question_and_chat() + [
        event("$b1", BOB, T0 + HOUR, "alice: which version of synapse is it?"),
        event("$q2", ALICE, T0 + 46 * HOUR, "dave: is the bridge back up?"),
        event("$a", BOB, T0 + 66 * HOUR, f"alice: {ANSWER}"),
    ]
    admit(world, events)
    assert [a.event_id for a in carrier(world).answers] == ["$b1"]


ASKED_BACK = (
    "alice: do you raise the cache factor of the state cache on a small server with little memory?"
)


def asked_back_then(asked: str, then: str, answer: str = "bob: yes, 2 GB of memory") -> list:
    """alice's question; bob asks back (`asked`); alice answers him; bob says `then`."""
    return [
        event("$q", ALICE, T0, QUESTION),
        event("$r1", BOB, T0 + 60_000, asked),
        event("$r2", ALICE, T0 + 120_000, answer),
        event("$r3", BOB, T0 + 180_000, then),
    ]


def test_a_question_back_is_quoted_after_what_its_sender_said_once_answered(
    wide_world, monkeypatch
):
    """bob asks back in the question's own words (the closest line), alice answers
    him, then bob says what to do. His question back was answered: what he said then
    is quoted (`SUPERSEDED`); without the rule the question back is."""
    events = asked_back_then(ASKED_BACK, "alice: then raise the cache factor to 2.0")
    assert _quoted_second(wide_world, events) == "$r3"
    monkeypatch.setattr(present, "SUPERSEDED", False)
    assert _quoted_second(wide_world, []) == "$r1"


def test_a_yes_or_no_answering_a_yes_no_question_is_quoted_first(wide_world, monkeypatch):
    """bob's first words to alice's yes/no question are the direct answer ("no, ...");
    his two later lines hold more of the query's words. The hit quotes the "no" with
    the best of them; without the rule, only those two."""
    admit(
        wide_world,
        [
            event("$q", ALICE, T0, "is there a way to raise the cache factor of the state cache?"),
            event("$n", BOB, T0 + 60_000, "alice: no, not the cache"),
            event(
                "$b",
                BOB,
                T0 + 120_000,
                "the cache factor of the state cache is read at start from homeserver yaml",
            ),
            event(
                "$c",
                BOB,
                T0 + 180_000,
                "rebuild synapse with a bigger cache factor for the state cache then restart the"
                " workers",
            ),
        ],
    )
    query = "raise the cache factor of the state cache on a small server"
    assert "$n" in {ln.event_id for ln in carrier(wide_world, query).shown}
    monkeypatch.setattr(present, "DIRECT", False)
    assert "$n" not in {ln.event_id for ln in carrier(wide_world, query).shown}


@pytest.mark.parametrize(
    "body, asks",
    [
        ("Is there a way to install Gitter to a custom URL?", True),
        ("bob: can I pin the version?", True),
        ("how do I raise the cache factor", False),
        ("I wonder whether it is fixed", False),
    ],
)
def test_which_lines_ask_yes_or_no(body, asks):
    assert lines.asks_yes_no(body) is asks


@pytest.mark.parametrize(
    "body, says",
    [
        ("No, Gitter Enterprise isn't yet released.", True),
        ("alice: yes, set it in homeserver.yaml", True),
        ("@alice nope", True),
        ("Nobody knows", False),
        ("the answer is no", False),
    ],
)
def test_which_lines_say_yes_or_no(body, says):
    assert lines.says_yes_no(body) is says


def test_a_request_without_its_question_mark_is_a_question_back(wide_world, monkeypatch):
    """Chat drops the question mark: "alice: can you post the logs of the state cache on
    the small server" asks back all the same (`OPENS_ASKING`), and what bob says once
    she answered is quoted before it. Read as a statement, the request is quoted."""
    events = asked_back_then(
        "alice: can you post the logs of the state cache factor on the small server",
        "alice: then raise the cache factor to 2.0",
        "bob: here they are",
    )
    assert _quoted_second(wide_world, events) == "$r3"
    monkeypatch.setattr(lines, "OPENS_ASKING", False)
    assert _quoted_second(wide_world, []) == "$r1"


@pytest.mark.parametrize(
    "body, asks",
    [
        ("can you post appium logs", True),
        ("Could u share the compose file", True),
        ("did you restart it?", True),
        ("you can post the logs", False),
        ("do it with the cache factor", False),
        ("canyou post", False),
        ("alice: can you post the logs", True),
        ("@bob could you share it", True),
        ("alice: you can post the logs", False),
    ],
)
def test_which_lines_ask_back(body, asks):
    assert (lines.asks_back(body) < 1) is asks


def test_a_question_back_stays_before_a_later_line_that_says_little(wide_world, monkeypatch):
    """What bob said later ("thats all i can think of") scores under SUPERSEDE_RATIO of
    his question back: the question back keeps its place; with no ratio it would not."""
    events = asked_back_then(ASKED_BACK, "alice: thats all i can think of, sorry")
    assert _quoted_second(wide_world, events) == "$r1"
    monkeypatch.setattr(present, "SUPERSEDE_RATIO", 0.0)
    assert _quoted_second(wide_world, []) == "$r3"


def test_a_statement_closed_by_a_tag_is_not_a_question_back(wide_world, monkeypatch):
    """ "..., right?" states and asks for a nod: it ties with the same words said
    flat and, the earlier, is quoted; taken for a question back (`TAG_WORDS` 0) it
    would go after."""
    events = [
        event("$q", ALICE, T0, QUESTION),
        event("$r1", BOB, T0 + 60_000, "alice: the global cache factor in homeserver.yaml, right?"),
        event(
            "$r2", CAROL, T0 + 120_000, "alice: the global cache factor in homeserver.yaml right."
        ),
    ]
    assert _quoted_second(wide_world, events) == "$r1"
    monkeypatch.setattr(lines, "TAG_WORDS", 0)
    assert _quoted_second(wide_world, []) == "$r2"


def test_a_matched_line_that_answers_someone_counts_as_the_hits_response(wide_world, monkeypatch):
    """bob's line answers alice ("@alice ...") in the question's words, with nothing
    after it; carol asked the same and got no answer. bob's answer comes first
    (`ANCHOR_ANSWERS`: the matched line is itself a response); without the rule the
    unanswered question does, its window being closer."""
    events = [
        event("$c", CAROL, T0, "how do I raise the cache factor of the state cache?"),
        event("$d", DAVE, T0 + 60_000, "carol: no idea, sorry"),
        event(
            "$b",
            BOB,
            T0 + 5 * HOUR,
            "@alice raise the cache factor of the state cache on a small server to 2.0",
        ),
    ]
    admit(wide_world, events)
    _, _, searcher, _ = wide_world

    def first() -> tuple:
        return searcher.search(SourceQuery.build([QUESTION], top_k=3))[0].event_ids

    assert first() == ("$b",)
    monkeypatch.setattr(present, "ANCHOR_ANSWERS", False)
    assert first() == ("$c", "$d")


def test_an_answer_the_asker_thanked_is_carried_however_far_its_words(wide_world, monkeypatch):
    """ "alice: use -f" shares nothing with the question and falls under the answer
    floor; alice thanks bob for it: it is carried and cited, and quoted where the hit
    has room (THANKED_QUOTED: the asker's thanks says it answered, whatever its
    words). carol's later line, thanked by no one, is neither."""
    events = question_and_chat() + [
        event("$a", BOB, T0 + 2 * HOUR, "alice: use -f"),
        event("$t", ALICE, T0 + 2 * HOUR + 60_000, "bob: thanks! that's what I needed"),
        event("$x", CAROL, T0 + 2 * HOUR + 120_000, "alice: lunch?"),
    ]
    admit(wide_world, events)
    hit = carrier(wide_world)
    assert [a.event_id for a in hit.answers] == ["$a"]
    assert "$a" in hit.to_json()["event_ids"] and "$a" in hit.to_json()["shown_event_ids"]
    assert "$x" not in hit.to_json()["event_ids"]
    monkeypatch.setattr(present, "THANKED_QUOTED", False)
    hit = carrier(wide_world)
    assert "$a" in hit.to_json()["event_ids"] and "$a" not in hit.to_json()["shown_event_ids"]
    monkeypatch.setattr(present, "THANKED", False)
    assert carrier(wide_world).answers == ()


def test_one_message_answers_at_most_one_question():
    """Issue 51: alice asked three questions, each answered and thanked; hours later
    someone names her in a message stuffed with the words of all three. It answers none
    of them (each was closed by her thanks), and unthanked it answers only the last one
    she asked; a reply still links to the line it replies to."""
    from matrix_sources.indexer.records import EventID, Message, RoomID, UserID
    from matrix_sources.indexer.search.linkage import Horizon, responses

    room = RoomID(ROOM)

    def m(eid, who, minute, body, reply_to=None, mentions=()):
        return Message(
            EventID(eid),
            room,
            UserID(who),
            T0 + minute * 60_000,
            body,
            EventID(reply_to) if reply_to else None,
            tuple(map(UserID, mentions)),
        )

    asked = [
        "how do I purge remote media?",
        "how do I rotate the signing key?",
        "how do I compress the state tables?",
    ]
    said, qs = [], []
    for i, body in enumerate(asked):
        q = m(f"$q{i}", ALICE, 10 * i, body)
        qs.append(q)
        said += [
            q,
            m(f"$a{i}", BOB, 10 * i + 1, f"bob: answer {i}", mentions=[ALICE]),
            m(f"$t{i}", ALICE, 10 * i + 2, "thanks bob!"),
        ]
    stuffed = m(
        "$s",
        CAROL,
        300,
        "alice: purge remote media rotate signing key compress state tables",
        mentions=[ALICE],
    )
    pill = m("$p", CAROL, 301, "also: media signing state", mentions=[ALICE])
    reply = m("$r", CAROL, 302, "the key: old_signing_keys", reply_to="$q1", mentions=[ALICE])

    def linked(q, later):
        return [l.answer.event_id for l in responses(q, later, Horizon())]

    for i, q in enumerate(qs):
        later = said[said.index(q) + 1 :] + [stuffed, pill, reply]
        got = linked(q, later)
        assert f"$a{i}" in got and "$s" not in got and "$p" not in got
        assert ("$r" in got) == (i == 1)  # a reply links to what it replies to
    # Not thanked: the stuffed message answers the last open question only.
    unthanked = [x for x in said if not x.event_id.startswith("$t")] + [stuffed]
    under = [q.event_id for q in qs if "$s" in linked(q, unthanked[unthanked.index(q) + 1 :])]
    assert under == ["$q2"]


def test_a_response_far_below_the_best_is_not_quoted(wide_world, monkeypatch):
    """bob answers alice's question; dave, naming her too, says something that shares a
    word with it and little else. The hit quotes the question and bob's answer, not
    dave's line when CLOSE_TO_BEST is set (it scores under 0.8 of bob's): fewer lines.
    Without the rule, dave's line fills the third place."""
    events = [
        event("$q", ALICE, T0, QUESTION),
        event("$a", BOB, T0 + 60_000, f"alice: {ANSWER}"),
        event("$d", DAVE, T0 + 120_000, "alice: a small server here too, no idea sorry"),
    ]
    admit(wide_world, events)

    def quoted() -> list[str]:
        return [ln.event_id for ln in carrier(wide_world).shown]

    monkeypatch.setattr(present, "CLOSE_TO_BEST", 0.8)
    assert quoted() == ["$q", "$a"]
    monkeypatch.setattr(present, "CLOSE_TO_BEST", None)
    assert quoted() == ["$q", "$a", "$d"]


def test_a_line_linked_by_place_is_not_quoted_beside_an_answer(wide_world, monkeypatch):
    """Two hours after alice's question, bob answers her by name; a minute later he
    goes on, to nobody ("more": the rest of his burst), in words near the question. The
    hit quotes the question and bob's answer: beside an answer that names the asker, a
    line linked only by its place was most often the responder's next topic
    (`PLACE_NOT_BESIDE`). Without the rule it fills the third place. When the best
    response is itself linked by place (nobody is named), the next is still quoted."""
    later = T0 + 2 * HOUR
    events = [
        *question_and_chat(),
        event("$a", BOB, later, f"alice: {ANSWER}"),
        event("$m", BOB, later + 60_000, "the state cache factor on a small server also costs"),
    ]
    admit(wide_world, events)

    def quoted(query: str = QUESTION) -> list[str]:
        return [ln.event_id for ln in carrier(wide_world, query).shown]

    assert quoted() == ["$q", "$a"]
    monkeypatch.setattr(present, "PLACE_NOT_BESIDE", False)
    assert quoted() == ["$q", "$a", "$m"]


def test_lines_linked_by_place_are_quoted_when_nothing_better_answers(wide_world):
    later = T0 + 2 * HOUR
    events = [
        event("$q", ALICE, T0, QUESTION),
        event("$n", BOB, later, ANSWER),
        event("$m", BOB, later + 60_000, "the state cache factor on a small server also costs"),
    ]
    admit(wide_world, events)
    assert [ln.event_id for ln in carrier(wide_world).shown] == ["$q", "$n", "$m"]


def test_a_matched_answer_quotes_its_askers_lines_not_others_who_address_its_sender(
    wide_world, monkeypatch
):
    """bob answers alice by name, and that line is what the query matches. Two hours
    later dave, who never spoke to bob, brings bob his own question about the cache
    factor; alice thanks bob. The hit quotes bob's answer and alice's reply, not dave's
    line (carried and cited all the same): `ANSWERS_ONE`. Without the rule dave's line
    is quoted."""
    later = T0 + 2 * HOUR
    events = [
        event("$q", ALICE, T0, QUESTION),
        event("$a", BOB, T0 + 60_000, f"alice: {ANSWER}"),
        event("$d", DAVE, later, "bob: my small server is slow too, where is that cache factor?"),
        event("$t", ALICE, later + 60_000, "bob: raising the cache factor to 2.0 did it, thanks"),
    ]
    admit(wide_world, events)

    def shown_and_cited() -> tuple[list[str], set[str]]:
        hit = carrier(wide_world, ANSWER)
        return [ln.event_id for ln in hit.shown], set(hit.cited_event_ids)

    shown, cited = shown_and_cited()
    assert "$a" in shown and "$d" not in shown and "$d" in cited
    monkeypatch.setattr(present, "ANSWERS_ONE", False)
    shown, _ = shown_and_cited()
    assert "$d" in shown


def test_who_a_matched_line_answers():
    """`present._answered_askers`: the people a line answers are those it names who
    spoke before it and never to its sender; a line that thanks, or one to people who
    had been helping its sender, answers no one who asked."""
    from matrix_sources.indexer.records import EventID, Message, RoomID, UserID

    def m(i: int, who: str, body: str) -> Message:
        return Message(EventID(f"$x{i}"), RoomID(ROOM), UserID(who), T0 + i, body)

    asked = [m(0, ALICE, "how do I raise the cache factor"), m(1, BOB, "alice: set it to 2.0")]
    assert present._answered_askers(asked, 1) == frozenset({"alice"})
    helped = [m(0, BOB, "alice: set it to 2.0"), m(1, ALICE, "bob: where is that file?")]
    assert present._answered_askers(helped, 1) == frozenset()
    thanks = [m(0, BOB, "the cache factor, 2.0"), m(1, ALICE, "bob: thanks, that worked")]
    assert present._answered_askers(thanks, 1) == frozenset()
    assert present._answered_askers([m(0, BOB, "set it to 2.0")], 0) == frozenset()


def test_a_question_of_its_own_linked_by_place_is_not_quoted(wide_world, monkeypatch):
    """Two hours after alice's question, dave is the next to speak and asks the room his
    own question, naming no one, in words near hers; then bob answers alice by name.
    The hit quotes her question and bob's answer; dave's line, linked only by its place,
    is carried and cited, not quoted (`PLACE_ASKS_OWN`), even where it ranks first and
    so `PLACE_NOT_BESIDE` keeps it (off here, as it is when such a line ranks above the
    answer). Without the rule it is quoted. The same line said as a statement stays
    quoted: it may be the answer."""
    own = "is the state cache factor on a small server why mine is slow?"
    monkeypatch.setattr(present, "PLACE_NOT_BESIDE", False)
    shown, cited = dave_then_bob(wide_world, own)
    assert shown == ["$q", "$a"] and "$d" in cited
    monkeypatch.setattr(present, "PLACE_ASKS_OWN", False)
    shown, _ = dave_then_bob(wide_world, own)
    assert "$d" in shown


def dave_then_bob(world, line: str) -> tuple[list[str], set[str]]:
    """alice's question; two hours later dave's `line`, then bob's answer to her by
    name: the carrier's quoted lines and what it cites."""
    later = T0 + 2 * HOUR
    admit(
        world,
        [
            event("$q", ALICE, T0, QUESTION),
            event("$d", DAVE, later, line),
            event("$a", BOB, later + 60_000, f"alice: {ANSWER}"),
        ],
    )
    hit = carrier(world)
    return [ln.event_id for ln in hit.shown], set(hit.cited_event_ids)


def test_a_thanks_linked_by_place_from_another_than_the_asker_is_not_quoted(
    wide_world, monkeypatch
):
    """dave, the next to speak two hours after alice's question, thanks the room in
    words near hers ("appium btw is very great thx guys"); then bob answers her by
    name. dave's line, linked only by its place, is carried and cited, not quoted
    (`RESPONDER_THANKS`); without the rule it is. The asker's own thanks is hers to
    make: it is never read as a response (linkage)."""
    praise = "the state cache factor on a small server is great btw, thx guys"
    monkeypatch.setattr(present, "PLACE_NOT_BESIDE", False)
    shown, cited = dave_then_bob(wide_world, praise)
    assert shown == ["$q", "$a"] and "$d" in cited
    monkeypatch.setattr(present, "RESPONDER_THANKS", False)
    shown, _ = dave_then_bob(wide_world, praise)
    assert "$d" in shown


def test_a_burst_turned_to_someone_who_spoke_hours_before_is_not_the_askers(world):
    """dave spoke two hours before alice's question, in another window. bob answers
    her by name, then turns to dave ("dave: nice article! some hints:") and goes on with
    hints in her question's words: they are dave's, neither quoted nor cited under her
    question (the event log's earlier speakers, linkage.BURST_ENDS_AT_EARLIER)."""
    later = T0 + 2 * HOUR
    admit(
        world,
        [
            event("$d", DAVE, T0 - 2 * HOUR, "wrote an article on the synapse caches"),
            event("$q", ALICE, T0, QUESTION),
            event("$a", BOB, later, f"alice: {ANSWER}"),
            event("$t", BOB, later + 60_000, "dave: nice article! some hints:"),
            event("$h", BOB, later + 120_000, "raise the state cache factor on a small server"),
        ],
    )
    hit = carrier(world)
    assert "$a" in hit.cited_event_ids
    assert not {"$t", "$h"} & set(hit.cited_event_ids)


def test_what_answers_the_askers_turn_to_someone_elses_matter_is_cited_not_quoted(
    wide_world, monkeypatch
):
    """bob answers alice by name; dave puts his own question to the room; alice turns to
    him ("dave: try the bridge settings"); his answer to her, in her question's words,
    is what she told him, not her question's: cited, not quoted (linkage.ASKER_TURNED).
    Without the rule it is quoted."""
    later = T0 + 2 * HOUR

    def quoted_and_cited() -> tuple[list[str], set[str]]:
        admit(
            wide_world,
            [
                event("$q", ALICE, T0, QUESTION),
                event("$a", BOB, later, f"alice: {ANSWER}"),
                event("$d", DAVE, later + 60_000, "how do i restart the irc bridge?"),
                event("$t", ALICE, later + 120_000, "dave: try the bridge settings"),
                event("$x", DAVE, later + 180_000, f"alice: {QUESTION} is what I asked too"),
            ],
        )
        hit = carrier(wide_world)
        return [ln.event_id for ln in hit.shown], set(hit.cited_event_ids)

    shown, cited = quoted_and_cited()
    assert "$x" not in shown and "$x" in cited and "$a" in shown
    monkeypatch.setattr(linkage, "ASKER_TURNED", False)
    shown, _ = quoted_and_cited()
    assert "$x" in shown


def test_the_next_speakers_line_far_from_the_question_is_quoted_when_nothing_else_is(
    wide_world, monkeypatch
):
    """Two hours after alice's question, dave is the next to speak: "good question. I
    dont believe so, not that server", far in words from the question (below
    IMPLICIT_FLOOR). With no other response it is quoted (NEXT_ALONE: the answer it
    may be, not the question alone); beside bob's answer by name, it is only cited."""
    line = "good question. I dont believe so, not that server"
    later = T0 + 2 * HOUR
    admit(wide_world, [event("$q", ALICE, T0, QUESTION), event("$d", DAVE, later, line)])
    hit = carrier(wide_world)
    assert [ln.event_id for ln in hit.shown] == ["$q", "$d"]
    monkeypatch.setattr(present, "NEXT_ALONE", False)
    hit = carrier(wide_world)
    assert [ln.event_id for ln in hit.shown] == ["$q"] and "$d" in hit.cited_event_ids
    monkeypatch.setattr(present, "NEXT_ALONE", True)
    admit(wide_world, [event("$a", BOB, later + 60_000, f"alice: {ANSWER}")])
    hit = carrier(wide_world)
    assert [ln.event_id for ln in hit.shown] == ["$q", "$a"] and "$d" in hit.cited_event_ids


def test_a_statement_linked_by_place_is_still_quoted_when_it_may_answer(wide_world):
    later = T0 + 2 * HOUR
    admit(
        wide_world,
        [
            event("$q", ALICE, T0, QUESTION),
            event("$d", DAVE, later, "the state cache factor on a small server: set it to 2.0"),
        ],
    )
    assert [ln.event_id for ln in carrier(wide_world).shown] == ["$q", "$d"]


def test_a_strangers_answer_the_asker_thanks_by_name_is_linked(world, monkeypatch):
    """Past alice's back and forth with bob, erin answers, addressing no one; other talk
    follows, then alice thanks erin by name: erin's answer is the conversation's. Her
    thanks to carol links nothing: carol's line after the question was to dave.
    Without the rule (THANKED_BY_NAME off) erin's answer is not linked at all."""
    erin = "@erin:example.org"
    events = question_and_chat() + [
        event("$b1", BOB, T0 + HOUR, "alice: which version of synapse is it?"),
        event("$q2", ALICE, T0 + 46 * HOUR, "bob: 1.98, and the cache factor is still 0.5"),
        event("$e", erin, T0 + 46 * HOUR + 60_000, ANSWER),
        event("$x", DAVE, T0 + 46 * HOUR + 120_000, "carol: the bridge is down again"),
        event("$t", ALICE, T0 + 46 * HOUR + 180_000, "@erin thanks for confirming"),
        event("$t2", ALICE, T0 + 46 * HOUR + 240_000, "carol: thanks too"),
    ]
    admit(world, events)

    def answers() -> list[str]:
        return [a.event_id for a in carrier(world).answers]

    assert answers() == ["$b1", "$e"]
    monkeypatch.setattr(conversation, "THANKED_BY_NAME", False)
    assert answers() == ["$b1"]


def test_a_thanked_persons_own_question_to_the_room_is_not_linked(world, monkeypatch):
    """erin puts her own question to the room after alice's; bob answers alice by name;
    alice then thanks erin by mistake. erin's question is no answer of alice's
    (THANKED_NOT_ASKING), nor is erin's later line; without the rule the question is
    linked as "thanked"."""
    erin = "@erin:example.org"
    events = question_and_chat() + [
        event(
            "$e", erin, T0 + 16 * 60_000, "my compose stack gets a 403, is there a way to fix it?"
        ),
        event("$b", BOB, T0 + 4 * HOUR, f"alice: {ANSWER}"),
        event("$e2", erin, T0 + 12 * HOUR, "bob: it was a misconfiguration of my volumes"),
        event("$t", ALICE, T0 + 13 * HOUR, "erin: it works, thank you very much"),
    ]
    admit(world, events)

    def answers() -> list[str]:
        return [a.event_id for a in carrier(world).answers]

    assert answers() == ["$b"]
    monkeypatch.setattr(conversation, "THANKED_NOT_ASKING", False)
    assert answers() == ["$e", "$b"]


def test_a_thanks_after_the_askers_next_question_links_nothing_to_the_first(world):
    """alice's question is answered and thanked; she then puts a new question to the
    room, erin answers it and alice thanks erin: erin's answer belongs to the new
    question, not to the first (one message answers at most one question)."""
    erin = "@erin:example.org"
    events = question_and_chat() + [
        event("$a", BOB, T0 + HOUR, f"alice: {ANSWER}"),
        event("$t", ALICE, T0 + HOUR + 60_000, "bob: thanks!"),
        event("$q2", ALICE, T0 + HOUR + 120_000, "how do I turn presence off?"),
        event("$e", erin, T0 + HOUR + 180_000, ANSWER),
        event("$t2", ALICE, T0 + HOUR + 240_000, "@erin thanks"),
    ]
    admit(world, events)
    assert "$e" not in [a.event_id for a in carrier(world).answers]


def test_the_askers_aside_to_someone_else_is_not_quoted_as_a_follow_up(wide_world, monkeypatch):
    """Right after her question, before anyone speaks, alice turns to dave, whom the
    question did not address and who never responds to it: an aside, not quoted. Her
    next line to no one is still her follow-up. Without the rule (ASIDES off) the aside
    is quoted."""
    admit(
        wide_world,
        question_and_chat()[:1]
        + [
            event("$s", ALICE, T0 + 30_000, "dave: the cache factor on your server is fine"),
            event("$u", ALICE, T0 + 40_000, "the state cache factor is 0.5 on a small server"),
        ]
        + question_and_chat()[1:]
        + [event("$a", BOB, T0 + 2 * HOUR, f"alice: {ANSWER}")],
    )

    def shown() -> list[str]:
        return [ln.event_id for ln in carrier(wide_world).shown]

    assert "$s" not in shown() and {"$q", "$u", "$a"} <= set(shown())
    monkeypatch.setattr(present, "ASIDES", False)
    assert "$s" in shown()


def test_a_conversation_is_one_hit_not_one_per_window(world, monkeypatch):
    """bob's answer, two hours after alice's question, sits in a window of its own that
    matches the query too; the hit of alice's question quotes it. That window is the
    same conversation again, so it is not a hit of its own: the next conversation
    takes its place. Without the rule it comes back as a second hit."""
    admit(world, question_and_chat() + [ANSWERS["reply"]])
    _, _, searcher, _ = world

    def hits():
        return searcher.search(SourceQuery.build([QUESTION], top_k=10))

    [first, *rest] = hits()
    assert "$q" in first.event_ids and "$a" in [a.event_id for a in first.shown]
    assert not any("$a" in h.event_ids for h in rest)
    # Search-box words: the answer's window holds them in that quoted line only.
    words = searcher.search(SourceQuery.build(["cache factor"], top_k=10))
    assert "$q" in words[0].event_ids and not any("$a" in h.event_ids for h in words[1:])
    monkeypatch.setattr(present, "ONE_CONVERSATION", False)
    assert any("$a" in h.event_ids for h in hits()[1:])


def test_a_conversations_later_part_is_shown_from_its_question(world, monkeypatch):
    """Two hours after alice's question, bob asks her back and she answers him: that
    later window matches the query best, but a person wants the conversation from its
    question. The first hit is alice's question's, carrying (citing) bob's line and
    her reply; the later window is no hit of its own. Without the rule the later part
    comes first, and the question second."""
    later = "alice: which synapse version runs the state cache on your small server"
    admit(
        world,
        [event("$q", ALICE, T0, f"{QUESTION}?"), *question_and_chat()[1:]]
        + [
            event("$b", BOB, T0 + 2 * HOUR, later),
            event("$c", ALICE, T0 + 2 * HOUR + 60_000, "bob: version 1.98 of synapse"),
        ],
    )
    _, _, searcher, _ = world

    def hits():
        return searcher.search(SourceQuery.build([later.removeprefix("alice: ")], top_k=10))

    [first, *rest] = hits()
    assert "$q" in first.event_ids
    assert {"$b", "$c"} <= set(first.cited_event_ids)
    assert not any("$b" in h.event_ids for h in rest)
    # The same first hit when only one is asked for.
    alone = searcher.search(SourceQuery.build([later.removeprefix("alice: ")], top_k=1))
    assert [h.to_json() for h in alone] == [first.to_json()]
    monkeypatch.setattr(present, "FROM_QUESTION", False)
    [first, *rest] = hits()
    assert "$b" in first.event_ids and "$q" not in first.event_ids
    assert any("$q" in h.event_ids for h in rest)


def test_a_later_answer_is_not_shown_from_an_earlier_line_that_asks_nothing(world):
    """The same later window, under a line of alice's that asks nothing: it stays a hit
    of its own, first."""
    later = "alice: which synapse version runs the state cache on your small server"
    admit(
        world,
        [event("$q", ALICE, T0, "the cache factor of the state cache on my small server is 0.5")]
        + question_and_chat()[1:]
        + [
            event("$b", BOB, T0 + 2 * HOUR, later),
            event("$c", ALICE, T0 + 2 * HOUR + 60_000, "bob: version 1.98 of synapse"),
        ],
    )
    _, _, searcher, _ = world
    first = searcher.search(SourceQuery.build([later.removeprefix("alice: ")], top_k=10))[0]
    assert "$b" in first.event_ids and "$q" not in first.event_ids


def test_a_question_nobody_answered_gives_its_place_to_the_same_askers_answered_one(
    world, monkeypatch
):
    """Nobody answers alice's question; a day later she asks again in other words and
    bob answers her. Her first question matches the query best, but the first hit is
    the one answered; the unanswered one comes after it. Without the rule, the
    question alone comes first."""
    day = 24 * HOUR
    admit(
        world,
        question_and_chat()
        + [
            event("$q2", ALICE, T0 + day, "anyone know how to raise the state cache factor?"),
            event("$a2", BOB, T0 + day + 60_000, f"alice: {ANSWER}"),
        ],
    )
    _, _, searcher, _ = world

    def hits():
        return searcher.search(SourceQuery.build([QUESTION], top_k=10))

    [first, second, *_] = hits()
    assert "$q2" in first.event_ids and "$a2" in {x.event_id for x in first.shown}
    assert "$q" in second.event_ids
    alone = searcher.search(SourceQuery.build([QUESTION], top_k=1))
    assert [h.to_json() for h in alone] == [first.to_json()]
    monkeypatch.setattr(present, "ASKED_AGAIN", False)
    [first, second, *_] = hits()
    assert "$q" in first.event_ids and "$q2" in second.event_ids


def test_search_box_words_keep_a_window_whose_line_holding_them_is_not_quoted(world):
    """The answer's window also holds dave's line with the searched words, which the
    hit of alice's question neither quotes nor carries: the window stays a hit of its
    own, so every message holding the words is found."""
    admit(
        world,
        question_and_chat()
        + [
            ANSWERS["reply"],
            event(
                "$d",
                DAVE,
                T0 + 2 * HOUR + 60_000,
                "bob: would that same cache factor setting also apply to the media repository"
                " workers we run on the other two machines behind the load balancer?",
            ),
        ],
    )
    _, _, searcher, _ = world
    hits = searcher.search(SourceQuery.build(["cache factor"], top_k=10))
    [answer] = [h for h in hits if "$a" in h.event_ids]  # matched on bob's quoted line
    assert "$d" in answer.event_ids and "$d" not in {ln.event_id for ln in hits[0].shown}


@pytest.mark.parametrize(
    "stranger",
    [
        # hours later, naming her, stuffed with her question's words
        event("$s", DAVE, T0 + 3 * HOUR, f"alice: same here, {QUESTION}, the cache factor"),
        # right after her thanks, by its place alone
        event("$s", DAVE, T0 + 3 * 60_000, "the cache factor of my state cache is ignored too"),
    ],
    ids=["named-after-the-pause", "next-after-the-thanks"],
)
def test_the_askers_thanks_is_no_question_of_its_own(world, monkeypatch, stranger):
    """bob answers alice, she thanks him; then dave brings his own problem. Her thanks
    asks nothing, so nothing is linked to it: dave's line is neither quoted nor carried
    under her question (a thanks closes it to lines naming her once the room paused).
    Without the rule (THANKS_ASK_NOTHING off) the thanks was read as a new question of
    hers and dave's line became its answer."""
    admit(
        world,
        [
            event("$q", ALICE, T0, QUESTION),
            event("$a", BOB, T0 + 60_000, f"alice: {ANSWER}"),
            event("$t", ALICE, T0 + 2 * 60_000, "bob: thanks, that was it!"),
            stranger,
        ],
    )

    def cited() -> set[str]:
        hit = carrier(world)
        return {a.event_id for a in hit.answers} | {ln.event_id for ln in hit.shown}

    assert "$a" in cited() and "$s" not in cited()
    monkeypatch.setattr(conversation, "THANKS_ASK_NOTHING", False)
    assert "$s" in cited()


@pytest.mark.parametrize(
    "body, only",
    [
        ("Oops thanks@priyankshah217:)", True),
        ("bob: thanks, that was it!", True),
        ("thank you so much", True),
        ("thanks, but it still fails with the same error", False),
        ("Thanks! does it work on 0.19?", False),
        ("aniket-21: @mgmanikandan87thanks for your input. I will try out", False),
        ("the cache factor is 0.5", False),
    ],
)
def test_a_line_that_only_thanks(body, only):
    assert lines.only_thanks(body) is only


def test_a_thanks_that_goes_on_with_a_problem_is_still_answered(world):
    """alice thanks bob but says what still fails; carol answers that right after: her
    line is linked, as the answer to alice's follow-up (a thanks that says more is not
    a line that only thanks)."""
    admit(
        world,
        [
            event("$q", ALICE, T0, QUESTION),
            event("$a", BOB, T0 + 60_000, f"alice: {ANSWER}"),
            event("$t", ALICE, T0 + 2 * 60_000, "bob: thanks, but the cache factor is still 0.5"),
            event("$c", CAROL, T0 + 3 * 60_000, "restart synapse after changing the cache factor"),
        ],
    )
    hit = carrier(world)
    assert {"$a", "$c"} <= {a.event_id for a in hit.answers} | {ln.event_id for ln in hit.shown}


def test_a_line_is_quoted_once_in_a_reply(world, monkeypatch):
    """alice asks again two hours later and bob answers her there, by name: his line
    is her first question's linked answer and a line of her second asking's window. The
    first hit quotes it; the second still cites it (its window holds it) but quotes its
    other lines only, here its question. Without the rule the reply quotes it twice."""
    admit(
        world,
        question_and_chat()
        + [
            event("$q2", ALICE, T0 + 2 * HOUR, "anyone? how do I raise the state cache's factor"),
            event("$a", BOB, T0 + 2 * HOUR + 60_000, f"alice: {ANSWER}"),
        ],
    )
    _, _, searcher, _ = world

    def quoted() -> list[list[str]]:
        hits = searcher.search(SourceQuery.build([QUESTION], top_k=10))
        assert [h.event_ids[0] for h in hits[:2]] == ["$q", "$q2"]
        assert all("$a" in h.cited_event_ids for h in hits[:2])
        return [[line.event_id for line in h.shown] for h in hits]

    first, second, *_ = quoted()
    assert first == ["$q", "$a"] and second == ["$q2"]
    monkeypatch.setattr(present, "QUOTED_ONCE", False)
    assert quoted()[1] == ["$q2", "$a"]


def test_search_words_kept_for_another_line_are_matched_on_it(world, monkeypatch):
    """bob's answer to alice, two hours later, shares its window with carol's line
    holding one of the words. "cache factor" finds alice's question first, quoting his
    answer; his window is kept for carol's line (ONE_CONVERSATION keeps a window while a
    line holding the words is not shown) and is matched on it, not on his answer again."""
    admit(
        world,
        question_and_chat()
        + [
            event("$a", BOB, T0 + 2 * HOUR, f"alice: {ANSWER}"),
            event("$c", CAROL, T0 + 2 * HOUR + 60_000, "my cache is huge"),
        ],
    )
    _, _, searcher, _ = world

    def quoted() -> list[list[str]]:
        hits = searcher.search(SourceQuery.build(["cache factor"], top_k=10))
        assert "$q" in hits[0].event_ids and "$a" in hits[1].event_ids
        return [[line.event_id for line in h.shown] for h in hits]

    assert quoted()[:2] == [["$q", "$a"], ["$c"]]
    monkeypatch.setattr(present, "QUOTED_ONCE", False)
    assert quoted()[:2] == [["$q", "$a"], ["$a", "$c"]]


def test_a_window_matched_on_another_line_carries_no_answer_a_hit_above_does(world):
    """As above, and dave's reply to carol three hours later names alice too: his line
    is a hit of its own, first. Carol's window, matched on her line, links his reply as
    her answer, but a hit above already quotes it (_once: one hit carries it)."""
    admit(
        world,
        question_and_chat()
        + [
            event("$a", BOB, T0 + 2 * HOUR, f"alice: {ANSWER}"),
            event("$c", CAROL, T0 + 2 * HOUR + 60_000, "my cache is huge"),
            event(
                "$d",
                DAVE,
                T0 + 5 * HOUR,
                "alice: the cache factor in homeserver.yaml, as bob said",
                **{"m.relates_to": {"m.in_reply_to": {"event_id": "$c"}}},
            ),
        ],
    )
    _, _, searcher, _ = world
    hits = searcher.search(SourceQuery.build(["cache factor"], top_k=10))
    [carol] = [h for h in hits if "$c" in h.event_ids]
    assert "$d" in hits[0].event_ids and [ln.event_id for ln in carol.shown] == ["$c"]
    assert "$d" not in carol.cited_event_ids
