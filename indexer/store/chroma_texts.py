"""Window texts for the store's records (a mixin of `ChromaStore`, sharing its `self`):
Chroma holds no text, so each record's text is read from the event log, chat windows
rebuilt by `chunker.document` from their messages as they are now, reference chunks
from `ref_chunks`."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from ..pipeline.chunker import document
from ..records import CORPUS_REFERENCE, Window, WindowID

if TYPE_CHECKING:
    from .chroma import StoredWindow


class WindowTexts:
    def _texts(self, ids: Sequence[str], metas: Sequence[dict | None]) -> list[str]:
        """Each record's text, from the event log ("" without one, or once gone)."""
        return self._texts_of(ids, [str((m or {}).get("corpus", "")) for m in metas],
                              [str((m or {}).get("room_label", "")) for m in metas])

    def _texts_of(self, ids: Sequence[str], corpora: Sequence[str],
                  labels: Sequence[str]) -> list[str]:
        if self.eventlog is None or not ids:
            return [""] * len(ids)
        refs = [i for i, c in zip(ids, corpora) if c == CORPUS_REFERENCE]
        chat = [i for i, c in zip(ids, corpora) if c != CORPUS_REFERENCE]
        ref_text = self.eventlog.ref_texts(refs) if refs else {}
        msgs = self.eventlog.windows_messages(chat) if chat else {}
        out = []
        for i, label in zip(ids, labels):
            if i in ref_text:
                out.append(ref_text[i])
            elif i in msgs:
                ms = msgs[i]
                out.append(document(Window(WindowID(i), ms[0].room_id, tuple(ms), label)))
            else:
                out.append("")
        return out

    def with_texts(self, windows: Sequence[StoredWindow]) -> list[StoredWindow]:
        """The windows with their texts, read from the event log in one go: for records
        fetched with `text=False` (search reads texts only for the hits it keeps)."""
        texts = self._texts_of([w.window_id for w in windows], [w.corpus for w in windows],
                               [w.room_label for w in windows])
        return [replace(w, text=t) for w, t in zip(windows, texts)]
