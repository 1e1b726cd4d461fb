"""Peak RSS of `matrix-sources run` with the model loaded and 100,000 windows.

    .venv/bin/python bench/memory.py [--asks 3]

The service phase of bench/query.py with a few `!sources` only: the cached collection
of bench/corpus100k.py copied into the data dir of a service started beside a real
local Synapse, `--asks` questions of 1, 4 and 8 texts asked through a matrix-nio client,
then VmHWM (the peak resident set since the process started, model, Chroma index and
queries included) and VmRSS read from /proc/PID/status. The target is at most 1 GiB.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import evalkit  # noqa: E402
import perfkit  # noqa: E402
import query  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--asks", type=int, default=3, help="!sources per text count")
    p.add_argument("--work", default=str(evalkit.OUT_DIR / "memory-stack"))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    items = evalkit.load_items(root / "dev")
    from indexer.embedder import SentenceTransformerEmbedder

    query.open_cache(SentenceTransformerEmbedder())  # checks size and meta
    result = query.service(items, args.asks, Path(args.work))
    report = {"benchmark": "memory", "machine": perfkit.machine(), **result}
    path = perfkit.write_report("memory", report, args.out)
    query.print_service(result)
    print(f"wrote {path}\n\n" + perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
