"""Names people address each other by, resolved against the room's members and their
display names when a message is admitted (indexer/ingest/members.py, issue 22)."""

from __future__ import annotations

import pytest

from matrix_sources.indexer.components import writers
from matrix_sources.indexer.ingest.addressing import address_words, display_forms, fold
from matrix_sources.indexer.ingest.events import StateEvent
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.members import RECENT_MS, Addressees
from matrix_sources.indexer.ingest.roomfacts import apply_state, facts_from_state
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

ROOM = RoomID("!room:example.org")
T0 = 1_700_000_000_000
# Localparts that share nothing with the names people use.
DANA, DANIEL, RICH, SAM, BEN, EVA = (UserID(f"@u{i}x9:example.org") for i in range(6))
NAMES = {
    DANA: "Dana Whitfield",
    DANIEL: "Daniel",
    RICH: "Richard van der Hoff",
    SAM: "Samira K",
    BEN: "Ben",
    EVA: "Eva",
}


def member(
    user: str, name: str | None, membership: str = "join", n: int = 0, ts: int = 0
) -> StateEvent:
    content = {"membership": membership}
    if name is not None:
        content["displayname"] = name
    return StateEvent(
        ROOM, EventID(f"$mem{user}{n}"), UserID(user), "m.room.member", user, content, ts
    )


def room(names: dict = NAMES):
    return facts_from_state([member(u, n) for u, n in names.items()])


def said(sender: str, body: str, ts: int = T0, mentions: tuple = ()) -> Message:
    return Message(EventID(f"$x{ts}"), ROOM, UserID(sender), ts, body, mentions=mentions)


def test_a_display_name_resolves_whole_by_first_word_and_by_a_unique_prefix():
    facts = room()
    a = Addressees()
    assert a.resolve(said(BEN, "dana: the key is in the vault"), facts).mentions == (DANA,)
    assert a.resolve(said(EVA, "Dana Whitfield: hi"), facts).mentions == ()  # not a "name:"
    assert a.resolve(said(EVA, "danawhitfield: hi"), facts).mentions == (DANA,)
    assert a.resolve(said(EVA, "rich, second Saturday"), facts).mentions == (RICH,)
    assert a.resolve(said(EVA, "samira> rsync it"), facts).mentions == (SAM,)
    assert a.resolve(said(EVA, "thanks @Richard, and @ben too"), facts).mentions == (RICH, BEN)
    # "dan" fits Dana and Daniel, and neither has spoken: nobody.
    assert a.resolve(said(EVA, "dan: which one?"), facts).mentions == ()
    # "Note:" is nobody's name; an address to oneself adds nothing.
    assert a.resolve(said(EVA, "note: the meetup moved"), facts).mentions == ()
    assert a.resolve(said(EVA, "eva: remember to ask"), facts).mentions == ()


def test_of_several_members_who_fit_the_one_who_spoke_recently_wins():
    facts = room()
    a = Addressees()
    a.resolve(said(DANIEL, "how do I rotate the key?", ts=T0), facts)
    assert a.resolve(said(BEN, "dan: with the admin script", ts=T0 + 60_000), facts).mentions == (
        DANIEL,
    )
    # Long after, Daniel is no longer talking: "dan" is ambiguous again.
    late = T0 + RECENT_MS + 120_000
    assert a.resolve(said(BEN, "dan: and again", ts=late), facts).mentions == ()
    # Both talking: still nobody.
    a.resolve(said(DANA, "me too", ts=late + 1), facts)
    a.resolve(said(DANIEL, "same here", ts=late + 2), facts)
    assert a.resolve(said(BEN, "dan: which?", ts=late + 3), facts).mentions == ()


def test_resolution_uses_the_members_at_the_time_of_the_message():
    facts = room()
    a = Addressees()
    assert a.resolve(said(BEN, "dana: one"), facts).mentions == (DANA,)
    renamed = apply_state(facts, member(DANA, "Dee", n=1))
    assert a.resolve(said(BEN, "dana: two"), renamed).mentions == ()
    assert a.resolve(said(BEN, "dee: two"), renamed).mentions == (DANA,)
    left = apply_state(renamed, member(DANA, None, "leave", n=2))
    assert DANA not in left.members and DANA not in left.display_names
    assert a.resolve(said(BEN, "dee: three"), left).mentions == ()
    # The facts before the change are unchanged: they are a value.
    assert facts.display_names[DANA] == "Dana Whitfield"


def test_names_in_any_script_and_case():
    facts = room({**NAMES, DANA: "Jürgen Weber", DANIEL: "王伟", RICH: "ÉLODIE"})
    a = Addressees()
    assert a.resolve(said(BEN, "JÜRGEN: ja"), facts).mentions == (DANA,)
    assert a.resolve(said(BEN, "@王伟 看一下"), facts).mentions == (DANIEL,)
    assert a.resolve(said(BEN, "élodie, merci"), facts).mentions == (RICH,)
    assert fold("Ｄａｎａ") == "dana" and fold("Dana-7f3") == "dana7f3"


def test_the_mentions_a_client_sent_are_kept_after_the_resolved_ones():
    facts = room()
    m = Addressees().resolve(said(BEN, "dana: see what eva said", mentions=(EVA, DANA)), facts)
    assert m.mentions == (DANA, EVA)


@pytest.mark.parametrize("bad", [None, "", "   ", 42, ["Dana"], "x" * 257, "bad\ud800name"])
def test_a_display_name_that_is_no_name_is_ignored(bad):
    facts = facts_from_state([member(DANA, bad), member(BEN, "Ben")])
    assert DANA in facts.members and DANA not in facts.display_names
    assert Addressees().resolve(said(BEN, "dana: hi"), facts).mentions == ()


def test_in_a_room_of_20000_members_a_unique_name_resolves_and_a_shared_one_does_not():
    users = [UserID(f"@p{i}:example.org") for i in range(20_000)]
    facts = facts_from_state(
        [member(u, f"Person {i}") for i, u in enumerate(users)] + [member(DANA, "Dana Whitfield")]
    )
    assert len(facts.members) == 20_001
    a = Addressees()
    assert a.resolve(said(BEN, "dana: hi"), facts).mentions == (DANA,)
    # "person" is 20,000 people's first word: nobody.
    assert a.resolve(said(BEN, "person: hi"), facts).mentions == ()


def test_address_words_and_display_forms():
    assert address_words("Dana: hi @rich and @Sam.") == ["dana", "rich", "sam"]
    assert address_words("> <@bob:example.org> old\n\nyes") == []  # a reply fallback
    assert address_words("mail me at a@b.org") == []  # not after a space
    assert display_forms("Richard van der Hoff") == {"richardvanderhoff", "richard"}
    assert display_forms("   ") == frozenset()


# -- a name that fits several: a newcomer's does not take another's answers (issue 44) ----

DANIELLE, MALLORY = UserID("@k7d2n:example.org"), UserID("@z9q4m:example.org")
DAY = 24 * 3600 * 1000
QUESTION = "How do I move the media store to S3?"


def hijacked(name: str, renamed_at: int, copy: bool = True) -> tuple:
    """Danielle asks at T0; Mallory, a member since long before, takes the room display
    name `name` at `renamed_at` and (with `copy`) posts Danielle's question with a link
    a minute after; then Ben answers "dani: ...". Whom the answer names."""
    facts = facts_from_state(
        [
            member(DANIELLE, "Danielle", ts=T0 - 30 * DAY),
            member(MALLORY, "Mallory", ts=T0 - 20 * DAY),
            member(BEN, "Ben", ts=T0 - 30 * DAY),
        ]
    )
    a = Addressees()
    a.resolve(said(DANIELLE, QUESTION, ts=T0), facts)
    facts = apply_state(facts, member(MALLORY, name, n=1, ts=renamed_at))
    if copy:
        a.resolve(said(MALLORY, f"{QUESTION} https://spam.example/s3", ts=T0 + 120_000), facts)
    return a.resolve(
        said(BEN, "dani: use synapse-s3-storage-provider", ts=T0 + 180_000), facts
    ).mentions


@pytest.mark.parametrize("name", ["Dani", "Da\u200bni", "D\u0430ni", "ＤＡＮＩ", "dani\u202e"])
def test_a_name_taken_after_the_question_does_not_take_its_answer(name):
    """Mallory's `Dani` (zero-width space, Cyrillic `а`, full width or a bidi control in
    it) fits "dani" whole, Danielle's only by its start: before, the whole fit won and
    Ben's answer was stored as a mention of Mallory, whose copy of the question then
    carried it as hit 1."""
    assert hijacked(name, T0 + 60_000) == (DANIELLE,)
    assert hijacked(name, T0 + 60_000, copy=False) == (DANIELLE,)


def test_a_newcomers_name_does_not_outrank_a_longer_standing_members():
    """Named `Dani` a day before Danielle asked, Mallory's copy is no question of hers
    to be answered first: Danielle has been Danielle longer."""
    assert hijacked("Dani", T0 - DAY) == (DANIELLE,)
    # Nobody asked anything: still the longer-standing member.
    facts = facts_from_state(
        [
            member(DANIELLE, "Danielle", ts=T0 - 30 * DAY),
            member(MALLORY, "Dani", ts=T0 - DAY),
            member(BEN, "Ben"),
        ]
    )
    assert Addressees().resolve(said(BEN, "dani: welcome back"), facts).mentions == (DANIELLE,)


def test_whoever_asked_the_question_the_line_answers_is_preferred():
    """A newcomer named Dani who asks, while Danielle does not: the answer is Dani's."""
    dani = UserID("@n3w:example.org")
    facts = facts_from_state(
        [
            member(DANIELLE, "Danielle", ts=T0 - 30 * DAY),
            member(dani, "Dani", ts=T0 - 60_000),
            member(BEN, "Ben"),
        ]
    )
    a = Addressees()
    a.resolve(said(DANIELLE, "morning all", ts=T0), facts)
    a.resolve(said(dani, "Is there a way to purge old media?", ts=T0 + 1000), facts)
    assert a.resolve(
        said(BEN, "dani: the purge_media admin API", ts=T0 + 60_000), facts
    ).mentions == (dani,)
    # A long-standing Dan is still "dan" to whoever says it, Daniel or not.
    dan = UserID("@d4n:example.org")
    facts = facts_from_state(
        [
            member(dan, "Dan", ts=T0 - 40 * DAY),
            member(DANIEL, "Daniel", ts=T0 - 30 * DAY),
            member(BEN, "Ben"),
        ]
    )
    assert Addressees().resolve(said(BEN, "dan: hi"), facts).mentions == (dan,)


def test_a_copy_of_a_whole_name_goes_to_who_had_it_first():
    """Mallory named herself Danielle (a Cyrillic `а` in it) a week ago: "danielle" is
    the Danielle of a year. Before, both fit whole and neither had spoken: nobody."""
    facts = facts_from_state(
        [
            member(DANIELLE, "Danielle", ts=T0 - 365 * DAY),
            member(MALLORY, "D\u0430nielle", ts=T0 - 7 * DAY),
            member(BEN, "Ben"),
        ]
    )
    assert Addressees().resolve(said(BEN, "danielle: hi"), facts).mentions == (DANIELLE,)


def test_two_members_who_look_alike_are_nobody():
    """Lookalikes are one name once folded: with nothing to tell them apart (the same
    age, neither asking), the address names neither."""
    twin = UserID("@tw1n:example.org")
    facts = facts_from_state(
        [
            member(DANIELLE, "Dani", ts=T0 - DAY),
            member(twin, "D\u0430n\u0456", ts=T0 - DAY),
            member(BEN, "Ben"),
        ]
    )
    assert Addressees().resolve(said(BEN, "dani: which of you?"), facts).mentions == ()


# -- through ingest and the chunker: conversations addressed by display name --------------

TOPICS = [
    (DANA, "How do I rotate the signing key of our homeserver?"),
    (RICH, "When is the community meetup this month?"),
    (SAM, "Which tool should we use to back up the media store?"),
    (BEN, "dana: the signing key backup is in the vault, rotate it yearly"),
    (EVA, "rich, second Saturday at 2pm, in the usual cafe"),
    (DANIEL, "samira: rsync the media_store folder nightly, then snapshot it"),
]


def raw(n: int, sender: str, body: str) -> dict:
    return {
        "type": "m.room.message",
        "room_id": ROOM,
        "sender": sender,
        "event_id": f"$t{n}",
        "origin_server_ts": T0 + n * 1000,
        "content": {"msgtype": "m.text", "body": body},
    }


def raw_member(user: str, name: str) -> dict:
    return {
        "type": "m.room.member",
        "room_id": ROOM,
        "sender": user,
        "state_key": user,
        "event_id": f"$j{user}",
        "origin_server_ts": T0,
        "content": {"membership": "join", "displayname": name},
    }


def test_interleaved_topics_addressed_by_display_names_become_their_conversations(
    tmp_path, eventlog_db
):
    log = EventLog(eventlog_db)
    store = ChromaStore(path=tmp_path / "chroma", eventlog=log)
    ingest, pipeline = writers(
        log,
        Journal(tmp_path / "journal.jsonl"),
        store,
        HashEmbedder(),
        Gate(frozenset({ROOM}), "@bot:example.org"),
        ChunkPolicy(),
    )
    ingest.admit(
        [
            {
                "type": "m.room.join_rules",
                "room_id": ROOM,
                "sender": DANA,
                "state_key": "",
                "event_id": "$jr",
                "origin_server_ts": T0,
                "content": {"join_rule": "public"},
            }
        ]
        + [raw_member(u, n) for u, n in NAMES.items()]
    )
    ingest.admit([raw(i, who, text) for i, (who, text) in enumerate(TOPICS)])
    pipeline.process_all()
    windows = {tuple(w.event_ids) for w in store.get()}
    assert windows == {("$t0", "$t3"), ("$t1", "$t4"), ("$t2", "$t5")}, windows
    # The resolved member is stored with the message; the display name is not.
    [answer] = [
        m
        for w in store.get()
        for m in log.texts.window_messages(w.window_id)
        if m.event_id == "$t3"
    ]
    assert answer.mentions == (DANA,)
    if log.path is not None:
        kept = b"".join(p.read_bytes() for p in tmp_path.glob("eventlog.sqlite3*"))
        assert b"Whitfield" not in kept


def test_a_name_the_user_id_already_says_adds_no_mention():
    """`quinn:` to `@quinn` (Synapse's default display name is the localpart) or `dana`
    to `@dana-7f3`: the chunker and the linkage read it from the text, as an address."""
    quinn, dana = UserID("@quinn:example.org"), UserID("@dana-7f3:example.org")
    facts = room({quinn: "quinn", dana: "Dana Whitfield", BEN: "Ben"})
    a = Addressees()
    assert a.resolve(said(BEN, "quinn: install it"), facts).mentions == ()
    assert a.resolve(said(BEN, "dana: the vault"), facts).mentions == ()
    assert a.resolve(said(BEN, "whitfield: the vault"), facts).mentions == ()  # not a first word
    assert a.resolve(said(BEN, "danawhit: the vault"), facts).mentions == (dana,)
