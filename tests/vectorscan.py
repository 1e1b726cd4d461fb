"""Finding a vector in files as float32 values, as Chroma and hnswlib write them.

A vector may be stored as given (Chroma's queue) or renormalised (hnswlib's cosine
space normalises on insert), so its last bits can differ: components are compared
with a tolerance, at every byte alignment. A hit is a run of `n` consecutive
components each within `tol` of the vector's first `n`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def files_holding(
    root: Path, vector: Sequence[float], n: int = 16, tol: float = 1e-5
) -> dict[str, int]:
    """File (relative to root) -> how many places hold the vector's first n components."""
    want = np.asarray(vector[:n], dtype=np.float32)
    assert np.count_nonzero(want) >= 3, "too few non-zero components to tell it apart"
    out: dict[str, int] = {}
    for path in sorted(Path(root).rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        found = 0
        for align in range(4):
            count = (len(data) - align) // 4
            if count < n:
                continue
            a = np.frombuffer(data, dtype="<f4", count=count, offset=align)
            with np.errstate(invalid="ignore"):
                # Narrow the candidate starts one component at a time, each step one
                # vectorised comparison over the survivors; the largest components
                # first, as zeros and small values abound in any file.
                order = np.argsort(-np.abs(want))
                k = order[0]
                starts = np.nonzero(np.abs(a[k : k + count - n + 1] - want[k]) < tol)[0]
                for k in order[1:]:
                    if not len(starts):
                        break
                    starts = starts[np.abs(a[starts + k] - want[k]) < tol]
                found += len(starts)
        if found:
            out[str(path.relative_to(root))] = found
    return out
