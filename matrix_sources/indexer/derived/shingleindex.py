"""The inverted index of the derived filter: shingle hash -> artifacts holding it.

    base   keys  uint64[n], sorted     one row per (shingle, artifact) posting
           ords  uint32[n]             the artifact's ordinal in the manifest
    delta  dict hash -> [ordinal]      postings added since the last merge
    dead   set of ordinals             removed artifacts, dropped at the next merge

A message's m shingles cost a binary search each over the base (a second one for those
present) and m dict probes: the manifest itself is never scanned. Twelve bytes a posting
(a dict of Python ints would take about ten times that): 9M postings, 100,000 artifacts
in bench/derived_filter.py, hold 103 MB. Additions land in the delta, merged into the
base once it holds an eighth of it (the new postings sorted, then inserted in one pass
over the base), so an add stays cheap.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import numpy as np

MIN_MERGE = 4096  # delta postings before a merge is worth a pass over the base
MERGE_FRACTION = 8  # ...or base size / this, whichever is larger


class ShingleIndex:
    def __init__(self) -> None:
        self._keys = np.empty(0, dtype=np.uint64)
        self._ords = np.empty(0, dtype=np.uint32)
        self._delta: dict[int, list[int]] = {}
        self._delta_postings = 0
        self._dead: set[int] = set()
        self._live: set[int] = set()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, ordinal: int) -> bool:
        return ordinal in self._live

    @property
    def postings(self) -> int:
        return int(self._keys.size) + self._delta_postings

    @property
    def nbytes(self) -> int:
        """Bytes held by the base arrays (the delta is small by construction)."""
        return int(self._keys.nbytes + self._ords.nbytes)

    # -- writing ---------------------------------------------------------------------

    def add(self, ordinal: int, shingles: Iterable[int] | np.ndarray) -> None:
        if ordinal in self._live:
            raise ValueError(f"ordinal {ordinal} is already in the index")
        self._live.add(ordinal)
        for h in set(shingles.tolist() if isinstance(shingles, np.ndarray) else shingles):
            self._delta.setdefault(h, []).append(ordinal)
            self._delta_postings += 1
        if self._delta_postings >= max(MIN_MERGE, self._keys.size // MERGE_FRACTION):
            self.merge()

    def bulk_add(self, items: Iterable[tuple[int, Collection[int] | np.ndarray]]) -> None:
        """Add many artifacts with one merge (loading a manifest). Arrays are taken as
        they are: the manifest writes each artifact's shingles once, sorted."""
        keys: list[np.ndarray] = []
        ordinals: list[int] = []
        sizes: list[int] = []
        for ordinal, shingles in items:
            if ordinal in self._live:
                raise ValueError(f"ordinal {ordinal} is already in the index")
            self._live.add(ordinal)
            arr = (
                shingles
                if isinstance(shingles, np.ndarray)
                else np.fromiter(set(shingles), dtype=np.uint64)
            )
            if arr.size:
                keys.append(arr)
                ordinals.append(ordinal)
                sizes.append(arr.size)
        if keys:
            self._merge_arrays(
                np.concatenate(keys).astype(np.uint64, copy=False),
                np.repeat(np.array(ordinals, dtype=np.uint32), sizes),
            )

    def discard(self, ordinal: int) -> None:
        """Remove an artifact. Ordinals are never reused (the manifest counts up)."""
        if ordinal in self._live:
            self._live.discard(ordinal)
            self._dead.add(ordinal)

    def merge(self) -> None:
        """Fold the delta into the base and drop the postings of removed artifacts."""
        if self._delta_postings:
            keys = np.fromiter(
                (h for h, os in self._delta.items() for _ in os),
                dtype=np.uint64,
                count=self._delta_postings,
            )
            ords = np.fromiter(
                (o for os in self._delta.values() for o in os),
                dtype=np.uint32,
                count=self._delta_postings,
            )
        else:
            keys, ords = np.empty(0, np.uint64), np.empty(0, np.uint32)
        self._delta, self._delta_postings = {}, 0
        self._merge_arrays(keys, ords)

    def _merge_arrays(self, keys: np.ndarray, ords: np.ndarray) -> None:
        base_keys, base_ords = self._keys, self._ords
        if self._dead:
            alive = ~np.isin(base_ords, np.fromiter(self._dead, dtype=np.uint32))
            base_keys, base_ords = base_keys[alive], base_ords[alive]
            keep = ~np.isin(ords, np.fromiter(self._dead, dtype=np.uint32))
            keys, ords = keys[keep], ords[keep]
            # A dead ordinal still in the delta is dropped at lookup until the next merge.
            if not any(o in self._dead for os in self._delta.values() for o in os):
                self._dead.clear()
        # Sort the new postings only, then insert them: O(n) for the base, not a re-sort.
        order = np.argsort(keys)
        keys, ords = keys[order], ords[order]
        del order
        if not base_keys.size:
            self._keys, self._ords = keys, ords
            return
        at = np.searchsorted(base_keys, keys, side="right")
        self._keys = np.insert(base_keys, at, keys)
        self._ords = np.insert(base_ords, at, ords)

    # -- reading ---------------------------------------------------------------------

    def overlaps(self, shingles: Collection[int], min_count: int = 1) -> dict[int, int]:
        """For every live artifact holding at least `min_count` of these (distinct)
        shingles, how many it holds. Counting and the cut happen in numpy, so a common
        phrase shared by thousands of artifacts costs no Python object per artifact."""
        if not shingles:
            return {}
        parts: list[np.ndarray] = []
        if self._keys.size:
            q = np.sort(np.fromiter(shingles, dtype=np.uint64, count=len(shingles)))
            lo = np.searchsorted(self._keys, q, side="left")
            # Most shingles of a message are in no artifact: search the run's end only
            # for those present (each search is cache misses over a large array).
            present = self._keys[np.minimum(lo, self._keys.size - 1)] == q
            q, lo = q[present], lo[present]
            hi = np.searchsorted(self._keys, q, side="right")
            n = hi - lo
            total = int(n.sum())
            if total:
                # Indices of every posting in the ranges [lo, hi), without a Python loop.
                starts = np.repeat(lo - np.concatenate(([0], np.cumsum(n)[:-1])), n)
                parts.append(self._ords[starts + np.arange(total)])
        if self._delta:
            extra = [o for h in shingles for o in self._delta.get(h, ())]
            if extra:
                parts.append(np.array(extra, dtype=np.uint32))
        if not parts:
            return {}
        found, counts = np.unique(
            np.concatenate(parts) if len(parts) > 1 else parts[0], return_counts=True
        )
        if min_count > 1:
            keep = counts >= min_count
            found, counts = found[keep], counts[keep]
        out = dict(zip(found.tolist(), counts.tolist()))
        if self._dead:
            for o in [o for o in out if o in self._dead]:
                del out[o]
        return out
