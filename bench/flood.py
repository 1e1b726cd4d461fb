"""Searches never starve indexing (issue 44 item 8): how long a message sent during a
flood of searches takes to become searchable.

    .venv/bin/python bench/flood.py [--clients 50] [--seconds 60] [--every 2]

One local Synapse and one `matrix-sources run` (real model, shipped 1 s debounce), the
search API's rate limit off (`api.requests_per_minute: 0`), all on 127.0.0.1:

1. --prefill lines of the eval chat are pushed to the transaction endpoint (one public
   room) and indexed, so that a search has an index to work on;
2. quiet: a person at a matrix-nio client sends a message into a public room every
   --every seconds, --quiet of them, nobody searching: the freshness without a flood;
3. flood: --clients API clients search the dev questions, each sending its next search
   as soon as the last was answered, for --seconds; from 5 s in, the person sends a
   message every --every seconds.

Freshness runs from the moment a message was sent (before the client's request) to the
moment the event log first shows it `indexed` (bench/stackkit.py's watcher: the pipeline
marks events indexed only after Chroma acknowledged their window). After the flood each
message is searched for once through the API, its hit checked by event id. Reported:
freshness p50, p95 and max, quiet and in the flood; searches answered per second in the
flood and their latency. Figures are printed and written to bench/out/flood.json;
nothing is asserted. Run it alone: the machine's other work shows in every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import evalkit  # noqa: E402
import live  # noqa: E402
import perfkit  # noqa: E402
import stackkit  # noqa: E402

PREFILL_ROOM = "!bench-flood-chat:localhost"
MAX_EVENTS_PER_TXN = 100
WARMUP_S = 5.0  # the flood runs this long before the first message
DRAIN_S = 120.0


def _token(stack) -> str:
    from matrix_sources.indexer.config import load_config
    from matrix_sources.indexer.datadir import api_token

    return api_token(load_config(stack.config))


async def prefill(stack, bodies: list[list[tuple[str, str]]], n: int) -> dict:
    """`n` eval chat lines pushed into one room as Synapse would, then indexed."""
    import aiohttp

    url = f"http://127.0.0.1:{stack.service.port}/_matrix/app/v1/transactions/flood-"
    headers = {"Authorization": f"Bearer {stack.hs_token}"}
    events = live.state_events(PREFILL_ROOM, "@floodbench:localhost", 0)
    lines = itertools.cycle([line for room in bodies for line in room])
    ids = []
    base = int(time.time() * 1000) - n * 1000
    for i in range(n):
        sender, body = next(lines)
        ids.append(f"$flood-chat-{i:06d}")
        events.append(
            {
                "type": "m.room.message",
                "room_id": PREFILL_ROOM,
                "sender": sender.replace(":eval.local", ":localhost"),
                "event_id": ids[-1],
                "origin_server_ts": base + i * 1000,
                "content": {"msgtype": "m.text", "body": body},
            }
        )
    watcher = stackkit.IndexedWatcher(stack.data_dir / "eventlog.sqlite3")
    watcher.start()
    start = time.monotonic()
    for e in ids:
        watcher.watch(e, start)
    async with aiohttp.ClientSession(headers={"Content-Type": "application/json"}) as s:
        for txn, at in enumerate(range(0, len(events), MAX_EVENTS_PER_TXN)):
            body = json.dumps({"events": events[at : at + MAX_EVENTS_PER_TXN]})
            while True:
                async with s.put(f"{url}{txn}", data=body, headers=headers) as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(1.0)  # the backlog's 503: as Synapse, again later
    settled = await asyncio.to_thread(watcher.wait_all, ids, 1800)
    watcher.stop()
    return {"messages": n, "settled": settled, "seconds": round(time.monotonic() - start, 1)}


async def flood(
    stack, questions: list[str], clients: int, seconds: float, every: float, quiet: int
) -> dict:
    import aiohttp

    from matrix_sources.appservice.tools.chatclient import ChatClient

    url = f"http://127.0.0.1:{stack.service.port}/_matrix_sources/v1/search"
    headers = {"Authorization": f"Bearer {_token(stack)}", "Content-Type": "application/json"}
    user, token = stack.synapse.register_user("prober", "prober-password")
    person = ChatClient(stack.synapse.url, user, token)
    await person.__aenter__()
    watcher = stackkit.IndexedWatcher(stack.data_dir / "eventlog.sqlite3")
    watcher.start()
    sent: dict[str, tuple[str, str]] = {}  # event id -> (phase, unique words)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    flooding = True
    ended = float("inf")  # when the flood ended

    async def send(phase: str, i: int) -> None:
        words = f"probe{phase}{i} zebracrossing{i} marmalade{i}"
        t = time.monotonic()
        eid = await person.send(room, f"flood check {i}: {words} in the config file")
        watcher.watch(eid, t)
        sent[eid] = (phase, words)

    async def searcher(session, n: int) -> None:
        qs = itertools.cycle(questions[n % len(questions) :] + questions[: n % len(questions)])
        while flooding:
            t = time.monotonic()
            try:
                async with session.post(
                    url, data=json.dumps({"texts": [next(qs)]}), headers=headers
                ) as r:
                    await r.read()
                    status = r.status
            except aiohttp.ClientError:
                status = 0
            latencies.append(time.monotonic() - t)
            statuses[status] = statuses.get(status, 0) + 1

    async def probes() -> None:
        nonlocal flooding, ended
        await asyncio.sleep(WARMUP_S)
        i = 0
        start = time.monotonic()
        while time.monotonic() - start < seconds - WARMUP_S:
            await send("flood", i)
            i += 1
            await asyncio.sleep(every)
        flooding = False
        ended = time.monotonic()

    try:
        room = await person.create_room("Flood bench", public=True)
        added = stack.cli("allowlist", "add", room)
        if added.returncode != 0:
            raise SystemExit(f"allowlist add failed: {added.stderr}")
        await person.wait_for_member(room, stack.bot, timeout=120)
        await asyncio.sleep(3)  # the join's backfill settles
        for i in range(quiet):
            await send("quiet", i)
            await asyncio.sleep(every)
        conn = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(connector=conn) as s:
            began = time.monotonic()
            await asyncio.gather(probes(), *(searcher(s, n) for n in range(clients)))
            flood_s = time.monotonic() - began
            drained = await asyncio.to_thread(watcher.wait_all, list(sent), DRAIN_S)
            found = 0
            for eid, (_, words) in sent.items():
                async with s.post(url, data=json.dumps({"texts": [words]}), headers=headers) as r:
                    hits = (await r.json()).get("hits", []) if r.status == 200 else []
                found += any(eid in h.get("event_ids", []) for h in hits)
    finally:
        watcher.stop()
        await person.__aexit__(None, None, None)
    by_phase = {p: [e for e, (ph, _) in sent.items() if ph == p] for p in ("quiet", "flood")}
    return {
        "clients": clients,
        "seconds": round(flood_s, 1),
        "every_s": every,
        "quiet": {
            "messages": len(by_phase["quiet"]),
            "freshness": perfkit.summary_ms(watcher.freshness(by_phase["quiet"])),
        },
        "flood": {
            "messages": len(by_phase["flood"]),
            "freshness": perfkit.summary_ms(watcher.freshness(by_phase["flood"])),
            "not_indexed_in_flood": [
                e for e in by_phase["flood"] if watcher.indexed.get(e, ended + 1) > ended
            ],
        },
        "all_indexed": drained,
        "found_by_search": found,
        "messages": len(sent),
        "searches": {
            "answered": statuses.get(200, 0),
            "per_s": round(statuses.get(200, 0) / flood_s, 1),
            "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "latency": perfkit.summary_ms(latencies),
        },
    }


def lines(r: dict) -> list[str]:
    q, f, s = r["quiet"]["freshness"], r["flood"]["freshness"], r["searches"]

    def fmt(d: dict) -> str:
        return (
            f"p50 {d['p50_ms'] / 1000:.2f} s, p95 {d['p95_ms'] / 1000:.2f} s, "
            f"max {(d['max_ms'] or 0) / 1000:.2f} s"
        )

    return [
        f"quiet: {r['quiet']['messages']} messages, sent -> indexed {fmt(q)}",
        f"flood of {r['clients']} API clients for {r['seconds']} s: "
        f"{r['flood']['messages']} messages, sent -> indexed {fmt(f)}; "
        f"indexed only after the flood ended: {len(r['flood']['not_indexed_in_flood'])}",
        f"  searches: {s['answered']} answered ({s['per_s']}/s), latency p50 "
        f"{s['latency']['p50_ms']:.0f} ms, p95 {s['latency']['p95_ms']:.0f} ms; "
        f"statuses {s['statuses']}",
        f"  every message found by a search afterwards: "
        f"{r['found_by_search']}/{r['messages']} (all indexed: {r['all_indexed']})",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--seconds", type=float, default=60.0, help="the flood's length")
    p.add_argument("--every", type=float, default=2.0, help="seconds between two messages")
    p.add_argument("--quiet", type=int, default=5, help="messages sent before the flood")
    p.add_argument("--prefill", type=int, default=3000, help="chat lines indexed first")
    p.add_argument("--work", default=str(evalkit.OUT_DIR / "flood-stack"))
    p.add_argument("--out", default=None)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config.yaml setting of the service (repeatable)",
    )
    args = p.parse_args(argv)
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    settings = {"api.requests_per_minute": 0, **perfkit.parse_settings(args.set)}
    report: dict = {
        "benchmark": "flood",
        "machine": perfkit.machine(),
        "load_average_before": perfkit.load_average(),
        "settings": settings,
    }
    with stackkit.running_stack(
        Path(args.work), settings=settings, allowlist=[PREFILL_ROOM]
    ) as stack:
        report["prefill"] = asyncio.run(prefill(stack, live.eval_bodies(root), args.prefill))
        report["flood"] = asyncio.run(
            flood(
                stack, live.dev_questions(root), args.clients, args.seconds, args.every, args.quiet
            )
        )
        report["service_status"] = perfkit.proc_status(stack.service.proc.pid)
    report["load_average_after"] = perfkit.load_average()
    path = perfkit.write_report("flood", report, args.out)
    pre = report["prefill"]
    print(
        f"prefill: {pre['messages']} chat lines indexed in {pre['seconds']} s "
        f"(settled: {pre['settled']})"
    )
    print("\n".join(lines(report["flood"])))
    print(f"load average {report['load_average_before']} -> {report['load_average_after']}")
    print(f"wrote {path}\n\n" + perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
