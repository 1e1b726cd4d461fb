"""What we know of a room, folded from its state events."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .events import StateEvent, is_utf8
from ..records import UserID

BRIDGE_STATE_TYPES = frozenset({"m.bridge", "uk.half-shot.bridge"})
HISTORY_VISIBILITIES = frozenset({"world_readable", "shared", "invited", "joined"})


@dataclass(frozen=True, slots=True)
class RoomFacts:
    join_rule: str | None = None
    encrypted: bool = False
    bridged: bool = False
    direct: bool = False  # some member event carried is_direct
    members: frozenset[UserID] = field(default_factory=frozenset)
    name: str | None = None
    canonical_alias: str | None = None
    # m.room.history_visibility: "shared" without the state event (the spec's default);
    # None when the event holds no valid value (unknowable: refused).
    history_visibility: str | None = "shared"
    # m.room.retention max_lifetime (ms): older messages leave the index (retention.py)
    max_lifetime_ms: int | None = None

    @property
    def label(self) -> str:
        return self.canonical_alias or self.name or ""

    @property
    def is_dm(self) -> bool:
        """Only a room a member marked `is_direct`: an invite-only room of two is
        refused as not public, which is what it is (issue 21)."""
        return self.direct


def apply_state(facts: RoomFacts, ev: StateEvent) -> RoomFacts:
    """Return the facts after one state event; unknown types change nothing."""
    c = ev.content
    if ev.type == "m.room.join_rules":
        rule = c.get("join_rule")
        return replace(facts, join_rule=rule if isinstance(rule, str) else None)
    if ev.type == "m.room.history_visibility":
        v = c.get("history_visibility")
        return replace(facts, history_visibility=v if v in HISTORY_VISIBILITIES else None)
    if ev.type == "m.room.retention":
        life = c.get("max_lifetime")
        return replace(facts, max_lifetime_ms=life if type(life) is int and life > 0 else None)
    if ev.type == "m.room.encryption":
        return replace(facts, encrypted=True)
    if ev.type in BRIDGE_STATE_TYPES:
        return replace(facts, bridged=True)
    if ev.type == "m.room.name":
        name = c.get("name")
        return replace(facts, name=name if isinstance(name, str) and name and is_utf8(name)
                       else None)
    if ev.type == "m.room.canonical_alias":
        alias = c.get("alias")
        return replace(facts, canonical_alias=alias if isinstance(alias, str) and alias
                       and is_utf8(alias) else None)
    if ev.type == "m.room.member":
        user = UserID(ev.state_key)
        members = set(facts.members)
        if c.get("membership") in ("join", "invite"):
            members.add(user)
        else:
            members.discard(user)
        direct = facts.direct or c.get("is_direct") is True
        return replace(facts, members=frozenset(members), direct=direct)
    return facts


def facts_from_state(events: list[StateEvent]) -> RoomFacts:
    facts = RoomFacts()
    for ev in events:
        facts = apply_state(facts, ev)
    return facts
