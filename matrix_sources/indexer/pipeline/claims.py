"""One pipeline's claims on rooms, when several processes run the pipeline
(`index.pipeline: external`: `matrix-sources worker`, eventlog/claims.py).

    take(room)     before planning a room (its timelines and its dirty windows): False
                   if another worker holds it, and the room is left to that one
    renew()        before each embedding and each commit: leases move on while the
                   worker works; a worker killed stops renewing, and after
                   `lease` seconds another takes the room over
    commit(rooms)  the fenced transaction a batch's upsert and event-log commit run in:
                   it says which rooms this worker lost (revoked by a purge, taken over
                   after a stall); their steps are dropped, left pending for the holder
    release(rooms) after a room's steps are committed: another worker may take it at once

Thread-safe: the pipeline commits in a helper thread while it embeds the next group.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from ..clock import REAL, Clock
from ..records import RoomID
from ..store.eventlog.log import EventLog


def worker_name() -> str:
    """host:pid:random: unique, and says where a claim's holder runs."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class RoomClaims:
    def __init__(
        self,
        eventlog: EventLog,
        lease_seconds: float = 60.0,
        worker: str | None = None,
        clock: Clock = REAL,
    ) -> None:
        self.eventlog = eventlog
        self.lease_ms = int(lease_seconds * 1000)
        self.worker = worker or worker_name()
        self._clock = clock  # its wall clock: leases are compared across machines
        self._tokens: dict[RoomID, int] = {}
        self._guard = threading.Lock()

    def _now(self) -> int:
        return self._clock.now_ms()

    def held(self) -> set[RoomID]:
        with self._guard:
            return set(self._tokens)

    def take(self, room_id: RoomID) -> bool:
        with self._guard:
            if room_id in self._tokens:
                return True
            token = self.eventlog.claims.claim(room_id, self.worker, self._now(), self.lease_ms)
            if token is None:
                return False
            self._tokens[room_id] = token
            return True

    def renew(self) -> set[RoomID]:
        """Move every lease on; forget (and return) the claims lost meanwhile."""
        with self._guard:
            if not self._tokens:
                return set()
            lost = self.eventlog.claims.renew(
                self.worker, dict(self._tokens), self._now(), self.lease_ms
            )
            for room in lost:
                self._tokens.pop(room, None)
            return lost

    @contextmanager
    def commit(self, rooms: Iterable[RoomID]) -> Iterator[set[RoomID]]:
        with self._guard:
            tokens = {r: self._tokens.get(r) for r in set(rooms)}
        with self.eventlog.claims.fenced(self.worker, tokens) as lost:
            yield lost

    def release(self, rooms: Iterable[RoomID] | None = None) -> None:
        """Release these rooms' claims (None: all of them)."""
        with self._guard:
            which = set(self._tokens) if rooms is None else set(rooms) & set(self._tokens)
            mine = {r: self._tokens.pop(r) for r in which}
        if mine:
            self.eventlog.claims.release(self.worker, mine)
