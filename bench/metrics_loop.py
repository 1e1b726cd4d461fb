"""/metrics at 1M events: how long the event loop goes without running, and how long an
ack takes, while scrapes read the event log's figures.

    .venv/bin/python bench/metrics_loop.py [--events 1000000]

Each scrape used to run two aggregates over the whole events table inside the aiohttp
handler, under the event log's lock: about 350 ms at 1M events, while acks waited. Now
a scrape serves the figures read last, and starts a read in a worker thread on a
connection of its own. The event log here is generated (executemany), 1M rows.
Figures are printed and written to bench/out/metrics_loop.json; nothing is asserted but
that the run worked."""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from matrix_sources.appservice.homeserver.metrics import (
    EventLogFigures,
    MetricSources,
    ServiceMetrics,
)
from matrix_sources.appservice.homeserver.transactions import TransactionHandler
from matrix_sources.indexer.ingest.admit import Ingest
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.roomfacts import RoomFacts
from matrix_sources.indexer.pipeline.pipeline import PipelineStats
from matrix_sources.indexer.records import RoomID, UserID
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.eventlog.reports import lag_report_at
from matrix_sources.indexer.store.journal import Journal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.appservice.homeserver.test_transactions import HS_TOKEN, PATH, auth  # noqa: E402

EVENTS = 1_000_000
ROOMS = 50
T0 = 1_700_000_000_000


def big_log(folder: Path):
    path = folder / "eventlog.sqlite3"
    EventLog(path).close()  # the real schema and indexes
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    per_room = EVENTS // ROOMS
    with db:
        db.executemany(
            "INSERT INTO events (event_id, room_id, sender, ts, body, status, window_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    f"$e{r:03d}{i:07d}",
                    f"!room{r:03d}:example.org",
                    "@alice:example.org",
                    T0 + i * 1000,
                    "the backup job failed again",
                    "pending" if i >= per_room - 2000 else "indexed",
                    None if i >= per_room - 2000 else f"w{r}-{i // 20}",
                )
                for r in range(ROOMS)
                for i in range(per_room)
            ),
        )
        db.executemany(
            "INSERT INTO cursors (room_id, event_id, ts, updated_at) VALUES (?, ?, ?, ?)",
            [
                (
                    f"!room{r:03d}:example.org",
                    f"$e{r:03d}{per_room - 2001:07d}",
                    T0 + (per_room - 2001) * 1000,
                    T0,
                )
                for r in range(ROOMS)
            ],
        )
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return path


class LoopWatch:
    """The longest the loop went without running this task's 1 ms sleeps."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last)
            last = now

    def __enter__(self) -> LoopWatch:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc) -> None:
        assert self._task is not None
        self._task.cancel()


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


async def measure(big_log: Path) -> dict:
    # What the removed per-scrape aggregate cost, for comparison with the loop's worst.
    started = time.perf_counter()
    pending, _, lags = await asyncio.to_thread(lag_report_at, big_log)
    read_seconds = time.perf_counter() - started
    assert pending == ROOMS * 2000 and len(lags) == ROOMS

    eventlog = EventLog(big_log)
    room = RoomID("!room000:example.org")
    ingest = Ingest(
        Gate(frozenset({room}), UserID("@bot:example.org")),
        eventlog,
        Journal(big_log.parent / "journal.jsonl"),
    )
    ingest.facts[room] = RoomFacts(join_rule="public")

    async def fetch_state(_room):
        return None

    handler = TransactionHandler(
        HS_TOKEN, "matrix-sources", ingest, fetch_state, lambda events, result: None
    )
    figures = EventLogFigures(big_log, max_age=0.0)
    metrics = ServiceMetrics()
    metrics.attach(
        MetricSources(
            pipeline=SimpleNamespace(stats=PipelineStats(), derived=None, failing={}),
            transactions=handler,
            worker=SimpleNamespace(failures=0),
            terms=None,
            figures=figures,
            ready=lambda: True,
        )
    )
    app = web.Application()
    app.router.add_get("/metrics", metrics.handle_metrics)
    app.router.add_put("/_matrix/app/v1/transactions/{transaction_id}", handler.handle)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        with LoopWatch() as watch:
            acks = []
            for i in range(6):
                resp = await client.get("/metrics")
                assert resp.status == 200
                text = await resp.text()
                # An ack while the figures are being read: it waits for no aggregate.
                t = time.perf_counter()
                resp = await client.put(
                    PATH.format(f"t{i}"),
                    headers=auth(),
                    json={
                        "events": [
                            {
                                "type": "m.room.message",
                                "room_id": room,
                                "event_id": f"$new{i}",
                                "sender": "@bob:example.org",
                                "origin_server_ts": T0,
                                "content": {"msgtype": "m.text", "body": "hello"},
                            }
                        ]
                    },
                )
                acks.append(time.perf_counter() - t)
                assert resp.status == 200
                if figures._reading is not None:
                    await figures._reading
        # The scrapes after the first serve the figures the previous one started reading.
        resp = await client.get("/metrics")
        text = await resp.text()
        assert metric(text, "matrix_sources_pipeline_queue_depth") >= ROOMS * 2000
        assert 'matrix_sources_cursor_lag_seconds{room_id="!room049:example.org"}' in text
    finally:
        await client.close()
        eventlog.close()
    return {
        "events": EVENTS,
        "aggregate_read_ms": round(read_seconds * 1000, 1),
        "loop_worst_block_ms": round(watch.worst * 1000, 1),
        "ack_ms_max": round(max(acks) * 1000, 1),
        "ack_ms": [round(a * 1000, 1) for a in acks],
    }


def main() -> None:
    global EVENTS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=EVENTS)
    EVENTS = ap.parse_args().events
    with tempfile.TemporaryDirectory() as d:
        figures = asyncio.run(measure(big_log(Path(d))))
    print(json.dumps(figures, indent=2))
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "metrics_loop.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
