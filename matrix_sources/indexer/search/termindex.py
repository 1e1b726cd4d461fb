"""The lexical leg's postings, in memory: which stored windows hold which words.

Scanning every window's text per query term costs: Chroma's `where_document` regex took about 60 ms
a term at 100,000 windows when Chroma held the text (bench/query.py); the event log's scan takes
about 250 ms (docs/storage.md). This index answers the same question from memory in about a
millisecond a term. It is never written anywhere: the service builds it from the event log's text
when it starts (termindex_build.py, in a background thread; until it is ready the leg scans the
event log) and the store keeps it in step with every write it makes (store/vectors/chroma.py), so a
redacted word stops matching when its window is re-upserted. docs/storage.md compares it with SQLite
FTS5 in the event log.

It matches exactly what the event log's scan (lexical.matching) matches, by the same
tokenizer (tokens.py):

- only what people wrote: a chat window's message bodies (typed, from the event log),
  a reference chunk's text; never sender ids or times;
- its keys are tokens.keys of the bodies: words, compounds and their parts, bigrams. A
  term matches a key equal to it, or, as a prefix stem, a word starting with it.

Layout, for memory (a few tens of MB at 100,000 windows): each window has a slot
number; a key's postings are one int (a single slot) or an array of
slot << TF_BITS | term frequency. A window written again gets a new slot and its old
one is marked dead; dead postings are dropped when they outnumber the live ones.
"""

from __future__ import annotations

import logging
import threading
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from ..clock import stopwatch
from ..records import Window
from .tokens import is_word, keys, matches

log = logging.getLogger(__name__)

TF_BITS = 6
TF_MAX = (1 << TF_BITS) - 1  # a word's count in one window, capped (BM25 saturates)
HEAD = 3  # prefix lookups go through the keys sharing their first HEAD characters


def matchable(texts: Iterable[str]) -> list[str]:
    """The parts the lexical leg matches in, one per line (keys never span a line
    break): of a chat window, its message bodies; of a reference chunk, its text."""
    return [line for text in texts for line in text.split("\n")]


def window_bodies(window: Window) -> list[str]:
    """A chat window's parts the lexical leg can match in: its bodies' lines."""
    return matchable(m.body for m in window.messages)


def doc_stats(parts: Sequence[str]) -> tuple[int, Counter]:
    """(length in whitespace words, count of each key: tokens.keys) of the bodies."""
    return (sum(len(p.split()) for p in parts), Counter(k for p in parts for k in keys(p)))


def id_key(wid: str) -> int:
    """The first 8 bytes of an id's UTF-8 as a big-endian number: a < b implies
    id_key(a) <= id_key(b) (UTF-8 keeps code point order; NUL pads, the least byte),
    so the smallest ids of many are among the smallest keys, found without turning
    every slot back into its id string (lexical._best's ties)."""
    return int.from_bytes(wid.encode("utf-8", "surrogatepass")[:8].ljust(8, b"\0"), "big")


class _Column:
    """One value per slot in a numpy array that grows by doubling: read whole by the
    vectorised lookups (slot_postings), written one slot at a time."""

    def __init__(self, dtype: type) -> None:
        self.data: np.ndarray = np.zeros(1024, dtype=dtype)

    def set(self, slot: int, value: int) -> None:
        if slot >= len(self.data):
            grown = np.zeros(max(2 * len(self.data), slot + 1), dtype=self.data.dtype)
            grown[: len(self.data)] = self.data
            self.data = grown
        self.data[slot] = value


EMPTY = np.zeros(0, dtype=np.int64)


class TermIndex:
    """Window id -> slot -> (room, corpus, length, live); key -> postings. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._slot: dict[str, int] = {}
        self._ids: list[str | None] = []
        self._codes: dict[str, int] = {}  # room and corpus names -> small ints
        self._room = _Column(np.uint32)
        self._corpus = _Column(np.uint32)
        self._live = _Column(np.bool_)
        self._key = _Column(np.uint64)  # id_key of each slot's window id
        self._length = array("I")
        self._post: dict[str, int | array] = {}
        self._heads: dict[str, set[str]] = {}
        self._dead = 0
        self._postings = 0
        self._touched: set[str] | None = None  # written while the build runs
        self._generation = 0
        self.ready = threading.Event()

    # -- writes (the store, for each of its own: store.chroma.WriteFollower) -----------

    def windows_written(self, windows: Sequence[Window]) -> None:
        self._add(
            [w.window_id for w in windows],
            [window_bodies(w) for w in windows],
            [{"room_id": w.room_id, "corpus": w.corpus} for w in windows],
        )

    def texts_written(
        self, ids: Sequence[str], texts: Sequence[str], metas: Sequence[dict]
    ) -> None:
        self._add(ids, [matchable([t or ""]) for t in texts], metas)

    def _add(self, ids: Iterable[str], parts: Iterable[list[str]], metas: Iterable[dict]) -> None:
        with self._lock:
            for wid, got, meta in zip(ids, parts, metas):
                if self._touched is not None:
                    self._touched.add(wid)
                self._put(wid, got, meta or {})
            self._maybe_compact()

    def remove(self, ids: Iterable[str]) -> None:
        with self._lock:
            for wid in ids:
                if self._touched is not None:
                    self._touched.add(wid)
                self._kill(wid)
            self._maybe_compact()

    def clear(self) -> None:
        """The collection was emptied (a rebuild): drop everything, stay usable."""
        with self._lock:
            self._generation += 1
            self.__init_state()
            if self._touched is not None:
                self._touched = set()
            self.ready.set()  # an empty collection is fully indexed

    def __init_state(self) -> None:
        self._slot, self._ids, self._codes = {}, [], {}
        self._room, self._corpus, self._live = (
            _Column(np.uint32),
            _Column(np.uint32),
            _Column(np.bool_),
        )
        self._key = _Column(np.uint64)
        self._length = array("I")
        self._post, self._heads = {}, {}
        self._dead = self._postings = 0

    def _put(self, wid: str, parts: list[str], meta: dict) -> None:
        self._kill(wid)
        slot = len(self._ids)
        self._slot[wid] = slot
        self._ids.append(wid)
        self._room.set(slot, self._code(str(meta.get("room_id", ""))))
        self._corpus.set(slot, self._code(str(meta.get("corpus", ""))))
        self._live.set(slot, True)
        self._key.set(slot, id_key(wid))
        length, counts = doc_stats(parts)
        self._length.append(min(length, 0xFFFFFFFF))
        for key, tf in counts.items():
            value = slot << TF_BITS | min(tf, TF_MAX)
            got = self._post.get(key)
            if got is None:
                self._post[key] = value
                if is_word(key):  # prefix lookups are of words only
                    self._heads.setdefault(key[:HEAD], set()).add(key)
            elif isinstance(got, int):
                self._post[key] = array("I", (got, value))
            else:
                got.append(value)
        self._postings += len(counts)

    def _code(self, name: str) -> int:
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self._codes)
        return code

    def _kill(self, wid: str) -> None:
        slot = self._slot.pop(wid, None)
        if slot is not None:
            self._ids[slot] = None
            self._live.set(slot, False)
            self._dead += 1

    def _maybe_compact(self) -> None:
        if self._dead > max(len(self._slot), 10_000):
            self._compact()

    def _compact(self) -> None:
        """Drop dead slots: renumber the live ones, rewrite every key's postings."""
        took = stopwatch()
        remap: dict[int, int] = {}
        ids: list[str | None] = []
        room, corpus, live = _Column(np.uint32), _Column(np.uint32), _Column(np.bool_)
        id_keys = _Column(np.uint64)
        length = array("I")
        for old, wid in enumerate(self._ids):
            if wid is not None:
                new = remap[old] = len(ids)
                ids.append(wid)
                room.set(new, int(self._room.data[old]))
                corpus.set(new, int(self._corpus.data[old]))
                live.set(new, True)
                id_keys.set(new, int(self._key.data[old]))
                length.append(self._length[old])
        post: dict[str, int | array] = {}
        postings = 0
        for key, got in self._post.items():
            kept = [
                remap[v >> TF_BITS] << TF_BITS | (v & TF_MAX)
                for v in ((got,) if isinstance(got, int) else got)
                if (v >> TF_BITS) in remap
            ]
            if not kept:
                heads = self._heads.get(key[:HEAD])
                if heads is not None:
                    heads.discard(key)
                    if not heads:
                        del self._heads[key[:HEAD]]
                continue
            post[key] = kept[0] if len(kept) == 1 else array("I", kept)
            postings += len(kept)
        self._ids, self._room, self._corpus, self._length = ids, room, corpus, length
        self._live, self._key = live, id_keys
        self._slot = {wid: i for i, wid in enumerate(ids) if wid is not None}
        self._post, self._postings, self._dead = post, postings, 0
        log.debug(
            "term_index_compacted",
            extra={
                "windows": len(ids),
                "keys": len(post),
                "postings": postings,
                "seconds": round(took(), 3),
            },
        )

    # -- the build, from the collection --------------------------------------------

    def build(
        self,
        ids: list[str],
        pages: Callable[[list[str]], Iterator[tuple[list, list, list]]],
        pause: Callable[[], None] = lambda: None,
    ) -> bool:
        """Index the stored windows `ids` (listed after this index was attached to the
        store, so any window written since reaches it through the store's writes);
        `pages(ids)` yields their (ids, bodies, metadatas). A write made meanwhile
        wins over what a page read before it. False if the collection was emptied
        meanwhile (the index then holds what was written since, which is all there is).
        `pause()` is called before each page is read and indexed: pure Python, a page
        holds the GIL, so a search waiting there runs at its own speed meanwhile."""
        with self._lock:
            generation = self._generation
            self._touched = set()
        try:
            got = iter(pages(ids))
            while True:
                pause()
                page = next(got, None)
                if page is None:
                    break
                if not self._build_page(generation, *page):
                    return False
        finally:
            with self._lock:
                self._touched = None
        self.ready.set()
        return True

    def _build_page(self, generation: int, ids, parts, metas) -> bool:
        with self._lock:
            if self._generation != generation:
                return False
            for wid, got, meta in zip(ids, parts, metas):
                if wid not in self._touched:  # type: ignore[operator]
                    self._put(wid, got, meta or {})
            return True

    # -- reads ---------------------------------------------------------------------

    def count(self) -> int:
        """Live windows: the collection's size, which idf is taken against."""
        with self._lock:
            return len(self._slot)

    def postings(self, base: str, prefix: bool, where: dict | None = None) -> dict[str, int] | None:
        """Window id -> term frequency for the windows whose bodies hold a run equal to
        `base` (or starting with it, `prefix`); None if not answerable here."""
        with self._lock:
            got = self.slot_postings(base, prefix, where)
            if got is None:
                return None
            slots, tfs = got
            return dict(zip(self.ids_of(slots), tfs.tolist()))

    def locked(self) -> threading.RLock:
        """Hold it across slot_postings, ids_of and slot_lengths: slots are renumbered
        by a compaction, which a write can start."""
        return self._lock

    def slot_postings(
        self, base: str, prefix: bool, where: dict | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """postings as two arrays, (slots, term frequencies), one entry per window,
        slots ascending; None if not answerable here. Vectorised: a common word's
        postings at 100,000 windows are tens of thousands of entries."""
        want = _wanted(where)
        if want is None or not self.ready.is_set():
            return None
        with self._lock:
            if prefix and len(base) >= HEAD:
                found: list[str] = [
                    k for k in self._heads.get(base[:HEAD], ()) if matches(base, prefix, k)
                ]
            elif prefix:
                found = [k for k in self._post if matches(base, prefix, k)]
            else:
                found = [base] if base in self._post else []
            if not found:
                return EMPTY, EMPTY
            parts = [
                np.array([got] if isinstance(got, int) else got, dtype=np.int64)
                for got in (self._post[k] for k in found)
            ]
            values = parts[0] if len(parts) == 1 else np.concatenate(parts)
            slots, tfs = values >> TF_BITS, values & TF_MAX
            keep = self._live.data[slots]
            room, corpus = want
            for column, name in ((self._room, room), (self._corpus, corpus)):
                if isinstance(name, tuple):  # a room's upgrade chain
                    codes = [self._codes.get(n, -1) for n in name]
                    keep &= np.isin(column.data[slots], codes)
                elif name is not None:
                    keep &= column.data[slots] == self._codes.get(name, -1)
            slots, tfs = slots[keep], tfs[keep]
            if len(parts) > 1:  # a window holding several keys of a prefix: one entry
                # Counted per slot rather than np.unique's sort: 0.1 ms against 1 for
                # a prefix of common words at 100,000 windows.
                summed = np.bincount(slots, weights=tfs)
                slots = np.flatnonzero(summed != 0)  # every tf is at least 1
                tfs = summed[slots].astype(np.int64)
            # A key's postings are in slot order: slots only grow, compaction keeps order.
            return slots, tfs

    def slots(self) -> int:
        """Slots in use (live and dead): the size of a per-slot array."""
        with self._lock:
            return len(self._ids)

    def ids_of(self, slots: np.ndarray) -> list[str]:
        with self._lock:
            ids = self._ids
            return [ids[s] for s in slots.tolist()]

    def slot_keys(self, slots: np.ndarray) -> np.ndarray:
        """id_key of each slot's window id."""
        with self._lock:
            return self._key.data[slots]

    def slot_lengths(self, slots: np.ndarray) -> np.ndarray:
        if not len(slots):
            return EMPTY
        with self._lock:
            return np.frombuffer(self._length, dtype=np.uint32)[slots].astype(np.int64)

    def lengths(self, ids: Iterable[str]) -> dict[str, int]:
        with self._lock:
            return {w: self._length[self._slot[w]] for w in ids if w in self._slot}

    def stats(self) -> dict:
        with self._lock:
            return {
                "windows": len(self._slot),
                "keys": len(self._post),
                "postings": self._postings,
                "dead_slots": self._dead,
                "ready": self.ready.is_set(),
            }


def _wanted(where: dict | None) -> tuple[str | tuple[str, ...] | None, str | None] | None:
    """The store's `where` forms search uses (room_id, corpus, their $and; a room's
    chain as room_id $in) as the (room or rooms, corpus) wanted, None for either meaning
    any; None for any other form."""
    if where is None:
        return None, None
    clauses = where.get("$and") if set(where) == {"$and"} else [where]
    want: dict[str, str | tuple[str, ...]] = {}
    for c in clauses or ():
        if not isinstance(c, dict) or len(c) != 1:
            return None
        ((field, value),) = c.items()
        if field == "room_id" and isinstance(value, dict) and set(value) == {"$in"}:
            value = tuple(value["$in"])
        if field not in ("room_id", "corpus") or field in want:
            return None
        if not isinstance(value, (str, tuple)) or (field == "corpus" and isinstance(value, tuple)):
            return None
        want[field] = value
    corpus = want.get("corpus")
    return want.get("room_id"), corpus if isinstance(corpus, str) else None
