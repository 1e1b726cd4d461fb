"""How rooms link to each other over time and in spaces, read from their state.

    m.room.tombstone  {replacement_room: B}            in A: A was upgraded to B
    m.room.create     {predecessor: {room_id: A, event_id?}, type?: "m.space"}   in B

An upgrade counts only when both ends say so: A's tombstone names B and B's create
names A (a room cannot adopt another room's index by claiming it). Since spec v1.16
`predecessor.event_id` is optional, and Synapse's upgrade to room version 12 leaves it
out: both shapes are read. A chain is walked with a bound and a seen-set, so a loop
(A -> B -> A) ends the walk instead of stalling it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..records import RoomID
from .events import is_clean_id

SPACE_TYPE = "m.space"
MAX_CHAIN = 64  # upgrades followed back at most; a real room has a handful
UPGRADE_LOOP = "upgrade_loop"  # journal rule: a tombstone naming a room of its own chain
UPGRADE_UNVERIFIED = "upgrade_unverified"  # the successor's create names another room
UPGRADE_REFUSED = "upgrade_refused"  # the successor fails the gate on its own
SPACE_LOOP = "space_loop"  # a space listing itself or a space above it
SPACE_TRUNCATED = "space_truncated"  # more rooms than index.space_max_rooms


def _room_id(v: object) -> RoomID | None:
    ok = isinstance(v, str) and v.startswith("!") and is_clean_id(v)
    return RoomID(v) if ok else None  # type: ignore[arg-type]


def predecessor_of(create: Mapping) -> RoomID | None:
    """The predecessor an m.room.create names, with or without `event_id`."""
    pred = create.get("predecessor")
    return _room_id(pred.get("room_id")) if isinstance(pred, Mapping) else None


def room_type_of(create: Mapping) -> str | None:
    t = create.get("type")
    return t if isinstance(t, str) and t else None


def successor_of(tombstone: Mapping, room_id: str) -> RoomID | None:
    """The room a tombstone points at (None: none, or not a room id, or itself)."""
    got = _room_id(tombstone.get("replacement_room"))
    return got if got != room_id else None


def verified(predecessor: str, successor_create: Mapping) -> bool:
    """Whether the successor's own create event names `predecessor` back."""
    return predecessor_of(successor_create) == predecessor


class Lineage:
    """The verified upgrades known: successor -> predecessor (and back)."""

    def __init__(self, links: Iterable[tuple[str, str]] = ()) -> None:
        self._pred: dict[RoomID, RoomID] = {}
        self._succ: dict[RoomID, RoomID] = {}
        for pred, succ in links:
            self.link(RoomID(pred), RoomID(succ))

    def link(self, predecessor: RoomID, successor: RoomID) -> bool:
        """Record predecessor -> successor; False (nothing recorded) if that would close
        a loop: the successor is already the predecessor or one of its ancestors."""
        if successor == predecessor or successor in self.chain(predecessor):
            return False
        self._pred[successor] = predecessor
        self._succ[predecessor] = successor
        return True

    def predecessor(self, room: str) -> RoomID | None:
        return self._pred.get(RoomID(room))

    def successor(self, room: str) -> RoomID | None:
        return self._succ.get(RoomID(room))

    def chain(self, room: str) -> list[RoomID]:
        """The room and its predecessors, newest first, bounded and loop-safe."""
        out = [RoomID(room)]
        seen = {out[0]}
        while len(out) < MAX_CHAIN and (p := self._pred.get(out[-1])) is not None and p not in seen:
            out.append(p)
            seen.add(p)
        return out

    def whole_chain(self, room: str) -> list[RoomID]:
        """Every room of the room's chain, oldest to newest (its successors too)."""
        newest, seen = RoomID(room), {RoomID(room)}
        while len(seen) < MAX_CHAIN and (s := self._succ.get(newest)) is not None and s not in seen:
            newest = s
            seen.add(s)
        return list(reversed(self.chain(newest)))

    def links(self) -> list[tuple[RoomID, RoomID]]:
        """(predecessor, successor) pairs, sorted."""
        return sorted((p, s) for s, p in self._pred.items())
