"""The moderators' report (DESIGN.md): per room, the questions asked, answered and
"nothing matches", the votes on the answers, and the questions nothing answered,
grouped by meaning, so that two phrasings of one question are one entry with a count.

    feedback tables (store/eventlog/feedback.py) -> figures and unanswered questions
    the unanswered texts -> embedded in one batch (the model's query side)
        -> each joins the closest group whose first question is at least
           MODEL_SAME_QUESTION similar (the same words count as the same question
           whatever the model), else starts a group
        -> entries, most asked first: the first phrasing, the count, the asking events

`matrix-sources report`, `!sources report` and the digest build it here; appservice
renders it. Blocking (the model): off the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..config.per_model import MODEL_SAME_QUESTION
from ..models.embedder import Embedder, query_side
from ..records import EventID, RoomID
from ..store.eventlog.feedback import FeedbackTables, RoomFigures, Unanswered

DAY_MS = 24 * 3600 * 1000
DEFAULT_SAME_QUESTION = MODEL_SAME_QUESTION["all-MiniLM-L6-v2"]


@dataclass(frozen=True, slots=True)
class Gap:
    """Questions of one meaning that got "nothing matches"."""

    text: str  # the first phrasing asked
    count: int
    event_ids: tuple[EventID, ...]  # the asking events, oldest first


@dataclass(frozen=True, slots=True)
class RoomReport:
    room_id: RoomID
    room_label: str
    figures: RoomFigures
    unanswered: tuple[Gap, ...] = ()

    def to_json(self) -> dict[str, object]:
        f = self.figures
        return {
            "room_id": self.room_id,
            "room_label": self.room_label,
            "asked": f.asked,
            "answered": f.answered,
            "nothing_matched": f.nothing_matched,
            "up": f.up,
            "down": f.down,
            "solved": f.solved,
            "unanswered": [
                {"text": g.text, "count": g.count, "event_ids": list(g.event_ids)}
                for g in self.unanswered
            ],
        }


@dataclass(frozen=True, slots=True)
class Report:
    rooms: tuple[RoomReport, ...]
    since_ms: int  # the period it covers, to `until_ms`
    until_ms: int

    def to_json(self) -> dict[str, object]:
        return {"rooms": [r.to_json() for r in self.rooms]}


def same_question(model: str) -> float:
    """The similarity at which two questions are one, for the embedder `model`."""
    return MODEL_SAME_QUESTION.get(model, DEFAULT_SAME_QUESTION)


def group(
    questions: Sequence[Unanswered], embedder: Embedder | None, threshold: float
) -> list[Gap]:
    """The questions by meaning, most asked first (then the first asked first). Without
    an embedder only the same words, whatever their case and spacing, are one."""
    if not questions:
        return []
    keys = [" ".join(q.text.casefold().split()) for q in questions]
    if embedder is not None:
        vectors = np.asarray(
            query_side(embedder).encode(list(dict.fromkeys(keys))), dtype=np.float32
        )
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        of = dict(zip(dict.fromkeys(keys), vectors, strict=True))
    members: list[list[int]] = []
    for i, key in enumerate(keys):
        best, best_sim = None, threshold
        for g, group_members in enumerate(members):
            first = keys[group_members[0]]
            sim = (
                1.0
                if first == key
                else (float(of[first] @ of[key]) if embedder is not None else -1.0)
            )
            if sim >= best_sim:
                best, best_sim = g, sim
        if best is None:
            members.append([i])
        else:
            members[best].append(i)
    gaps = [
        Gap(questions[m[0]].text, len(m), tuple(questions[i].event_id for i in m)) for m in members
    ]
    order = {id(g): m[0] for g, m in zip(gaps, members, strict=True)}
    return sorted(gaps, key=lambda g: (-g.count, order[id(g)]))


def build_report(
    feedback: FeedbackTables,
    rooms: Sequence[tuple[RoomID, str]],
    since_ms: int,
    until_ms: int,
    embedder: Embedder | None = None,
    threshold: float = DEFAULT_SAME_QUESTION,
) -> Report:
    """The report over `rooms` ((room id, label), in the order given) for the period.
    The embedder is asked only when a room has unanswered questions."""
    out = []
    for room_id, label in rooms:
        figures = feedback.figures(room_id, since_ms)
        gaps = group(feedback.unanswered(room_id, since_ms), embedder, threshold)
        out.append(RoomReport(room_id, label, figures, tuple(gaps)))
    return Report(tuple(out), since_ms, until_ms)


def report_rooms(
    feedback: FeedbackTables, allowlist: Sequence[RoomID], since_ms: int, labels: dict[RoomID, str]
) -> list[tuple[RoomID, str]]:
    """Every room the report covers: the allowlisted ones, and any other with feedback
    in the period (a room listed then); by label, then id."""
    rooms = set(allowlist) | set(feedback.rooms(since_ms))
    return sorted(
        ((r, labels.get(r, "")) for r in rooms),
        key=lambda rl: (rl[1].casefold() or "\uffff", rl[0]),
    )
