"""Admitting events: parse, judge by the gate, append what passed to the event log.

The transaction handler, backfill and `matrix-sources import` all come through here, so
the gate cannot be bypassed by any way in. A refused event touches no disk (only a
journal line naming ids and the rule); events of rooms not on the allowlist are not
even looked at.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from . import gate as rules
from .eventlog import EventLog
from .events import EncryptedEvent, MessageEvent, Skipped, StateEvent, parse_event
from .gate import Gate
from .journal import Journal
from .records import EventID, Message, Refusal, RoomID
from .roomfacts import RoomFacts, apply_state


@dataclass
class AdmitResult:
    appended: int = 0
    accepted: int = 0  # passed the gate (appended now or earlier)
    refused: Counter = field(default_factory=Counter)  # by rule
    skipped: Counter = field(default_factory=Counter)  # by reason
    commands: list[MessageEvent] = field(default_factory=list)
    rooms: set[RoomID] = field(default_factory=set)  # rooms that got new events

    def merge(self, other: "AdmitResult") -> None:
        self.appended += other.appended
        self.accepted += other.accepted
        self.refused.update(other.refused)
        self.skipped.update(other.skipped)
        self.commands.extend(other.commands)
        self.rooms |= other.rooms


@dataclass
class Ingest:
    gate: Gate
    eventlog: EventLog
    journal: Journal
    facts: dict[RoomID, RoomFacts] = field(default_factory=dict)

    def label(self, room_id: RoomID) -> str:
        f = self.facts.get(room_id)
        return f.label if f else ""

    def unknown_rooms(self, raw_events: Iterable[object]) -> set[RoomID]:
        """Allowlisted rooms in these events whose state we have not seen yet: the
        caller fetches their state before `admit` judges their events."""
        out = set()
        for raw in raw_events:
            rid = raw.get("room_id") if isinstance(raw, dict) else None
            if isinstance(rid, str) and rid in self.gate.allowlist and rid not in self.facts:
                out.add(RoomID(rid))
        return out

    def admit(self, raw_events: Iterable[object], txn_key: str | None = None,
              source: str = "push") -> AdmitResult:
        result = AdmitResult()
        passed: list[tuple[Message, EventID | None]] = []
        for raw in raw_events:
            ev = parse_event(raw)
            if isinstance(ev, MessageEvent) and ev.is_command:
                result.commands.append(ev)  # answered, never stored
                continue
            room_id = getattr(ev, "room_id", None) or getattr(ev, "message", None) and ev.message.room_id
            if room_id is None or room_id not in self.gate.allowlist:
                result.refused[rules.NOT_ALLOWLISTED] += 1  # never read: no journal, no log
                continue
            if isinstance(ev, StateEvent):
                self.facts[room_id] = apply_state(self.facts.get(room_id, RoomFacts()), ev)
                continue
            if isinstance(ev, Skipped):
                result.skipped[ev.reason] += 1
                continue
            if isinstance(ev, EncryptedEvent):
                self._refuse(result, Refusal(rules.ENCRYPTED_EVENT, room_id, ev.event_id), source)
                continue
            m = ev.message
            refusal = self.gate.judge_message(room_id, m.event_id, m.sender,
                                              self.facts.get(room_id))
            if refusal is not None:
                self._refuse(result, refusal, source)
                continue
            passed.append((m, ev.thread_root))
            result.rooms.add(room_id)
        result.accepted = len(passed)
        # Appended with the transaction id in one SQLite transaction: after a crash either
        # both are there (a replay is answered 200, not re-processed) or neither is.
        result.appended = self.eventlog.append(passed, txn_key)
        return result

    def _refuse(self, result: AdmitResult, refusal: Refusal, source: str) -> None:
        result.refused[refusal.rule] += 1
        self.journal.refusal(refusal, self.label(refusal.room_id), source)
