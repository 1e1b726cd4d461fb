"""A space's hierarchy (`GET /_matrix/client/v1/rooms/{id}/hierarchy`, paged) read into
what the space brings to the corpus.

    each room the pages return, reached from the space through m.space.child links:
      a space within index.space_depth        -> sub-space (joined, followed)
      a space deeper                          -> refused: too_deep
      a room whose join rule is `public`      -> room (still judged by the gate on its own)
      any other join rule                     -> refused: not_public
    a child linked but not returned (the homeserver shows it to no stranger) -> not_public
    a link back to the space or a space above it                   -> space_loop
    past index.space_max_rooms rooms                               -> truncated

Pure: the pages are handed in, so tests need no homeserver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .followed import SpaceReading
from .roomlinks import SPACE_LOOP, SPACE_TYPE

NOT_PUBLIC = "not_public"
TOO_DEEP = "too_deep"


def _children(room: Mapping) -> list[str]:
    """The rooms an m.space.child state lists (one with empty content is removed)."""
    out = []
    for ev in room.get("children_state") or ():
        if not isinstance(ev, Mapping) or ev.get("type") != "m.space.child":
            continue
        key, content = ev.get("state_key"), ev.get("content")
        if isinstance(key, str) and key.startswith("!") and isinstance(content, Mapping):
            if content.get("via"):  # the spec: a child without `via` is not a child
                out.append(key)
    return out


def read_space(
    root: str, pages: Iterable[Mapping], depth: int, max_rooms: int
) -> tuple[SpaceReading, bool]:
    """(what the space brings, whether the pages were cut at max_rooms)."""
    rooms: dict[str, Mapping] = {}
    truncated = False
    for page in pages:
        for room in page.get("rooms") or ():
            rid = room.get("room_id") if isinstance(room, Mapping) else None
            if not isinstance(rid, str) or rid in rooms:
                continue
            if len(rooms) >= max_rooms + 1:  # the space itself does not count
                truncated = True
                break
            rooms[rid] = room
        if truncated:
            break
    reading = SpaceReading(truncated=truncated)
    # Breadth first from the space: a room's depth is its shortest path.
    level, seen, ancestors_of = [root], {root}, {root: frozenset({root})}
    for d in range(depth + 1):
        nxt: list[str] = []
        for parent in level:
            for child in _children(rooms.get(parent, {})):
                if child in ancestors_of[parent]:
                    reading.refused[child] = SPACE_LOOP
                    continue
                if child in seen:
                    continue  # a room in two sub-spaces: once
                seen.add(child)
                room = rooms.get(child)
                if room is None:
                    reading.refused.setdefault(child, NOT_PUBLIC)
                    continue
                if room.get("room_type") == SPACE_TYPE:
                    if d < depth:
                        reading.subspaces.append(child)
                        ancestors_of[child] = ancestors_of[parent] | {child}
                        nxt.append(child)
                    else:
                        reading.refused[child] = TOO_DEEP
                elif room.get("join_rule", "public") == "public":
                    reading.rooms.append(child)
                else:
                    reading.refused[child] = NOT_PUBLIC
        level = nxt
    reading.rooms.sort()
    reading.subspaces.sort()
    return reading, truncated
