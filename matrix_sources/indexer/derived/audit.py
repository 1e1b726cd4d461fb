"""`matrix-sources verify`: checks over the index that an admin (or CI) can run.

Each check is a function returning a `CheckResult`; the CLI runs the ones asked for
(flags combine) and exits non-zero if any failed. Listings (`exclusions`) never fail.

    derived_filter   every indexed window, message by message and as a whole, against
                     the live artifacts emitted before its text arrived (as the filter
                     judges): a match is a leak (derived text in evidence)
    exclusions       the `derived_excluded` journal entries since T, for review of
                     false positives: artifact, score, threshold in force
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ..clock import format_ts
from ..records import CORPUS_REFERENCE, EventID, Message
from ..store.eventlog.log import EventLog
from ..store.journal import Journal
from ..store.vectors.chroma import ChromaStore
from ..store.vectors.points import StoredWindow
from .filter import JOURNAL_KIND, DerivedMatch, Matcher

PAGE = 500
_RELATIVE = re.compile(r"(\d+)\s*([mhdw])")
_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    ok: bool
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Leak:
    window_id: str
    room_id: str
    event_id: str | None  # None: the window's text as a whole matched
    match: DerivedMatch


def find_leaks(store: ChromaStore, eventlog: EventLog, matcher: Matcher) -> tuple[int, list[Leak]]:
    """(windows checked, leaks): each indexed window's messages as the event log holds
    them now, each held only against the artifacts emitted before its text arrived, as
    the filter judged it. Reference chunks are the artifacts themselves and are
    skipped; an answer never counts against the windows it quoted."""
    matcher.refresh()
    checked, leaks = 0, []
    chat = (w for w in store.iter_windows(PAGE) if w.corpus != CORPUS_REFERENCE)
    while page := list(itertools.islice(chat, PAGE)):
        messages = eventlog.texts.windows_messages([w.window_id for w in page])
        written = eventlog.derived.text_times(m.event_id for ms in messages.values() for m in ms)
        for w in page:
            checked += 1
            leaks += _leaks(w, messages.get(w.window_id, ()), matcher, written)
    return checked, leaks


def _leaks(
    w: StoredWindow, messages: Sequence[Message], matcher: Matcher, written: dict[EventID, int]
) -> list[Leak]:
    """A window's messages matching an artifact, or else the window as a whole."""
    leaks = []
    for m in messages:
        match = matcher.match(m.body, w.event_ids, written.get(m.event_id))
        if match is not None:
            leaks.append(Leak(w.window_id, w.room_id, m.event_id, match))
    if leaks or len(messages) < 2:
        return leaks
    # A quote split over several short messages shows only in the window as a whole:
    # its messages from each one's arrival on, against the artifacts emitted before it.
    times: Sequence[int | None] = sorted(
        {written[m.event_id] for m in messages if m.event_id in written}
    ) or [None]
    for since in times:
        text = "\n".join(
            m.body for m in messages if since is None or written.get(m.event_id, since) >= since
        )
        if (match := matcher.match(text, w.event_ids, since)) is not None:
            return [Leak(w.window_id, w.room_id, None, match)]
    return []


def check_derived_filter(store: ChromaStore, eventlog: EventLog, matcher: Matcher) -> CheckResult:
    checked, leaks = find_leaks(store, eventlog, matcher)
    live = len(matcher.manifest)
    if not leaks:
        return CheckResult(
            "derived-filter",
            True,
            (
                f"derived-filter: ok, {checked} indexed windows checked against {live} live "
                "artifacts",
            ),
        )
    windows = sorted({leak.window_id for leak in leaks})
    lines = [
        f"derived-filter: FAILED, {len(windows)} indexed window(s) match a live "
        f"artifact ({checked} checked against {live})"
    ]
    for leak in leaks:
        m = leak.match
        where = f"event {leak.event_id}" if leak.event_id else "whole window"
        lines.append(
            f"  window {leak.window_id} room {leak.room_id or '-'} {where}: "
            f"{m.kind} {m.artifact} score {m.score:.3f} >= threshold {m.threshold:.2f}"
        )
    return CheckResult("derived-filter", False, tuple(lines))


def parse_since(text: str, now_ms: int) -> int:
    """`7d`, `24h`, `30m`, `2w` before now, or an ISO date/time (UTC unless it says)."""
    text = text.strip()
    if m := _RELATIVE.fullmatch(text):
        return now_ms - int(m.group(1)) * _UNIT_MS[m.group(2)]
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r}: give a duration (30m, 24h, 7d, 2w) or an ISO "
            "date or time (2025-01-31, 2025-01-31T12:00)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def exclusions(journal: Journal, since_ms: int | None = None) -> list[dict]:
    return [
        e
        for e in journal.read(kind=JOURNAL_KIND)
        if since_ms is None or int(e.get("ts", 0)) >= since_ms
    ]


def check_exclusions(journal: Journal, since_ms: int | None = None) -> CheckResult:
    entries = exclusions(journal, since_ms)
    since = f" since {format_ts(since_ms)}" if since_ms is not None else ""
    lines = [f"exclusions: {len(entries)}{since}"]
    for e in entries:
        lines.append(
            f"  {format_ts(int(e.get('ts', 0)))}  {e.get('room_id', '-')}  "
            f"{e.get('event_id', '-')}  {e.get('artifact_kind', '?')} "
            f"{e.get('artifact', '?')}  score {float(e.get('score', 0)):.3f}  "
            f"threshold {float(e.get('threshold', 0)):.2f}"
        )
    return CheckResult("exclusions", True, tuple(lines))
