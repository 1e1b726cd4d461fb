"""allowlist.yaml: the rooms in the corpus, edited round-trip (comments and order kept).

    rooms:
      - '!abc:example.org'  # #community:example.org
      - '!new:example.org'  # upgraded from !abc:example.org
      - id: '!def'  # #project:other.org
        via: [other.org, matrix.org]
    spaces:                 # each stands for its public rooms as they come and go
      - '!space:example.org'  # #community-space:example.org

`spaces` is optional (files without it load as before); a successor the service adds
after a room upgrade is a plain `rooms` entry whose comment names its predecessor.

A room on another homeserver keeps, beside its id, the servers to join it through (a
homeserver that is in no room yet can only join one by asking a server that is): those
its alias resolved to, or the `?via=` of a matrix.to link or `!id:server?via=...`. A
plain id (every file written before via existed) is a room with none.

Writes are atomic (a temp file renamed over the old one), so the running service,
which re-reads the file when it changes, never sees half a file.
"""

from __future__ import annotations

import io
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken

from ..config import ConfigError, load_yaml
from ..records import RoomID

ROOM_ID = re.compile(r"^![^\s:]+(:[^\s]+)?$")  # room version 12 ids have no server part
# A server name: a host (DNS name, IPv4, [IPv6]) and maybe a port (`example.org:8448`).
SERVER_NAME = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$")
MAX_VIA = 10  # servers kept per room: a join asks them one after another


@dataclass(frozen=True)
class ListedRoom:
    room_id: RoomID
    via: tuple[str, ...] = ()


class RoomRefError(ValueError):
    """A room argument that is neither an id, an alias nor a matrix.to link to one."""


def parse_room_ref(text: str) -> tuple[str, tuple[str, ...]]:
    """(room id or alias, via servers) from what an admin may paste: `!id:server`,
    `#alias:server`, either with `?via=a&via=b`, or a matrix.to link to one
    (`https://matrix.to/#/!id:server?via=a`, the link Element's "Share room" gives)."""
    ref = text.strip()
    if ref.startswith(("https://matrix.to/", "http://matrix.to/")):
        ref = urlsplit(ref).fragment.lstrip("/")
        if not ref:
            raise RoomRefError(f"{text!r}: a matrix.to link without a room in it")
    target, _, query = ref.partition("?")
    target = unquote(target).split("/", 1)[0]  # a link to an event: the room's part
    via: list[str] = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key != "via":
            continue
        if not SERVER_NAME.match(value):
            raise RoomRefError(
                f"{text!r}: via {value!r} is not a server name like 'example.org' "
                "or 'example.org:8448'"
            )
        via.append(value)
    return target, tuple(dict.fromkeys(via))


def _yaml() -> YAML:
    y = YAML()  # round-trip
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def load_allowlist(path: Path) -> list[RoomID]:
    return [r.room_id for r in load_listed(path)]


def load_listed(path: Path) -> list[ListedRoom]:
    """Every listed room with its via servers (none for a plain id)."""
    data = load_yaml(path)
    if data is None:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("rooms", []), list):
        raise ConfigError(path, "rooms", "must be a list of room ids")
    return [_entry(path, i, e) for i, e in enumerate(data.get("rooms") or [])]


def _entry(path: Path, i: int, entry: object) -> ListedRoom:
    if isinstance(entry, dict):
        room, via = entry.get("id"), entry.get("via", [])
        if not isinstance(room, str) or not ROOM_ID.match(room):
            raise ConfigError(
                path, f"rooms[{i}].id", f"{room!r} is not a room id like '!abc:example.org'"
            )
        extra = set(entry) - {"id", "via"}
        if extra:
            raise ConfigError(
                path, f"rooms[{i}]", f"unknown key {sorted(extra)[0]!r} (a room has id and via)"
            )
        if isinstance(via, str):
            via = [via]
        if not isinstance(via, list) or not all(
            isinstance(v, str) and SERVER_NAME.match(v) for v in via
        ):
            raise ConfigError(
                path,
                f"rooms[{i}].via",
                f"{via!r} is not a list of server names like ['example.org', 'example.org:8448']",
            )
        return ListedRoom(RoomID(room), tuple(dict.fromkeys(via)))
    if not isinstance(entry, str) or not ROOM_ID.match(entry):
        raise ConfigError(
            path, f"rooms[{i}]", f"{entry!r} is not a room id like '!abc:example.org'"
        )
    return ListedRoom(RoomID(entry))


def _id_of(entry: object) -> object:
    return entry.get("id") if isinstance(entry, dict) else entry


def _index_of(rooms: CommentedSeq, room_id: str) -> int | None:
    return next((i for i, e in enumerate(rooms) if _id_of(e) == room_id), None)


def load_spaces(path: Path) -> list[RoomID]:
    """The spaces listed (`spaces:`), [] for a file without the key."""
    data = load_yaml(path)
    if not isinstance(data, dict) or data.get("spaces") is None:
        return []
    if not isinstance(data["spaces"], list):
        raise ConfigError(path, "spaces", "must be a list of space room ids")
    out = []
    for i, entry in enumerate(data["spaces"]):
        if not isinstance(entry, str) or not ROOM_ID.match(entry):
            raise ConfigError(
                path, f"spaces[{i}]", f"{entry!r} is not a room id like '!space:example.org'"
            )
        out.append(RoomID(entry))
    return out


def listed_comments(path: Path, key: str = "rooms") -> dict[str, str]:
    """Each entry's end-of-line comment (the alias, `upgraded from ...`), for `list`."""
    if not path.exists():
        return {}
    data = _read_rt(path, key)
    seq = data[key]
    out = {}
    for i, entry in enumerate(seq):
        if isinstance(entry, CommentedMap):  # `id: ..., via: [...]`: the comment is on its id
            token, room = (entry.ca.items.get("id") or [None, None, None])[2], entry.get("id")
        else:
            token, room = (seq.ca.items.get(i) or [None])[0], entry
        if token is not None and isinstance(room, str):
            out[room] = token.value.partition("\n")[0].strip().lstrip("#").strip()
    return out


def _read_rt(path: Path, key: str = "rooms") -> CommentedMap:
    y = _yaml()
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    data = y.load(text) if text.strip() else None
    if data is None:
        data = CommentedMap()
    if not isinstance(data, CommentedMap):
        raise ConfigError(path, "", "must be a YAML mapping with a 'rooms' list")
    for k in dict.fromkeys(("rooms", key)):
        if not isinstance(data.get(k), CommentedSeq):
            data[k] = CommentedSeq(data.get(k) or [])
        data[k].fa.set_block_style()  # `rooms: []` would otherwise grow as a flow list
    return data


def _write_atomic(path: Path, data: CommentedMap) -> None:
    buf = io.StringIO()
    _yaml().dump(data, buf)
    fd, tmp = tempfile.mkstemp(prefix=".allowlist.", dir=str(path.parent))
    try:
        # mkstemp makes the file 0600; keep the old file's mode so the service (maybe
        # another user than the admin editing) can still read it.
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def add_room(
    path: Path,
    room_id: str,
    comment: str | None = None,
    via: tuple[str, ...] = (),
    key: str = "rooms",
) -> bool:
    """Add a room id (with an optional comment, e.g. its alias, and the servers to join
    it through) to `rooms`, or a space to `spaces`; False if nothing changed. A room
    listed already gets the via servers it did not have (after its own: the admin's
    first choice stays first)."""
    if not ROOM_ID.match(room_id):
        raise ConfigError(path, key, f"{room_id!r} is not a room id like '!abc:example.org'")
    bad = [v for v in via if not SERVER_NAME.match(v)]
    if bad:
        raise ConfigError(path, key, f"via {bad[0]!r} is not a server name like 'example.org'")
    data = _read_rt(path, key)
    rooms = data[key]
    i = _index_of(rooms, room_id)
    if i is not None:
        if key != "rooms":
            return False
        old = _entry(path, i, rooms[i]).via
        merged = tuple(dict.fromkeys((*old, *via)))[:MAX_VIA]
        if merged == old:
            return False
        if isinstance(rooms[i], dict):
            rooms[i]["via"] = _flow(merged)
        else:  # a plain id becomes an entry with via, its comments kept
            rooms[i] = _room_map(room_id, merged, rooms.ca.items.pop(i, [None])[0])
        _write_atomic(path, data)
        return True
    if via and key == "rooms":
        rooms.append(_room_map(room_id, via[:MAX_VIA]))
        if comment:
            rooms[-1].yaml_add_eol_comment("# " + comment, "id")
    else:
        rooms.append(room_id)
        if comment:
            # "# " always: ruamel takes a comment starting with "#" (an alias) as the marker.
            rooms.yaml_add_eol_comment("# " + comment, len(rooms) - 1)
    _write_atomic(path, data)
    return True


def _flow(via: tuple[str, ...]) -> CommentedSeq:
    seq = CommentedSeq(via)
    seq.fa.set_flow_style()  # `via: [a, b]` on one line
    return seq


def _room_map(
    room_id: str, via: tuple[str, ...], comment: CommentToken | None = None
) -> CommentedMap:
    """`id: ..., via: [...]`; `comment`, the plain id's end-of-line comment with the
    full-line ones that followed it: the first beside the id, the others after via."""
    entry = CommentedMap()
    entry["id"] = room_id
    entry["via"] = _flow(via)
    if comment is not None:
        eol, nl, following = comment.value.partition("\n")
        if eol.strip():
            entry.yaml_add_eol_comment(eol.strip(), "id")
        if following.strip():
            entry.ca.items["via"] = [
                None,
                None,
                CommentToken(nl + following, CommentMark(0), None),
                None,
            ]
    return entry


def remove_room(path: Path, room_id: str) -> bool:
    """Take a room or a space off the list; False if neither lists it."""
    raw = load_yaml(path) if path.exists() else None
    key = "spaces" if isinstance(raw, dict) and room_id in (raw.get("spaces") or []) else "rooms"
    data = _read_rt(path, key)
    i = _index_of(data[key], room_id)
    if i is None:
        return False
    _delete_keeping_comments(data, i, key)
    if key == "spaces" and not data["spaces"]:
        del data["spaces"]  # the file as it was before a space was added
    _write_atomic(path, data)
    return True


def _delete_keeping_comments(data: CommentedMap, i: int, key: str = "rooms") -> None:
    """Delete rooms[i] with its end-of-line comment. ruamel hangs the full-line comments
    that follow an item on that item; move them to the item before (or above the list),
    so they stay where they were."""
    rooms = data[key]
    token = (rooms.ca.items.get(i) or [None])[0]
    if isinstance(rooms[i], CommentedMap) and rooms[i]:  # an entry with via: its last key
        token = (rooms[i].ca.items.get(list(rooms[i])[-1]) or [None, None, None])[2]
    following = token.value.partition("\n")[2] if token is not None else ""
    del rooms[i]
    if not following.strip():
        return
    if i > 0:
        slot = rooms.ca.items.setdefault(i - 1, [None, None, None, None])
        if slot[0] is None:
            slot[0] = CommentToken("\n" + following, CommentMark(0), None)
        else:
            v = slot[0].value
            slot[0].value = (v if v.endswith("\n") else v + "\n") + following
    else:
        slot = data.ca.items.setdefault(key, [None, None, None, None])
        first = following.lstrip(" ")
        slot[3] = (slot[3] or []) + [
            CommentToken(first, CommentMark(len(following) - len(first)), None)
        ]
