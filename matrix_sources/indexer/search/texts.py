"""What a person reads of the stored points search keeps: Chroma holds no text, so each
one's text is read from the event log, a chat window's as its messages now, typed
(`Line`), and as their document (`chunker.document`), a reference chunk's from
`ref_chunks`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..pipeline.chunker import document
from ..records import CORPUS_REFERENCE, Line, Window, WindowID

if TYPE_CHECKING:
    from ..store.eventlog.log import EventLog
    from ..store.vectors.points import StoredWindow


class WindowTexts:
    def __init__(self, eventlog: EventLog | None) -> None:
        self.eventlog = eventlog

    def read(self, windows: Sequence[StoredWindow]) -> list[tuple[str, tuple[Line, ...]]]:
        """Each window's (text, lines), in one read of the event log ("", () without an
        event log, or once gone)."""
        if self.eventlog is None or not windows:
            return [("", ())] * len(windows)
        refs = [w.window_id for w in windows if w.corpus == CORPUS_REFERENCE]
        chat = [w.window_id for w in windows if w.corpus != CORPUS_REFERENCE]
        ref_text = self.eventlog.texts.ref_texts(refs) if refs else {}
        msgs = self.eventlog.texts.windows_messages(chat) if chat else {}
        out: list[tuple[str, tuple[Line, ...]]] = []
        for w in windows:
            i = w.window_id
            if i in ref_text:
                out.append((ref_text[i], ()))
            elif i in msgs:
                ms = msgs[i]
                out.append(
                    (
                        document(Window(WindowID(i), ms[0].room_id, tuple(ms), w.room_label)),
                        tuple(Line(m.event_id, m.sender, m.ts, m.body) for m in ms),
                    )
                )
            else:
                out.append(("", ()))
        return out
