"""followed.json in the data dir: the rooms the service follows on its own, beside the
admin's allowlist.yaml: each listed space's rooms as last read from the homeserver, and
the upgrades seen (accepted, or refused and why).

The running service is its one writer (appservice/homeserver/spaces.py, upgrades.py);
the Gate of every process reads the space rooms at open, so a stopped service's
`backfill` and a restart do not purge a space's rooms before the space is read again.
`allowlist list`, `doctor` and `!sources status` read what each space brings from here.
Ids, rules and counts only; a file that cannot be read counts as empty (the next read
of the spaces writes it again).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..records import RoomID
from .allowlist import load_allowlist, load_spaces

log = logging.getLogger(__name__)
FILE_NAME = "followed.json"


@dataclass
class SpaceReading:
    """One listed space as last read: its public rooms (each still gated), its
    sub-spaces followed, the children left out and why (`not_public`, `too_deep`, ...)."""

    rooms: list[str] = field(default_factory=list)
    subspaces: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    truncated: bool = False
    read_ms: int = 0


@dataclass
class Upgrade:
    predecessor: str
    successor: str
    accepted: bool
    rule: str | None = None  # why not, when not accepted (roomlinks.py's rules, the gate's)
    detail: str | None = None
    ms: int = 0


@dataclass
class Followed:
    spaces: dict[str, SpaceReading] = field(default_factory=dict)
    upgrades: list[Upgrade] = field(default_factory=list)

    def space_rooms(self, spaces: Collection[str] | None = None) -> set[RoomID]:
        """The rooms and sub-spaces the given spaces (all: None) bring."""
        out: set[RoomID] = set()
        for sid, r in self.spaces.items():
            if spaces is None or sid in spaces:
                out.update(RoomID(x) for x in (*r.rooms, *r.subspaces))
        return out

    def accepted_links(self) -> list[tuple[str, str]]:
        return [(u.predecessor, u.successor) for u in self.upgrades if u.accepted]

    def note_upgrade(self, upgrade: Upgrade) -> None:
        """One entry per predecessor and successor: the latest verdict."""
        self.upgrades = [
            u
            for u in self.upgrades
            if (u.predecessor, u.successor) != (upgrade.predecessor, upgrade.successor)
        ] + [upgrade]


def path_in(data_dir: Path) -> Path:
    return Path(data_dir) / FILE_NAME


def load_followed(data_dir: Path) -> Followed:
    p = path_in(data_dir)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
        spaces = {
            str(k): SpaceReading(
                **{f: v for f, v in r.items() if f in SpaceReading.__dataclass_fields__}
            )
            for k, r in (raw.get("spaces") or {}).items()
        }
        upgrades = [
            Upgrade(**{f: v for f, v in u.items() if f in Upgrade.__dataclass_fields__})
            for u in raw.get("upgrades") or []
        ]
        return Followed(spaces, upgrades)
    except FileNotFoundError:
        return Followed()
    except (OSError, ValueError, TypeError, AttributeError):
        log.warning("followed_unreadable", extra={"path": str(p)})
        return Followed()


def dump_followed(followed: Followed) -> str:
    """The file's text (taken on the event loop, where the object changes)."""
    return json.dumps(
        {
            "spaces": {k: asdict(v) for k, v in sorted(followed.spaces.items())},
            "upgrades": [asdict(u) for u in followed.upgrades],
        },
        indent=1,
        sort_keys=True,
    )


def save_followed(data_dir: Path, followed: Followed | str) -> None:
    """Written atomically (a temp file renamed over the old one)."""
    p = path_in(data_dir)
    body = followed if isinstance(followed, str) else dump_followed(followed)
    fd, tmp = tempfile.mkstemp(prefix=".followed.", dir=str(p.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def corpus_rooms(allowlist_path: Path, data_dir: Path) -> frozenset[RoomID]:
    """What the gate lets in: the rooms listed, the spaces listed and the rooms those
    spaces brought when last read."""
    rooms = set(load_allowlist(allowlist_path))
    spaces = set(load_spaces(allowlist_path))
    return frozenset(rooms | spaces | load_followed(data_dir).space_rooms(spaces))
