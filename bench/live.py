"""Live ingest: sustained throughput and freshness (message sent -> searchable), p50/p95.

    .venv/bin/python bench/live.py [--parts synapse,push] [--seconds 60] [--rates 50,200]
    .venv/bin/python bench/live.py --parts mixed [--messages 20000] [--push-rooms 50]

One local Synapse and one `matrix-sources run` (real model, shipped 1 s debounce), on
127.0.0.1, measured two ways:

synapse  people at matrix-nio clients (appservice/tools/chatclient.py) send eval chat lines into
         public rooms the bot indexes, as fast as Synapse takes them: several senders in
         several rooms, each sending its next message as soon as the last was accepted.
push     a load generator speaks the appservice protocol as Synapse does: PUT
         /_matrix/app/v1/transactions/{txnId} with the hs_token, one transaction in
         flight, each carrying up to 100 events that queued meanwhile, the same id and
         body again after a non-200. Events are made at a fixed rate (50 and 200 per
         second) for public rooms whose state events the first transaction carries (the
         rooms are allowlisted but do not exist on Synapse: the service asks Synapse for
         their state, gets nothing, and learns them from the pushed state).

mixed    people asking while indexing is behind (issue 26 item 6): --messages events in
         --push-rooms rooms pushed as fast as the service acknowledges them (one
         transaction of up to 100 in flight; after a non-200, the backlog bound's 503
         among them, the same transaction again after 0.25 s doubling to 2 s), while a
         person in a real room asks one `!sources` a second through Synapse (a question
         of the dev set) and waits for the reply. It reports the `!sources` latency
         (command sent to reply seen by the asker's client; p50, p95, max, how many
         answered), /health's backlog every second (pending messages and the oldest
         one's wait: the most, and over time), the transactions refused, and whether
         every message was settled at the end: indexed, or judged derived (the
         pushed chat repeats its lines, so a line the bot quoted in an answer comes
         back later as text the bot emitted, which the derived filter keeps out).

Freshness runs from the moment a message was sent (before the client's request; for
push, when the event was made and queued) to the moment the event log first shows it
`indexed`, polled every 50 ms (the pipeline marks events indexed only after Chroma
acknowledged their window). Throughput is messages indexed per second from the first
send to the last one indexed. Embeddings per message come from the service's /metrics.
Every loop is bounded (--seconds, and a drain timeout); figures are printed and written to
bench/out/live.json; nothing is asserted.
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
import perfkit  # noqa: E402
import stackkit  # noqa: E402

PUSH_ROOMS = 4
MAX_EVENTS_PER_TXN = 100  # Synapse's limit per appservice transaction
DRAIN_TIMEOUT = 240.0


def eval_bodies(root: Path) -> list[list[tuple[str, str]]]:
    """Per eval room, its (sender, body) lines, minus empty ones and bot commands."""
    rooms: dict[str, list[tuple[str, str]]] = {}
    for split in perfkit.SPLITS:
        for ev in evalkit.load_events(root / split):
            body = (ev.get("content") or {}).get("body")
            if (
                ev.get("type") == "m.room.message"
                and isinstance(body, str)
                and body.strip()
                and not body.startswith("!")
            ):
                rooms.setdefault(ev["room_id"], []).append((ev["sender"], body))
    return [rooms[r] for r in sorted(rooms)]


def summarise(
    watcher: stackkit.IndexedWatcher, ids: list[str], first_sent: float, before: dict, after: dict
) -> dict:
    fresh = watcher.freshness(ids)
    last_third = watcher.freshness(ids[len(ids) * 2 // 3 :])
    done = [watcher.indexed[e] for e in ids if e in watcher.indexed]
    span = (max(done) - first_sent) if done else float("nan")
    d_emb = after.get("matrix_sources_embeddings", 0) - before.get("matrix_sources_embeddings", 0)
    d_msg = after.get("matrix_sources_messages_indexed", 0) - before.get(
        "matrix_sources_messages_indexed", 0
    )
    return {
        "messages": len(ids),
        "indexed": len(fresh),
        "indexed_per_s": round(len(fresh) / span, 1) if done else None,
        "freshness": perfkit.summary_ms(fresh),
        "freshness_last_third": perfkit.summary_ms(last_third),
        "embeddings": int(d_emb),
        "messages_indexed": int(d_msg),
        "embeddings_per_message": round(d_emb / d_msg, 3) if d_msg else None,
    }


# -- through Synapse ------------------------------------------------------------------


async def through_synapse(stack, bodies, senders: int, rooms: int, seconds: float) -> dict:
    from matrix_sources.appservice.tools.chatclient import ChatClient

    users = [
        stack.synapse.register_user(f"sender{i}", f"sender{i}-password") for i in range(senders)
    ]
    clients = [ChatClient(stack.synapse.url, u, t) for u, t in users]
    for c in clients:
        await c.__aenter__()
    try:
        room_ids = [
            await clients[0].create_room(f"Live bench {i}", public=True) for i in range(rooms)
        ]
        added = stack.cli("allowlist", "add", *room_ids)
        if added.returncode != 0:
            raise SystemExit(f"allowlist add failed: {added.stderr}")
        for r in room_ids:
            await clients[0].wait_for_member(r, stack.bot, timeout=60)
        for i, c in enumerate(clients[1:], start=1):
            await c.join(room_ids[i % rooms])
        await asyncio.sleep(3)  # let joins and backfill settle
        watcher = stackkit.IndexedWatcher(stack.data_dir / "eventlog.sqlite3")
        watcher.start()
        before = stackkit.metrics(stack)
        lines = [itertools.cycle(b for _, b in bodies[i % len(bodies)]) for i in range(senders)]
        ids: list[str] = []
        start = time.monotonic()
        end = start + seconds

        async def send_loop(i: int) -> None:
            c, room = clients[i], room_ids[i % rooms]
            while time.monotonic() < end:
                t = time.monotonic()
                eid = await c.send(room, next(lines[i]))
                watcher.watch(eid, t)
                ids.append(eid)

        await asyncio.gather(*(send_loop(i) for i in range(senders)))
        sent_seconds = time.monotonic() - start
        drained = await asyncio.to_thread(watcher.wait_all, ids, DRAIN_TIMEOUT)
        await asyncio.sleep(1.5)  # the counters of the last run
        after = stackkit.metrics(stack)
        watcher.stop()
    finally:
        for c in clients:
            await c.__aexit__(None, None, None)
    out = summarise(watcher, ids, start, before, after)
    out.update(
        senders=senders,
        rooms=rooms,
        seconds=round(sent_seconds, 1),
        accepted_per_s=round(len(ids) / sent_seconds, 1),
        drained=drained,
    )
    return out


# -- pushed straight to the transaction endpoint ----------------------------------------


def push_room_ids(rate: int) -> list[str]:
    return [f"!bench-push-{rate}-{i}:localhost" for i in range(PUSH_ROOMS)]


def state_events(room_id: str, creator: str, n: int) -> list[dict]:
    now = int(time.time() * 1000)
    base = {"room_id": room_id, "sender": creator, "origin_server_ts": now, "state_key": ""}
    return [
        dict(base, type=t, event_id=f"${room_id[1:].split(':')[0]}-state-{k}", content=c)
        for k, (t, c) in enumerate(
            (
                ("m.room.create", {"room_version": "12"}),
                ("m.room.join_rules", {"join_rule": "public"}),
                ("m.room.history_visibility", {"history_visibility": "shared"}),
                ("m.room.name", {"name": f"Push bench {n}"}),
            )
        )
    ]


async def push(stack, bodies, rate: int, seconds: float, redact_every: float = 0.0) -> dict:
    """`redact_every`: also push a redaction of a message pushed 20 s before (indexed
    by then), every that many seconds (0: none), so compactions run during the push."""
    import aiohttp

    rooms = push_room_ids(rate)
    url = f"http://127.0.0.1:{stack.service.port}/_matrix/app/v1/transactions/"
    headers = {"Authorization": f"Bearer {stack.hs_token}"}
    queue: list[dict] = [
        ev for n, r in enumerate(rooms) for ev in state_events(r, "@pushbench:localhost", n)
    ]
    more = asyncio.Event()
    more.set()
    watcher = stackkit.IndexedWatcher(stack.data_dir / "eventlog.sqlite3")
    watcher.start()
    before = stackkit.metrics(stack)
    lines = [itertools.cycle(bodies[i % len(bodies)]) for i in range(PUSH_ROOMS)]
    total = int(rate * seconds)
    ids: list[str] = []
    txn_sizes: list[int] = []
    txn_seconds: list[float] = []
    retries = 0
    producing = True
    redacted: list[str] = []

    async def produce() -> None:
        nonlocal producing
        start = time.monotonic()
        for i in range(total):
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sender, body = next(lines[i % PUSH_ROOMS])
            eid = f"$push{rate}-{i:06d}"
            queue.append(
                {
                    "type": "m.room.message",
                    "room_id": rooms[i % PUSH_ROOMS],
                    "sender": sender.replace(":eval.local", ":localhost"),
                    "event_id": eid,
                    "origin_server_ts": int(time.time() * 1000),
                    "content": {"msgtype": "m.text", "body": body},
                }
            )
            watcher.watch(eid, time.monotonic())
            ids.append(eid)
            if redact_every and time.monotonic() - start >= (len(redacted) + 1) * redact_every:
                target = ids[max(0, len(ids) - 1 - 20 * rate)]
                queue.append(
                    {
                        "type": "m.room.redaction",
                        "room_id": rooms[ids.index(target) % PUSH_ROOMS],
                        "sender": "@pushbench:localhost",
                        "redacts": target,
                        "event_id": f"$push{rate}-redaction-{len(redacted)}",
                        "origin_server_ts": int(time.time() * 1000),
                        "content": {},
                    }
                )
                redacted.append(target)
            more.set()
        producing = False
        more.set()

    async def deliver(session) -> None:
        nonlocal retries
        txn = 0
        while producing or queue:
            await more.wait()
            more.clear()
            while queue:
                batch = queue[:MAX_EVENTS_PER_TXN]
                del queue[: len(batch)]
                txn += 1
                body = json.dumps({"events": batch})
                backoff = 0.5
                for _attempt in range(20):  # bounded: Synapse retries for much longer
                    t = time.monotonic()
                    try:
                        async with session.put(
                            f"{url}bench{rate}-{txn}", data=body, headers=headers
                        ) as resp:
                            status = resp.status
                            await resp.read()
                    except aiohttp.ClientError:
                        status = 0
                    txn_seconds.append(time.monotonic() - t)
                    if status == 200:
                        break
                    retries += 1
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 8.0)
                else:
                    raise RuntimeError(f"transaction bench{rate}-{txn} never got a 200")
                txn_sizes.append(len(batch))

    start = time.monotonic()
    async with aiohttp.ClientSession(headers={"Content-Type": "application/json"}) as session:
        await asyncio.gather(produce(), deliver(session))
    sent_seconds = time.monotonic() - start
    # A redacted message is never indexed if its redaction came first: not waited for.
    fresh_ids = [e for e in ids if e not in set(redacted)]
    drained = await asyncio.to_thread(watcher.wait_all, fresh_ids, DRAIN_TIMEOUT)
    await asyncio.sleep(1.5)
    after = stackkit.metrics(stack)
    watcher.stop()
    out = summarise(watcher, fresh_ids, start, before, after)
    out.update(
        offered_per_s=rate,
        redactions=len(redacted),
        seconds=round(sent_seconds, 1),
        sent_per_s=round(len(ids) / sent_seconds, 1),
        drained=drained,
        transactions=len(txn_sizes),
        retried=retries,
        events_per_txn_mean=round(sum(txn_sizes) / max(len(txn_sizes), 1), 1),
        events_per_txn_max=max(txn_sizes, default=0),
        txn_latency=perfkit.summary_ms(txn_seconds),
    )
    return out


# -- mixed: people asking while indexing is behind ----------------------------------------

MIXED_TXN_BACKOFF = (0.25, 2.0)  # first retry after a non-200, and the longest


def search_buckets(stack) -> dict[float, float]:
    """The service's search latency histogram: bucket bound (s) -> cumulative count."""
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{stack.service.port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        float(m.group(1)): float(m.group(2))
        for m in re.finditer(
            r'^matrix_sources_search_latency_seconds_bucket\{le="([^"]+)"\} ([0-9.e+]+)$',
            text,
            re.M,
        )
        if m.group(1) != "+Inf"
    }


def bucket_p95(before: dict[float, float], after: dict[float, float]) -> float | None:
    """The smallest bucket bound holding 95% of the searches between the two reads."""
    counts = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = max(counts.values(), default=0.0)
    return next((le for le, n in counts.items() if total and n >= 0.95 * total), None)


def health(stack) -> dict:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{stack.service.port}/health", timeout=10
        ) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read() or b"{}")


async def mixed(
    stack,
    bodies,
    questions: list[str],
    messages: int,
    rooms: int,
    ask_every: float,
    drain_timeout: float,
) -> dict:
    import aiohttp

    from matrix_sources.appservice.tools.chatclient import ChatClient

    push_rooms = mixed_room_ids(rooms)
    url = f"http://127.0.0.1:{stack.service.port}/_matrix/app/v1/transactions/"
    headers = {"Authorization": f"Bearer {stack.hs_token}"}
    queue: list[dict] = [
        ev for n, r in enumerate(push_rooms) for ev in state_events(r, "@pushbench:localhost", n)
    ]
    lines = [itertools.cycle(bodies[i % len(bodies)]) for i in range(rooms)]
    ids: list[str] = []
    watcher = stackkit.IndexedWatcher(stack.data_dir / "eventlog.sqlite3")
    watcher.start()
    for i in range(messages):  # all made up front: pushed as fast as they are acked
        sender, body = next(lines[i % rooms])
        eid = f"$mixed-{i:06d}"
        queue.append(
            {
                "type": "m.room.message",
                "room_id": push_rooms[i % rooms],
                "sender": sender.replace(":eval.local", ":localhost"),
                "event_id": eid,
                "origin_server_ts": int(time.time() * 1000),
                "content": {"msgtype": "m.text", "body": body},
            }
        )
        ids.append(eid)
    user, token = stack.synapse.register_user("asker", "asker-password")
    asker = ChatClient(stack.synapse.url, user, token)
    await asker.__aenter__()
    room = await asker.create_room("Mixed bench questions", public=True)
    await asker.invite(room, stack.bot)  # the bot answers where it is; nothing indexed
    await asker.wait_for_member(room, stack.bot, timeout=120)
    asked: dict[str, float] = {}  # command event id -> when sent
    answered: dict[str, float] = {}
    backlog: list[dict] = []
    txn_seconds: list[float] = []
    status_counts: dict[int, int] = {}
    pushing = True
    start = time.monotonic()

    async def deliver(session) -> None:
        nonlocal pushing
        txn = 0
        while queue:
            batch = queue[:MAX_EVENTS_PER_TXN]
            del queue[: len(batch)]
            for e in batch:
                if e["type"] == "m.room.message":
                    watcher.watch(e["event_id"], time.monotonic())
            txn += 1
            body = json.dumps({"events": batch})
            backoff = MIXED_TXN_BACKOFF[0]
            while True:
                t = time.monotonic()
                try:
                    async with session.put(f"{url}mixed-{txn}", data=body, headers=headers) as resp:
                        status = resp.status
                        await resp.read()
                except aiohttp.ClientError:
                    status = 0
                txn_seconds.append(time.monotonic() - t)
                status_counts[status] = status_counts.get(status, 0) + 1
                if status == 200:
                    break
                if time.monotonic() - start > drain_timeout:
                    raise RuntimeError(f"transaction mixed-{txn} never got a 200")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MIXED_TXN_BACKOFF[1])
        pushing = False

    async def ask() -> None:
        qs = itertools.cycle(questions)
        while pushing:
            t = time.monotonic()
            asked[await asker.send(room, f"!sources {next(qs)}")] = t
            await asyncio.sleep(max(0.0, t + ask_every - time.monotonic()))

    async def replies() -> None:
        while pushing or len(answered) < len(asked):
            for ev in await asker.sync_once(timeout_ms=500):
                rel = ((ev.get("content") or {}).get("m.relates_to") or {}).get(
                    "m.in_reply_to"
                ) or {}
                cmd = rel.get("event_id")
                if ev.get("sender") == stack.bot and cmd in asked and cmd not in answered:
                    answered[cmd] = time.monotonic()
            if not pushing and time.monotonic() - start > drain_timeout:
                return

    async def sample() -> None:
        while pushing or not watcher.settled(ids):
            h = await asyncio.to_thread(health, stack)
            b = h.get("backlog") or {}
            backlog.append(
                {
                    "t": round(time.monotonic() - start, 1),
                    "pending": b.get("pending"),
                    "oldest_pending_s": b.get("oldest_pending_seconds"),
                    "full": b.get("full"),
                }
            )
            if time.monotonic() - start > drain_timeout:
                return
            await asyncio.sleep(1.0)

    before = stackkit.metrics(stack)
    searches_before = search_buckets(stack)
    try:
        async with aiohttp.ClientSession(headers={"Content-Type": "application/json"}) as s:
            await asyncio.gather(deliver(s), ask(), replies(), sample())
    finally:
        await asker.__aexit__(None, None, None)
    pushed_seconds = max(watcher.sent.values()) - start if watcher.sent else 0.0
    drained = await asyncio.to_thread(
        watcher.wait_all, ids, max(1.0, drain_timeout - (time.monotonic() - start))
    )
    after = stackkit.metrics(stack)
    searches = bucket_p95(searches_before, search_buckets(stack))
    watcher.stop()
    latency = [answered[c] - asked[c] for c in answered]
    oldest = [b["oldest_pending_s"] for b in backlog if b["oldest_pending_s"] is not None]
    out = summarise(watcher, ids, start, before, after)
    out.update(
        rooms=rooms,
        pushed_seconds=round(pushed_seconds, 1),
        pushed_per_s=round(len(ids) / pushed_seconds, 1) if pushed_seconds else None,
        all_indexed=drained and all(e in watcher.indexed or e in watcher.derived for e in ids),
        derived=len(set(ids) & watcher.derived),
        transactions={str(k): v for k, v in sorted(status_counts.items())},
        refused_backlog=int(
            after.get("matrix_sources_transactions_refused_backlog", 0)
            - before.get("matrix_sources_transactions_refused_backlog", 0)
        ),
        txn_latency=perfkit.summary_ms(txn_seconds),
        commands={
            "asked": len(asked),
            "answered": len(answered),
            "latency": perfkit.summary_ms(latency),
            "search_p95_s_at_most": searches,
        },
        oldest_pending_s={
            "max": max(oldest, default=0.0),
            "p50": round(perfkit.pct(oldest, 50), 1) if oldest else 0.0,
        },
        pending_max=max((b["pending"] or 0 for b in backlog), default=0),
        backlog_over_time=backlog,
    )
    return out


def mixed_room_ids(n: int) -> list[str]:
    return [f"!bench-mixed-{i}:localhost" for i in range(n)]


def dev_questions(root: Path) -> list[str]:
    return [item.query for item in evalkit.load_items(root / "dev")]


def mixed_lines(r: dict) -> list[str]:
    c, lat = r["commands"], r["commands"]["latency"]
    series = ", ".join(
        f"{b['t']:.0f}s:{b['pending']}/{b['oldest_pending_s']}s"
        for b in r["backlog_over_time"][:: max(1, len(r["backlog_over_time"]) // 12)]
    )
    return [
        f"mixed: {r['messages']} messages in {r['rooms']} rooms pushed in "
        f"{r['pushed_seconds']} s ({r['pushed_per_s']}/s), indexed {r['indexed']}"
        f"/{r['messages']}, derived {r.get('derived', 0)} (all settled: {r['all_indexed']}), "
        f"{r['indexed_per_s']}/s",
        f"  !sources: {c['answered']}/{c['asked']} answered, latency p50 "
        f"{lat['p50_ms']:.0f} ms, p95 {lat['p95_ms']:.0f} ms, max {lat['max_ms'] or 0:.0f} ms"
        f" (sent to reply seen); the search itself p95 <= {c['search_p95_s_at_most']} s",
        f"  backlog: at most {r['pending_max']} pending, oldest waited at most "
        f"{r['oldest_pending_s']['max']} s; transactions {r['transactions']}, "
        f"{r['refused_backlog']} refused for the backlog",
        f"  over time (t: pending/oldest wait): {series}",
    ]


def line(name: str, r: dict, rate: str) -> str:
    f, g = r["freshness"], r["freshness_last_third"]
    return (
        f"{name:<22}{rate:>10}{r['indexed_per_s'] or 0:>10.1f}{f['p50_ms']:>10.0f}"
        f"{f['p95_ms']:>10.0f}{g['p95_ms']:>11.0f}{r['embeddings_per_message'] or 0:>9.3f}"
        f"{r['indexed']:>7}/{r['messages']}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--parts", default="synapse,push")
    p.add_argument("--seconds", type=float, default=60.0, help="sending time per run")
    p.add_argument("--rates", default="50,200", help="push: messages per second")
    p.add_argument("--messages", type=int, default=20_000, help="mixed: messages pushed")
    p.add_argument("--push-rooms", type=int, default=50, help="mixed: rooms they go to")
    p.add_argument(
        "--ask-every", type=float, default=1.0, help="mixed: seconds between two `!sources`"
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=3600.0,
        help="mixed: the longest the whole run may take, in seconds",
    )
    p.add_argument("--senders", type=int, default=6)
    p.add_argument("--rooms", type=int, default=3)
    p.add_argument("--work", default=str(evalkit.OUT_DIR / "live-stack"))
    p.add_argument("--out", default=None)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config.yaml setting of the service (repeatable), e.g. "
        "index.embedder.backend=onnx-int8",
    )
    args = p.parse_args(argv)
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    bodies = eval_bodies(root)
    parts = args.parts.split(",")
    rates = [int(r) for r in args.rates.split(",")]
    allow = [r for rate in rates for r in push_room_ids(rate)] if "push" in parts else []
    allow += mixed_room_ids(args.push_rooms) if "mixed" in parts else []
    report: dict = {
        "benchmark": "live",
        "machine": perfkit.machine(),
        "load_average_before": perfkit.load_average(),
        "seconds": args.seconds,
        "settings": perfkit.parse_settings(args.set),
    }
    with stackkit.running_stack(
        Path(args.work), settings=report["settings"], allowlist=allow
    ) as stack:
        report["service_pid"] = stack.service.proc.pid
        if "synapse" in parts:
            report["synapse"] = asyncio.run(
                through_synapse(stack, bodies, args.senders, args.rooms, args.seconds)
            )
        for rate in rates if "push" in parts else []:
            report[f"push_{rate}"] = asyncio.run(push(stack, bodies, rate, args.seconds))
        if "mixed" in parts:
            report["load_average_mixed_start"] = perfkit.load_average()
            report["mixed"] = asyncio.run(
                mixed(
                    stack,
                    bodies,
                    dev_questions(root),
                    args.messages,
                    args.push_rooms,
                    args.ask_every,
                    args.drain_timeout,
                )
            )
            report["load_average_mixed_end"] = perfkit.load_average()
        report["service_status"] = perfkit.proc_status(stack.service.proc.pid)
    report["load_average_after"] = perfkit.load_average()
    path = perfkit.write_report("live", report, args.out)
    print(
        f"{'way':<22}{'rate/s':>10}{'idx/s':>10}{'p50 ms':>10}{'p95 ms':>10}"
        f"{'p95 last⅓':>11}{'emb/msg':>9}{'indexed':>12}"
    )
    if "synapse" in report:
        s = report["synapse"]
        print(line(f"synapse ({s['senders']} senders)", s, f"{s['accepted_per_s']:.1f}"))
    for rate in rates if "push" in parts else []:
        r = report[f"push_{rate}"]
        print(
            line("push (appservice API)", r, f"{r['sent_per_s']:.1f}")
            + f"  txns {r['transactions']}, {r['events_per_txn_mean']} ev/txn,"
            f" retried {r['retried']}"
        )
    if "mixed" in report:
        print("\n".join(mixed_lines(report["mixed"])))
        print(
            f"  load average {report['load_average_mixed_start']} -> "
            f"{report['load_average_mixed_end']}"
        )
    print(
        f"service VmHWM {report['service_status'].get('VmHWM', 0) / 1024:.0f} MiB; "
        f"load average {report['load_average_before']} -> {report['load_average_after']}"
    )
    print(f"wrote {path}\n\n" + perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
