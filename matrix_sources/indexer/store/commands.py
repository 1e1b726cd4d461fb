"""`!sources` commands taken and not answered yet: they survive a crash.

    transaction --keep (before the 200)--> commands: body kept
        --answered (the reply sent, or given up on)--> body dropped, answered_at set
    start --unanswered()--> answered now, or told "sorry, I restarted" (bot.py)

A command's text is kept from its transaction's acknowledgement until it is answered
(seconds), in the event log, then dropped (on SQLite `secure_delete` zeroes it in the database
file; on PostgreSQL what VACUUM keeps is said in docs/storage.md).
The row itself stays KEEP_ANSWERED_MS: a transaction sent again (Synapse retries after a
non-200, the backlog bound answers 503) carries the same commands, and `keep` returns
only the ones never seen, so nobody is answered twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..records import EventID, Message, RoomID, UserID
from .eventlog.log import EventLog

KEEP_ANSWERED_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class KeptCommand:
    message: Message
    thread_root: EventID | None
    received_at: int  # ms, wall clock


class CommandLog:
    def __init__(self, eventlog: EventLog) -> None:
        self.eventlog = eventlog  # its table, commands: eventlog/schema.py

    def keep(self, commands: Sequence[tuple[Message, EventID | None]], now_ms: int) -> set[EventID]:
        """Store the commands not seen before; return their event ids."""
        new: set[EventID] = set()
        with self.eventlog.transaction() as cur:
            for m, root in commands:
                cur.execute(
                    "INSERT INTO commands (event_id, room_id, sender, ts, body, thread_root,"
                    " reply_to, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING",
                    (m.event_id, m.room_id, m.sender, m.ts, m.body, root, m.reply_to, now_ms),
                )
                if cur.rowcount:
                    new.add(m.event_id)
        return new

    def answered(self, event_id: EventID, now_ms: int) -> None:
        with self.eventlog.transaction() as cur:
            cur.execute(
                "UPDATE commands SET body = NULL, answered_at = ? WHERE event_id = ?",
                (now_ms, event_id),
            )

    def unanswered(self, now_ms: int) -> list[KeptCommand]:
        """The commands taken and never answered, oldest first; rows answered more than
        KEEP_ANSWERED_MS ago are dropped on the way."""
        with self.eventlog.transaction() as cur:
            cur.execute("DELETE FROM commands WHERE answered_at < ?", (now_ms - KEEP_ANSWERED_MS,))
            rows = cur.execute(
                "SELECT event_id, room_id, sender, ts, body, thread_root, reply_to,"
                " received_at FROM commands WHERE answered_at IS NULL"
                " ORDER BY received_at, ts"
            ).fetchall()
        return [
            KeptCommand(
                Message(
                    EventID(r[0]),
                    RoomID(r[1]),
                    UserID(r[2]),
                    r[3],
                    r[4] or "",
                    EventID(r[6]) if r[6] else None,
                ),
                EventID(r[5]) if r[5] else None,
                r[7],
            )
            for r in rows
        ]
