"""`matrix-sources eventlog migrate --to URL`: the data dir's SQLite event log moved to
PostgreSQL (indexer/store/eventlog/move.py), with a progress bar and the total, counts
verified, the keyword index built there (a second bar), then store.database set in
config.yaml (its comments kept). Run it with the service stopped; run it again after an
interruption: it copies what is missing and builds the rest."""

from __future__ import annotations

import sys
from pathlib import Path

from matrix_sources.indexer.config import Config, ConfigError, parse_database
from matrix_sources.indexer.store.lock import WriterLock


def run_migrate(cfg: Config, to: str, quiet: bool = False) -> int:
    from tqdm import tqdm

    from matrix_sources.indexer.store.eventlog.check import check_eventlog
    from matrix_sources.indexer.store.eventlog.move import move_eventlog, row_counts

    try:
        target = parse_database(to, cfg.data_dir)
    except ValueError as e:
        raise ConfigError(cfg.file, "--to", str(e)) from None
    if target.kind != "postgresql":
        raise ConfigError(cfg.file, "--to", "the target is a postgresql:// URL")
    source = cfg.database
    if source.kind != "sqlite":
        if str(source) == to:  # run again after config.yaml was switched: nothing left
            print(
                f"store.database is {source} already; the SQLite event log "
                f"{cfg.default_eventlog_path} stays where it is"
            )
            return 0
        raise ConfigError(
            cfg.file,
            "store.database",
            f"is {source}, not an SQLite event log: there is nothing of this data dir's to move",
        )
    path = source.path
    assert path is not None
    health = check_eventlog(path)
    if health.state != "ok":
        print(f"error: the event log {path} is {health.state}: {health.detail}", file=sys.stderr)
        return 1
    reach = check_eventlog(target)
    if reach.state == "unreachable":
        print(f"error: {reach.detail}", file=sys.stderr)
        return 1
    lock = WriterLock(cfg.data_dir, "matrix-sources eventlog migrate").acquire()
    try:
        total = sum(row_counts(path).values())
        with (
            tqdm(total=total, desc="moving", unit="row", disable=quiet) as bar,
            tqdm(desc="indexing words", unit="window", disable=quiet) as words,
        ):

            def indexing(done: int, of: int) -> None:
                words.total = of
                words.update(done - words.n)

            report = move_eventlog(path, target, bar.update, indexing)
    finally:
        lock.release()
    rows = sum(report.tables.values())
    print(
        f"{rows} rows in {len(report.tables)} tables; {report.copied} copied now, "
        f"{rows - report.copied} there already"
    )
    if not report.ok:
        for table, (want, held) in sorted(report.mismatched.items()):
            print(f"error: {table}: {want} rows here, {held} in {target}", file=sys.stderr)
        print(
            "error: the target holds another event log's rows: give an empty database "
            "(or this one's own, to resume)",
            file=sys.stderr,
        )
        return 1
    _set_database(cfg.file, str(target))
    print(f"verified: every table holds as many rows in {target} as in {path}")
    print(
        f"{cfg.file}: store.database is now {target}; start the service. Nothing is "
        "embedded again: the collection stays as it is."
    )
    print(
        f"{path} still holds every message's text: once the service runs on PostgreSQL, "
        f"remove it and its -wal and -shm files (`shred -u`, or your disk's secure "
        "erase), and from your backups (docs/storage.md)"
    )
    return 0


def _set_database(config: Path, value: str) -> None:
    """store.database in config.yaml, round-trip: every comment stays."""
    from ruamel.yaml import YAML

    y = YAML()
    data = y.load(config.read_text(encoding="utf-8"))
    if data.get("store") is None:
        data["store"] = {}
    data["store"]["database"] = value
    import shutil

    tmp = config.with_name(config.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        y.dump(data, f)
    shutil.copymode(config, tmp)
    tmp.replace(config)
