"""Editing the bot's earlier replies when a message they quoted is redacted.

The reply is rebuilt from what was recorded when it was sent (its hits' ids and the
event ids of the lines it showed, indexer/store/answers.py), with every line whose event is
gone left out, and sent as an `m.replace` of the reply.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping

from matrix_sources.indexer.components import Index
from matrix_sources.indexer.records import EventID, Hit, Line, UserID
from matrix_sources.indexer.store.answers import RecordedAnswer
from matrix_sources.indexer.store.eventlog.rows import EventText

from .replies import Reply, render_hits

log = logging.getLogger(__name__)

EDITED = "edited: a message quoted here was deleted"
EDIT_HEADER = f"Sources ({EDITED})"  # when the question can no longer be read


def rebuild_reply(
    rec: RecordedAnswer,
    lines: Mapping[EventID, EventText],
    fallback_server: str | None = None,
    question: tuple[str, ...] = (),
) -> Reply:
    """lines: the text of the quoted events whose text is still there;
    question: the texts of the command answered (read back from the homeserver, never
    stored here), for the "Sources for" line the reply had."""
    hits = []
    for h in rec.hits:
        kept = [e for e in h.get("quoted", []) if e in lines]
        shown = tuple(
            Line(
                EventID(e),
                UserID(lines[e].sender),
                lines[e].ts,
                lines[e].body,
                "linked" if e in h.get("answer_event_ids", ()) else "",
            )
            for e in kept
        )
        hits.append(Hit.from_json(h, shown=shown))
    if question:
        return render_hits(hits, question, fallback_server, note=EDITED)
    return render_hits(hits, ("",), fallback_server, header=EDIT_HEADER)


def edit_content(reply_event_id: str, reply: Reply) -> dict:
    new = {
        "msgtype": "m.notice",
        "body": reply.body,
        "format": "org.matrix.custom.html",
        "formatted_body": reply.formatted_body,
        "m.mentions": {},
    }
    return {
        "msgtype": "m.notice",
        "body": "* " + reply.body,
        "format": "org.matrix.custom.html",
        "formatted_body": "* " + reply.formatted_body,
        "m.mentions": {},
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": reply_event_id},
    }


async def edit_replies(
    index: Index,
    withdrawn: set,
    send: Callable[[str, dict], Awaitable[str]],
    asked: Callable[[str, str | None], Awaitable[tuple[str, ...]]],
    fallback_server: str,
) -> None:
    """A withdrawn message must not live on in the bot's own answers: edit every
    reply that quoted one, and re-record what the edited reply quotes. `asked(room,
    command_id)`: the texts the command asked, read back from the homeserver."""
    answers, manifest = index.answers, index.manifest
    for rec in await asyncio.to_thread(answers.quoting, withdrawn):
        ids = [e for h in rec.hits for e in h.get("quoted", [])]
        lines = await asyncio.to_thread(answers.lines, ids)
        reply = rebuild_reply(
            rec, lines, fallback_server, await asked(rec.room_id, rec.in_reply_to)
        )
        await send(rec.room_id, edit_content(rec.reply_event_id, reply))
        await asyncio.to_thread(answers.forget_quote, rec.reply_event_id, withdrawn)
        if manifest is not None:
            await asyncio.to_thread(index.replace_answer, rec.reply_event_id, list(reply.sections))
        log.info(
            "reply_edited_after_redaction",
            extra={"room_id": rec.room_id, "reply": rec.reply_event_id, "redacted": len(withdrawn)},
        )


class WithdrawnLately:
    """The event ids withdrawn lately (the newest `keep`). A reply is sent before what it
    quoted is recorded, so a message withdrawn in between is found by no edit: the
    recording asks here and edits the reply itself. Written on the loop, read from the
    thread that records."""

    def __init__(self, keep: int = 10_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._keep = keep
        self._lock = threading.Lock()

    def add(self, event_ids: set[str]) -> None:
        with self._lock:
            for e in event_ids:
                self._ids[e] = None
                self._ids.move_to_end(e)
            while len(self._ids) > self._keep:
                self._ids.popitem(last=False)

    def among(self, event_ids: Iterable[str]) -> set[str]:
        with self._lock:
            return {e for e in event_ids if e in self._ids}
