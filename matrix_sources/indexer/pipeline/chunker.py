"""Cutting a room's timeline into windows that follow its conversations.

A busy room interleaves several conversations; a window cut blindly from the timeline
mixes them and parts a question from its answers. So the timeline is cut in two steps:

    timeline --greedy: block_bytes, gap_ms--> blocks (contiguous)
    block --follow replies and mentions--> windows, each <= max_bytes

A block closes when the next message would push it past `block_bytes` of message text
or arrives more than `gap_ms` after the previous one. Inside a block a message joins
the conversation of the message it replies to (`m.in_reply_to`, when that is in the
block), else of the person it addresses ("nick: ...", a shortened "dana:" for the one
recent speaker named so, a reply fallback, a user in its `m.mentions`), else that of
someone its text mentions, else its sender's own last one,
else, when only two people talk, the other's (unless it is a question right after the
other's question: a second topic); else it starts one
(indexer/ingest/addressing.py). A conversation past `max_bytes` goes on in a new window. All
of it looks back at most `gap_ms`, and never before the block's start.

The room's last block (still growing) is cut the same way as a closed one, so a live
room's recent talk is searchable conversation by conversation within seconds: every
step looks only at earlier messages, so appending messages never moves an earlier
one, and re-cutting the open block from its start reproduces its windows with the
new messages added (a message joins an existing window, or starts one).

The invariants the pipeline relies on (tests/indexer/pipeline/test_chunker.py):
- every message is in exactly one window; a window keeps timeline order;
- a window's id comes from its room and first event id;
- blocks are greedy from the first message, so re-chunking from any block start
  reproduces every later block and window;
- appending messages changes only the last block's windows, and of those only the
  ones the new messages join (or start).

The pipeline keeps the start of each timeline's last block (the event log's
`open_blocks`) and re-chunks from there, with whatever is pending.

`follow_replies=False` gives the windows of CHUNKER_VERSION 1: blocks of `max_bytes`,
one window each.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from ..clock import format_ts
from ..ingest.addressing import addressed, mentions, names, resolve
from ..records import ChunkPolicy, EventID, Message, RoomID, Window, WindowID

CHUNKER_VERSION = "4"  # 4: shortened names and "-" bridge prefixes are followed
DIALOGUE = 2  # this few people talking within the gap: they talk to each other


def window_id(room_id: RoomID, first_event_id: EventID) -> WindowID:
    digest = hashlib.sha256(f"{room_id}\x00{first_event_id}".encode()).hexdigest()
    return WindowID("w" + digest[:31])


def _size(m: Message) -> int:
    return len(m.body.encode("utf-8", "surrogatepass"))


def _cut(messages: Sequence[Message], max_bytes: int, gap_ms: int) -> list[tuple[Message, ...]]:
    """Greedy contiguous cut: a run closes when the next message would push it past
    max_bytes or arrives more than gap_ms after the previous one."""
    runs: list[tuple[Message, ...]] = []
    current: list[Message] = []
    size = 0
    for m in messages:
        s = _size(m)
        if current and (size + s > max_bytes or m.ts - current[-1].ts > gap_ms):
            runs.append(tuple(current))
            current, size = [], 0
        current.append(m)
        size += s
    if current:
        runs.append(tuple(current))
    return runs


def blocks(messages: Sequence[Message], policy: ChunkPolicy) -> list[tuple[Message, ...]]:
    """The room's timeline (one room, timeline order) cut into contiguous blocks."""
    return _cut(messages, policy.block_bytes, policy.gap_ms)


def conversations(block: Sequence[Message], policy: ChunkPolicy) -> list[tuple[Message, ...]]:
    """A block's messages grouped by conversation, in windows of at most
    max_bytes (or one message), ordered by their first message."""
    if not policy.follow_replies:
        return _cut(block, policy.max_bytes, policy.gap_ms)
    windows: list[list[Message]] = []
    sizes: list[int] = []
    current: list[int] = []  # conversation -> index of its current window
    by_name: dict[str, tuple[int, int]] = {}  # name -> (conversation, ts), their last message
    by_sender: dict[str, int] = {}  # sender -> ts of their last message
    by_event: dict[str, int] = {}  # event id -> its conversation
    previous: int | None = None  # conversation of the previous message
    last: Message | None = None  # the previous message

    def recent(name: str, m: Message) -> int | None:
        seen = by_name.get(name)
        return seen[0] if seen and m.ts - seen[1] <= policy.gap_ms else None

    def conversation_of(m: Message, own: frozenset[str]) -> int | None:
        if m.reply_to is not None and m.reply_to in by_event:  # a Matrix reply, in block
            return by_event[m.reply_to]
        for n in addressed(m.body):  # "nick: ..." or a reply fallback
            if n not in own and (c := recent(n, m)) is not None:
                return c
            # A shortened name ("dana:" for dana-7f3): the one recent speaker it fits.
            talking = [names(u) for u, ts in by_sender.items() if m.ts - ts <= policy.gap_ms]
            whole = resolve(n, talking)
            if whole and not whole & own:
                for full in sorted(whole):
                    if (c := recent(full, m)) is not None:
                        return c
        for user in m.mentions:  # m.mentions: a pill, or a reply's target sender
            for n in sorted(names(user)):
                if n not in own and (c := recent(n, m)) is not None:
                    return c
        for n in mentions(m.body):
            if n not in own and (c := recent(n, m)) is not None:
                return c
        for n in sorted(own):  # the sender's own conversation
            if (c := recent(n, m)) is not None:
                return c
        speaking = {u for u, ts in by_sender.items() if m.ts - ts <= policy.gap_ms}
        if (
            previous is not None
            and len(speaking | {m.sender}) <= DIALOGUE
            and not (_asks(m) and last is not None and _asks(last))
        ):
            # Two people alone in the room talk to each other; but a question right
            # after someone else's question is a second topic, not an answer.
            return previous
        return None

    for m in block:
        own = names(m.sender)
        conv = conversation_of(m, own)
        s = _size(m)
        if conv is None or sizes[current[conv]] + s > policy.max_bytes:
            windows.append([])
            sizes.append(0)
            if conv is None:
                conv = len(current)
                current.append(len(windows) - 1)
            else:  # the conversation goes on in a new window
                current[conv] = len(windows) - 1
        windows[current[conv]].append(m)
        sizes[current[conv]] += s
        for n in own:
            by_name[n] = (conv, m.ts)
        by_sender[m.sender] = m.ts
        by_event[m.event_id] = conv
        previous, last = conv, m
    return [tuple(w) for w in windows]


def _asks(m: Message) -> bool:
    return m.body.rstrip().endswith("?")


def chunk_blocks(
    messages: Sequence[Message], policy: ChunkPolicy
) -> list[list[tuple[Message, ...]]]:
    """Windows of messages (one room, timeline order), grouped by block."""
    return [conversations(b, policy) for b in blocks(messages, policy)]


def chunk(messages: Sequence[Message], policy: ChunkPolicy) -> list[tuple[Message, ...]]:
    """Split messages (one room, timeline order) into windows; every message lands in
    exactly one window."""
    return [w for b in chunk_blocks(messages, policy) for w in b]


def _window(ms: tuple[Message, ...], room_label: str) -> Window:
    return Window(window_id(ms[0].room_id, ms[0].event_id), ms[0].room_id, ms, room_label)


def build_blocks(
    messages: Sequence[Message], policy: ChunkPolicy, room_label: str = ""
) -> list[list[Window]]:
    return [[_window(ms, room_label) for ms in b] for b in chunk_blocks(messages, policy)]


def build_windows(
    messages: Sequence[Message], policy: ChunkPolicy, room_label: str = ""
) -> list[Window]:
    return [w for b in build_blocks(messages, policy, room_label) for w in b]


def commit_batches(
    grouped: Sequence[Sequence[Window]],
    pending: set[EventID],
    held: Mapping[EventID, WindowID],
    size: int,
) -> list[list[Window]]:
    """The windows of re-chunked blocks that differ from what the store holds, in the
    order the pipeline upserts and commits them. A window is unchanged when the store
    holds exactly its messages under its id (`held`: indexed event -> its window):
    it is not embedded again. The changed windows of every block holding an already
    indexed message go into the first batch: its events may move between windows,
    so their new windows must land together with the re-pointing of those events.
    Blocks of pending messages only follow, at most `size` windows a batch, split
    anywhere: a failure part-way leaves the rest pending."""
    members: dict[WindowID, set[EventID]] = {}
    for e, w in held.items():
        members.setdefault(w, set()).add(e)

    def changed(w: Window) -> bool:
        return members.get(w.window_id) != set(w.event_ids)

    first = [
        w
        for b in grouped
        if any(m.event_id not in pending for w in b for m in w.messages)
        for w in b
        if changed(w)
    ]
    rest = [
        w for b in grouped if all(m.event_id in pending for w in b for m in w.messages) for w in b
    ]
    out = [first] if first else []
    out += [rest[i : i + size] for i in range(0, len(rest), size)]
    return out


def document(window: Window) -> str:
    """The stored text: each message with its sender and time, one per line; a body's
    further lines are indented, so every message maps back to exactly one entry."""
    return "\n".join(
        f"[{format_ts(m.ts)}] {m.sender}: " + m.body.replace("\n", "\n  ") for m in window.messages
    )


def embed_text(window: Window) -> str:
    """What the model reads: the words, without ids and timestamps, which would spend
    the model's 256 word pieces on tokens that carry no meaning."""
    return "\n".join(m.body for m in window.messages)
