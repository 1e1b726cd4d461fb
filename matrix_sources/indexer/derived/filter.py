"""The derived filter: is this message text the system itself emitted?

    message --normalise--> words --(fewer than min_words: never derived)-->
        shingles (k words) --inverted index--> artifacts sharing any shingle
        score = |shingles(message) ∩ shingles(section)| / |shingles(message)|
        derived if score >= threshold[kind of that artifact]   (best match wins)

Only artifacts emitted before the message's text arrived (appended, or last edited:
`text_at` in the event log, on this service's clock; not origin_server_ts, which the
sender's server sets and could date a paste back) count: a message written before the
bot quoted it is the original, evidence.

Containment of the *message* in one artifact *section* (an answer's hit, a reference
section), not overlap with a whole document: quoting ten lines of a fifty-line section
scores high, while the same lines are a fifth of the section. One matcher and one
normaliser serve both kinds; only the threshold differs (documentation is quoted
partially, with people's own words around it, so its threshold is lower).

`DerivedFilter.screen` is the pipeline's hook, before chunking: a derived message gets a
`derived_excluded` journal entry (ids, artifact, score, threshold; never text), is tagged
`derived` in the event log with the same facts, and never reaches the collection. An edit
is judged again (`withdraw_edited`, before its window is re-cut): an indexed message
edited into a quote leaves the collection as a redacted one does, vector and all.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from ..config import DerivedConfig
from ..records import (
    ARTIFACT_ANSWER,
    ARTIFACT_REFERENCE,
    Artifact,
    EventID,
    Message,
    RoomID,
    WindowID,
)
from ..store.eventlog.log import EventLog
from ..store.eventlog.rows import DerivedMark
from ..store.journal import Journal
from .manifest import ArtifactInfo, Manifest, emitted_iso
from .normalise import normalise, sha256_normalised, shingles, words

log = logging.getLogger(__name__)
JOURNAL_KIND = "derived_excluded"


@dataclass(frozen=True, slots=True)
class DerivedMatch:
    artifact: str  # the artifact's name
    kind: str  # answer | reference
    score: float  # containment of the message in the artifact section, 0..1
    threshold: float  # the threshold of that kind in force when judged
    sha256: str  # the artifact's content hash: which version of a section matched


@dataclass(frozen=True, slots=True)
class EmittedSection:
    """One section of an answer the bot sent: a hit's header and quoted lines."""

    text: str
    sources: tuple[EventID, ...] = ()  # the events of the quoted window
    shown: tuple[EventID, ...] = ()  # the events whose lines the reply showed


def answer_prefix(reply_event_id: str) -> str:
    """What every answer artifact of one reply is named with: `answer:$reply#n`, one a hit."""
    return f"answer:{reply_event_id}#"


def answer_artifacts(
    reply_event_id: str, sections: Sequence[EmittedSection], shingle_size: int, emitted_ms: int
) -> list[Artifact]:
    """`emitted_ms`: when the reply went out (before its send began: nobody can have
    pasted it earlier)."""
    emitted = emitted_iso(emitted_ms)
    return [
        Artifact(
            ARTIFACT_ANSWER,
            f"{answer_prefix(reply_event_id)}{n}",
            sha256_normalised(s.text),
            shingles(words(s.text), shingle_size),
            emitted,
            shingle_size,
            sources=s.sources,
        )
        for n, s in enumerate(sections, start=1)
        if normalise(s.text)
    ]


class Matcher:
    def __init__(self, manifest: Manifest, cfg: DerivedConfig) -> None:
        self.manifest = manifest
        self.cfg = cfg
        self.thresholds = {
            ARTIFACT_ANSWER: cfg.answer_threshold,
            ARTIFACT_REFERENCE: cfg.reference_threshold,
        }

    def refresh(self) -> None:
        self.manifest.refresh()

    def candidates(
        self,
        text: str,
        exclude_sources: Collection[str] = (),
        min_score: float = 0.0,
        written_ms: int | None = None,
    ) -> list[tuple[ArtifactInfo, float]]:
        """Artifacts sharing shingles with the text (at least min_score of them) and
        their scores, best first; none below the minimum length. Artifacts quoting one
        of `exclude_sources` are left out: an original is never derived from an answer
        that quoted it. With `written_ms` (when the text arrived), so are artifacts
        emitted after it: text older than an artifact is evidence, not derived from it."""
        ws = words(text)
        if len(ws) < self.cfg.min_words:
            return []
        sh = shingles(ws, self.cfg.shingle_size)
        min_count = max(1, math.ceil(min_score * len(sh) - 1e-9))
        exclude = set(exclude_sources)
        out = [
            (info, n / len(sh))
            for info, n in self.manifest.overlaps(sh, min_count)
            if not (info.sources and any(s in exclude for s in info.sources))
            and (written_ms is None or info.emitted_ms <= written_ms)
        ]
        out.sort(key=lambda c: (-c[1], c[0].kind, c[0].name))
        return out

    def match(
        self, text: str, exclude_sources: Collection[str] = (), written_ms: int | None = None
    ) -> DerivedMatch | None:
        lowest = min(self.thresholds.values())  # nothing below it can match any kind
        for info, score in self.candidates(text, exclude_sources, lowest, written_ms):
            threshold = self.thresholds[info.kind]
            if score >= threshold:
                return DerivedMatch(info.name, info.kind, score, threshold, info.sha256)
        return None


@dataclass
class DerivedFilter:
    """The pipeline's hook: judge pending messages before they are chunked."""

    matcher: Matcher
    eventlog: EventLog
    journal: Journal
    excluded: int = 0
    judged: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)  # exclusions per artifact kind

    def screen(
        self, room_id: RoomID, tail: list[Message], pending: set[EventID]
    ) -> tuple[list[Message], set[EventID]]:
        """Tag the derived among the pending messages; return the tail and pending set
        without them. Indexed messages of the tail are not judged again here (an edit
        judges its message again: `withdraw_edited`)."""
        found = self._judge([m for m in tail if m.event_id in pending])
        if not found:
            return tail, pending
        self._journal(found)
        self.eventlog.derived.mark_derived(self._rows(found))
        self._count(room_id, found)
        drop = {m.event_id for m, _ in found}
        return [m for m in tail if m.event_id not in drop], pending - drop

    def withdraw_edited(self, windows: dict[WindowID, list[Message]]) -> set[WindowID]:
        """The indexed messages of windows an edit changed, judged as they read now: the
        derived leave the index like a redaction (tagged derived, text kept in the event
        log; their windows re-cut without them and their old vectors compacted out of
        the store's files). Returns the windows that lost a message."""
        found = self._judge([m for ms in windows.values() for m in ms])
        if not found:
            return set()
        self._journal(found)
        lost = self.eventlog.derived.withdraw_derived(self._rows(found))
        for room_id in sorted({m.room_id for m, _ in found}):
            self._count(room_id, [f for f in found if f[0].room_id == room_id])
        return set(lost)

    def _judge(self, messages: list[Message]) -> list[tuple[Message, DerivedMatch]]:
        if not messages:
            return []
        self.matcher.refresh()
        if not len(self.matcher.manifest):
            return []
        written = self.eventlog.derived.text_times(m.event_id for m in messages)
        found = []
        for m in messages:
            self.judged += 1
            match = self.matcher.match(m.body, (m.event_id,), written.get(m.event_id))
            if match is not None:
                found.append((m, match))
        return found

    def _journal(self, found: list[tuple[Message, DerivedMatch]]) -> None:
        # Journal first: a crash before the event log is written re-judges the message
        # (a second entry), never leaves an exclusion nobody can audit.
        k = self.matcher.cfg.shingle_size
        for m, match in found:
            self.journal.write(
                JOURNAL_KIND,
                room_id=m.room_id,
                event_id=m.event_id,
                artifact=match.artifact,
                artifact_kind=match.kind,
                artifact_sha256=match.sha256,
                score=match.score,
                threshold=match.threshold,
                shingle_size=k,
                min_words=self.matcher.cfg.min_words,
            )

    @staticmethod
    def _rows(found: list[tuple[Message, DerivedMatch]]) -> list[DerivedMark]:
        return [
            DerivedMark(m.event_id, match.artifact, match.kind, match.score, match.threshold)
            for m, match in found
        ]

    def _count(self, room_id: RoomID, found: list[tuple[Message, DerivedMatch]]) -> None:
        self.excluded += len(found)
        for _, match in found:
            self.by_kind[match.kind] = self.by_kind.get(match.kind, 0) + 1
        log.info("derived_excluded", extra={"room_id": room_id, "events": len(found)})
