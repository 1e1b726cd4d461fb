"""The journal: JSON lines of refusals, purges and exclusions. Ids and rules only: never
message text, nor a room's name (a refused room's name, "Staff only", says too much).

Tests and `matrix-sources journal` read it back with `Journal.read`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..clock import REAL, Clock
from ..records import Refusal


@dataclass
class Journal:
    path: Path
    clock: Clock = REAL  # its wall clock stamps each line

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        # Room ids already journalled for a whole-room refusal, so a busy refused room
        # writes one line per (room, rule) per process, not one per event.
        self._seen_rooms: set[tuple[str, str]] = set()
        # (event id, rule) of every refusal in the file, read on first need: backfill
        # and Synapse's retries read events again, and a restart must not count them twice.
        self._seen_events: set[tuple[str | None, str]] | None = None

    def write(self, kind: str, **fields: object) -> None:
        entry = {"ts": self.clock.now_ms(), "kind": kind}
        entry.update({k: v for k, v in fields.items() if v is not None})
        line = json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())

    def refusal(self, refusal: Refusal, source: str = "push") -> None:
        if refusal.whole_room and refusal.event_id is None:
            key = (refusal.room_id, refusal.rule)
            if key in self._seen_rooms:
                return
            self._seen_rooms.add(key)
        elif refusal.event_id is not None and not self._first_refusal(refusal):
            return
        self.write(
            "refusal",
            rule=refusal.rule,
            room_id=refusal.room_id,
            event_id=refusal.event_id,
            detail=refusal.detail or None,
            source=source,
        )

    def _first_refusal(self, refusal: Refusal) -> bool:
        """True once per (event id, rule) over the file's whole history."""
        with self._lock:
            if self._seen_events is None:
                self._seen_events = {
                    (e["event_id"], e.get("rule", ""))
                    for e in self.read(kind="refusal")
                    if e.get("event_id")
                }
            key = (refusal.event_id, refusal.rule)
            if key in self._seen_events:
                return False
            self._seen_events.add(key)
            return True

    def purge(
        self,
        refusal: Refusal,
        windows: int = 0,
        messages: int = 0,
        source: str = "push",
        compacted: bool | None = None,
    ) -> None:
        """A room purged after the fact: the rule, the event that showed it (if any), how
        much was dropped, and whether the store's files were compacted after it too."""
        self.write(
            "purge",
            rule=refusal.rule,
            room_id=refusal.room_id,
            event_id=refusal.event_id,
            detail=refusal.detail or None,
            windows=windows,
            messages=messages,
            source=source,
            compacted=compacted,
        )

    def read(
        self, room: str | None = None, rule: str | None = None, kind: str | None = None
    ) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line after a crash
                if room and room not in (entry.get("room_id"), entry.get("room")):
                    continue
                if rule and entry.get("rule") != rule:
                    continue
                if kind and entry.get("kind") != kind:
                    continue
                yield entry
