"""What a person reads: each chat hit with the answers it carries and the lines to quote.

    hit (a window) --event log--> its messages, as they are now
        --linkage.py--> the later messages that respond to its matched question,
                        from whichever window they are in, within the horizon
        --one encode call for every candidate line of every hit-->
        the matched question (the line closest to the query) and the responses by
        others that say most about it, chosen by meaning

A line's score is its cosine similarity to the nearest query text, plus, for a
response to the matched question, its similarity to that question (an answer often
shares no words with the query but speaks to the question). Lines of a few
characters ("yes", "?") say nothing on their own and are never chosen over a longer
one. Text is read from the event log at presentation time, so an edit shows its new
text and a redacted message is quoted nowhere: not in the window, not as an answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Sequence

from .embedder import Embedder
from .eventlog import EventLog
from .linkage import Horizon, Link, responses
from .records import CORPUS_CHAT, EventID, Hit, Line, Message

MAX_ANSWERS = 12  # linked answers carried (and cited) per hit
SHOWN_ANSWERS = 2  # responses quoted under the matched question
SHOWN_LINES = 3  # lines quoted per hit
MIN_LINE_CHARS = 12  # shorter lines are quoted only when nothing longer responds
_WORDY = re.compile(r"\w", re.UNICODE)


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


@dataclass(frozen=True, slots=True)
class _Candidate:
    message: Message
    linked: str  # "" for the window's own messages
    responds: bool  # a response by someone else to the matched question


@dataclass(frozen=True, slots=True)
class _Plan:
    window: list[Message]
    candidates: list[_Candidate]  # the window's messages, then every linked answer
    links: dict[EventID, list[Link]]  # a window message -> the responses to it


@dataclass
class Presenter:
    eventlog: EventLog
    embedder: Embedder
    horizon: Horizon = Horizon()
    shown_lines: int = SHOWN_LINES
    shown_answers: int = SHOWN_ANSWERS

    def present(self, hits: Sequence[Hit], query_vectors: Sequence[Sequence[float]]
                ) -> list[Hit]:
        """The hits with their answers and quoted lines; a chat hit whose window has
        no message left (redacted meanwhile) is dropped. Reference hits pass as
        they are."""
        plans = [self._plan(h) if h.corpus == CORPUS_CHAT else None for h in hits]
        texts = [c.message.body for p in plans if p for c in p.candidates]
        vectors = iter(self.embedder.encode(texts)) if texts else iter(())
        out = []
        for hit, plan in zip(hits, plans):
            if plan is None:
                out.append(hit)
                continue
            if not plan.window:
                continue
            vecs = [next(vectors) for _ in plan.candidates]
            out.append(self._choose(hit, plan, vecs, query_vectors))
        return out

    def _plan(self, hit: Hit) -> _Plan:
        window = self.eventlog.window_messages(hit.window_id)
        if not window:
            return _Plan([], [], {})
        in_window = {m.event_id for m in window}
        root = self.eventlog.thread_root_of(window[0].event_id)
        timeline = self.eventlog.timeline_after(
            hit.room_id, root, window[0].ts, window[-1].ts + self.horizon.ms,
            len(window) + self.horizon.messages * 2, roots=tuple(in_window))
        thread_of = {m.event_id: t for m, t in timeline if t is not None}
        later = [m for m, _ in timeline]
        position = {m.event_id: i for i, m in enumerate(later)}
        # Every message of the window may be the question; the one matching the query
        # is chosen once the vectors are in (_choose), so link for each asker's lines.
        links: dict[EventID, list] = {}
        for q in window:
            at = position.get(q.event_id)
            if at is not None:
                links[q.event_id] = responses(q, later[at + 1:], self.horizon, thread_of)
        seen: set[EventID] = set(in_window)
        candidates = [_Candidate(m, "", False) for m in window]
        for q in window:
            for link in links.get(q.event_id, ()):
                a = link.answer
                if a.event_id not in seen:
                    seen.add(a.event_id)
                    candidates.append(_Candidate(a, link.rule, False))
        return _Plan(window, candidates, links)

    def _choose(self, hit: Hit, plan: _Plan, vecs: list,
                query_vectors: Sequence[Sequence[float]]) -> Hit:
        window, candidates = plan.window, plan.candidates
        to_query = [max(_dot(v, q) for q in query_vectors) for v in vecs]
        # The matched question: the window's line closest to the query.
        n = len(window)
        anchor = max(range(n), key=lambda i: (to_query[i], -i))
        asker = window[anchor].sender
        # Responses to the asker's lines of the window from their anchor on: linked
        # answers (recomputed for this hit) and the window's own later lines by others.
        links = {}
        for q in window[anchor:]:
            if q.sender == asker:
                for link in plan.links.get(q.event_id, ()):
                    links.setdefault(link.answer.event_id, link.rule)
        after = window[anchor].ts
        responding = [i for i, c in enumerate(candidates)
                      if c.message.sender != asker and c.message.ts >= after
                      and (i < n or c.message.event_id in links)]
        answers = [candidates[i] for i in range(n, len(candidates))
                   if candidates[i].message.event_id in links][:MAX_ANSWERS]

        def score(i: int) -> float:
            s = to_query[i]
            if i in responding_set:
                s += _dot(vecs[i], vecs[anchor])
            return s

        responding_set = set(responding)
        chosen = [anchor]
        picked = sorted(responding, key=lambda i: (not _says_something(candidates[i]),
                                                   -score(i), i))
        chosen += [i for i in picked if i in responding_set][:self.shown_answers]
        rest = sorted((i for i in range(n) if i not in chosen),
                      key=lambda i: (not _says_something(candidates[i]), -to_query[i], i))
        chosen += rest[:max(0, self.shown_lines - len(chosen))]
        shown = sorted(chosen[:self.shown_lines], key=lambda i: (candidates[i].message.ts, i))
        keep = {c.message.event_id for c in answers}
        return replace(
            hit, text=_document(window), event_ids=tuple(m.event_id for m in window),
            senders=tuple(dict.fromkeys(m.sender for m in window)),
            ts_first=window[0].ts, ts_last=window[-1].ts,
            answers=tuple(_line(c.message, links.get(c.message.event_id, c.linked))
                          for c in answers),
            shown=tuple(_line(candidates[i].message,
                              links.get(candidates[i].message.event_id, "")
                              if candidates[i].message.event_id in keep else "")
                        for i in shown))


def _says_something(c: _Candidate) -> bool:
    body = c.message.body.strip()
    return len(body) >= MIN_LINE_CHARS and bool(_WORDY.search(body))


def _line(m: Message, linked: str) -> Line:
    return Line(m.event_id, m.sender, m.ts, m.body, linked)


def _document(window: list[Message]) -> str:
    from .chunker import document
    from .records import Window, WindowID

    return document(Window(WindowID(""), window[0].room_id, tuple(window)))
