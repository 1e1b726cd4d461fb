"""Admitting events: parse, judge by the gate, append what passed to the event log.

The transaction handler, backfill and `matrix-sources import` all come through here, so
the gate cannot be bypassed by any way in. A refused event touches no disk (only a
journal line naming ids and the rule, once per event however often it is read again);
events of rooms not on the allowlist are not even looked at. The bot's own messages are
skipped, counted apart, not journalled.

Here too a room is purged after the fact (purge.py): when a state event, a puppet
sender or newly learned facts make the gate refuse a room whose text is stored, or the
room left the allowlist. Only settled facts count: a room whose join rule is not known
yet is refused, but not purged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ..clock import REAL, Clock
from ..records import EventID, Message, Refusal, RoomID, UserID
from ..store.eventlog.log import EventLog
from ..store.journal import Journal
from . import gate as rules
from .acldeny import Passed, denies, note_problems, split_denied, withdraw_changed, withdraw_denied
from .events import (
    JOURNALLED,
    MAX_TS_MS,
    QUARANTINED,
    TIMESTAMP_OUT_OF_RANGE,
    EditEvent,
    EncryptedEvent,
    MessageEvent,
    ParsedEvent,
    ReactionEvent,
    RedactionEvent,
    Skipped,
    StateEvent,
    parse_event,
)
from .gate import Gate
from .history import Applied, History, operations
from .members import Addressees
from .polls import POLL_ANSWERS_BOUNDED
from .purge import Purger, PurgeReport
from .roomfacts import RoomFacts, apply_state
from .roomlinks import Lineage
from .sentaway import SentAwayRooms


@dataclass
class AdmitResult:
    appended: int = 0
    accepted: int = 0  # passed the gate (appended now or earlier)
    refused: Counter = field(default_factory=Counter)  # by rule
    skipped: Counter = field(default_factory=Counter)  # by reason
    commands: int = 0  # `!sources` commands met (history, an import): never stored
    rooms: set[RoomID] = field(default_factory=set)  # rooms that got new events
    history: Applied = field(default_factory=Applied)  # edits and redactions applied

    def merge(self, other: AdmitResult) -> None:
        self.appended += other.appended
        self.accepted += other.accepted
        self.refused.update(other.refused)
        self.skipped.update(other.skipped)
        self.commands += other.commands
        self.rooms |= other.rooms
        self.history.rooms |= other.history.rooms
        self.history.redacted |= other.history.redacted
        self.history.edited |= other.history.edited


@dataclass
class Ingest:
    gate: Gate
    eventlog: EventLog
    journal: Journal
    facts: dict[RoomID, RoomFacts] = field(default_factory=dict)
    purger: Purger | None = None  # None: one that purges the event log only
    history: History | None = None  # edits and redactions (eventlog/history.py)
    # Users forgotten on request (forget.py): the time (ms) from which their messages
    # are admitted again, None while forgotten. Read from the event log at open.
    forgotten: dict[UserID, int | None] = field(default_factory=dict)
    clock: Clock = REAL  # its wall clock stamps when the bot was sent away
    sent_away: SentAwayRooms = field(init=False)  # the gate reads it too
    # Names addressed by display name -> members' user ids, at admission (members.py).
    addressees: Addressees = field(default_factory=Addressees, init=False)
    # Room labels as last written to the event log, where embedding workers in other
    # processes read them for their windows (eventlog/claims.py).
    _labels: dict[RoomID, str] = field(default_factory=dict, init=False)
    # Verified room upgrades (roomlinks.py): `--room here` searches the whole chain.
    lineage: Lineage = field(default_factory=Lineage, init=False)

    def __post_init__(self) -> None:
        if self.purger is None:
            self.purger = Purger(self.eventlog, self.journal)
        self.forgotten.update(self.eventlog.history.forgotten_users())
        self.sent_away = SentAwayRooms(self.eventlog, self.journal)
        self.gate.sent_away = self.sent_away

    def is_forgotten(self, user: UserID, ts: int) -> bool:
        if user not in self.forgotten:
            return False
        readmit_from = self.forgotten[user]
        return readmit_from is None or ts < readmit_from

    def label(self, room_id: RoomID) -> str:
        f = self.facts.get(room_id)
        return f.label if f else ""

    def topic(self, room_id: RoomID) -> str:
        f = self.facts.get(room_id)
        return (f.topic or "") if f else ""

    def _note_label(self, room_id: RoomID) -> None:
        label = self.label(room_id)
        if label and self._labels.get(room_id) != label:
            self.eventlog.claims.set_label(room_id, label)
            self._labels[room_id] = label

    def admits(self, room_id: RoomID) -> bool:
        """Whether the gate lets the room in now (the pipeline asks before indexing)."""
        return self.gate.judge_room(room_id, self.facts.get(room_id)) is None

    def unknown_rooms(self, raw_events: Iterable[object]) -> set[RoomID]:
        """Allowlisted rooms in these events whose join rule we have not seen yet: the
        caller fetches their state before `admit` judges their events. (A state event
        pushed alone, the bot's own join, leaves a room known but not settled.)"""
        out = set()
        for raw in raw_events:
            rid = raw.get("room_id") if isinstance(raw, dict) else None
            if isinstance(rid, str) and rid in self.gate.allowlist:
                if not self.settled(RoomID(rid)):
                    out.add(RoomID(rid))
        return out

    def learn(self, room_id: RoomID, facts: RoomFacts, source: str = "state") -> Applied:
        """Replace what we know of a room (its state fetched from the homeserver); a room
        that turned out refused while its text is stored is purged, and what a server
        ACL new to us denies is withdrawn (returned: the answers quoting it are edited)."""
        before = self.facts.get(room_id)
        self.facts[room_id] = facts
        self._note_label(room_id)
        refusal = self._settled_refusal(room_id)
        if refusal is not None:
            self._purge_if_stored(refusal, source)
        applied = Applied()
        acl = facts.server_acl
        if acl is not None and (before is None or before.server_acl != acl):
            note_problems(self.journal, room_id, acl, None, source)
            withdraw_denied(self.eventlog, self.journal, room_id, acl, applied, None, source)
        return applied

    def quarantine_stored_poison(self) -> int:
        """Events an older version stored with a timestamp past MAX_TS_MS: quarantined
        now as the parse would have (journal: by id and rule). Run at start."""
        found = self.eventlog.quarantine_timestamps(MAX_TS_MS)
        for event_id, room_id in found:
            self.journal.write(
                "quarantine",
                rule=TIMESTAMP_OUT_OF_RANGE,
                room_id=room_id,
                event_id=event_id,
                source="event_log",
            )
        return len(found)

    def purge_unlisted(self, source: str = "allowlist") -> list[PurgeReport]:
        """Purge every room with stored text that the allowlist no longer lists (after a
        reload, and at start for edits made while the service was down)."""
        reports = []
        held = set(self.eventlog.rooms_with_text()) | set(self.eventlog.feedback.rooms(0))
        for room_id in sorted(held):
            if room_id in self.gate.allowlist:
                continue
            refusal = Refusal(rules.NOT_ALLOWLISTED, room_id, whole_room=True)
            assert self.purger is not None  # set by __post_init__
            reports.append(self.purger.purge(refusal, source))
            self.facts.pop(room_id, None)  # not read any more
            self.addressees.forget_room(room_id)
        return reports

    def admit(
        self, raw_events: Iterable[object], txn_key: str | None = None, source: str = "push"
    ) -> AdmitResult:
        return self.admit_parsed([parse_event(raw) for raw in raw_events], txn_key, source)

    def admit_parsed(
        self, events: Iterable[ParsedEvent], txn_key: str | None = None, source: str = "push"
    ) -> AdmitResult:
        """`admit` for events parsed already (the transaction handler parses each once,
        and routes commands to the bot before this)."""
        result = AdmitResult()
        passed: list[tuple[Message, EventID | None]] = []
        history: list[EditEvent | RedactionEvent] = []
        # Rooms the gate refused at some event of this batch: the first such refusal
        # (it triggers the purge), and how many messages had passed by the last one.
        refused_rooms: dict[RoomID, Refusal] = {}
        cutoff: dict[RoomID, tuple[int, Refusal]] = {}
        acl_changed: dict[RoomID, EventID] = {}  # rooms whose server ACL this batch changed
        for ev in events:
            if isinstance(ev, MessageEvent) and ev.is_command:
                result.commands += 1  # never stored (the bot answers live ones)
                continue
            room_id = ev.room_id
            if room_id is None or room_id not in self.gate.allowlist:
                result.refused[rules.NOT_ALLOWLISTED] += 1  # never read: no journal, no log
                continue
            if isinstance(ev, StateEvent):
                before = self.facts.get(room_id, RoomFacts())
                self.facts[room_id] = apply_state(before, ev)
                self._note_label(room_id)
                if ev.state_key == self.gate.bot_user:  # kicked, banned, invited back
                    self.sent_away.fold(ev, self.gate.bot_user, self.clock.now_ms())
                self._note_visibility(before, self.facts[room_id], ev, source)
                acl = self.facts[room_id].server_acl
                if acl != before.server_acl:
                    acl_changed[room_id] = ev.event_id
                    if acl is not None:
                        note_problems(self.journal, room_id, acl, ev.event_id, source)
                self._note_refused(self._state_refusal(ev), refused_rooms, cutoff, len(passed))
                continue
            if isinstance(ev, Skipped):
                result.skipped[ev.reason] += 1
                if ev.reason in QUARANTINED or ev.reason in JOURNALLED:  # by id and rule
                    self.journal.write(
                        "quarantine" if ev.reason in QUARANTINED else "skip",
                        rule=ev.reason,
                        room_id=room_id,
                        event_id=ev.event_id,
                        source=source,
                    )
                continue
            if isinstance(ev, ReactionEvent):
                result.skipped["reaction"] += 1  # a vote is the bot's (reactions.py)
                continue
            if isinstance(ev, EncryptedEvent):
                self._refuse(result, Refusal(rules.ENCRYPTED_EVENT, room_id, ev.event_id), source)
                continue
            if isinstance(ev, (EditEvent, RedactionEvent)):
                # The bot's own edits (of its replies) are not the history of the room.
                if (
                    ev.sender != self.gate.bot_user
                    and not (isinstance(ev, EditEvent) and self.is_forgotten(ev.sender, ev.ts))
                    and not (isinstance(ev, EditEvent) and self._server_denied(room_id, ev.sender))
                    and self.gate.judge_room(room_id, self.facts.get(room_id)) is None
                ):
                    history.append(ev)  # applied by the append below
                continue
            m = ev.message
            refusal = self.gate.judge_message(
                room_id, m.event_id, m.sender, self.facts.get(room_id)
            )
            if refusal is not None and refusal.rule == rules.OWN_MESSAGE:
                # The bot's answers: never indexed, but not a refusal either (no journal
                # line: counting them made `!sources status` grow with every answer).
                result.skipped[rules.OWN_MESSAGE] += 1
                continue
            if refusal is not None:
                self._refuse(result, refusal, source)
                facts = self.facts.get(room_id)
                if facts is not None and self.gate.is_puppet(m.sender):
                    # It spoke, so it is in the room: the room stays refused after this.
                    self.facts[room_id] = replace(facts, members=facts.members | {m.sender})
                if refusal.whole_room and self.settled(room_id):
                    self._note_refused(refusal, refused_rooms, cutoff, len(passed))
                continue
            if self.is_forgotten(m.sender, m.ts):
                self._refuse(result, Refusal(rules.USER_FORGOTTEN, room_id, m.event_id), source)
                continue
            passed.append((self.addressees.resolve(m, self.facts.get(room_id)), ev.thread_root))
            if ev.bounded:  # a poll's answers past the spec's 20 (polls.py)
                self.journal.write(
                    "poll",
                    rule=POLL_ANSWERS_BOUNDED,
                    room_id=room_id,
                    event_id=m.event_id,
                    left_out=ev.bounded,
                    source=source,
                )
        # Messages that passed before their room turned refused later in this batch are
        # dropped (journalled as refused): they would only be written to be erased. The
        # purge runs before the append, so it covers what earlier batches stored, and
        # messages sent after the room was admitted again are kept.
        kept = []
        for i, (m, root) in enumerate(passed):
            cut = cutoff.get(m.room_id)
            if cut is not None and i < cut[0]:
                r = cut[1]
                self._refuse(
                    result,
                    Refusal(r.rule, m.room_id, m.event_id, r.detail, whole_room=True),
                    source,
                )
            else:
                kept.append((m, root))
        passed = self._acl_denied(kept, acl_changed, result, source)
        for refusal in refused_rooms.values():
            self._purge_if_stored(refusal, source)
        result.accepted = len(passed)
        result.rooms = {m.room_id for m, _ in passed}
        # Appended with the transaction id in one SQLite transaction: after a crash either
        # both are there (a replay is answered 200, not re-processed) or neither is.
        if self.history is not None:
            result.appended = self.eventlog.append(
                passed, txn_key, operations(history), result.history
            )
            result.rooms |= result.history.rooms
        else:
            result.appended = self.eventlog.append(passed, txn_key)
        return result

    def _server_denied(self, room_id: RoomID, sender: UserID) -> bool:
        return denies(self.facts.get(room_id), sender)

    def _acl_denied(
        self, passed: list[Passed], changed: dict[RoomID, EventID], result: AdmitResult, source: str
    ) -> list[Passed]:
        """Rooms whose server ACL this batch changed: what passed before the change and
        that it denies is refused; what is stored from the denied servers withdrawn."""
        kept, denied = split_denied(passed, changed, self.facts)
        for r in denied:
            self._refuse(result, r, source)
        withdraw_changed(self.eventlog, self.journal, changed, self.facts, result.history, source)
        return kept

    def _note_visibility(
        self, before: RoomFacts, after: RoomFacts, ev: StateEvent, source: str
    ) -> None:
        """A change of history visibility that stops (or resumes) storing what is sent
        from now on: journalled by ids and rule. Nothing stored is purged: Matrix still
        shows what was sent before to anyone who joins."""
        was, now = (self.gate.visible_to_strangers(f) for f in (before, after))
        if was != now and self.gate.judge_room(ev.room_id, after) is None:
            self.journal.write(
                "history_visibility",
                rule=rules.HISTORY_NOT_SHARED,
                room_id=ev.room_id,
                event_id=ev.event_id,
                source=source,
                detail=f"{after.history_visibility or 'unknown'}:"
                f" {'resumed' if now else 'stopped'}",
            )

    def settled(self, room_id: RoomID) -> bool:
        """Whether the room's facts are known (a join rule seen): only then does a
        refusal mean the room is private, not merely unknown yet."""
        facts = self.facts.get(room_id)
        return facts is not None and facts.join_rule is not None

    def _settled_refusal(self, room_id: RoomID) -> Refusal | None:
        if not self.settled(room_id):
            return None
        return self.gate.judge_room(room_id, self.facts.get(room_id))

    def _state_refusal(self, ev: StateEvent) -> Refusal | None:
        """The gate's verdict after a state event, naming it. Members are not all scanned
        for puppets again (per member event that would make importing a big room
        quadratic): only the one this event added."""
        room_id, facts = ev.room_id, self.facts.get(ev.room_id)
        if facts is None or facts.join_rule is None:
            return None
        r = self.gate.judge_room(room_id, facts, scan_members=False)
        if (
            r is None
            and ev.type == "m.room.member"
            and ev.state_key in facts.members
            and self.gate.is_puppet(ev.state_key)
        ):
            r = Refusal(rules.PUPPET_SENDER, room_id, detail=f"puppet member {ev.state_key}")
        return (
            None if r is None else Refusal(r.rule, room_id, ev.event_id, r.detail, whole_room=True)
        )

    @staticmethod
    def _note_refused(
        refusal: Refusal | None,
        refused_rooms: dict[RoomID, Refusal],
        cutoff: dict[RoomID, tuple[int, Refusal]],
        n_passed: int,
    ) -> None:
        if refusal is None:
            return
        refused_rooms.setdefault(refusal.room_id, refusal)
        cutoff[refusal.room_id] = (n_passed, refusal)

    def _purge_if_stored(self, refusal: Refusal, source: str) -> PurgeReport | None:
        if not (
            self.eventlog.has_text(refusal.room_id)
            or refusal.room_id in self.eventlog.feedback.rooms(0)
        ):  # questions asked
            return None
        assert self.purger is not None  # set by __post_init__
        return self.purger.purge(refusal, source)

    def _refuse(self, result: AdmitResult, refusal: Refusal, source: str) -> None:
        result.refused[refusal.rule] += 1
        self.journal.refusal(refusal, source)
