"""Window texts for the store's records: Chroma holds no text, so each record's text is
read from the event log, chat windows rebuilt by `chunker.document` from their messages
as they are now (and given as those messages, typed), reference chunks from
`ref_chunks`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..pipeline.chunker import document
from ..records import CORPUS_REFERENCE, Line, Window, WindowID

if TYPE_CHECKING:
    from .eventlog import EventLog


class WindowTexts:
    def __init__(self, eventlog: EventLog | None) -> None:
        self.eventlog = eventlog

    def read(self, ids: Sequence[str], corpora: Sequence[str], labels: Sequence[str]
             ) -> list[tuple[str, tuple[Line, ...]]]:
        """Each record's (text, lines) ("", () without an event log, or once gone)."""
        if self.eventlog is None or not ids:
            return [("", ())] * len(ids)
        refs = [i for i, c in zip(ids, corpora) if c == CORPUS_REFERENCE]
        chat = [i for i, c in zip(ids, corpora) if c != CORPUS_REFERENCE]
        ref_text = self.eventlog.texts.ref_texts(refs) if refs else {}
        msgs = self.eventlog.texts.windows_messages(chat) if chat else {}
        out: list[tuple[str, tuple[Line, ...]]] = []
        for i, label in zip(ids, labels):
            if i in ref_text:
                out.append((ref_text[i], ()))
            elif i in msgs:
                ms = msgs[i]
                out.append((document(Window(WindowID(i), ms[0].room_id, tuple(ms), label)),
                            tuple(Line(m.event_id, m.sender, m.ts, m.body) for m in ms)))
            else:
                out.append(("", ()))
        return out
