"""What a compaction (store.compact) costs, and that it leaves no deleted vector:

    .venv/bin/python bench/compaction.py [--windows 100000] [--deleted 100]

An embedded collection of N points (random unit vectors of 384 dimensions, the
model's, with window metadata of the usual size) is written, `--deleted` of them
deleted (a redaction's or a purge's points), then compacted: the live points copied
into a fresh generation, the old one's folder removed. Reports the time of the copy
and swap, this process's RSS growth, the folder's size before and after, and how many
of the deleted vectors' first 16 float32 components are still found in any file
(tests/vectorscan.py), before and after. The points are not the eval chat: a
compaction copies vectors and metadata and never looks at text. The deleted points are
spread over the whole collection, so every segment is dirty and copied: the cost of a
copy of everything, as every compaction was before segments (bench/scale.py measures
what one redaction copies).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import perfkit  # noqa: E402

DIM = 384
BATCH = 1000


def folder_mib(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20, 1)


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, Window, WindowID
    from matrix_sources.indexer.store.eventlog.log import EventLog
    from matrix_sources.indexer.store.vectors.chroma import ChromaStore
    from tests.vectorscan import files_holding

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--windows", type=int, default=100_000)
    p.add_argument("--deleted", type=int, default=100)
    p.add_argument("--checked", type=int, default=10, help="deleted vectors searched for")
    args = p.parse_args(argv)
    perfkit.quiet_env()
    report: dict = {
        "machine": perfkit.machine(),
        "load_before": perfkit.load_average(),
        "windows": args.windows,
        "deleted": args.deleted,
    }
    rng = np.random.default_rng(7)
    perfkit.evalkit.OUT_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=perfkit.evalkit.OUT_DIR) as tmp:
        root = Path(tmp)
        store = ChromaStore(path=root / "chroma", eventlog=EventLog(root / "eventlog.sqlite3"))
        t = time.perf_counter()
        deleted: dict[str, list[float]] = {}
        for start in range(0, args.windows, BATCH):
            n = min(BATCH, args.windows - start)
            v = rng.normal(size=(n, DIM)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            ids = [f"w{start + i:07d}" for i in range(n)]
            # Windows of 4 messages (their metadata is what counts; text is not stored).
            ws = [
                Window(
                    WindowID(wid),
                    RoomID(f"!room{(start + i) % 500}:bench.local"),
                    tuple(
                        Message(
                            EventID(f"$e{start + i}-{k}"),
                            RoomID(f"!room{(start + i) % 500}:bench.local"),
                            UserID("@a:bench.local" if k % 2 else "@b:bench.local"),
                            start + i + k,
                            "",
                        )
                        for k in range(4)
                    ),
                    "bench",
                )
                for i, wid in enumerate(ids)
            ]
            store.upsert(ws, v.tolist())
            for i in range(n):
                if (start + i) % max(1, args.windows // args.deleted) == 0 and len(
                    deleted
                ) < args.deleted:
                    deleted[ids[i]] = v[i].tolist()
        report["write_s"] = round(time.perf_counter() - t, 1)
        store.delete(sorted(deleted))
        report["count"] = store.count()
        report["segments"] = store.segments.counts()
        report["folder_before_mib"] = folder_mib(root / "chroma")
        checked = list(deleted.values())[: args.checked]
        report["deleted_found_before"] = sum(
            1 for v in checked if files_holding(root / "chroma", v)
        )
        rss = perfkit.proc_status(os.getpid())["VmRSS"]
        t = time.perf_counter()
        copied = store.compact()
        report["compact_s"] = round(time.perf_counter() - t, 1)
        report["compact_rss_growth_mib"] = round(
            (perfkit.proc_status(os.getpid())["VmHWM"] - rss) / 1024
        )
        report["copied"] = copied
        report["folder_after_mib"] = folder_mib(root / "chroma")
        report["deleted_found_after"] = sum(1 for v in checked if files_holding(root, v))
        report["checked"] = len(checked)
    report["load_after"] = perfkit.load_average()
    print(perfkit.dumps({k: v for k, v in report.items() if k != "machine"}))
    out = perfkit.write_report(f"compaction-{args.windows}", report)
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
