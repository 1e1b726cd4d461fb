"""Allowlisted rooms the bot could not join, tried again on a schedule rather than at
every start: a room no server lets the bot into (deleted, its servers gone, a typo)
would otherwise cost a homeserver round trip each start, and thousands of them slow
the `!sources` asked meanwhile (bench/scale.py: 9,528 at a million windows).

    join fails   -> tried again after FIRST_S, then twice as long each time, at most CAP_S
    joined       -> forgotten
    via changed  -> tried at once (allowlistwatch.py's rejoin; at start, the new via)

Kept in the data dir's joins.json (room ids, via servers and times; no text), written
once a round of joins is over, atomically.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ValidationError

from matrix_sources.indexer.clock import REAL, Clock

log = logging.getLogger(__name__)

FIRST_S = 300.0  # the first wait after a failed join
CAP_S = 6 * 3600.0  # the longest: an unreachable room is still tried four times a day
FILE = "joins.json"


class Failed(BaseModel):
    tries: int
    next_at: float  # wall seconds
    via: tuple[str, ...] = ()


class JoinBackoff:
    def __init__(self, data_dir: Path, clock: Clock = REAL) -> None:
        self.path = Path(data_dir) / FILE
        self._clock = clock
        self.failed: dict[str, Failed] = {}
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            self.failed = {r: Failed.model_validate(f) for r, f in raw.items()}
        except FileNotFoundError:
            pass
        except (ValueError, AttributeError, ValidationError) as e:  # every room tried again
            log.warning("joins_file_unreadable", extra={"path": str(self.path), "error": str(e)})

    def due(self, room_id: str, via: tuple[str, ...]) -> bool:
        """Whether a join of the room may be tried now."""
        f = self.failed.get(room_id)
        return f is None or f.via != via or self._clock.wall() >= f.next_at

    def record(self, room_id: str, via: tuple[str, ...], joined: bool) -> None:
        if joined:
            self.failed.pop(room_id, None)
            return
        tries = self.failed[room_id].tries + 1 if room_id in self.failed else 1
        wait = min(FIRST_S * 2 ** (tries - 1), CAP_S)
        self.failed[room_id] = Failed(tries=tries, next_at=self._clock.wall() + wait, via=via)

    def waiting(self, listed: Iterable[str]) -> list[str]:
        """The listed rooms whose next try is still to come."""
        now = self._clock.wall()
        return [r for r in listed if r in self.failed and self.failed[r].next_at > now]

    def save(self, listed: Iterable[str]) -> None:
        """Written atomically; rooms no longer listed are dropped."""
        keep = set(listed)
        self.failed = {r: f for r, f in self.failed.items() if r in keep}
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump({r: f.model_dump(mode="json") for r, f in sorted(self.failed.items())}, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)
