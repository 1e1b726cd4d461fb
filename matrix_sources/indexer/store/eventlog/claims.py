"""Claims on rooms, for embedding workers in several processes (`EventLog.claims`).

A worker builds a room's windows only while it holds the room's claim: a row of
`claims` with a lease (`until_ms`) and a fencing token that grows at every claim and
every revocation. Two workers never hold one room: a claim is taken only where none is,
or where the last one's lease ran out (its worker died or stalled: taken over).

    claim      INSERT ... ON CONFLICT DO UPDATE ... WHERE the lease ran out: a new token
    renew      the lease moved on, for the token this worker holds
    release    the lease ended now (the row and its token stay: tokens never repeat)
    revoke     a purge, in its own transaction, before it drops the room's text: the
               token moves on and the lease ends, so a batch built before cannot land

    fenced     a worker's commit: one transaction that locks the rows of the rooms it
               commits (PostgreSQL: SELECT ... FOR UPDATE; SQLite: BEGIN IMMEDIATE),
               says which claims it lost, and stays open while the caller upserts to
               Chroma and marks the events indexed. A revoke waits for it to end, and a
               commit after a revoke or a takeover finds its token stale and drops its
               batch: so a purged room's windows never come back, and a stalled
               worker never overwrites its successor's windows.
    exclusive  a compaction (the service's only): the collection's fence row locked
               for update, which every `fenced` commit locks for share; no worker
               writes the collection while its points are copied and swapped.

Everything here uses the clock it is given (ms): tests drive leases with a fake one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ...records import RoomID
from .db import Database
from .sqldialect import Cursor


class ClaimTables:
    def __init__(self, db: Database) -> None:
        self.db = db

    def claim(self, room_id: RoomID, worker: str, now_ms: int, lease_ms: int) -> int | None:
        """The room's claim for `worker` (its new token), or None if another holds it."""
        with self.db.transaction() as cur:
            rows = cur.execute(
                "INSERT INTO claims (room_id, worker, token, until_ms) VALUES (?, ?, 1, ?)"
                " ON CONFLICT (room_id) DO UPDATE SET worker = excluded.worker,"
                " token = claims.token + 1, until_ms = excluded.until_ms"
                " WHERE claims.until_ms < ? RETURNING token",
                (room_id, worker, now_ms + lease_ms, now_ms),
            ).fetchall()
        return rows[0][0] if rows else None

    def renew(
        self, worker: str, tokens: dict[RoomID, int], now_ms: int, lease_ms: int
    ) -> set[RoomID]:
        """Move the leases on; return the rooms whose claim this worker no longer holds."""
        lost = set()
        with self.db.transaction() as cur:
            for room, token in sorted(tokens.items()):
                n = cur.execute(
                    "UPDATE claims SET until_ms = ? WHERE room_id = ? AND worker = ? AND token = ?",
                    (now_ms + lease_ms, room, worker, token),
                ).rowcount
                if n == 0:
                    lost.add(room)
        return lost

    def release(self, worker: str, tokens: dict[RoomID, int]) -> None:
        with self.db.transaction() as cur:
            cur.executemany(
                "UPDATE claims SET until_ms = 0, worker = '' WHERE room_id = ?"
                " AND worker = ? AND token = ?",
                [(room, worker, token) for room, token in sorted(tokens.items())],
            )

    @staticmethod
    def revoke(cur: Cursor, room_id: RoomID) -> None:
        """In the purge's transaction, first thing (claims before events: the order every
        writer locks them in, so none waits on another in a cycle)."""
        cur.execute(
            "INSERT INTO claims (room_id, worker, token, until_ms) VALUES (?, '', 1, 0)"
            " ON CONFLICT (room_id) DO UPDATE SET worker = '',"
            " token = claims.token + 1, until_ms = 0",
            (room_id,),
        )

    def holders(self, now_ms: int) -> dict[RoomID, str]:
        """Rooms claimed now, and by whom (status, tests)."""
        with self.db.locked() as conn:
            rows = conn.execute(
                "SELECT room_id, worker FROM claims WHERE until_ms >= ? AND worker != ''", (now_ms,)
            ).fetchall()
        return {RoomID(r): w for r, w in rows}

    @contextmanager
    def fenced(self, worker: str, tokens: dict[RoomID, int | None]) -> Iterator[set[RoomID]]:
        """A commit's transaction (module docstring): yields the rooms whose claim this
        worker lost; everything the block writes to the event log commits with it."""
        lock = self.db.dialect
        with self.db.transaction() as cur:
            cur.execute(f"SELECT id FROM collection_fence{lock.for_share}").fetchall()
            lost = set()
            for room in sorted(tokens):
                row = cur.execute(
                    f"SELECT worker, token FROM claims WHERE room_id = ?{lock.for_update}", (room,)
                ).fetchone()
                if row is None or tokens[room] is None or tuple(row) != (worker, tokens[room]):
                    lost.add(room)
            yield lost

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """A compaction's transaction: no `fenced` commit runs beside it."""
        with self.db.transaction() as cur:
            cur.execute(f"SELECT id FROM collection_fence{self.db.dialect.for_update}").fetchall()
            yield

    # -- room labels: what the service knows of each room, for workers' windows ----------

    def set_label(self, room_id: RoomID, label: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO room_labels (room_id, label) VALUES (?, ?)"
                " ON CONFLICT (room_id) DO UPDATE SET label = excluded.label",
                (room_id, label),
            )

    def labels(self) -> dict[RoomID, str]:
        with self.db.locked() as conn:
            return {
                RoomID(r): label
                for r, label in conn.execute("SELECT room_id, label FROM room_labels").fetchall()
            }
