"""Chunker invariants over generated timelines (in the manner of Chroma's property tests),
and the conversations it follows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matrix_sources.indexer.ingest.addressing import addressed, names
from matrix_sources.indexer.pipeline.chunker import (
    ChunkPolicy,
    blocks,
    build_blocks,
    build_windows,
    chunk,
    chunk_blocks,
    document,
    embed_text,
    window_id,
)
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID
from tests.strength import examples

ROOM = RoomID("!room:example.org")
SENDERS = [
    UserID("@alice:example.org"),
    UserID("@bob:example.org"),
    UserID("@żółw:x"),
    UserID("@irc_stig_5f:eval.local"),
]
ADDRESSES = [
    "",
    "",
    "alice: ",
    "bob, ",
    "stig_: ",
    "> <@bob:example.org> quoted\n\n",
    "thanks alice ",
    "żółw: ",
]
T0 = 1_700_000_000_000


def size(m: Message) -> int:
    return len(m.body.encode("utf-8"))


@st.composite
def timelines(draw, max_messages: int = 40) -> list[Message]:
    n = draw(st.integers(0, max_messages))
    bodies = draw(
        st.lists(
            st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=120),
            min_size=n,
            max_size=n,
        )
    )
    prefixes = draw(st.lists(st.sampled_from(ADDRESSES), min_size=n, max_size=n))
    # Mostly small steps, sometimes a long silence.
    steps = draw(
        st.lists(
            st.one_of(st.integers(0, 120_000), st.integers(0, 4 * 3_600_000)),
            min_size=n,
            max_size=n,
        )
    )
    senders = draw(st.lists(st.sampled_from(SENDERS), min_size=n, max_size=n))
    # Matrix replies (m.in_reply_to) to any earlier event, or to one never seen.
    replies = draw(
        st.lists(st.one_of(st.none(), st.integers(-1, max(n - 1, 0))), min_size=n, max_size=n)
    )
    mentioned = draw(
        st.lists(st.lists(st.sampled_from(SENDERS), max_size=2), min_size=n, max_size=n)
    )
    ts, out = T0, []
    for i in range(n):
        ts += steps[i]
        r = replies[i]
        reply_to = None if r is None or r >= i else EventID(f"$e{r}" if r >= 0 else "$gone")
        out.append(
            Message(
                EventID(f"$e{i}"),
                ROOM,
                senders[i],
                ts,
                prefixes[i] + bodies[i],
                reply_to,
                tuple(mentioned[i]),
            )
        )
    return out


policies = st.builds(
    ChunkPolicy,
    max_bytes=st.integers(1, 300),
    gap_ms=st.integers(0, 3_600_000),
    block_windows=st.integers(1, 6),
    follow_replies=st.booleans(),
)
SETTINGS = settings(max_examples=examples(100), deadline=None, database=None)


def window_bytes(w) -> int:
    return sum(size(m) for m in w)


@pytest.mark.slow  # property test at full strength: in the full run
@SETTINGS
@given(timelines(), policies)
def test_every_message_in_exactly_one_window_in_timeline_order(messages, policy):
    windows = chunk(messages, policy)
    flat = [m for w in windows for m in w]
    assert sorted(flat, key=messages.index) == messages  # none lost, none doubled
    assert len(flat) == len(messages)
    assert all(len(w) >= 1 for w in windows)
    for w in windows:  # each window keeps timeline order
        assert [messages.index(m) for m in w] == sorted(messages.index(m) for m in w)
    firsts = [messages.index(w[0]) for w in windows]
    assert firsts == sorted(firsts)


@SETTINGS
@given(timelines(), policies)
def test_windows_respect_the_byte_bounds(messages, policy):
    """Every window, the last block's included, is at most max_bytes (or one message)."""
    for block in chunk_blocks(messages, policy):
        for w in block:
            if len(w) > 1:
                assert window_bytes(w) <= policy.max_bytes


@SETTINGS
@given(timelines(), policies)
def test_blocks_are_greedy_and_no_window_spans_a_silence(messages, policy):
    cut = blocks(messages, policy)
    assert [m for b in cut for m in b] == messages
    for b in cut:
        for a, c in zip(b, b[1:]):
            assert c.ts - a.ts <= policy.gap_ms
    # A block is only closed for a reason: the next message would not fit or is late.
    for a, b in zip(cut, cut[1:]):
        too_big = window_bytes(a) + size(b[0]) > policy.block_bytes
        too_late = b[0].ts - a[-1].ts > policy.gap_ms
        assert too_big or too_late
    # Every window lies inside one block.
    where = {m.event_id: i for i, b in enumerate(cut) for m in b}
    for w in chunk(messages, policy):
        assert len({where[m.event_id] for m in w}) == 1


@pytest.mark.slow  # property test at full strength: in the full run
@SETTINGS
@given(timelines(), policies, st.data())
def test_rechunking_from_any_block_start_reproduces_later_windows(messages, policy, data):
    cut = blocks(messages, policy)
    if not cut:
        return
    i = data.draw(st.integers(0, len(cut) - 1))
    start = messages.index(cut[i][0])
    assert build_blocks(messages[start:], policy) == build_blocks(messages, policy)[i:]


@pytest.mark.slow  # property test at full strength: in the full run
@SETTINGS
@given(timelines(), policies, st.data())
def test_live_tail_reproduces_the_room(messages, policy, data):
    """What the pipeline does live: index a prefix, then re-chunk its last block (from
    the block's start) plus what came since. The result is what chunking everything at
    once gives from that block on; earlier blocks are kept; and of the last block's
    windows, only those the new messages joined or started differ."""
    cut = data.draw(st.integers(1, max(len(messages), 1)))
    before = build_blocks(messages[:cut], policy)
    if not before:
        return
    start = messages.index(before[-1][0].messages[0])
    after = build_blocks(messages, policy)
    tail = build_blocks(messages[start:], policy)
    assert after[len(before) - 1 :] == tail
    assert after[: len(before) - 1] == before[:-1]
    new = {m.event_id for m in messages[cut:]}
    kept = {w.window_id: w for w in before[-1]}
    for w in tail[0]:
        if not new & set(w.event_ids):  # untouched by the new messages: the same window
            assert kept[w.window_id] == w
        elif w.window_id in kept:  # joined: the old messages first, then new ones
            assert w.messages[: len(kept[w.window_id].messages)] == kept[w.window_id].messages


@pytest.mark.slow  # property test at full strength: in the full run
@SETTINGS
@given(timelines(), policies)
def test_the_last_block_is_cut_like_a_closed_one(messages, policy):
    """A live room's recent talk is conversation windows at once, not one window: a
    later message that closes the block changes none of them."""
    if not messages:
        return
    late = messages[-1].ts + policy.gap_ms + 1
    nxt = Message(EventID("$late"), ROOM, SENDERS[0], late, "later")
    assert build_blocks(messages, policy) == build_blocks(messages + [nxt], policy)[:-1]


@SETTINGS
@given(timelines(), policies)
def test_window_ids_are_stable_and_distinct(messages, policy):
    a = build_windows(messages, policy)
    b = build_windows(list(messages), policy)
    assert [w.window_id for w in a] == [w.window_id for w in b]
    assert len({w.window_id for w in a}) == len(a)
    for w in a:
        assert w.window_id == window_id(ROOM, w.messages[0].event_id)


@SETTINGS
@given(timelines(), st.integers(1, 300), st.integers(0, 3_600_000))
def test_without_following_replies_windows_are_timeline_runs(messages, max_bytes, gap):
    """follow_replies=False: the windows of chunker version 1, greedy and contiguous."""
    policy = ChunkPolicy(max_bytes=max_bytes, gap_ms=gap, follow_replies=False)
    windows = chunk(messages, policy)
    assert [m for w in windows for m in w] == messages
    for a, b in zip(windows, windows[1:]):
        assert window_bytes(a) + size(b[0]) > max_bytes or b[0].ts - a[-1].ts > gap


def test_window_id_depends_on_room_and_first_event_only():
    assert window_id(ROOM, EventID("$a")) == window_id(ROOM, EventID("$a"))
    assert window_id(ROOM, EventID("$a")) != window_id(ROOM, EventID("$b"))
    assert window_id(ROOM, EventID("$a")) != window_id(RoomID("!other:x"), EventID("$a"))
    # Pinned: a change here silently duplicates every window of an existing collection.
    assert window_id(ROOM, EventID("$a")) == window_id(RoomID("!room:example.org"), EventID("$a"))
    assert window_id(ROOM, EventID("$a")).startswith("w") and len(window_id(ROOM, "$a")) == 32


def test_byte_bound_counts_utf8_bytes():
    msgs = [Message(EventID(f"$e{i}"), ROOM, SENDERS[0], T0 + i, "é" * 10) for i in range(3)]
    # 20 bytes each: two fit in 40, not three.
    assert [len(w) for w in chunk(msgs, ChunkPolicy(max_bytes=40, gap_ms=10))] == [2, 1]


def test_oversized_message_gets_a_window_of_its_own():
    msgs = [
        Message(EventID("$a"), ROOM, SENDERS[0], T0, "short"),
        Message(EventID("$b"), ROOM, SENDERS[0], T0 + 1, "x" * 500),
        Message(EventID("$c"), ROOM, SENDERS[0], T0 + 2, "short"),
    ]
    assert [len(w) for w in chunk(msgs, ChunkPolicy(max_bytes=100))] == [1, 1, 1]


def say(i: int, sender: str, body: str, minute: float = 0) -> Message:
    return Message(EventID(f"$m{i}"), ROOM, UserID(sender), T0 + int((i + minute) * 60_000), body)


def bodies(windows) -> list[list[str]]:
    return [[m.body for m in w] for w in windows]


def test_interleaved_conversations_get_their_own_windows():
    timeline = [
        say(0, "@alice:x", "how do I open a rar archive?"),
        say(1, "@bob:x", "alice: apt install unrar"),
        say(2, "@carol:x", "my wifi drops every few minutes"),
        say(3, "@dave:x", "carol, which card is it?"),
        say(4, "@alice:x", "bob: thanks, that works"),
        say(5, "@carol:x", "dave: an intel 3945"),
        say(6, "@bob:x", "or file-roller if you want a gui"),
    ]
    windows = chunk(timeline, ChunkPolicy())
    assert bodies(windows) == [
        [
            "how do I open a rar archive?",
            "alice: apt install unrar",
            "bob: thanks, that works",
            "or file-roller if you want a gui",
        ],
        ["my wifi drops every few minutes", "carol, which card is it?", "dave: an intel 3945"],
    ]
    # A live room: the same conversations while the block is still open.
    assert bodies(chunk(timeline, ChunkPolicy())) == bodies(windows)


def test_two_people_alone_talk_to_each_other():
    timeline = [
        say(0, "@alice:x", "is the server down?"),
        say(1, "@bob:x", "yes, restarting it now"),
        say(2, "@alice:x", "thanks"),
    ]
    assert bodies(chunk(timeline, ChunkPolicy())) == [[m.body for m in timeline]]
    # A third voice, addressing no one, starts a conversation of its own.
    third = say(3, "@carol:x", "does anyone know a good markdown editor?")
    assert len(chunk(timeline + [third], ChunkPolicy())) == 2


def test_irc_nicks_reply_fallbacks_and_mentions_are_followed():
    timeline = [
        say(0, "@irc_stig_5f:eval.local", "how can I read my NTFS disk?"),
        say(1, "@irc_bob:eval.local", "Stig_: install ntfs-3g"),
        say(2, "@irc_ann:eval.local", "anyone else seeing slow apt mirrors?"),
        say(3, "@erin:x", "> <@irc_ann:eval.local> anyone else\n\nyes, since this morning"),
        say(4, "@irc_zed:eval.local", "what stig_ needs is ntfs-3g, yes"),
    ]
    windows = chunk(timeline, ChunkPolicy())
    assert [[m.event_id for m in w] for w in windows] == [["$m0", "$m1", "$m4"], ["$m2", "$m3"]]


def test_matrix_replies_without_fallback_join_the_conversation_replied_to():
    """Clients no longer put "> <@bob:...>" into a reply's body (Matrix 1.13): the reply
    names no one, and only m.in_reply_to says what it answers."""
    timeline = [
        say(0, "@alice:x", "how do I open a rar archive?"),
        say(1, "@bob:x", "apt install unrar"),
        say(2, "@carol:x", "my wifi drops every few minutes"),
        say(3, "@dave:x", "which card is it?"),
        say(4, "@erin:x", "or file-roller if you want a gui"),
    ]
    plain = chunk(timeline, ChunkPolicy())
    assert len(plain) > 2  # without the relations: nothing to go by
    replies = {1: "$m0", 3: "$m2", 4: "$m1"}
    timeline = [
        Message(
            m.event_id,
            m.room_id,
            m.sender,
            m.ts,
            m.body,
            EventID(replies[i]) if i in replies else None,
        )
        for i, m in enumerate(timeline)
    ]
    assert [[m.event_id for m in w] for w in chunk(timeline, ChunkPolicy())] == [
        ["$m0", "$m1", "$m4"],
        ["$m2", "$m3"],
    ]


def test_m_mentions_address_a_message_whose_text_names_no_one():
    """A pill (or a reply to a message of an earlier block) leaves only m.mentions to
    say who is addressed."""
    timeline = [
        say(0, "@alice:x", "how do I open a rar archive?"),
        say(1, "@bob:x", "alice: which version?"),
        say(2, "@carol:x", "my wifi drops every few minutes"),
        say(3, "@dave:x", "carol: which card is it?"),
        say(4, "@erin:x", "apt install unrar"),
    ]
    ids = lambda ws: [[m.event_id for m in w] for w in ws]  # noqa: E731
    assert ids(chunk(timeline, ChunkPolicy())) == [["$m0", "$m1"], ["$m2", "$m3"], ["$m4"]]
    last = timeline[4]
    timeline[4] = Message(
        last.event_id, ROOM, last.sender, last.ts, last.body, None, (UserID("@alice:x"),)
    )
    assert ids(chunk(timeline, ChunkPolicy())) == [["$m0", "$m1", "$m4"], ["$m2", "$m3"]]


def test_a_long_conversation_goes_on_in_a_new_window():
    timeline = [
        say(i, "@alice:x" if i % 2 else "@bob:x", ("bob: " if i % 2 else "alice: ") + "x" * 40)
        for i in range(6)
    ]
    windows = chunk(timeline, ChunkPolicy(max_bytes=100))
    assert [len(w) for w in windows] == [2, 2, 2]


def test_names_come_from_the_user_id():
    assert "stig" in names("@irc_stig_5f:eval.local")
    assert "alice" in names("@alice:example.org")
    assert addressed("Stig_: try this") == ("stig",)
    assert addressed("no address here") == ()
    assert addressed("> <@bob:example.org> hi\n\nreply") == tuple(sorted(names("@bob:example.org")))


@SETTINGS
@given(timelines(max_messages=10), policies)
def test_document_and_embed_text_hold_every_message(messages, policy):
    """The document gives each message one head line (its further lines indented);
    the model reads the bodies alone."""
    for w in build_windows(messages, policy):
        heads = [ln for ln in document(w).split("\n") if not ln.startswith("  ")]
        assert len(heads) == len(w.messages)
        assert embed_text(w) == "\n".join(m.body for m in w.messages)


def test_shortened_names_and_bridge_prefixes_are_followed():
    """Issue 22: people address each other by the start of a name ("dana:" for
    dana-7f3) and Slack's bridge writes `@slack-delmy` for "@Delmy"; a prefix that
    fits two speakers addresses no one."""
    assert "delmy" in names("@slack-delmy:eval.local")
    timeline = [
        say(0, "@dana-7f3:x", "how do I rotate the signing key?"),
        say(1, "@richvdh:x", "is the meetup on saturday?"),
        say(2, "@sam:x", "my wifi drops every few minutes"),
        say(3, "@bob:x", "dana: it lives in the vault, rotate it yearly"),
        say(4, "@erin:x", "rich, second saturday, 2pm"),
        say(5, "@zoe:x", "sam: which card is it?"),
    ]
    ids = lambda ws: [[m.event_id for m in w] for w in ws]  # noqa: E731
    assert ids(chunk(timeline, ChunkPolicy())) == [["$m0", "$m3"], ["$m1", "$m4"], ["$m2", "$m5"]]
    # "r" fits richvdh alone, but is shorter than any name anyone shortens to.
    short = timeline[:4] + [say(4, "@erin:x", "r, second saturday, 2pm")] + timeline[5:]
    assert ["$m1", "$m4"] not in ids(chunk(short, ChunkPolicy()))
    # With a second "ri..." talking, "rich," is ambiguous: it joins neither.
    two = timeline[:2] + [say(2, "@richard:x", "anyone seen the new release?")] + timeline[3:]
    assert all(not {"$m1", "$m4"} <= set(w) for w in ids(chunk(two, ChunkPolicy())))


def test_resolve_finds_one_person_by_a_whole_or_shortened_name():
    from matrix_sources.indexer.ingest.addressing import resolve

    people = [names("@dana-7f3:x"), names("@daniel:x"), names("@slack-delmy:x")]
    assert resolve("dana", people) == names("@dana-7f3:x")  # unique prefix
    assert resolve("dan", people) == frozenset()  # dana-7f3 and daniel
    assert resolve("delmy", people) == names("@slack-delmy:x")  # bridge prefix dropped
    assert resolve("DELMY".lower(), people) == names("@slack-delmy:x")
    assert resolve("zed", people) == frozenset()
