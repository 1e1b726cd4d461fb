"""Which segment holds each point id: a compact map for a million ids.

A write must go to the segment that already holds its id (an upsert there, never a
duplicate in another), a delete to the one that holds it, and a read by ids to the
segments that hold them, without asking every segment. A dict of a million window ids
took 121 MiB here; this map keeps window ids ("w" and 31 hex digits, chunker.window_id)
as 16 bytes in a sorted array beside a uint16 array of segment keys (about 18 MiB for a
million), with a dict for the latest writes and for ids of any other form (reference
chunks, tests), folded into the arrays when it grows.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import cast

import numpy as np

_WINDOW_ID = re.compile(r"w[0-9a-f]{31}")
_KEY = np.dtype("S16")
_SEG = np.uint16
DEAD = np.iinfo(_SEG).max  # a deleted id's slot in the arrays, until the next fold
FOLD_AT = 65_536
# The map as a clean stop keeps it (store/clean_stop.py): packed window ids, sorted;
# each one's segment generation; the ids of any other form with theirs.
IdMapByGeneration = tuple[np.ndarray, np.ndarray, dict[str, int]]
_NIBBLE = np.full(256, 255, dtype=np.uint8)  # ASCII -> hex digit value (255: not one)
_NIBBLE[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)


def _packed(wid: str) -> bytes | None:
    return bytes.fromhex(wid[1:] + "0") if _WINDOW_ID.fullmatch(wid) else None


class IdMap:
    """id -> segment key (a small int), and how many ids each key holds."""

    def __init__(
        self,
        keys: np.ndarray | None = None,
        segs: np.ndarray | None = None,
        other: dict[str, int] | None = None,
    ) -> None:
        """Empty, or the map `export` gave (its arrays sorted, every id live)."""
        self._keys = np.asarray(keys if keys is not None else [], dtype=_KEY)  # sorted
        self._segs = np.asarray(segs if segs is not None else [], dtype=_SEG)
        self._recent: dict[str, int] = {}  # wins over the arrays; -1: deleted
        self._other: dict[str, int] = dict(other or {})  # ids that are not window ids
        self._loaded: list[tuple[np.ndarray, np.ndarray]] = []  # read, not sorted in yet
        self.counts: Counter[int] = Counter(self._segs.tolist()) + Counter(self._other.values())

    def __len__(self) -> int:
        return sum(self.counts.values())

    def _find(self, packed: list[bytes]) -> np.ndarray:
        """Positions in the arrays of packed ids, -1 where absent or dead."""
        self._sorted()
        if not len(self._keys) or not packed:
            return np.full(len(packed), -1, dtype=np.int64)
        want = np.asarray(packed, dtype=_KEY)
        pos = np.searchsorted(self._keys, want)
        pos[pos >= len(self._keys)] = 0
        hit = (self._keys[pos] == want) & (self._segs[pos] != DEAD)
        return np.where(hit, pos, -1)

    def get(self, ids: Sequence[str]) -> list[int]:
        """The segment key of each id, -1 where the map has none."""
        out = [-1] * len(ids)
        missing: list[int] = []
        packed: list[bytes] = []
        for i, wid in enumerate(ids):
            if wid in self._recent:
                out[i] = self._recent[wid]
            elif wid in self._other:
                out[i] = self._other[wid]
            else:
                p = _packed(wid)
                if p is not None:
                    missing.append(i)
                    packed.append(p)
        if packed:
            pos = self._find(packed)
            for i, at in zip(missing, pos.tolist()):
                if at >= 0:
                    out[i] = int(self._segs[at])
        return out

    def load(self, ids: Sequence[str], key: int) -> None:
        """Ids read from segment `key` when the map is built (none of them in it yet).
        Packed as arrays: a million ids in about a second, not four."""
        self.counts[key] += len(ids)
        windows = [w for w in ids if len(w) == 32 and w[0] == "w"]
        if len(windows) != len(ids):
            for wid in ids:
                if len(wid) != 32 or wid[0] != "w":
                    self._other[wid] = key
        if not windows:
            return
        digits = _NIBBLE[
            np.frombuffer("".join(windows).encode("ascii", "replace"), dtype=np.uint8).reshape(
                -1, 32
            )[:, 1:]
        ]
        bad = (digits == 255).any(axis=1)
        for wid in np.asarray(windows, dtype=object)[bad]:
            self._other[wid] = key
        digits = np.concatenate([digits[~bad], np.zeros((int((~bad).sum()), 1), np.uint8)], axis=1)
        packed = (digits[:, 0::2] << 4 | digits[:, 1::2]).astype(np.uint8)
        self._loaded.append((packed.view(_KEY).ravel(), np.full(len(packed), key, dtype=_SEG)))

    def _sorted(self) -> None:
        """Sort in what `load` read: once, at the first look-up after."""
        if self._loaded:
            keys = np.concatenate([self._keys, *(k for k, _ in self._loaded)])
            segs = np.concatenate([self._segs, *(s for _, s in self._loaded)])
            self._loaded = []
            order = np.argsort(keys, kind="stable")
            self._keys, self._segs = keys[order], segs[order]

    def set(self, ids: Sequence[str], key: int) -> None:
        """The ids are held by segment `key` (new ids, or moved from another)."""
        for wid, was in zip(ids, self.get(ids)):
            if was == key:
                continue
            if was >= 0:
                self.counts[was] -= 1
            self.counts[key] += 1
            if _packed(wid) is None:
                self._other[wid] = key
            else:
                self._recent[wid] = key
        self._maybe_fold()

    def delete(self, ids: Iterable[str]) -> None:
        ids = list(ids)
        for wid, was in zip(ids, self.get(ids)):
            if was < 0:
                continue
            self.counts[was] -= 1
            if wid in self._other:
                del self._other[wid]
            else:
                self._recent[wid] = -1
        self._maybe_fold()

    def rekey(self, old: Iterable[int], new: int) -> None:
        """Every id of the `old` segments is now held by `new` (a merge)."""
        old = [k for k in old if k != new]
        if not old:
            return
        self._sorted()
        moved = sum(self.counts.pop(k, 0) for k in old)
        self.counts[new] += moved
        was = set(old)
        if len(self._segs):
            self._segs[np.isin(self._segs, np.asarray(old, dtype=_SEG))] = new
        for d in (self._recent, self._other):
            for wid, k in d.items():
                if k in was:
                    d[wid] = new

    def drop_key(self, key: int) -> None:
        """Forget every id of segment `key` (a segment emptied and dropped)."""
        self._sorted()
        self.counts.pop(key, None)
        if len(self._segs):
            self._segs[self._segs == key] = DEAD
        for wid in [w for w, k in self._recent.items() if k == key]:
            self._recent[wid] = -1  # the arrays may hold an older key of it
        for wid in [w for w, k in self._other.items() if k == key]:
            del self._other[wid]

    def _maybe_fold(self) -> None:
        if len(self._recent) >= FOLD_AT:
            self.fold()

    def fold(self) -> None:
        """Move the recent ids into the sorted arrays; drop the dead."""
        if not self._recent:
            return
        self._sorted()
        items = list(self._recent.items())
        self._recent = {}
        # Only ids `_packed` reads reach `_recent` (set, delete): none is None.
        packed = cast(list[bytes], [_packed(w) for w, _ in items])
        pos = self._find(packed)
        segs = self._segs.copy()
        fresh_keys, fresh_segs = [], []
        for (_wid, key), p, at in zip(items, packed, pos.tolist()):
            if at >= 0:
                segs[at] = DEAD if key < 0 else key
            elif key >= 0:
                fresh_keys.append(p)
                fresh_segs.append(key)
        keys = np.concatenate([self._keys, np.asarray(fresh_keys, dtype=_KEY)])
        segs = np.concatenate([segs, np.asarray(fresh_segs, dtype=_SEG)])
        live = segs != DEAD
        keys, segs = keys[live], segs[live]
        order = np.argsort(keys, kind="stable")
        self._keys, self._segs = keys[order], segs[order]

    def export(self) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        """(packed window ids, sorted; their segment keys; the other ids' keys): every
        live id once, for the next start to read back (clean_stop.py)."""
        self.fold()
        self._sorted()
        live = self._segs != DEAD
        return self._keys[live], self._segs[live], dict(self._other)
