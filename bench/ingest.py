"""Import throughput against the embedder as its floor, in one process.

    .venv/bin/python bench/ingest.py [--eval-dir DIR] [--splits dev,test] [--out FILE]

1. Pipeline: a fresh data dir (as `matrix-sources init` makes it, the eval rooms on its
   allowlist), the eval events of both splits imported through the real import path
   (`Index.open` + `import_events`, what `matrix-sources import` runs: gate, event log,
   derived filter, chunker, embedder, Chroma upsert, cursors), timed from the first
   event read to the last cursor committed.
2. Bare: the very texts the pipeline embedded, in one `SentenceTransformerEmbedder.encode`
   call with the same model instance and batch size: what the model alone needs.

Prints messages/s of both, the ratio pipeline/bare (the target is at least 0.85), where
the pipeline's time went, and embeddings spent per window and per message (each window
is embedded once on import: 1.0 per window). The model is loaded and warmed before
either run; the bare run goes twice, right after the pipeline, and the ratio uses their
mean (this machine is shared: `load_average` in the JSON says how busy it was).
Like the CLI, the process re-executes itself once with the heap tunables of
appservice/heap.py (MATRIX_SOURCES_HEAP_HYGIENE=0 to measure without them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import evalkit  # noqa: E402
import perfkit  # noqa: E402

TARGET = 0.85


def bare_seconds(model, texts: list[str]) -> float:
    t = time.perf_counter()
    model.encode(texts)
    return time.perf_counter() - t


def run_pipeline(root: Path, splits: list[str], data_dir: Path, model) -> dict:
    from indexer.components import Index
    from indexer.config import load_config
    from indexer.importer import import_events

    config = perfkit.fresh_data_dir(data_dir, perfkit.eval_rooms(root, splits))
    recorder = perfkit.RecordingEmbedder(model)
    index = Index.open(load_config(config), recorder)
    index.ensure_meta()
    read = indexed = 0
    admit_s = 0.0
    t0 = time.perf_counter()
    for split in splits:
        # import_events admits every event, then indexes: time the two apart.
        pipeline = index.pipeline
        process_all = pipeline.process_all
        marks: dict[str, float] = {}

        def timed_process_all(progress=None, _p=process_all, _m=marks):
            _m["admitted"] = time.perf_counter()
            return _p(progress)

        pipeline.process_all = timed_process_all  # type: ignore[method-assign]
        start = time.perf_counter()
        summary = import_events(root / split / "events.jsonl", index.ingest, pipeline)
        del pipeline.process_all
        admit_s += marks["admitted"] - start
        read += summary.read
        indexed += summary.indexed
    seconds = time.perf_counter() - t0
    stats = index.pipeline.stats
    windows = index.store.count()
    index.close()
    return {
        "events_read": read, "messages_indexed": indexed, "seconds": round(seconds, 2),
        "messages_per_s": round(indexed / seconds, 1),
        "admit_seconds": round(admit_s, 2),
        "embed_seconds_in_pipeline": round(recorder.seconds, 2),
        "other_seconds": round(seconds - admit_s - recorder.seconds, 2),
        "windows_stored": windows, "windows_upserted": stats.windows_upserted,
        "embeddings": stats.embeddings, "encode_calls": len(recorder.calls),
        "store_batches": stats.batches,
        "embeddings_per_window": round(stats.embeddings / max(windows, 1), 3),
        "embeddings_per_message": round(stats.embeddings / max(indexed, 1), 3),
        "texts": recorder.texts,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--splits", default="dev,test")
    p.add_argument("--data-dir", default=str(evalkit.OUT_DIR / "ingest-data"),
                   help="made afresh (removed first)")
    p.add_argument("--out", default=None, help="default bench/out/ingest.json")
    args = p.parse_args(argv)
    if argv is None:
        from appservice.heap import ensure_heap_hygiene

        ensure_heap_hygiene()  # as `matrix-sources import` runs
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    splits = args.splits.split(",")

    from indexer.embedder import SentenceTransformerEmbedder

    model = SentenceTransformerEmbedder()
    model.encode(["warm up the model"] * 64)
    load_before = perfkit.load_average()
    pipe = run_pipeline(root, splits, Path(args.data_dir), model)
    texts = pipe.pop("texts")
    bare = [bare_seconds(model, texts)]
    bare.append(bare_seconds(model, texts))
    bare_s = sum(bare) / len(bare)
    msgs = pipe["messages_indexed"]
    ratio = bare_s / pipe["seconds"]
    report = {
        "benchmark": "ingest", "splits": splits, "eval_dir": str(root),
        "machine": perfkit.machine(), "load_average_before": load_before,
        "load_average_after": perfkit.load_average(),
        "batch_size": model.batch_size, "pipeline": pipe,
        "bare": {"texts": len(texts), "seconds_runs": [round(b, 2) for b in bare],
                 "seconds": round(bare_s, 2), "messages_per_s": round(msgs / bare_s, 1),
                 "windows_per_s": round(len(texts) / bare_s, 1)},
        "ratio_pipeline_over_bare": round(ratio, 3), "target": TARGET,
    }
    path = perfkit.write_report("ingest", report, args.out)
    print(f"Import of {'+'.join(splits)}: {pipe['events_read']} events, {msgs} messages, "
          f"{pipe['windows_stored']} windows (batch size {model.batch_size})")
    print(f"  pipeline  {pipe['seconds']:8.2f} s  {pipe['messages_per_s']:8.1f} msg/s   "
          f"(admit {pipe['admit_seconds']} s, embed {pipe['embed_seconds_in_pipeline']} s, "
          f"chunk+store+commit {pipe['other_seconds']} s)")
    print(f"  bare      {bare_s:8.2f} s  {msgs / bare_s:8.1f} msg/s   "
          f"(runs {', '.join(f'{b:.2f}' for b in bare)} s)")
    print(f"  ratio pipeline/bare {ratio:.3f} (target >= {TARGET})")
    print(f"  embeddings: {pipe['embeddings']} for {pipe['windows_stored']} windows = "
          f"{pipe['embeddings_per_window']} per window, {pipe['embeddings_per_message']} "
          f"per message; {pipe['encode_calls']} encode calls")
    print(f"  load average before/after: {load_before} / {report['load_average_after']}")
    print(f"wrote {path}\n")
    print(perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
