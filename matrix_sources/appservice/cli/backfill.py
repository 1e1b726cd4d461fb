"""`matrix-sources backfill -c ... [ROOM ...]`: read rooms' history with a progress bar,
while the service is stopped (it backfills on its own at start and when a room is
added). Resumes where an interrupted backfill stopped."""

from __future__ import annotations

import asyncio
import sys

from mautrix.api import HTTPAPI
from tqdm import tqdm

from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.datadir import service_registration
from matrix_sources.indexer.ingest.allowlist import load_allowlist
from matrix_sources.indexer.ingest.backfill import backfill_room, horizon
from matrix_sources.indexer.records import RoomID
from matrix_sources.indexer.store.lock import WriterLock

from ..homeserver.pager import MatrixPager
from ..homeserver.roomstate import fetch_room_facts
from .progress import ensure_collection, load_model, pending_total


async def _run(cfg: Config, rooms: list[str], show: bool) -> int:
    reg = service_registration(cfg)
    listed = set(load_allowlist(cfg.allowlist_path))
    unlisted = [r for r in rooms if r not in listed]
    if unlisted:  # before the model loads: a typo should not cost 15 s
        print(
            f"error: not on the allowlist: {', '.join(unlisted)}; add them first "
            "(`matrix-sources allowlist add`), or see `matrix-sources allowlist list`",
            file=sys.stderr,
        )
        return 2
    index = Index.open(cfg, load_model(cfg))
    ensure_collection(index, show)
    api = HTTPAPI(base_url=cfg.homeserver.url, token=reg.as_token)
    problems = 0
    try:
        for room in rooms or sorted(index.gate.allowlist):
            room_id = RoomID(room)
            if room_id not in index.gate.allowlist:
                print(f"{room}: not on the allowlist; add it first", file=sys.stderr)
                problems += 1
                continue
            facts = await fetch_room_facts(api, room_id)
            if facts is None:
                print(
                    f"{room}: the bot cannot read it (not joined?); start the service "
                    "once so it joins",
                    file=sys.stderr,
                )
                problems += 1
                continue
            await asyncio.to_thread(index.ingest.learn, room_id, facts, "backfill")
            refusal = index.gate.judge_room(room_id, facts)
            if refusal is not None:
                print(f"{room}: refused ({refusal.rule}); nothing read")
                continue
            with tqdm(desc=f"reading {facts.label or room}", unit="ev", disable=not show) as bar:
                result = await backfill_room(
                    room_id,
                    MatrixPager(api),
                    index.ingest,
                    horizon(cfg.index.backfill_days),
                    bar.update,
                )
            with tqdm(
                total=pending_total(index.eventlog), desc="indexing", unit="msg", disable=not show
            ) as bar:
                indexed = await asyncio.to_thread(index.pipeline.process_all, bar.update)
            a = result.admitted
            print(
                f"{room}: {result.events} events read in {result.pages} pages, "
                f"{a.appended} new messages, {indexed} indexed, "
                f"{sum(a.refused.values())} refused, {sum(a.skipped.values())} skipped"
            )
    finally:
        await api.session.close()
        index.close()
    return 1 if problems else 0


def run_backfill(cfg: Config, rooms: list[str], quiet: bool = False) -> int:
    with WriterLock(cfg.data_dir, "matrix-sources backfill"):
        return asyncio.run(_run(cfg, rooms, not quiet))
