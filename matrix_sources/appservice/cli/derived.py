"""`matrix-sources ref ...` and `matrix-sources verify ...`: reference corpora and the
audits of the derived filter. Neither `ref rm`, `ref list` nor `verify` loads the model."""

from __future__ import annotations

import sys
from pathlib import Path

from matrix_sources.indexer.clock import REAL
from matrix_sources.indexer.components import open_references, open_store
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.derived.audit import (
    CheckResult,
    check_derived_filter,
    check_exclusions,
    parse_since,
)
from matrix_sources.indexer.derived.filter import Matcher
from matrix_sources.indexer.derived.manifest import Manifest, manifest_path
from matrix_sources.indexer.derived.reference import ReferenceError, References
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.journal import Journal
from matrix_sources.indexer.store.lock import WriterLock


def _references(cfg: Config, with_embedder: bool) -> References:
    embedder = None
    if with_embedder:
        from .progress import load_model

        embedder = load_model(cfg)
    manifest = Manifest(manifest_path(cfg.data_dir), cfg.derived.shingle_size)
    return open_references(cfg, open_store(cfg), manifest, embedder)


def run_ref(cfg: Config, args) -> int:
    if args.action != "list":
        with WriterLock(cfg.data_dir, f"matrix-sources ref {args.action}"):
            return _run_ref(cfg, args)
    return _run_ref(cfg, args)


def _run_ref(cfg: Config, args) -> int:
    try:
        if args.action == "list":
            corpora = _references(cfg, False).list()
            if not corpora:
                print(
                    "no reference corpora; add one with `matrix-sources ref add -c CONFIG "
                    "NAME PATH`"
                )
            for c in corpora:
                print(
                    f"{c.name}  {c.sections} sections  {c.chunks} chunks  {c.path}"
                    + (f"  synced {c.synced_at}" if c.synced_at else "")
                )
            return 0
        if args.action == "rm":
            removed, chunks = _references(cfg, False).rm(args.name)
            print(
                f"removed {args.name}: {removed} manifest entries, {chunks} chunks "
                "(earlier exclusions stay in the journal and the event log)"
            )
            return 0
        if args.action == "sync" and args.name not in {
            c.name for c in _references(cfg, False).list()
        }:
            raise ReferenceError(f"no corpus named {args.name}; `ref list` shows them")
        refs = _references(cfg, True)
        report = (
            refs.add(args.name, Path(args.path)) if args.action == "add" else refs.sync(args.name)
        )
    except ReferenceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(
        f"{report.corpus}: {report.files} files, {report.sections} sections, "
        f"{report.chunks} chunks ({report.embedded} embedded, {report.deleted} removed); "
        f"manifest +{report.artifacts_added} -{report.artifacts_removed}"
    )
    return 0


def run_verify(cfg: Config, args) -> int:
    """Run the checks the flags ask for (all of them without flags); exit 1 if any
    failed, 2 for a bad argument."""
    wanted = {
        "derived-filter": args.derived_filter,
        "exclusions": args.exclusions,
        "index": args.index,
    }
    if not any(wanted.values()):
        wanted = {k: True for k in wanted}
    since = None
    if args.since is not None:
        try:
            since = parse_since(args.since, REAL.now_ms())
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    results: list[CheckResult] = []
    if wanted["derived-filter"]:
        manifest = Manifest(manifest_path(cfg.data_dir), cfg.derived.shingle_size)
        eventlog = EventLog(cfg.database)
        try:
            results.append(
                check_derived_filter(
                    open_store(cfg, eventlog), eventlog, Matcher(manifest, cfg.derived)
                )
            )
        finally:
            eventlog.close()
    if wanted["exclusions"]:
        results.append(check_exclusions(Journal(cfg.journal_path), since))
    if wanted["index"]:
        results.append(check_index(cfg, dry_run=args.dry_run))
    for r in results:
        print("\n".join(r.lines))
    return 0 if all(r.ok for r in results) else 1


def check_index(cfg: Config, dry_run: bool = False) -> CheckResult:
    """verify --index: every window reachable by its own vector, store and event log
    agree; repairs what it can (indexer/pipeline/verify_index.py), unless dry_run. Nothing is
    repaired against an event log that is missing or damaged: it is the judge."""
    from tqdm import tqdm

    from matrix_sources.indexer.pipeline.verify_index import verify_index
    from matrix_sources.indexer.store.eventlog.check import check_eventlog, recovery
    from matrix_sources.indexer.store.eventlog.log import EventLog

    health = check_eventlog(cfg.database)
    if health.state != "ok":
        return CheckResult(
            "index",
            False,
            (
                f"FAIL the event log is {health.state}: {health.detail}",
                "  nothing checked or repaired: the event log says what the collection must "
                "hold, and without it every window would look orphaned",
                f"  fix: {recovery(cfg.database)}",
            ),
        )
    lock = None if dry_run else WriterLock(cfg.data_dir, "matrix-sources verify --index").acquire()
    store = open_store(cfg)
    eventlog = EventLog(cfg.database)
    try:
        with tqdm(
            total=store.count(), desc="probing windows", unit="win", disable=not sys.stderr.isatty()
        ) as bar:
            report = verify_index(store, eventlog, repair=not dry_run, progress=bar.update)
    finally:
        eventlog.close()
        if lock is not None:
            lock.release()
    return CheckResult("index", report.ok, tuple(report.lines()))
