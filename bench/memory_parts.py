"""Where the service's resident memory goes, part by part, in the order it starts.

    .venv/bin/python bench/memory_parts.py --windows 1000000

On the collection of bench/corpus_scale.py (built first if missing), in one fresh
process with the service's heap settings (the re-exec's glibc tunables and the heap
scrub): VmRSS after each step, and what the step added. The steps: the interpreter;
the service's and the bot's imports; the model loaded and one question embedded; the
second model session (`encode_each`, made at the first search's quoted lines); the
store opened; the first search (it loads every segment's HNSW index); the keyword
postings built from the event log, then malloc_trim (heap.release_free_memory, as the
service does after its build). What is left for the postings under a budget is the
budget less everything before them. Figures are printed and written to
bench/out/memory-parts-N.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import corpus_scale  # noqa: E402
import evalkit  # noqa: E402
import perfkit  # noqa: E402

BUDGET_MIB = 2560  # the target: 2.5 GiB


def rss_mib() -> int:
    return round(perfkit.proc_status(os.getpid())["VmRSS"] / 1024)


def measure(windows: int) -> list[dict]:
    steps: list[dict] = []
    last = rss_mib()

    def step(name: str) -> None:
        nonlocal last
        now = rss_mib()
        steps.append({"step": name, "vm_rss_mib": now, "added_mib": now - last})
        last = now

    step("the interpreter, this script's imports")
    import matrix_sources.indexer.store.vectors.heapscrub  # noqa: F401  (scrubs as it is imported, as in the service)
    from matrix_sources.appservice.bot.bot import Bot  # noqa: F401
    from matrix_sources.appservice.homeserver.heap import release_free_memory
    from matrix_sources.appservice.homeserver.service import Service  # noqa: F401

    step("the service's and the bot's imports")
    from matrix_sources.indexer.models.embedder import DEFAULT_BACKEND, load_embedder
    from matrix_sources.indexer.search.searcher import Searcher, SourceQuery
    from matrix_sources.indexer.store.eventlog.keywords_build import KeywordBuild

    model = load_embedder("all-MiniLM-L6-v2", DEFAULT_BACKEND, evalkit.OUT_DIR / "models")
    model.encode(["how do I mount an nfs share"])
    step("the model, one question embedded")
    model.encode_each(["how do I mount an nfs share", "sudo mount -t nfs"])
    step("the model's second session (encode_each)")
    store = corpus_scale.open_store(corpus_scale.cache_dir(windows), windows, bulk=False)
    step("the store opened")
    Searcher(model, store).search(SourceQuery.build(["how do I mount an nfs share"]))
    step(f"the first search: {len(store.segments.list)} segments' HNSW indexes loaded")
    t = time.perf_counter()
    KeywordBuild(store.eventlog.db).run()  # a cache from before the index; nothing else writes
    step(f"the keyword index on disk ready ({time.perf_counter() - t:.0f} s; none in memory)")
    release_free_memory()
    step("malloc_trim after the build (as the service does)")
    return steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--windows", type=int, default=1_000_000)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:  # a fresh process: nothing of the build or of the parent in its heap
        from matrix_sources.appservice.homeserver.heap import ensure_heap_hygiene

        ensure_heap_hygiene()  # the service's glibc tunables: re-executes once
        print(json.dumps(measure(args.windows)))
        return 0
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    corpus_scale.build(root, args.windows)
    report: dict = {
        "benchmark": "memory_parts",
        "windows": args.windows,
        "machine": perfkit.machine(),
        "load_average_before": perfkit.load_average(),
    }
    print(f"resident memory part by part at {args.windows:,} windows:", flush=True)
    out = subprocess.run(
        [sys.executable, __file__, "--windows", str(args.windows), "--child"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    report["steps"] = steps = json.loads(out.stdout.strip().splitlines()[-1])
    for s in steps:
        print(f"  {s['step']:58s} {s['vm_rss_mib']:6d} MiB  (+{s['added_mib']})")
    before_postings = steps[-3]["vm_rss_mib"]
    report["left_for_the_postings_under_2_5_gib_mib"] = BUDGET_MIB - before_postings
    print(
        f"everything but the postings: {before_postings} MiB; under 2.5 GiB that leaves "
        f"{BUDGET_MIB - before_postings} MiB for them; they took "
        f"{steps[-1]['vm_rss_mib'] - before_postings} MiB once built and trimmed"
    )
    out = evalkit.OUT_DIR / f"memory-parts-{args.windows}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    print("\n" + perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
