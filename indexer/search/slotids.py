"""Window id <-> slot for the keyword postings (termindex.py), packed.

A dict of a million window ids, with the list of them by slot, took 141 MiB at a
million windows, and the build left its heap fragmented around those million small
strings and ints (the postings' resident growth was 458 MiB for 303 MiB of structures;
bench/out notes in docs/benchmarks.md). Here a window id ("w" and 31 hex digits,
chunker.window_id) is 16 bytes in a per-slot column, and the id -> slot lookup is a
sorted array of those bytes beside their slots, with a dict for the latest writes
folded in when it grows (as store/idmap.py keeps which segment holds each id). Ids of
any other form (reference chunks, tests) stay in dicts.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..store.idmap import _packed

_KEY = np.dtype("S16")
FOLD_AT = 65_536


class _Grown:
    """A per-slot numpy column that grows by doubling."""

    def __init__(self, dtype) -> None:
        self.data = np.zeros(1024, dtype=dtype)

    def ensure(self, size: int) -> None:
        if size > len(self.data):
            grown = np.zeros(max(2 * len(self.data), size), dtype=self.data.dtype)
            grown[:len(self.data)] = self.data
            self.data = grown


class SlotIds:
    """Slots are handed out in order (add); a removed id's slot stays used until
    `compact` renumbers the held ones."""

    def __init__(self) -> None:
        self._packed = _Grown(_KEY)  # slot -> packed window id
        self._held = _Grown(np.bool_)  # slot -> holds an id now
        self._other: dict[int, str] = {}  # slot -> an id of another form
        self._other_slot: dict[str, int] = {}
        self._keys = np.empty(0, dtype=_KEY)  # sorted, with their slots; stale entries
        self._slots = np.empty(0, dtype=np.uint32)  # are told by _valid
        self._recent: dict[str, int] = {}  # window id -> slot, newer than the arrays
        self.n = 0  # slots used, held or not
        self.held = 0

    def __len__(self) -> int:
        return self.held

    def get(self, wid: str) -> int | None:
        slot = self._other_slot.get(wid)
        if slot is not None:
            return slot
        packed = _packed(wid)
        if packed is None:
            return None
        slot = self._recent.get(wid)
        if slot is not None:
            return slot if slot >= 0 else None
        if not len(self._keys):
            return None
        key = packed.rstrip(b"\0")  # as the arrays give it back: trailing NULs dropped
        at = int(np.searchsorted(self._keys, key))
        if at < len(self._keys) and self._keys[at] == key:
            slot = int(self._slots[at])
            if self._held.data[slot] and self._packed.data[slot] == key:
                return slot
        return None

    def add(self, wid: str) -> int:
        """A new slot for `wid` (which holds none: remove it first)."""
        slot = self.n
        self.n += 1
        self._packed.ensure(self.n)
        self._held.ensure(self.n)
        self._held.data[slot] = True
        self.held += 1
        key = _packed(wid)
        if key is None:
            self._other[slot] = wid
            self._other_slot[wid] = slot
        else:
            self._packed.data[slot] = key
            self._recent[wid] = slot
            if len(self._recent) >= max(FOLD_AT, self.n // 4):  # folds cost O(n)
                self.fold()
        return slot

    def remove(self, wid: str) -> int | None:
        """The slot `wid` held, now free; None if it held none."""
        slot = self.get(wid)
        if slot is None:
            return None
        self._held.data[slot] = False
        self.held -= 1
        if slot in self._other:
            del self._other[slot]
            del self._other_slot[wid]
        else:
            self._recent[wid] = -1
        return slot

    def ids_of(self, slots: Sequence[int] | np.ndarray) -> list[str]:
        """The ids the slots hold (each slot must hold one)."""
        out = []
        for s, key in zip(np.asarray(slots).tolist(), self._packed.data[slots].tolist()):
            other = self._other.get(s)
            # numpy drops a bytes value's trailing NULs: the last hex digit may be 0
            out.append(other if other is not None else "w" + key.ljust(16, b"\0").hex()[:31])
        return out

    def compact(self) -> np.ndarray:
        """Renumber the held slots in order; the old slot -> new slot map (-1 where
        none was held)."""
        held = self._held.data[:self.n]
        remap = np.full(self.n, -1, dtype=np.int64)
        remap[held] = np.arange(int(held.sum()))
        packed = self._packed.data[:self.n][held]
        self._packed, self._held = _Grown(_KEY), _Grown(np.bool_)
        self.n = self.held = len(packed)
        self._packed.ensure(self.n)
        self._held.ensure(self.n)
        self._packed.data[:self.n] = packed
        self._held.data[:self.n] = True
        self._other = {int(remap[s]): w for s, w in self._other.items()}
        self._other_slot = {w: s for s, w in self._other.items()}
        self._recent = {}
        self._sort()
        return remap

    def fold(self) -> None:
        """Move the latest writes into the sorted arrays (the dict's strings go)."""
        self._recent = {}
        self._sort()

    def _sort(self) -> None:
        """The lookup arrays afresh from the column: every held window id's slot."""
        slots = np.flatnonzero(self._held.data[:self.n])
        if self._other:
            slots = slots[~np.isin(slots, np.fromiter(self._other, dtype=np.int64))]
        keys = self._packed.data[slots]
        order = np.argsort(keys, kind="stable")
        self._keys, self._slots = keys[order], slots[order].astype(np.uint32)
