"""Chunker invariants over generated timelines (in the manner of Chroma's property tests)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.chunker import (
    ChunkPolicy,
    build_windows,
    chunk,
    document,
    embed_text,
    parse_document,
    window_id,
)
from indexer.records import EventID, Message, RoomID, UserID

ROOM = RoomID("!room:example.org")
SENDERS = [UserID("@alice:example.org"), UserID("@bob:example.org"), UserID("@żółw:x")]


def size(m: Message) -> int:
    return len(m.body.encode("utf-8"))


@st.composite
def timelines(draw, max_messages: int = 40) -> list[Message]:
    n = draw(st.integers(0, max_messages))
    bodies = draw(st.lists(st.text(st.characters(blacklist_categories=("Cs",)),
                                   min_size=1, max_size=120), min_size=n, max_size=n))
    # Mostly small steps, sometimes a long silence.
    steps = draw(st.lists(st.one_of(st.integers(0, 120_000), st.integers(0, 4 * 3_600_000)),
                          min_size=n, max_size=n))
    senders = draw(st.lists(st.sampled_from(SENDERS), min_size=n, max_size=n))
    ts, out = 1_700_000_000_000, []
    for i in range(n):
        ts += steps[i]
        out.append(Message(EventID(f"$e{i}"), ROOM, senders[i], ts, bodies[i]))
    return out


policies = st.builds(ChunkPolicy, max_bytes=st.integers(1, 600),
                     gap_ms=st.integers(0, 3_600_000))

SETTINGS = settings(max_examples=100, deadline=None, database=None)


@SETTINGS
@given(timelines(), policies)
def test_every_message_in_exactly_one_window_in_order(messages, policy):
    windows = chunk(messages, policy)
    flat = [m for w in windows for m in w]
    assert flat == messages  # none lost, none doubled, order kept
    assert all(len(w) >= 1 for w in windows)


@SETTINGS
@given(timelines(), policies)
def test_windows_respect_the_byte_bound(messages, policy):
    for w in chunk(messages, policy):
        if len(w) > 1:
            assert sum(size(m) for m in w) <= policy.max_bytes


@SETTINGS
@given(timelines(), policies)
def test_windows_respect_the_gap(messages, policy):
    windows = chunk(messages, policy)
    for w in windows:
        for a, b in zip(w, w[1:]):
            assert b.ts - a.ts <= policy.gap_ms
    # And a window is only closed for a reason: the next message would not fit or is late.
    for a, b in zip(windows, windows[1:]):
        too_big = sum(size(m) for m in a) + size(b[0]) > policy.max_bytes
        too_late = b[0].ts - a[-1].ts > policy.gap_ms
        assert too_big or too_late


@SETTINGS
@given(timelines(), policies, st.data())
def test_rechunking_from_any_window_start_reproduces_later_windows(messages, policy, data):
    """The pipeline re-chunks only a room's open window plus what is new; that is only
    right if chunking from a window start gives the same windows as chunking it all."""
    windows = build_windows(messages, policy)
    if not windows:
        return
    i = data.draw(st.integers(0, len(windows) - 1))
    start = messages.index(windows[i].messages[0])
    again = build_windows(messages[start:], policy)
    assert again == windows[i:]


@SETTINGS
@given(timelines(), policies, st.data())
def test_appending_keeps_every_closed_window(messages, policy, data):
    """Live extension: new messages only change the last (open) window."""
    cut = data.draw(st.integers(0, len(messages)))
    before = build_windows(messages[:cut], policy)
    after = build_windows(messages, policy)
    assert after[:max(len(before) - 1, 0)] == before[:-1]
    if before:
        assert after[len(before) - 1].window_id == before[-1].window_id


@SETTINGS
@given(timelines(), policies)
def test_window_ids_are_stable_and_distinct(messages, policy):
    a = build_windows(messages, policy)
    b = build_windows(list(messages), policy)
    assert [w.window_id for w in a] == [w.window_id for w in b]
    assert len({w.window_id for w in a}) == len(a)
    for w in a:
        assert w.window_id == window_id(ROOM, w.messages[0].event_id)


def test_window_id_depends_on_room_and_first_event_only():
    assert window_id(ROOM, EventID("$a")) == window_id(ROOM, EventID("$a"))
    assert window_id(ROOM, EventID("$a")) != window_id(ROOM, EventID("$b"))
    assert window_id(ROOM, EventID("$a")) != window_id(RoomID("!other:x"), EventID("$a"))
    # Pinned: a change here silently duplicates every window of an existing collection.
    assert window_id(ROOM, EventID("$a")) == window_id(RoomID("!room:example.org"),
                                                      EventID("$a"))
    assert window_id(ROOM, EventID("$a")).startswith("w") and len(window_id(ROOM, "$a")) == 32


def test_byte_bound_counts_utf8_bytes():
    msgs = [Message(EventID(f"$e{i}"), ROOM, SENDERS[0], i, "é" * 10) for i in range(3)]
    # 20 bytes each: two fit in 40, not three.
    assert [len(w) for w in chunk(msgs, ChunkPolicy(max_bytes=40, gap_ms=10))] == [2, 1]


def test_oversized_message_gets_a_window_of_its_own():
    msgs = [Message(EventID("$a"), ROOM, SENDERS[0], 0, "short"),
            Message(EventID("$b"), ROOM, SENDERS[0], 1, "x" * 500),
            Message(EventID("$c"), ROOM, SENDERS[0], 2, "short")]
    assert [len(w) for w in chunk(msgs, ChunkPolicy(max_bytes=100))] == [1, 1, 1]


@SETTINGS
@given(timelines(max_messages=10), policies)
def test_document_maps_back_to_each_message(messages, policy):
    """Replies quote the stored document line by line: every message, even one whose
    body has newlines or looks like a document line, maps back to exactly one entry."""
    for w in build_windows(messages, policy):
        lines = parse_document(document(w))
        assert [sender for _, sender, _ in lines] == [m.sender for m in w.messages]
        assert [body for _, _, body in lines] == [m.body for m in w.messages]
        assert embed_text(w) == "\n".join(m.body for m in w.messages)
