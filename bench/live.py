"""Live ingest: sustained throughput and freshness (message sent -> searchable), p50/p95.

    .venv/bin/python bench/live.py [--parts synapse,push] [--seconds 60] [--rates 50,200]

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
            if ev.get("type") == "m.room.message" and isinstance(body, str) \
                    and body.strip() and not body.startswith("!"):
                rooms.setdefault(ev["room_id"], []).append((ev["sender"], body))
    return [rooms[r] for r in sorted(rooms)]


def summarise(watcher: stackkit.IndexedWatcher, ids: list[str], first_sent: float,
              before: dict, after: dict) -> dict:
    fresh = watcher.freshness(ids)
    last_third = watcher.freshness(ids[len(ids) * 2 // 3:])
    done = [watcher.indexed[e] for e in ids if e in watcher.indexed]
    span = (max(done) - first_sent) if done else float("nan")
    d_emb = after.get("matrix_sources_embeddings", 0) - before.get("matrix_sources_embeddings", 0)
    d_msg = after.get("matrix_sources_messages_indexed", 0) - before.get(
        "matrix_sources_messages_indexed", 0)
    return {"messages": len(ids), "indexed": len(fresh),
            "indexed_per_s": round(len(fresh) / span, 1) if done else None,
            "freshness": perfkit.summary_ms(fresh),
            "freshness_last_third": perfkit.summary_ms(last_third),
            "embeddings": int(d_emb), "messages_indexed": int(d_msg),
            "embeddings_per_message": round(d_emb / d_msg, 3) if d_msg else None}


# -- through Synapse ------------------------------------------------------------------


async def through_synapse(stack, bodies, senders: int, rooms: int, seconds: float) -> dict:
    from appservice.tools.chatclient import ChatClient

    users = [stack.synapse.register_user(f"sender{i}", f"sender{i}-password")
             for i in range(senders)]
    clients = [ChatClient(stack.synapse.url, u, t) for u, t in users]
    for c in clients:
        await c.__aenter__()
    try:
        room_ids = [await clients[0].create_room(f"Live bench {i}", public=True)
                    for i in range(rooms)]
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
        lines = [itertools.cycle(b for _, b in bodies[i % len(bodies)])
                 for i in range(senders)]
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
    out.update(senders=senders, rooms=rooms, seconds=round(sent_seconds, 1),
               accepted_per_s=round(len(ids) / sent_seconds, 1), drained=drained)
    return out


# -- pushed straight to the transaction endpoint ----------------------------------------


def push_room_ids(rate: int) -> list[str]:
    return [f"!bench-push-{rate}-{i}:localhost" for i in range(PUSH_ROOMS)]


def state_events(room_id: str, creator: str, n: int) -> list[dict]:
    now = int(time.time() * 1000)
    base = {"room_id": room_id, "sender": creator, "origin_server_ts": now, "state_key": ""}
    return [dict(base, type=t, event_id=f"${room_id[1:].split(':')[0]}-state-{k}", content=c)
            for k, (t, c) in enumerate((
                ("m.room.create", {"room_version": "12"}),
                ("m.room.join_rules", {"join_rule": "public"}),
                ("m.room.history_visibility", {"history_visibility": "shared"}),
                ("m.room.name", {"name": f"Push bench {n}"})))]


async def push(stack, bodies, rate: int, seconds: float, redact_every: float = 0.0) -> dict:
    """`redact_every`: also push a redaction of a message pushed 20 s before (indexed
    by then), every that many seconds (0: none), so compactions run during the push."""
    import aiohttp

    rooms = push_room_ids(rate)
    url = f"http://127.0.0.1:{stack.service.port}/_matrix/app/v1/transactions/"
    headers = {"Authorization": f"Bearer {stack.hs_token}"}
    queue: list[dict] = [ev for n, r in enumerate(rooms)
                         for ev in state_events(r, "@pushbench:localhost", n)]
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
            queue.append({"type": "m.room.message", "room_id": rooms[i % PUSH_ROOMS],
                          "sender": sender.replace(":eval.local", ":localhost"),
                          "event_id": eid, "origin_server_ts": int(time.time() * 1000),
                          "content": {"msgtype": "m.text", "body": body}})
            watcher.watch(eid, time.monotonic())
            ids.append(eid)
            if redact_every and time.monotonic() - start >= (len(redacted) + 1) * redact_every:
                target = ids[max(0, len(ids) - 1 - 20 * rate)]
                queue.append({"type": "m.room.redaction",
                              "room_id": rooms[ids.index(target) % PUSH_ROOMS],
                              "sender": "@pushbench:localhost", "redacts": target,
                              "event_id": f"$push{rate}-redaction-{len(redacted)}",
                              "origin_server_ts": int(time.time() * 1000), "content": {}})
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
                del queue[:len(batch)]
                txn += 1
                body = json.dumps({"events": batch})
                backoff = 0.5
                for _attempt in range(20):  # bounded: Synapse retries for much longer
                    t = time.monotonic()
                    try:
                        async with session.put(f"{url}bench{rate}-{txn}", data=body,
                                               headers=headers) as resp:
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
    drained = await asyncio.to_thread(watcher.wait_all, ids, DRAIN_TIMEOUT)
    await asyncio.sleep(1.5)
    after = stackkit.metrics(stack)
    watcher.stop()
    fresh_ids = [e for e in ids if e not in set(redacted)]  # never indexed if redacted first
    out = summarise(watcher, fresh_ids, start, before, after)
    out.update(offered_per_s=rate, redactions=len(redacted), seconds=round(sent_seconds, 1),
               sent_per_s=round(len(ids) / sent_seconds, 1), drained=drained,
               transactions=len(txn_sizes), retried=retries,
               events_per_txn_mean=round(sum(txn_sizes) / max(len(txn_sizes), 1), 1),
               events_per_txn_max=max(txn_sizes, default=0),
               txn_latency=perfkit.summary_ms(txn_seconds))
    return out


def line(name: str, r: dict, rate: str) -> str:
    f, g = r["freshness"], r["freshness_last_third"]
    return (f"{name:<22}{rate:>10}{r['indexed_per_s'] or 0:>10.1f}{f['p50_ms']:>10.0f}"
            f"{f['p95_ms']:>10.0f}{g['p95_ms']:>11.0f}{r['embeddings_per_message'] or 0:>9.3f}"
            f"{r['indexed']:>7}/{r['messages']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--parts", default="synapse,push")
    p.add_argument("--seconds", type=float, default=60.0, help="sending time per run")
    p.add_argument("--rates", default="50,200", help="push: messages per second")
    p.add_argument("--senders", type=int, default=6)
    p.add_argument("--rooms", type=int, default=3)
    p.add_argument("--work", default=str(evalkit.OUT_DIR / "live-stack"))
    p.add_argument("--out", default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config.yaml setting of the service (repeatable), e.g. "
                   "index.embedder.backend=onnx-int8")
    args = p.parse_args(argv)
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    bodies = eval_bodies(root)
    parts = args.parts.split(",")
    rates = [int(r) for r in args.rates.split(",")]
    allow = [r for rate in rates for r in push_room_ids(rate)] if "push" in parts else []
    report: dict = {"benchmark": "live", "machine": perfkit.machine(),
                    "load_average_before": perfkit.load_average(), "seconds": args.seconds,
                    "settings": perfkit.parse_settings(args.set)}
    with stackkit.running_stack(Path(args.work), settings=report["settings"],
                                allowlist=allow) as stack:
        report["service_pid"] = stack.service.proc.pid
        if "synapse" in parts:
            report["synapse"] = asyncio.run(through_synapse(
                stack, bodies, args.senders, args.rooms, args.seconds))
        for rate in rates if "push" in parts else []:
            report[f"push_{rate}"] = asyncio.run(push(stack, bodies, rate, args.seconds))
        report["service_status"] = perfkit.proc_status(stack.service.proc.pid)
    report["load_average_after"] = perfkit.load_average()
    path = perfkit.write_report("live", report, args.out)
    print(f"{'way':<22}{'rate/s':>10}{'idx/s':>10}{'p50 ms':>10}{'p95 ms':>10}"
          f"{'p95 last⅓':>11}{'emb/msg':>9}{'indexed':>12}")
    if "synapse" in report:
        s = report["synapse"]
        print(line(f"synapse ({s['senders']} senders)", s, f"{s['accepted_per_s']:.1f}"))
    for rate in rates if "push" in parts else []:
        r = report[f"push_{rate}"]
        print(line("push (appservice API)", r, f"{r['sent_per_s']:.1f}")
              + f"  txns {r['transactions']}, {r['events_per_txn_mean']} ev/txn,"
              f" retried {r['retried']}")
    print(f"service VmHWM {report['service_status'].get('VmHWM', 0) / 1024:.0f} MiB; "
          f"load average {report['load_average_before']} -> {report['load_average_after']}")
    print(f"wrote {path}\n\n" + perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
