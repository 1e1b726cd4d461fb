"""allowlist.yaml: the rooms in the corpus, edited round-trip (comments and order kept).

    rooms:
      - '!abc:example.org'  # #community:example.org

Writes are atomic (a temp file renamed over the old one), so the running service,
which re-reads the file when it changes, never sees half a file.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from .config import ConfigError, load_yaml
from .records import RoomID

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
            raise ConfigError(path, f"rooms[{i}]",
                              f"{entry!r} is not a room id like '!abc:example.org'")
        rooms.append(RoomID(entry))
    return rooms


def _read_rt(path: Path) -> CommentedMap:
    y = _yaml()
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    data = y.load(text) if text.strip() else None
    if data is None:
        data = CommentedMap()
    if not isinstance(data, CommentedMap):
        raise ConfigError(path, "", "must be a YAML mapping with a 'rooms' list")
    if not isinstance(data.get("rooms"), CommentedSeq):
        data["rooms"] = CommentedSeq(data.get("rooms") or [])
    data["rooms"].fa.set_block_style()  # `rooms: []` would otherwise grow as a flow list
    return data


def _write_atomic(path: Path, data: CommentedMap) -> None:
    buf = io.StringIO()
    _yaml().dump(data, buf)
    fd, tmp = tempfile.mkstemp(prefix=".allowlist.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def add_room(path: Path, room_id: str, comment: str | None = None) -> bool:
    """Add a room id (with an optional comment, e.g. its alias); False if already there."""
    if not ROOM_ID.match(room_id):
        raise ConfigError(path, "rooms", f"{room_id!r} is not a room id like '!abc:example.org'")
    data = _read_rt(path)
    rooms = data["rooms"]
    if room_id in rooms:
        return False
    rooms.append(room_id)
    if comment:
        rooms.yaml_add_eol_comment(comment, len(rooms) - 1)
    _write_atomic(path, data)
    return True


def remove_room(path: Path, room_id: str) -> bool:
    data = _read_rt(path)
    rooms = data["rooms"]
    if room_id not in rooms:
        return False
    del rooms[list(rooms).index(room_id)]
    _write_atomic(path, data)
    return True
