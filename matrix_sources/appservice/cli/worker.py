"""`matrix-sources worker -c CONFIG`: an embedding worker (indexer/pipeline/standalone.py),
on this machine or another that reaches the event log's database and the Chroma server.
Refuses, saying why, a config it cannot work with: the service embeds itself
(index.pipeline internal), embedded Chroma (one process only), or a collection made by
another model. SIGTERM or Ctrl-C: it stops after the run under way."""

from __future__ import annotations

import signal
import sys

from matrix_sources.indexer.config import Config


def refusal(cfg: Config) -> str:
    if cfg.index.pipeline != "external":
        return (
            f"{cfg.file}: index.pipeline is {cfg.index.pipeline}: the service embeds "
            "itself; set it to external, for the service and the workers, to leave the "
            "embedding to workers"
        )
    if cfg.chroma.mode != "server":
        return (
            f"{cfg.file}: index.chroma.mode is embedded: an embedded Chroma is one "
            "process's; workers need Chroma as a server (docs/deployment.md)"
        )
    return ""


def run_worker(cfg: Config, quiet: bool = False) -> int:
    from matrix_sources.indexer.components import open_worker
    from matrix_sources.indexer.pipeline.rebuild import meta_mismatch
    from matrix_sources.indexer.pipeline.standalone import WorkerLoop

    from ..logs import setup_logging
    from .progress import load_model

    why = refusal(cfg)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 1
    setup_logging(cfg.logging.level, as_json=cfg.logging.format == "json")
    worker = open_worker(cfg, load_model(cfg))
    mismatch = meta_mismatch(worker.store, worker.pipeline.embedder)
    if mismatch:
        worker.close()
        said = ", ".join(
            f"{k}: collection {have}, this worker {want}"
            for k, (have, want) in sorted(mismatch.items())
        )
        print(
            f"error: the collection was made otherwise ({said}): give the worker the "
            "service's config, and let the service rebuild first",
            file=sys.stderr,
        )
        return 1
    loop = WorkerLoop(worker, poll=max(0.2, cfg.index.debounce_seconds))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: loop.stop.set())
    claims = worker.pipeline.claims
    assert claims is not None  # a worker's pipeline claims its rooms (open_worker)
    if not quiet:
        print(
            f"matrix-sources worker {claims.worker}: embedding for {cfg.database}",
            file=sys.stderr,
            flush=True,
        )
    try:
        loop.run()
    finally:
        worker.close()
    if not quiet:
        print(f"stopped: {loop.indexed} messages indexed", file=sys.stderr)
    return 0
