"""Typed records that cross the boundary between `appservice/` and `indexer/`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NewType

RoomID = NewType("RoomID", str)
EventID = NewType("EventID", str)
UserID = NewType("UserID", str)
WindowID = NewType("WindowID", str)

CORPUS_CHAT = "chat"
CORPUS_REFERENCE = "reference"


class EventStatus(str, Enum):
    """Where an event of the event log stands in the pipeline."""

    PENDING = "pending"  # appended, not yet in a committed window
    INDEXED = "indexed"  # part of a window the store acknowledged
    PURGED = "purged"  # its room was refused after the fact; text dropped
    DERIVED = "derived"  # quotes an artifact (DESIGN.md "Derived filter"); kept, not indexed
    REDACTED = "redacted"  # redacted in the room; text dropped everywhere


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message that passed the gate: what a window is made of."""

    event_id: EventID
    room_id: RoomID
    sender: UserID
    ts: int  # origin_server_ts, milliseconds
    body: str
    # The event this one replies to (m.relates_to / m.in_reply_to), if any: how the
    # chunker follows a reply that names no one (clients stopped sending the "> <@bob>"
    # fallback, Matrix 1.13).
    reply_to: EventID | None = None
    # Users the message mentions (`m.mentions.user_ids`): who it is addressed to when
    # its text does not say (a reply's target sender is among them).
    mentions: tuple[UserID, ...] = ()


@dataclass(frozen=True, slots=True)
class Window:
    """Consecutive messages of one room, embedded and stored as one document."""

    window_id: WindowID
    room_id: RoomID
    messages: tuple[Message, ...]
    room_label: str = ""  # alias or name, for citations
    corpus: str = CORPUS_CHAT

    @property
    def event_ids(self) -> list[EventID]:
        return [m.event_id for m in self.messages]

    @property
    def senders(self) -> list[UserID]:
        """Distinct senders in order of first appearance."""
        return list(dict.fromkeys(m.sender for m in self.messages))

    @property
    def ts_first(self) -> int:
        return self.messages[0].ts

    @property
    def ts_last(self) -> int:
        return self.messages[-1].ts


@dataclass(frozen=True, slots=True)
class RefSource:
    """Where a reference window comes from: its corpus, file and heading path."""

    corpus_name: str
    file: str
    heading: str  # "Disk › Cleanup"; "" before the first heading

    @property
    def label(self) -> str:
        return f"{self.file} › {self.heading}" if self.heading else self.file


@dataclass(frozen=True, slots=True)
class Line:
    """One message as a reply shows it: its text as the event log holds it now."""

    event_id: EventID
    sender: UserID
    ts: int
    body: str
    # A linked answer (indexer/search/linkage.py) from outside the hit's window: the rule
    # that linked it (reply, thread, mention, address, next, more, thanked, aside,
    # conversation: a line of the conversation's later part, present.FROM_QUESTION);
    # "" for the window's.
    linked: str = ""


def bodies_of(corpus: str, text: str, lines: tuple[Line, ...]) -> tuple[str, ...]:
    """What a query's words are matched in: a chat window's message bodies, a reference
    chunk's text; never a document's sender ids and times."""
    return (text,) if corpus == CORPUS_REFERENCE else tuple(line.body for line in lines)


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: a stored window with its fused score, and once presented
    (indexer/search/present.py) the answers it carries and the lines a reply quotes."""

    window_id: WindowID
    room_id: RoomID
    room_label: str
    corpus: str
    event_ids: tuple[EventID, ...]
    senders: tuple[UserID, ...]
    ts_first: int
    ts_last: int
    score: float
    text: str
    # Per query text: (rank starting at 1, cosine similarity), None when absent.
    ranks: tuple[tuple[int, float] | None, ...] = field(default=())
    ref: RefSource | None = None  # set for corpus reference: cite file and heading
    # The best cosine similarity of the window to any query text (the abstain floor).
    similarity: float | None = None
    # Linked answers from other windows, in timeline order: cited with the hit.
    answers: tuple[Line, ...] = ()
    # The lines a reply quotes for this hit, in timeline order.
    shown: tuple[Line, ...] = ()
    # A chat window's messages as the event log holds them now (`text` is their
    # document, which nothing reads back).
    lines: tuple[Line, ...] = ()
    # The room's topic as it is now (the reply shows it over the room's link).
    room_topic: str = ""

    @property
    def bodies(self) -> tuple[str, ...]:
        """What the query's words are matched in: a chat window's message bodies, a
        reference chunk's text (never the document's sender ids and times)."""
        return bodies_of(self.corpus, self.text, self.lines)

    @property
    def cited_event_ids(self) -> tuple[EventID, ...]:
        """Every event the hit cites: its window's, then its linked answers'."""
        return self.event_ids + tuple(a.event_id for a in self.answers)

    @property
    def first_event_id(self) -> EventID:
        # A reference window has no events.
        return self.event_ids[0] if self.event_ids else EventID("")

    @property
    def last_event_id(self) -> EventID:
        return self.event_ids[-1] if self.event_ids else EventID("")

    def to_json(self) -> dict[str, Any]:
        return {
            "window_id": self.window_id,
            "room_id": self.room_id,
            "room_label": self.room_label,
            "corpus": self.corpus,
            "event_ids": list(self.cited_event_ids),
            "window_event_ids": list(self.event_ids),
            "answer_event_ids": [a.event_id for a in self.answers],
            # Who answered and when (their text is in `shown` when the reply quotes it).
            "answers": [
                {"event_id": a.event_id, "sender": a.sender, "ts": a.ts, "linked": a.linked}
                for a in self.answers
            ],
            "shown_event_ids": [ln.event_id for ln in self.shown],
            "shown": [
                {
                    "event_id": ln.event_id,
                    "sender": ln.sender,
                    "ts": ln.ts,
                    "body": ln.body,
                    **({"linked": ln.linked} if ln.linked else {}),
                }
                for ln in self.shown
            ],
            "similarity": self.similarity,
            "first_event_id": self.first_event_id,
            "last_event_id": self.last_event_id,
            "senders": list(self.senders),
            "ts_first": self.ts_first,
            "ts_last": self.ts_last,
            "score": self.score,
            "text": self.text,
            **(
                {
                    "ref": {
                        "corpus_name": self.ref.corpus_name,
                        "file": self.ref.file,
                        "heading": self.ref.heading,
                    }
                }
                if self.ref
                else {}
            ),
        }

    @classmethod
    def from_search_json(cls, d: dict[str, Any]) -> Hit:
        """A hit of a search answered elsewhere (the search API), from `to_json`: whole,
        as far as a reply renders it and `to_json` writes it again (not its ranks)."""

        def line(x: dict[str, Any], body: str) -> Line:
            return Line(
                EventID(x["event_id"]), UserID(x["sender"]), int(x["ts"]), body, x.get("linked", "")
            )

        ref = d.get("ref")
        return cls(
            WindowID(d["window_id"]),
            RoomID(d["room_id"]),
            d["room_label"],
            d["corpus"],
            tuple(EventID(e) for e in d["window_event_ids"]),
            tuple(UserID(s) for s in d["senders"]),
            int(d["ts_first"]),
            int(d["ts_last"]),
            float(d["score"]),
            d["text"],
            ref=RefSource(ref["corpus_name"], ref["file"], ref["heading"]) if ref else None,
            similarity=d.get("similarity"),
            answers=tuple(line(a, "") for a in d.get("answers", [])),
            shown=tuple(line(s, s["body"]) for s in d.get("shown", [])),
        )

    @classmethod
    def from_json(cls, d: dict[str, Any], shown: tuple[Line, ...] = ()) -> Hit:
        """The hit `to_json` wrote, as far as that keeps it: its window's events, not
        its linked answers' lines (a recorded answer keeps no text: answers.py). `shown`:
        the lines to quote, read anew from the event log."""
        ids = tuple(EventID(e) for e in d.get("window_event_ids", d.get("event_ids", []))) or (
            EventID(d.get("first_event_id") or ""),
        )
        ref = d.get("ref")
        return cls(
            WindowID(d.get("window_id", "")),
            RoomID(d.get("room_id", "")),
            d.get("room_label", ""),
            d.get("corpus", CORPUS_CHAT),
            ids,
            tuple(UserID(s) for s in d.get("senders", [])),
            int(d.get("ts_first", 0)),
            int(d.get("ts_last", 0)),
            float(d.get("score", 0.0)),
            d.get("text", ""),
            ref=RefSource(ref["corpus_name"], ref["file"], ref["heading"]) if ref else None,
            similarity=d.get("similarity"),
            shown=shown,
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the gate would not let an event (or a whole room) in. Never carries text."""

    rule: str
    room_id: RoomID
    event_id: EventID | None = None
    detail: str = ""
    whole_room: bool = False


ARTIFACT_ANSWER = "answer"
ARTIFACT_REFERENCE = "reference"
ARTIFACT_KINDS = (ARTIFACT_ANSWER, ARTIFACT_REFERENCE)


@dataclass(frozen=True, slots=True)
class Artifact:
    """Text the system itself emitted, as the manifest holds it: shingle hashes, no text."""

    kind: str  # answer | reference
    name: str  # answer:<reply event id>#<n> | <corpus>/<file>#<heading path>
    sha256: str  # of the normalised text
    shingles: frozenset[int]
    emitted_at: str  # ISO 8601, UTC
    shingle_size: int
    corpus: str = ""  # reference: its corpus, which `ref rm` removes whole
    # answer: the events it quoted. Those are the originals, never derived from it.
    sources: tuple[EventID, ...] = ()


@dataclass(frozen=True, slots=True)
class ChunkPolicy:
    """How the chunker cuts windows (config.yaml's index.window_* keys)."""

    max_bytes: int = 500  # a window's message text; 500 bytes of chat is ~130 word pieces
    gap_ms: int = 30 * 60 * 1000  # a silence this long ends a block
    block_windows: int = 8  # a block holds up to this many windows' worth of text
    follow_replies: bool = True

    @property
    def block_bytes(self) -> int:
        return self.max_bytes * self.block_windows if self.follow_replies else self.max_bytes
