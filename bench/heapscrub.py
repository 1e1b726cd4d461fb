"""How often a copy like a compaction's writes a deleted vector of an earlier collection
into a new one's files, with freed memory scrubbed (indexer/store/vectors/heapscrub.py) and
without:

    .venv/bin/python bench/heapscrub.py [--rounds 200]

Each side runs in its own child process (the scrub is process-wide and cannot be
undone). A round writes 8 random 64-dimension points into an "old" collection, deletes
one (a redaction), copies the rest into a "new" collection, stops both clients (their
memory freed), and scans the new collection's files for every vector deleted so far
(tests/vectorscan.py). Without the scrub a leak is a matter of which freed block
hnswlib's next vector array gets, so its rate depends on the machine and its load (0.25
to 5% of rounds here, 33% in an earlier measurement); with the scrub it must be 0.
`tests/indexer/store/test_heapscrub.py` runs the scrubbed side as a test (`--child scrub N`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rounds(scrub: bool, n: int) -> int:
    """The rounds whose new collection held a deleted vector, in this process."""
    import shutil
    import tempfile

    os.environ["ANONYMIZED_TELEMETRY"] = "False"
    sys.path.insert(0, str(ROOT))
    if scrub:
        import matrix_sources.indexer.store  # noqa: F401 - sets the scrub
        from matrix_sources.indexer.store.vectors.heapscrub import SCRUBBED

        assert SCRUBBED, "this C library has no M_PERTURB"
    import chromadb
    import numpy as np
    from chromadb.api.client import SharedSystemClient
    from chromadb.config import Settings

    from tests.vectorscan import files_holding

    rng = np.random.default_rng(0)
    deleted: list = []
    leaks = 0
    for i in range(n):
        root = Path(tempfile.mkdtemp())
        clients, cols = [], []
        for name in ("old", "new"):
            c = chromadb.PersistentClient(
                path=str(root / name), settings=Settings(anonymized_telemetry=False)
            )
            clients.append(c)
            cols.append(
                c.get_or_create_collection(
                    f"{name}-gen",
                    embedding_function=None,
                    configuration={"hnsw": {"space": "cosine"}},
                )
            )
        old, new = cols
        v = rng.normal(size=(8, 64)).astype(np.float32)
        old.add(ids=[f"p{k}" for k in range(8)], embeddings=v)
        old.query(query_embeddings=v[:1], n_results=2)
        old.delete(ids=["p0"])  # a redaction
        deleted.append(v[0])
        live = old.get(include=["embeddings"])  # the compaction's copy
        new.add(ids=live["ids"], embeddings=live["embeddings"])
        new.query(query_embeddings=v[:1], n_results=2)
        for c in clients:  # both generations' clients stopped: their memory freed
            SharedSystemClient._identifier_to_system.pop(c._identifier).stop()
        leaks += any(files_holding(root / "new", d) for d in deleted)
        shutil.rmtree(root)
        if (i + 1) % 50 == 0:
            print(
                f"  {'scrub' if scrub else 'plain'}: {i + 1}/{n} rounds, {leaks} leaked",
                file=sys.stderr,
                flush=True,
            )
    return leaks


def child(side: str, n: int, timeout: float | None = None) -> int:
    """Run one side in a fresh process; the rounds that leaked."""
    proc = subprocess.run(
        [sys.executable, __file__, "--child", side, str(n)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        timeout=timeout,
        check=True,
    )
    return int(proc.stdout.decode().split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--child", nargs=2, metavar=("SIDE", "ROUNDS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        side, n = args.child
        print(rounds(side == "scrub", int(n)))
        return
    for side in ("plain", "scrub"):
        t = time.perf_counter()
        leaks = child(side, args.rounds)
        print(
            f"{side:5}: {leaks} of {args.rounds} rounds left a deleted vector in a new "
            f"collection's files ({time.perf_counter() - t:.0f} s)"
        )


if __name__ == "__main__":
    main()
