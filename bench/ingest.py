"""Import throughput against the embedder as its floor, in one process.

    .venv/bin/python bench/ingest.py [--eval-dir DIR] [--splits dev,test] [--out FILE]

1. Pipeline: a fresh data dir (as `matrix-sources init` makes it, the eval rooms on its
   allowlist), the eval events of both splits imported through the real import path
   (`Index.open` + `import_events`, what `matrix-sources import` runs: gate, event log,
   derived filter, chunker, embedder, Chroma upsert, cursors), timed from the first
   event read to the last cursor committed.
2. Bare: the very texts the pipeline embeds, in one `SentenceTransformerEmbedder.encode`
   call with the same model instance and batch size: what the model alone needs. The
   texts come from a dry run of the same import with a fake embedder (seconds), and are
   checked against what the real run embedded.

Prints messages/s of both, the ratio pipeline/bare (the target is at least 0.85), where
the pipeline's time went, and embeddings spent per window and per message (each window
is embedded once on import: 1.0 per window). The model is loaded and warmed before
either run; the bare run goes before and after the pipeline and the ratio uses their
mean, so load from other processes on this shared machine weighs on both sides alike
(`load_average` in the JSON says how busy it was). CPU seconds of this process are
reported beside wall time: they move less with other load.
Like the CLI, the process re-executes itself once with the heap tunables of
appservice/heap.py (MATRIX_SOURCES_HEAP_HYGIENE=0 to measure without them).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import evalkit  # noqa: E402
import perfkit  # noqa: E402

TARGET = 0.85


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def bare_run(model, texts: list[str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one encode call over all the texts."""
    t, c = time.perf_counter(), cpu_seconds()
    model.encode(texts)
    return time.perf_counter() - t, cpu_seconds() - c


def padded_word_pieces(model, calls: list[list[str]]) -> int:
    """Word pieces the model processes for these encode calls, padding included: each
    call sorted by length (as sentence-transformers does), cut into batches, each batch
    padded to its longest text. Independent of load: it says what batching costs."""
    st = model.model
    limit = st.max_seq_length
    total = 0
    for call in calls:
        ordered = sorted(call, key=len, reverse=True)
        for i in range(0, len(ordered), model.batch_size):
            batch = ordered[i:i + model.batch_size]
            ids = st.tokenizer(batch, truncation=True, max_length=limit)["input_ids"]
            total += max(len(x) for x in ids) * len(batch)
    return total


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
    t0, c0 = time.perf_counter(), cpu_seconds()
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
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    stats = index.pipeline.stats
    windows = index.store.count()
    index.close()
    return {
        "events_read": read, "messages_indexed": indexed, "seconds": round(seconds, 2),
        "messages_per_s": round(indexed / seconds, 1), "cpu_seconds": round(cpu, 2),
        "admit_seconds": round(admit_s, 2),
        "embed_seconds_in_pipeline": round(recorder.seconds, 2),
        "other_seconds": round(seconds - admit_s - recorder.seconds, 2),
        "windows_stored": windows, "windows_upserted": stats.windows_upserted,
        "embeddings": stats.embeddings, "encode_calls": len(recorder.calls),
        "store_batches": stats.batches,
        "embeddings_per_window": round(stats.embeddings / max(windows, 1), 3),
        "embeddings_per_message": round(stats.embeddings / max(indexed, 1), 3),
        "texts": recorder.texts, "calls": recorder.calls,
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

    from indexer.embedder import HashEmbedder, SentenceTransformerEmbedder

    data_dir = Path(args.data_dir)
    # Its own folder: Chroma keeps a client per path for the life of the process.
    dry = run_pipeline(root, splits, data_dir.with_name(data_dir.name + "-dry"),
                       HashEmbedder())
    texts = dry["texts"]
    model = SentenceTransformerEmbedder()
    model.encode(["warm up the model"] * 64)
    load_before = perfkit.load_average()
    bare = [bare_run(model, texts)]
    pipe = run_pipeline(root, splits, data_dir, model)
    bare.append(bare_run(model, texts))
    same_texts = sorted(pipe.pop("texts")) == sorted(texts)
    pieces_pipe = padded_word_pieces(model, pipe.pop("calls"))
    pieces_bare = padded_word_pieces(model, [texts])
    bare_s = sum(b[0] for b in bare) / len(bare)
    bare_cpu = sum(b[1] for b in bare) / len(bare)
    msgs = pipe["messages_indexed"]
    ratio = bare_s / pipe["seconds"]
    conservative = min(b[0] for b in bare) / pipe["seconds"]
    report = {
        "benchmark": "ingest", "splits": splits, "eval_dir": str(root),
        "machine": perfkit.machine(), "load_average_before": load_before,
        "load_average_after": perfkit.load_average(),
        "batch_size": model.batch_size, "pipeline": pipe,
        "bare": {"texts": len(texts), "same_texts_as_pipeline": same_texts,
                 "seconds_runs": [round(b[0], 2) for b in bare],
                 "cpu_seconds_runs": [round(b[1], 2) for b in bare],
                 "seconds": round(bare_s, 2), "messages_per_s": round(msgs / bare_s, 1),
                 "windows_per_s": round(len(texts) / bare_s, 1)},
        "ratio_pipeline_over_bare": round(ratio, 3), "target": TARGET,
        "ratio_vs_fastest_bare": round(conservative, 3),
        "ratio_cpu": round(bare_cpu / pipe["cpu_seconds"], 3),
        "padded_word_pieces": {"pipeline": pieces_pipe, "bare": pieces_bare,
                               "ratio": round(pieces_pipe / pieces_bare, 3)},
    }
    path = perfkit.write_report("ingest", report, args.out)
    print(f"Import of {'+'.join(splits)}: {pipe['events_read']} events, {msgs} messages, "
          f"{pipe['windows_stored']} windows (batch size {model.batch_size})")
    print(f"  pipeline  {pipe['seconds']:8.2f} s  {pipe['messages_per_s']:8.1f} msg/s   "
          f"(admit {pipe['admit_seconds']} s, embed {pipe['embed_seconds_in_pipeline']} s, "
          f"chunk+store+commit {pipe['other_seconds']} s)")
    print(f"  bare      {bare_s:8.2f} s  {msgs / bare_s:8.1f} msg/s   "
          f"(before and after: {bare[0][0]:.2f}, {bare[1][0]:.2f} s; "
          f"same texts as the pipeline: {same_texts})")
    print(f"  ratio pipeline/bare {ratio:.3f} (target >= {TARGET}); against the faster bare "
          f"run {conservative:.3f}; in CPU seconds {report['ratio_cpu']:.3f} "
          f"({bare_cpu:.1f} bare, {pipe['cpu_seconds']:.1f} pipeline)")
    print(f"  padded word pieces: pipeline {pieces_pipe}, bare {pieces_bare} "
          f"({pieces_pipe / pieces_bare:.3f}x)")
    print(f"  embeddings: {pipe['embeddings']} for {pipe['windows_stored']} windows = "
          f"{pipe['embeddings_per_window']} per window, {pipe['embeddings_per_message']} "
          f"per message; {pipe['encode_calls']} encode calls")
    print(f"  load average before/after: {load_before} / {report['load_average_after']}")
    print(f"wrote {path}\n")
    print(perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
