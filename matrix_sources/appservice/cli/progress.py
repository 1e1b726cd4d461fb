"""What the CLI prints while a long step runs: the model load, and bars with a total."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from matrix_sources.indexer.clock import REAL
from matrix_sources.indexer.config import Config, ConfigError

if TYPE_CHECKING:  # the embedder module is not needed to parse -c
    from matrix_sources.indexer.models.embedder import Embedder


def config_path(arg: str) -> Path:
    """`-c` takes DIR/config.yaml; a data dir is taken to mean its config.yaml. A file
    that is not there is refused with the `init` that makes it."""
    from .access import init_command, missing_config

    path = Path(arg)
    if path.is_dir():
        if (path / "config.yaml").is_file():
            return path / "config.yaml"
        raise ConfigError(
            path,
            "",
            "is a folder with no config.yaml in it; pass "
            f"-c DIR/config.yaml, or {init_command(path.absolute())}",
        )
    if not path.exists() and not path.is_symlink():
        raise missing_config(path.absolute())
    return path


def load_model(cfg: Config) -> Embedder:
    """The embedder, saying so on stderr (and how long it took): a model that takes a
    while to load leaves a silent command looking hung."""
    from matrix_sources.indexer.models.embedder import load_embedder

    t0 = REAL.now()
    print(
        f"loading the model ({cfg.index.embedder.model}, backend {cfg.index.embedder.backend}) ...",
        file=sys.stderr,
        flush=True,
    )
    embedder = load_embedder(cfg.index.embedder.model, cfg.index.embedder.backend, cfg.models_dir)
    print(f"model loaded in {REAL.now() - t0:.1f} s", file=sys.stderr, flush=True)
    return embedder


def pending_total(eventlog) -> int:
    """Messages the pipeline has to index: the total of an indexing bar."""
    return eventlog.counts().get("pending", 0)


def ensure_collection(index, show: bool = True) -> bool:
    """Rebuild the collection from the event log if it must be (indexer/pipeline/rebuild.py),
    with a bar whose total is the messages to embed again; True if it rebuilt."""
    from tqdm import tqdm

    from matrix_sources.indexer.config.per_model import rebuild_estimate_s
    from matrix_sources.indexer.pipeline.rebuild import rebuild_reason

    reason = rebuild_reason(index.store, index.eventlog, index.embedder)
    counts = index.eventlog.counts()
    if not reason:
        if counts.get("pending", 0):  # a rebuild stopped halfway, or messages queued
            print(f"resuming: {counts['pending']} messages still to embed", file=sys.stderr)
        return index.ensure_meta()
    messages = counts.get("indexed", 0) + counts.get("pending", 0)
    minutes = rebuild_estimate_s(index.embedder.name, messages) / 60
    print(
        f"rebuilding the collection from the event log: {reason}\n"
        f"every message is embedded again with {index.embedder.name}: {messages} messages, "
        f"about {max(1, round(minutes))} min on 2 cores; stopped, it resumes at the next start",
        file=sys.stderr,
    )
    with tqdm(
        total=counts.get("indexed", 0) + counts.get("pending", 0),
        unit="msg",
        desc="rebuilding the collection",
        disable=not show,
    ) as bar:
        return index.ensure_meta(bar.update)
