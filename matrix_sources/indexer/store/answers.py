"""The bot's `!sources` replies, remembered by what they quoted, without their text.

When a quoted message is redacted, the reply that quoted it is edited to drop the quote:
a redaction must not live on in the bot's own answers. For that each reply is recorded
(after it was sent) with its hits' ids and the event ids of the lines it showed; at edit
time the lines still there are read back from the event log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..records import EventID, Hit
from .eventlog.log import EventLog
from .eventlog.rows import EventText


@dataclass(frozen=True, slots=True)
class RecordedAnswer:
    reply_event_id: str
    room_id: str
    in_reply_to: str | None
    thread_root: str | None
    hits: list[dict[str, Any]]  # Hit.to_json() without text, plus "quoted": [event ids]


class AnswerLog:
    def __init__(self, eventlog: EventLog) -> None:
        self.eventlog = eventlog  # its tables, answers and answer_quotes: eventlog/schema.py

    def record(
        self,
        reply_event_id: str,
        room_id: str,
        in_reply_to: str | None,
        thread_root: str | None,
        hits: list[Hit],
        quoted: list[tuple[EventID, ...]],
    ) -> None:
        entries = []
        for hit, ids in zip(hits, quoted):
            entry = hit.to_json()
            entry.pop("text", None)
            entry.pop("shown", None)  # text lives in the event log only; the ids stay
            entry["quoted"] = list(ids)
            entries.append(entry)
        quoted_ids = {e for q in quoted for e in q}
        with self.eventlog.transaction() as cur:
            cur.execute(
                "INSERT INTO answers (reply_event_id, room_id, in_reply_to,"
                " thread_root, hits, created_at) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (reply_event_id) DO UPDATE SET"
                " room_id = excluded.room_id, in_reply_to = excluded.in_reply_to,"
                " thread_root = excluded.thread_root, hits = excluded.hits,"
                " created_at = excluded.created_at",
                (
                    reply_event_id,
                    room_id,
                    in_reply_to,
                    thread_root,
                    json.dumps(entries),
                    self.eventlog.clock.now_ms(),
                ),
            )
            cur.executemany(
                "INSERT INTO answer_quotes (event_id, reply_event_id)"
                " VALUES (?, ?) ON CONFLICT DO NOTHING",
                [(e, reply_event_id) for e in sorted(quoted_ids)],
            )

    def quoting(self, event_ids: set[EventID]) -> list[RecordedAnswer]:
        """The replies that quoted any of these events."""
        if not event_ids:
            return []
        marks = ",".join("?" * len(event_ids))
        with self.eventlog.transaction(immediate=False) as cur:
            rows = cur.execute(
                "SELECT reply_event_id, room_id, in_reply_to, thread_root, hits FROM answers"
                " WHERE reply_event_id IN (SELECT reply_event_id FROM answer_quotes"
                f" WHERE event_id IN ({marks})) ORDER BY created_at, reply_event_id",
                sorted(event_ids),
            ).fetchall()
        return [RecordedAnswer(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def lines(self, event_ids: list[str]) -> dict[EventID, EventText]:
        """The text of those events whose text is still there."""
        return self.eventlog.texts.event_texts(EventID(e) for e in event_ids)

    def forget_quote(self, reply_event_id: str, event_ids: set[EventID]) -> None:
        """After the reply was edited: these quotes are gone from it."""
        with self.eventlog.transaction() as cur:
            cur.executemany(
                "DELETE FROM answer_quotes WHERE reply_event_id = ? AND event_id = ?",
                [(reply_event_id, e) for e in sorted(event_ids)],
            )
