"""What we know of a room, folded from its state events."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..records import RoomID, UserID
from .events import StateEvent, is_utf8
from .roomlinks import SPACE_TYPE, predecessor_of, room_type_of, successor_of
from .serveracl import ServerAcl, parse_acl

MAX_DISPLAY_NAME = 256  # characters; a longer one is not a name anybody types
BRIDGE_STATE_TYPES = frozenset({"m.bridge", "uk.half-shot.bridge"})
HISTORY_VISIBILITIES = frozenset({"world_readable", "shared", "invited", "joined"})


@dataclass(frozen=True, slots=True)
class RoomFacts:
    join_rule: str | None = None
    encrypted: bool = False
    bridged: bool = False
    direct: bool = False  # some member event carried is_direct
    members: frozenset[UserID] = field(default_factory=frozenset)
    # Members' display names, to resolve the names people address each other by
    # (members.py). Replaced, never changed in place: the facts are a value.
    display_names: dict[UserID, str] = field(default_factory=dict)
    # Each member's (joined, named): since when (ms; 0 when unknown) they have been in the
    # room, and have had their current display name. A newcomer's name does not outrank
    # a longer-standing member's, nor one set after the question it would take over.
    since: dict[UserID, tuple[int, int]] = field(default_factory=dict)
    name: str | None = None
    canonical_alias: str | None = None
    # m.room.history_visibility: "shared" without the state event (the spec's default);
    # None when the event holds no valid value (unknowable: refused).
    history_visibility: str | None = "shared"
    # m.room.retention max_lifetime (ms): older messages leave the index (retention.py)
    max_lifetime_ms: int | None = None
    topic: str | None = None
    # A room's place in time and in spaces (roomlinks.py): m.room.create's `type`
    # (m.space) and `predecessor`, m.room.tombstone's `replacement_room`.
    room_type: str | None = None
    predecessor: RoomID | None = None
    successor: RoomID | None = None
    # m.room.server_acl: the servers whose users' messages are never indexed (None: no ACL)
    server_acl: ServerAcl | None = None

    @property
    def label(self) -> str:
        return self.canonical_alias or self.name or ""

    @property
    def is_space(self) -> bool:
        return self.room_type == SPACE_TYPE

    @property
    def is_dm(self) -> bool:
        """Only a room a member marked `is_direct`: an invite-only room of two is
        refused as not public, which is what it is."""
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
    if ev.type == "m.room.server_acl" and ev.state_key == "":
        return replace(facts, server_acl=parse_acl(c))
    if ev.type == "m.room.encryption":
        return replace(facts, encrypted=True)
    if ev.type in BRIDGE_STATE_TYPES:
        return replace(facts, bridged=True)
    if ev.type == "m.room.name":
        name = c.get("name")
        return replace(
            facts, name=name if isinstance(name, str) and name and is_utf8(name) else None
        )
    if ev.type == "m.room.topic":
        topic = c.get("topic")
        return replace(
            facts, topic=topic if isinstance(topic, str) and topic and is_utf8(topic) else None
        )
    if ev.type == "m.room.create" and ev.state_key == "":
        return replace(facts, room_type=room_type_of(c), predecessor=predecessor_of(c))
    if ev.type == "m.room.tombstone" and ev.state_key == "":
        return replace(facts, successor=successor_of(c, ev.room_id))
    if ev.type == "m.room.canonical_alias":
        alias = c.get("alias")
        return replace(
            facts,
            canonical_alias=alias if isinstance(alias, str) and alias and is_utf8(alias) else None,
        )
    if ev.type == "m.room.member":
        members, display = set(facts.members), dict(facts.display_names)
        since = dict(facts.since)
        _fold_member(members, display, since, ev)
        direct = facts.direct or c.get("is_direct") is True
        return replace(
            facts, members=frozenset(members), display_names=display, since=since, direct=direct
        )
    return facts


def _fold_member(
    members: set[UserID],
    display: dict[UserID, str],
    since: dict[UserID, tuple[int, int]],
    ev: StateEvent,
) -> None:
    user = UserID(ev.state_key)
    name = ev.content.get("displayname")
    if ev.content.get("membership") in ("join", "invite"):
        was = since.get(user) if user in members else None
        before = display.get(user)
        members.add(user)
        if (
            isinstance(name, str)
            and name.strip()
            and len(name) <= MAX_DISPLAY_NAME
            and is_utf8(name)
        ):
            display[user] = name.strip()
        else:
            display.pop(user, None)
        # A member event that keeps the name (an avatar changed) keeps its age.
        joined = was[0] if was else ev.ts
        named = was[1] if was and display.get(user) == before else ev.ts
        since[user] = (joined, named)
    else:
        members.discard(user)
        display.pop(user, None)
        since.pop(user, None)


def facts_from_state(events: list[StateEvent]) -> RoomFacts:
    """The facts of a room's whole state; its member events folded in one pass (a room
    of 10,000 members would copy the member set 10,000 times event by event)."""
    facts = RoomFacts()
    members: set[UserID] = set()
    display: dict[UserID, str] = {}
    since: dict[UserID, tuple[int, int]] = {}
    direct = False
    for ev in events:
        if ev.type == "m.room.member":
            _fold_member(members, display, since, ev)
            direct = direct or ev.content.get("is_direct") is True
        else:
            facts = apply_state(facts, ev)
    return replace(
        facts,
        members=frozenset(members),
        display_names=display,
        since=since,
        direct=facts.direct or direct,
    )
