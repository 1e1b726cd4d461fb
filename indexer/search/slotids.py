"""Which window id each slot of the keyword postings holds, and back, packed.

A dict of a million window ids and a list of them cost about 160 MiB at a million
windows (bench/scale.py): a Python string, a dict entry and a list cell per id, and the
strings, made one by one through the start-up build, keep half-empty allocator arenas
alive among the build's garbage. Here the ids are one UTF-8 buffer with an end offset per
slot, and id -> slot goes through 64-bit hashes: a sorted array, plus a dict of the
hashes added since it was last sorted (merged in batches, so a build sorts a few times,
not once a window). About 30 bytes a slot besides the id's own bytes.

Never written anywhere; the process's own `hash` is fine (it is stable within one).
"""

from __future__ import annotations

import numpy as np

MERGE_AT = 1 << 16  # recent hashes merged into the sorted array past this many
id_hash = hash  # tests force collisions through it


class Column:
    """One value per slot in a numpy array that grows by doubling: read whole by the
    vectorised lookups, written one slot at a time."""

    def __init__(self, dtype: type, values: np.ndarray | None = None) -> None:
        self.data = np.zeros(1024, dtype=dtype) if values is None else values

    def set(self, slot: int, value: int) -> None:
        if slot >= len(self.data):
            grown = np.zeros(max(2 * len(self.data), slot + 1), dtype=self.data.dtype)
            grown[:len(self.data)] = self.data
            self.data = grown
        self.data[slot] = value


class SlotIds:
    """slot -> id and live id -> slot. Not thread-safe: TermIndex holds its lock."""

    def __init__(self) -> None:
        self._blob = bytearray()
        self._ends = Column(np.uint64)  # where slot i's id ends in the blob
        self._hash = Column(np.int64)
        self.live = Column(np.bool_)
        self._slots = 0
        self._count = 0
        self._recent: dict[int, int] = {}  # hash -> slot, added since the last merge
        self._sorted_hash = np.zeros(0, dtype=np.int64)
        self._sorted_slot = np.zeros(0, dtype=np.int64)
        # An id whose hash a live id of the recent dict holds already (about one in
        # 10^7 at a million windows): kept here by its string instead.
        self._clash: dict[str, int] = {}

    def __len__(self) -> int:
        """Slots used, live and dead."""
        return self._slots

    def count(self) -> int:
        """Live ids."""
        return self._count

    def add(self, wid: str) -> int:
        """A new slot for `wid`, which must not be live (kill it first)."""
        slot = self._slots
        self._blob += wid.encode("utf-8", "surrogatepass")
        self._ends.set(slot, len(self._blob))
        h = id_hash(wid)
        self._hash.set(slot, h)
        self.live.set(slot, True)
        self._slots += 1
        self._count += 1
        held = self._recent.get(h)
        if held is not None and self.live.data[held] and self.id_of(held) != wid:
            self._clash[wid] = slot
        else:
            self._recent[h] = slot
            if len(self._recent) >= MERGE_AT:
                self._merge()
        return slot

    def slot_of(self, wid: str) -> int | None:
        """The live slot holding `wid`, if any."""
        if self._clash:
            slot = self._clash.get(wid)
            if slot is not None:
                return slot
        h = id_hash(wid)
        slot = self._recent.get(h)
        if slot is not None and self.live.data[slot] and self.id_of(slot) == wid:
            return slot
        at = int(np.searchsorted(self._sorted_hash, h))
        while at < len(self._sorted_hash) and self._sorted_hash[at] == h:
            slot = int(self._sorted_slot[at])
            if self.live.data[slot] and self.id_of(slot) == wid:
                return slot
            at += 1
        return None

    def kill(self, wid: str) -> int | None:
        """Mark `wid`'s slot dead; its slot, or None if it held none."""
        slot = self.slot_of(wid)
        if slot is not None:
            self.live.data[slot] = False
            self._count -= 1
            if self._clash.get(wid) == slot:
                del self._clash[wid]
        return slot

    def id_of(self, slot: int) -> str:
        start = int(self._ends.data[slot - 1]) if slot else 0
        return self._blob[start:int(self._ends.data[slot])].decode("utf-8", "surrogatepass")

    def ids_of(self, slots: np.ndarray) -> list[str]:
        return [self.id_of(s) for s in slots.tolist()]

    def _merge(self) -> None:
        """The recent hashes into the sorted array, dropping dead slots' entries."""
        if self._recent:
            hashes = np.concatenate([self._sorted_hash,
                                     np.fromiter(self._recent.keys(), np.int64, len(self._recent))])
            slots = np.concatenate([self._sorted_slot,
                                    np.fromiter(self._recent.values(), np.int64, len(self._recent))])
        else:
            hashes, slots = self._sorted_hash, self._sorted_slot
        keep = self.live.data[slots]
        hashes, slots = hashes[keep], slots[keep]
        order = np.argsort(hashes, kind="stable")
        self._sorted_hash, self._sorted_slot = hashes[order], slots[order]
        self._recent = {}

    def renumber(self) -> np.ndarray:
        """Drop the dead slots: the live ones renumbered in order. Returns old -> new
        slot (-1 for a dead one) for the caller's own per-slot data."""
        n = self._slots
        live = self.live.data[:n]
        remap = np.full(n, -1, dtype=np.int64)
        kept = np.flatnonzero(live)
        remap[kept] = np.arange(len(kept))
        ends = self._ends.data[:n].astype(np.int64)
        lengths = np.diff(ends, prepend=0)
        blob = np.frombuffer(self._blob, dtype=np.uint8)
        self._blob = bytearray(blob[np.repeat(live, lengths)].tobytes())
        lengths = lengths[kept]
        clash = {wid: int(remap[s]) for wid, s in self._clash.items()}
        self._ends = Column(np.uint64, grown(np.cumsum(lengths).astype(np.uint64)))
        self._hash = Column(np.int64, grown(self._hash.data[:n][kept]))
        self.live = Column(np.bool_, grown(np.ones(len(kept), dtype=np.bool_)))
        self._slots = self._count = len(kept)
        clashed = set(clash.values())
        mine = np.array([s for s in range(len(kept)) if s not in clashed], dtype=np.int64) \
            if clashed else np.arange(len(kept), dtype=np.int64)
        order = np.argsort(self._hash.data[mine], kind="stable")
        self._sorted_slot = mine[order]
        self._sorted_hash = self._hash.data[self._sorted_slot]
        self._recent, self._clash = {}, clash
        return remap


def grown(values: np.ndarray) -> np.ndarray:
    """`values` in an array with room to grow (Column doubles from its length)."""
    out = np.zeros(max(1024, len(values)), dtype=values.dtype)
    out[:len(values)] = values
    return out
