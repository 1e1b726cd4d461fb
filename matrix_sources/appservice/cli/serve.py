"""`matrix-sources run`: the running service with its bot (built in appservice/app.py),
served until SIGINT or SIGTERM."""

from __future__ import annotations

import sys
from pathlib import Path

from matrix_sources.indexer.config import Config

from ..app import serve_with_bot


def run_service(cfg: Config, json_logs: bool) -> int:
    """`matrix-sources run`: serve until SIGINT or SIGTERM; 1 with the fix said when the
    event log cannot be used or the homeserver refuses the service."""
    import asyncio
    import signal
    import sqlite3

    from ..homeserver.startup import StartupError
    from ..logs import setup_logging

    setup_logging(cfg.logging.level, as_json=json_logs or cfg.logging.format == "json")
    from matrix_sources.indexer.store import clean_stop
    from matrix_sources.indexer.store.eventlog.check import clear_clean, mark_clean

    refusal = _start_refusal(cfg)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 1
    # Read before anything opens the pair: opening Chroma writes its files.
    pair = clean_stop.pair(cfg)
    vouched = clean_stop.unchanged(*pair)
    kept_map = clean_stop.id_map(pair[0]) if vouched else None
    clean_stop.clear(pair[0])
    clear_clean(cfg.database)

    async def main() -> int:
        try:
            service = serve_with_bot(cfg, collection_vouched=vouched, id_map=kept_map)
        except sqlite3.DatabaseError as e:  # damage quick_check did not see
            from matrix_sources.indexer.store.eventlog.check import recovery

            print(
                f"error: the event log {cfg.database} cannot be used ({e}). To "
                f"recover: {recovery(cfg.database)}",
                file=sys.stderr,
            )
            return 1
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        starting = asyncio.create_task(service.start())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        code = 0
        if starting.done():
            try:
                starting.result()
                print(
                    f"matrix-sources: serving on {cfg.appservice.host}:{cfg.appservice.port} as "
                    f"{cfg.bot_user}",
                    file=sys.stderr,
                    flush=True,
                )
                await stopping
            except StartupError as e:
                print(f"error: {e}", file=sys.stderr)
                code = 1
        else:  # asked to stop while still starting (e.g. waiting for the homeserver)
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
        stopping.cancel()
        await service.stop()
        mark_clean(cfg.database)  # stopped cleanly: the next start may skip quick_check
        if service.collection_checked:  # and the collection's id check
            clean_stop.mark(*pair, service.index.store.segments.map_by_generation())
        return code

    return asyncio.run(main())


def _start_refusal(cfg: Config) -> str:
    """A damaged event log, or a missing one beside a full collection: say how to
    recover instead of crashing in systemd's restart loop (indexer/store/eventlog/check.py)."""
    from matrix_sources.indexer.components import open_store
    from matrix_sources.indexer.store.eventlog.check import start_refusal

    def windows() -> int:
        if cfg.chroma.mode == "embedded" and not Path(cfg.chroma.path).exists():
            return 0  # never create the folder just to count it
        try:
            return open_store(cfg, inspect=True).count()
        except Exception:  # a Chroma server not up yet: the service's start says so
            return 0

    return start_refusal(cfg.database, windows)
