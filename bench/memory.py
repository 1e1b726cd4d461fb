"""Peak RSS of `matrix-sources run` with the model loaded and 100,000 windows.

    .venv/bin/python bench/memory.py [--asks 3] [--push-rate 50] [--push-seconds 30]

The service phase of bench/query.py with a few `!sources` only: the cached collection
of bench/corpus100k.py copied into the data dir of a service started beside a real
local Synapse, `--asks` questions of 1, 4 and 8 texts and one of search words asked
through a matrix-nio client; then live chat pushed to its transaction endpoint by
bench/live.py's load generator (--push-rate messages/s for --push-seconds, indexed into
the same collection) and the questions asked again. Then VmHWM (the peak resident set
since the process started: model, Chroma index, keyword postings, ingest and queries)
and VmRSS read from /proc/PID/status, once per `--backends` entry (embedder.backend;
each on the collection of its own vector class, `bench/corpus100k.py --backend B`; an
ONNX backend's export is made once, in a child process, before the service is ready).
The target is at most 1 GiB.
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
    p.add_argument("--push-rate", type=int, default=50, help="0: no live traffic")
    p.add_argument("--push-seconds", type=float, default=30.0)
    p.add_argument("--work", default=str(evalkit.OUT_DIR / "memory-stack"))
    p.add_argument("--out", default=None)
    p.add_argument(
        "--backends",
        default=None,
        help="embedder.backend of the service, one run each (comma-separated; "
        "default: the shipped default). Each starts on the 100,000-window "
        "collection of its vector class (bench/corpus100k.py --backend B)",
    )
    args = p.parse_args(argv)
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    items = evalkit.load_items(root / "dev")
    from matrix_sources.indexer.models.embedder import DEFAULT_BACKEND, load_embedder

    args.backends = args.backends or DEFAULT_BACKEND
    # Builds it if missing; checks its meta.
    query.open_cache(
        load_embedder("all-MiniLM-L6-v2", DEFAULT_BACKEND, evalkit.OUT_DIR / "models"), root
    )
    push = None
    if args.push_rate > 0:
        import live

        push = (live.eval_bodies(root), args.push_rate, args.push_seconds)
    runs = {}
    import corpus100k

    for backend in args.backends.split(","):
        cache = corpus100k.cache_for(backend)
        if corpus100k.open_cache(cache).count() < query.WINDOWS:
            raise SystemExit(
                f"error: {cache} has no {query.WINDOWS}-window collection of "
                f"{backend}'s vector class: build it first with "
                f"`bench/corpus100k.py --backend {backend}`"
            )
        result = query.service(
            items,
            args.asks,
            Path(args.work),
            push,
            settings={"index.embedder.backend": backend},
            cache=cache,
        )
        runs[backend] = result
        print(f"embedder.backend: {backend}")
        query.print_service(result)
    first = runs[args.backends.split(",")[0]]
    report = {"benchmark": "memory", "machine": perfkit.machine(), **first, "backends": runs}
    path = perfkit.write_report("memory", report, args.out)
    print(f"wrote {path}\n\n" + perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
