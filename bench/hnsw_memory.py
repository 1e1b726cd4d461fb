"""What Chroma's HNSW indexes take in memory once a search has loaded every segment,
with the heap scrub on (as the service runs) and off (for the comparison only).

    .venv/bin/python bench/hnsw_memory.py --windows 1000000

On the collection of bench/corpus_scale.py (built first if missing), in a child process
per setting: the store is opened and each segment asked one query (which loads its
HNSW index), and the process's anonymous memory is read before and after. The heap
scrub (indexer/store/vectors/heapscrub.py: glibc's M_PERTURB) fills every block malloc hands
out, so the part of hnswlib's vector array reserved past the points loaded (its
capacity) becomes resident too; without it, those pages are never touched. Figures are
printed and written to bench/out/hnsw-memory-N.json, with what is left after a
malloc_trim (whether any of it is freed garbage of the loads).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import corpus_scale  # noqa: E402
import evalkit  # noqa: E402
import perfkit  # noqa: E402


def anonymous_mib() -> int:
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) // 1024
    return 0


def child(windows: int, scrub: bool) -> dict:
    import numpy as np

    from matrix_sources.indexer.store.vectors.chroma import ChromaStore
    from matrix_sources.indexer.store.vectors.heapscrub import M_PERTURB

    if not scrub:  # measurement only: the service always scrubs
        ctypes.CDLL(None).mallopt(M_PERTURB, 0)
    store = ChromaStore(path=corpus_scale.cache_dir(windows) / "chroma")
    before = anonymous_mib()
    q = np.random.default_rng(1).normal(size=(384,)).astype(np.float32)
    q /= np.linalg.norm(q)
    sizes = []
    for seg in store.segments.list:
        seg.collection.query(query_embeddings=[q], n_results=20, include=["distances"])
        sizes.append(seg.collection.count())
    after = anonymous_mib()
    ctypes.CDLL(None).malloc_trim(0)  # freed garbage of the loads, if any, goes back
    trimmed = anonymous_mib()
    on_disk = sum(p.stat().st_size for p in store.path.glob("g*/*/data_level0.bin"))
    return {
        "scrub": scrub,
        "segments": len(sizes),
        "points": sum(sizes),
        "anonymous_before_mib": before,
        "anonymous_after_mib": after,
        "hnsw_mib": after - before,
        "hnsw_after_malloc_trim_mib": trimmed - before,
        "data_level0_on_disk_mib": round(on_disk / 2**20),
        "bytes_a_point_in_memory": round((after - before) * 2**20 / max(sum(sizes), 1)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--windows", type=int, default=1_000_000)
    p.add_argument("--child", choices=["scrub", "plain"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.windows, args.child == "scrub")))
        return 0
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    corpus_scale.build(root, args.windows)
    report: dict = {
        "benchmark": "hnsw_memory",
        "windows": args.windows,
        "machine": perfkit.machine(),
        "load_average_before": perfkit.load_average(),
    }
    for kind in ("scrub", "plain"):
        out = subprocess.run(
            [sys.executable, __file__, "--windows", str(args.windows), "--child", kind],
            check=True,
            capture_output=True,
            text=True,
        )
        r = report[kind] = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"heap scrub {'on ' if r['scrub'] else 'off'}: {r['segments']} segments, "
            f"{r['points']} points: HNSW {r['hnsw_mib']} MiB in memory "
            f"({r['bytes_a_point_in_memory']} bytes a point; data_level0.bin on disk "
            f"{r['data_level0_on_disk_mib']} MiB); after malloc_trim "
            f"{r['hnsw_after_malloc_trim_mib']} MiB",
            flush=True,
        )
    report["load_average_after"] = perfkit.load_average()
    path = perfkit.write_report(f"hnsw-memory-{args.windows}", report)
    print(f"wrote {path}\n\n" + perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
