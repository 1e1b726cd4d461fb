"""Cutting a room's timeline into windows of consecutive messages.

A window closes when the next message would push it past `max_bytes` of message text
or arrives more than `gap_ms` after the previous one. The cut is greedy from the first
message, so re-chunking from any window start reproduces every later window exactly:
the pipeline re-chunks only a room's open window plus what is new.

A window's id is derived from its room and first event id, so the same window upserted
twice (a retry, a restart after a crash) overwrites itself instead of duplicating.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Sequence

from .records import EventID, Message, RoomID, Window, WindowID

CHUNKER_VERSION = "1"


@dataclass(frozen=True, slots=True)
class ChunkPolicy:
    max_bytes: int = 1000
    gap_ms: int = 30 * 60 * 1000


def window_id(room_id: RoomID, first_event_id: EventID) -> WindowID:
    digest = hashlib.sha256(f"{room_id}\x00{first_event_id}".encode()).hexdigest()
    return WindowID("w" + digest[:31])


def _size(m: Message) -> int:
    return len(m.body.encode("utf-8", "surrogatepass"))


def chunk(messages: Sequence[Message], policy: ChunkPolicy) -> list[tuple[Message, ...]]:
    """Split messages (one room, timeline order) into windows; every message lands in
    exactly one window, order kept."""
    windows: list[tuple[Message, ...]] = []
    current: list[Message] = []
    size = 0
    for m in messages:
        s = _size(m)
        if current and (size + s > policy.max_bytes or m.ts - current[-1].ts > policy.gap_ms):
            windows.append(tuple(current))
            current, size = [], 0
        current.append(m)
        size += s
    if current:
        windows.append(tuple(current))
    return windows


def build_windows(messages: Sequence[Message], policy: ChunkPolicy,
                  room_label: str = "") -> list[Window]:
    return [Window(window_id(ms[0].room_id, ms[0].event_id), ms[0].room_id, ms, room_label)
            for ms in chunk(messages, policy)]


def format_ts(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def document(window: Window) -> str:
    """The stored text: each message with its sender and time, one per line; a body's
    further lines are indented, so every message maps back to exactly one entry."""
    return "\n".join(f"[{format_ts(m.ts)}] {m.sender}: " + m.body.replace("\n", "\n  ")
                     for m in window.messages)


def parse_document(doc: str) -> list[tuple[str, str, str]]:
    """Split a stored document back into (time, sender, body), one per message."""
    out: list[tuple[str, str, str]] = []
    for line in doc.split("\n"):
        if line.startswith("  ") and out:
            stamp, sender, body = out[-1]
            out[-1] = (stamp, sender, body + "\n" + line[2:])
        elif line.startswith("[") and "] " in line:
            stamp, rest = line[1:].split("] ", 1)
            sender, _, body = rest.partition(": ")
            out.append((stamp, sender, body))
        else:
            out.append(("", "", line))
    return out


def embed_text(window: Window) -> str:
    """What the model reads: the words, without ids and timestamps, which would spend
    the model's 256 word pieces on tokens that carry no meaning."""
    return "\n".join(m.body for m in window.messages)


def all_event_ids(windows: Iterable[Window]) -> list[EventID]:
    return [e for w in windows for e in w.event_ids]
