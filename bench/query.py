"""Query latency at 100,000 windows: in process against bare model + Chroma, and the
`!sources` round trip through Synapse; the service's peak RSS after those queries.

    .venv/bin/python bench/query.py [--parts inproc,service] [--reps 100] [--asks 10]

Uses the cached collection of bench/corpus100k.py, which it builds first if it is not
there (about 25 minutes of embedding on 2 cores, once; interrupted, it goes on).

inproc   `Searcher.search` (the path `!sources` and `matrix-sources search` share: one
         embedding batch, one Chroma query for all vectors, the lexical leg for texts of a few
         search words, fusion, then the fused windows' records in one call, hits) with 1, 4 and 8
         texts, each search followed by its bare counterpart in the same process:
         `model.encode(texts)` plus one `collection.query` for all vectors with the same number of
         results. Texts are the dev items' questions ("sentences": dense only) or their search-box
         words ("keywords": the lexical leg runs too). Reports p50/p95 of both and the overhead
         ratio search/bare at p50. The first query of a fresh client (index loaded from disk) is
         reported apart and left out. The lexical leg reads the keyword index in the event log
         (indexer/store/eventlog/keyword_reads.py): one keyword row is run first without it (a
         cache from before it: the leg scans), then it is built (time and this process's RSS
         growth reported) and every row runs with it.
service  a copy of the collection in the data dir of `matrix-sources run` beside a real
         local Synapse; a matrix-nio client asks `!sources` with 1, 4 and 8 question texts
         (one per line), then with one text of search words, and times command sent ->
         reply received (its /sync). Then the
         service's VmHWM (peak RSS) and VmRSS from /proc/PID/status.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import corpus100k  # noqa: E402
import evalkit  # noqa: E402
import perfkit  # noqa: E402

SIZES = (1, 4, 8)
WINDOWS = 100_000
RSS_TARGET_MIB = 1024


def text_sets(items: list[evalkit.Item], kind: str, n: int, reps: int) -> list[list[str]]:
    pool = (
        [i.query for i in items] if kind == "sentences" else [" ".join(i.keywords) for i in items]
    )
    return [[pool[(r * n + k) % len(pool)] for k in range(n)] for r in range(reps)]


def open_cache(model, root: Path) -> object:
    """The cached 100,000-window collection, built first if it is not there (or not
    finished): about 25 minutes of embedding on 2 cores, once; resumable."""
    from matrix_sources.indexer.pipeline.rebuild import expected_meta, meta_mismatch

    store = corpus100k.open_cache()
    count = store.count()
    if count < WINDOWS:
        print(
            f"building the {WINDOWS}-window collection in {corpus100k.CACHE} first "
            f"({count} there; bench/corpus100k.py; once, resumable)",
            flush=True,
        )
        del store
        corpus100k.build(root, WINDOWS, 0)
        store = corpus100k.open_cache()
    mismatch = meta_mismatch(store, model)
    if mismatch and set(mismatch) <= {"chunker"}:
        # Another chunker version since the build: the windows stay as generated (their
        # sizes, not their cut, matter here); the meta is updated so the service takes
        # the collection as its own instead of rebuilding it from an empty event log.
        print(
            f"note: the cache was cut by chunker {mismatch['chunker'][0]}, the code is "
            f"at {mismatch['chunker'][1]}; meta updated, windows kept"
        )
        store.set_meta(expected_meta(model))
    elif mismatch:
        raise SystemExit(f"error: the cache was made by {mismatch}; rebuild it")
    return store


def inproc(store, model, items, reps: int) -> dict:
    import os

    from matrix_sources.indexer.search.searcher import Searcher, SourceQuery
    from matrix_sources.indexer.store.eventlog.keywords_build import KeywordBuild

    searcher = Searcher(model, store)
    t = time.perf_counter()
    searcher.search(SourceQuery.build([items[0].query]))
    cold = time.perf_counter() - t
    for texts in text_sets(items, "sentences", 4, 3):  # warm up
        searcher.search(SourceQuery.build(texts))
    out: dict = {"cold_first_search_ms": round(cold * 1000, 1), "count": store.count()}
    out["keywords_1_chroma_leg"] = rows(searcher, store, model, items, reps, [("keywords", 1)])[
        "keywords_1"
    ]
    rss_before = perfkit.proc_status(os.getpid())["VmRSS"]
    t = time.perf_counter()
    KeywordBuild(store.eventlog.db).run()  # a cache from before the index; nothing else writes
    out["term_index"] = {
        "windows": store.eventlog.keywords.count(),
        "build_s": round(time.perf_counter() - t, 1),
        "rss_growth_mib": round((perfkit.proc_status(os.getpid())["VmRSS"] - rss_before) / 1024),
    }
    out.update(
        rows(
            searcher,
            store,
            model,
            items,
            reps,
            [(kind, n) for kind in ("sentences", "keywords") for n in SIZES],
        )
    )
    return out


def rows(searcher, store, model, items, reps: int, which) -> dict:
    from matrix_sources.indexer.search.lexical import is_keywords
    from matrix_sources.indexer.search.searcher import DEFAULT_TOP_K, SourceQuery

    out: dict = {}
    for kind, n in which:
        search_s, bare_s, lexical = [], [], 0
        for texts in text_sets(items, kind, n, reps):
            q = SourceQuery.build(texts)
            lexical += sum(1 for x in dict.fromkeys(q.texts) if is_keywords(x))
            t = time.perf_counter()
            searcher.search(q)
            search_s.append(time.perf_counter() - t)
            distinct = list(dict.fromkeys(q.texts))
            fusing = len(distinct) > 1 or any(is_keywords(x) for x in distinct)
            k = max(DEFAULT_TOP_K * 4, 20) if fusing else DEFAULT_TOP_K
            t = time.perf_counter()
            vectors = model.encode(distinct)
            store.nearest(vectors, k, records=True)  # the bare baseline: Chroma alone
            bare_s.append(time.perf_counter() - t)
        s, b = perfkit.summary_ms(search_s), perfkit.summary_ms(bare_s)
        out[f"{kind}_{n}"] = {
            "search": s,
            "bare": b,
            "overhead_p50": round(s["p50_ms"] / b["p50_ms"], 2),
            "overhead_p95": round(s["p95_ms"] / b["p95_ms"], 2),
            "texts_with_lexical_leg": lexical,
            "texts": n * reps,
        }
    return out


async def ask_room(stack, user: str = "asker") -> tuple[str, str, str]:
    """(user, token, room): a room of the user's, allowlisted, the bot in it, one
    `!sources` answered there."""
    from matrix_sources.appservice.tools.chatclient import ChatClient

    user, token = stack.synapse.register_user(user, f"{user}-password")
    async with ChatClient(stack.synapse.url, user, token) as c:
        room = await c.create_room("Query bench", public=True)
        added = stack.cli("allowlist", "add", room)
        if added.returncode != 0:
            raise SystemExit(f"allowlist add failed: {added.stderr}")
        await c.wait_for_member(room, stack.bot, timeout=60)
        await c.ask(room, "!sources how do I mount a disk", stack.bot, timeout=120)
    return user, token, room


async def ask_loop(
    stack, items, asks: int, user: str = "asker", room: tuple[str, str, str] | None = None
) -> dict:
    """`asks` `!sources` of each size through Synapse: p50/p95 ms. `room`: ask_room's
    (from a run before), else one made here (its one `!sources` the warm-up)."""
    from matrix_sources.appservice.tools.chatclient import ChatClient

    user, token, where = room or await ask_room(stack, user)
    out: dict = {}
    async with ChatClient(stack.synapse.url, user, token) as c:
        for kind, n in [("sentences", n) for n in SIZES] + [("keywords", 1)]:
            times = []
            for texts in text_sets(items, kind, n, asks):
                body = "!sources " + "\n".join(texts)
                t = time.monotonic()
                reply = await c.ask(where, body, stack.bot, timeout=120)
                times.append(time.monotonic() - t)
                if "m.notice" != reply["content"].get("msgtype"):
                    raise SystemExit("unexpected reply: not an m.notice")
            out[f"{kind}_{n}"] = perfkit.summary_ms(times)
    return out


def service(
    items,
    asks: int,
    work: Path,
    push: tuple[list, int, float] | None = None,
    settings: dict | None = None,
    cache: Path = corpus100k.CACHE,
) -> dict:
    """`push`: (eval bodies, messages/s, seconds) of live traffic pushed to the service
    (bench/live.py's load generator) after the asks, which are then asked again.
    `cache`: the collection to start on (corpus100k.cache_for the service's backend)."""
    import stackkit

    allow = corpus100k.room_ids()
    if push is not None:
        import live

        allow += live.push_room_ids(push[1])
    t = time.monotonic()
    with stackkit.running_stack(
        work, settings=settings, seed_chroma=cache / "chroma", allowlist=allow
    ) as stack:
        ready = time.monotonic() - t
        pid = stack.service.proc.pid
        after_start = perfkit.proc_status(pid)
        while stackkit.metrics(stack).get("matrix_sources_term_index_ready") != 1:
            if time.monotonic() - t > 600:
                raise SystemExit("error: the service's term index was not ready in 10 min")
            time.sleep(0.5)
        terms_ready = time.monotonic() - t
        # VmHWM only grows: read at the end of each phase, it says which one set the peak.
        hwm = {
            "started": after_start["VmHWM"] // 1024,
            "term_index_built": perfkit.proc_status(pid)["VmHWM"] // 1024,
        }
        round_trips = asyncio.run(ask_loop(stack, items, asks))
        hwm["asked"] = perfkit.proc_status(pid)["VmHWM"] // 1024
        pushed = None
        if push is not None:
            before_push = perfkit.proc_status(pid)
            pushed = asyncio.run(live.push(stack, push[0], push[1], push[2]))
            pushed["vm_hwm_before_mib"] = round(before_push["VmHWM"] / 1024)
            hwm["pushed"] = perfkit.proc_status(pid)["VmHWM"] // 1024
            round_trips.update(
                {
                    f"after_push_{k}": v
                    for k, v in asyncio.run(ask_loop(stack, items, asks, user="asker2")).items()
                }
            )
            hwm["asked_again"] = perfkit.proc_status(pid)["VmHWM"] // 1024
        status = perfkit.proc_status(pid)
        count = stackkit.metrics(stack)
    return {
        "start_to_ready_s": round(ready, 1),
        "round_trip": round_trips,
        "start_to_term_index_s": round(terms_ready, 1),
        "rss_after_start_mib": round(after_start["VmRSS"] / 1024),
        "vm_hwm_by_phase_mib": hwm,
        "vm_hwm_mib": round(status["VmHWM"] / 1024),
        "vm_rss_mib": round(status["VmRSS"] / 1024),
        "threads": status.get("Threads"),
        "rss_target_mib": RSS_TARGET_MIB,
        "search_latency_count": count.get("matrix_sources_search_latency_seconds_count"),
        **({"push": pushed} if pushed is not None else {}),
    }


def print_inproc(r: dict) -> None:
    print(
        f"In process at {r['count']} windows (first search of a fresh client: "
        f"{r['cold_first_search_ms']:.0f} ms)"
    )
    t = r["term_index"]
    print(
        f"keyword index on disk: {t['windows']} windows, ready in {t['build_s']} s "
        f"(a cache from before it is built once), this process's RSS +{t['rss_growth_mib']} MiB"
    )
    print(
        f"{'texts':<22}{'search p50':>11}{'p95':>8}{'bare p50':>10}{'p95':>8}"
        f"{'ratio p50':>10}{'p95':>7}  lexical legs"
    )
    keys = ["keywords_1_chroma_leg"] + [
        f"{k}_{n}" for k in ("sentences", "keywords") for n in SIZES
    ]
    for key in keys:
        x = r[key]
        label = key.replace("_chroma_leg", " (Chroma)").replace("_", " ")
        print(
            f"{label:<22}{x['search']['p50_ms']:>11.0f}"
            f"{x['search']['p95_ms']:>8.0f}{x['bare']['p50_ms']:>10.0f}"
            f"{x['bare']['p95_ms']:>8.0f}{x['overhead_p50']:>10.2f}"
            f"{x['overhead_p95']:>7.2f}  {x['texts_with_lexical_leg']}/{x['texts']}"
        )


def print_service(r: dict) -> None:
    print(
        f"!sources through Synapse ({r['start_to_ready_s']} s from start to ready, "
        f"{r['start_to_term_index_s']} s to the keyword index ready):"
    )
    for key, x in r["round_trip"].items():
        after = key.startswith("after_push_")
        kind, n = key.removeprefix("after_push_").split("_")
        print(
            f"  {n} {kind[:-1] if n == '1' else kind}{' (after the push)' if after else ''}:"
            f" p50 {x['p50_ms']:.0f} ms, p95 {x['p95_ms']:.0f} ms ({x['n']} asks)"
        )
    if "push" in r:
        p = r["push"]
        print(
            f"live push: {p['sent_per_s']} msg/s for {p['seconds']} s, {p['indexed']}/"
            f"{p['messages']} indexed, freshness p50 {p['freshness']['p50_ms']:.0f} ms, "
            f"p95 {p['freshness']['p95_ms']:.0f} ms; VmHWM {p['vm_hwm_before_mib']} MiB "
            "before it"
        )
    print(
        f"service memory: VmHWM {r['vm_hwm_mib']} MiB (target <= {RSS_TARGET_MIB}), "
        f"VmRSS {r['vm_rss_mib']} MiB, {r['rss_after_start_mib']} MiB after start"
    )
    print(
        "  peak so far, by phase (MiB): "
        + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in r["vm_hwm_by_phase_mib"].items())
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--parts", default="inproc,service")
    p.add_argument(
        "--reps",
        type=int,
        default=100,
        help="in-process searches per row (p95: the 5th slowest of 100)",
    )
    p.add_argument("--asks", type=int, default=10, help="!sources per text count")
    p.add_argument("--work", default=str(evalkit.OUT_DIR / "query-stack"))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    items = evalkit.load_items(root / "dev")
    parts = args.parts.split(",")
    from matrix_sources.indexer.models.embedder import DEFAULT_BACKEND, load_embedder

    # The shipped default backend, as the service runs it (and as the cache was built).
    model = load_embedder("all-MiniLM-L6-v2", DEFAULT_BACKEND, evalkit.OUT_DIR / "models")
    store = open_cache(model, root)
    report: dict = {
        "benchmark": "query",
        "machine": perfkit.machine(),
        "load_average_before": perfkit.load_average(),
    }
    if "inproc" in parts:
        report["inproc"] = inproc(store, model, items, args.reps)
    del store, model  # the service phase measures another process
    if "service" in parts:
        report["service"] = service(items, args.asks, Path(args.work))
    report["load_average_after"] = perfkit.load_average()
    path = perfkit.write_report("query", report, args.out)
    if "inproc" in report:
        print_inproc(report["inproc"])
    if "service" in report:
        print_service(report["service"])
    print(f"load average {report['load_average_before']} -> {report['load_average_after']}")
    print(f"wrote {path}\n\n" + perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
