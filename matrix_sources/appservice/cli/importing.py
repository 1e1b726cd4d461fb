"""`matrix-sources import FILE`: Matrix events from a JSONL file (one event a line, as
the client-server API serves them) into the index, as if Synapse had pushed them."""

from __future__ import annotations

import sys
from pathlib import Path

from matrix_sources.indexer.config import Config
from matrix_sources.indexer.store.lock import WriterLock


def run_import(cfg: Config, path: Path, quiet: bool) -> int:
    """Events read from the file through the gate and indexed, a bar for each with its
    total (the indexing one's known once everything is read)."""
    from tqdm import tqdm

    from matrix_sources.indexer.components import Index
    from matrix_sources.indexer.pipeline.importer import import_events

    from .progress import ensure_collection, load_model, pending_total

    if not path.is_file():
        print(f"error: {path}: no such file", file=sys.stderr)
        return 1
    lock = WriterLock(cfg.data_dir, "matrix-sources import").acquire()
    index = Index.open(cfg, load_model(cfg))
    size = sum(1 for _ in open(path, "rb"))
    show = not quiet
    ensure_collection(index, show)
    with (
        tqdm(total=size, desc="reading", unit="ev", disable=not show) as read_bar,
        tqdm(desc="indexing", unit="msg", disable=not show) as index_bar,
    ):

        def indexing() -> None:  # everything is read: the bar's total is known now
            index_bar.total = pending_total(index.eventlog)
            index_bar.refresh()

        summary = import_events(
            path,
            index.ingest,
            index.pipeline,
            on_read=read_bar.update,
            on_indexed=index_bar.update,
            on_indexing=indexing,
        )
    index.close()
    lock.release()
    for line in summary.lines():
        print(line)
    return 0
