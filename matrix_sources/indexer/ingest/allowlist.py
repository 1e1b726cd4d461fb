"""allowlist.yaml: the rooms in the corpus, edited round-trip (comments and order kept).

    rooms:
      - '!abc:example.org'  # #community:example.org
      - '!new:example.org'  # upgraded from !abc:example.org
    spaces:                 # each stands for its public rooms as they come and go
      - '!space:example.org'  # #community-space:example.org

`spaces` is optional (files without it load as before); a successor the service adds
after a room upgrade is a plain `rooms` entry whose comment names its predecessor.

Writes are atomic (a temp file renamed over the old one), so the running service,
which re-reads the file when it changes, never sees half a file.
"""

from __future__ import annotations

import io
import os
import re
import stat
import tempfile
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken

from ..config import ConfigError, load_yaml
from ..records import RoomID

ROOM_ID = re.compile(r"^![^\s:]+(:[^\s]+)?$")  # room version 12 ids have no server part


def _yaml() -> YAML:
    y = YAML()  # round-trip
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def load_allowlist(path: Path) -> list[RoomID]:
    data = load_yaml(path)
    if data is None:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("rooms", []), list):
        raise ConfigError(path, "rooms", "must be a list of room ids")
    rooms = []
    for i, entry in enumerate(data.get("rooms") or []):
        if not isinstance(entry, str) or not ROOM_ID.match(entry):
            raise ConfigError(
                path, f"rooms[{i}]", f"{entry!r} is not a room id like '!abc:example.org'"
            )
        rooms.append(RoomID(entry))
    return rooms


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
        token = (seq.ca.items.get(i) or [None])[0]
        if token is not None and isinstance(entry, str):
            out[entry] = token.value.partition("\n")[0].strip().lstrip("#").strip()
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


def add_room(path: Path, room_id: str, comment: str | None = None, key: str = "rooms") -> bool:
    """Add a room id (with an optional comment, e.g. its alias) to `rooms`, or a space
    to `spaces`; False if already there."""
    if not ROOM_ID.match(room_id):
        raise ConfigError(path, key, f"{room_id!r} is not a room id like '!abc:example.org'")
    data = _read_rt(path, key)
    rooms = data[key]
    if room_id in rooms:
        return False
    rooms.append(room_id)
    if comment:
        # "# " always: ruamel takes a comment starting with "#" (an alias) as the marker.
        rooms.yaml_add_eol_comment("# " + comment, len(rooms) - 1)
    _write_atomic(path, data)
    return True


def remove_room(path: Path, room_id: str) -> bool:
    """Take a room or a space off the list; False if neither lists it."""
    raw = load_yaml(path) if path.exists() else None
    key = "spaces" if isinstance(raw, dict) and room_id in (raw.get("spaces") or []) else "rooms"
    data = _read_rt(path, key)
    rooms = data[key]
    if room_id not in rooms:
        return False
    _delete_keeping_comments(data, list(rooms).index(room_id), key)
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
