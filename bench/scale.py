"""How the service grows with the index: 10,000, 100,000 and 1,000,000 windows.

    .venv/bin/python bench/scale.py --windows 10000 [--parts inproc,service,redact]

On the collection of bench/corpus_scale.py (built first if it is not there: resumable;
segments as the service leaves them; each window's messages in the event log):

inproc   in this process, `Searcher.search` (the path `!sources` takes) with 1 and 8
         texts (the dev questions) and 1 text of search words, `--reps` each: p50/p95;
         the keyword postings built from the event log first (time, RSS growth).
service  a copy of the cache as the data dir of `matrix-sources run` beside a local
         Synapse (bench/stackkit.py), the model's ONNX export in it as a deployment has it: start-up
         to the first answered query (a search API request from the moment the process is
         spawned, again 0.2 s after each refusal, each waited on until answered), `!sources`
         round trips through Synapse (1 and 8
         texts, `--asks` each), the service's resident memory (VmRSS, VmHWM) after them; then, once
         its keyword postings are built (minutes at a million windows: the asks may come while they
         build, the push measures the steady state), 200 messages/s pushed to its transaction
         endpoint for `--push-seconds`, with a redaction every `--redact-every` s and
         index.compaction_interval_seconds set to that, so compactions run during the push:
         freshness p50/p95 and the compactions' log lines.
redact   the service stopped, in this process on the same data dir: a live room of
         `--live` messages indexed through the pipeline (its windows in the hot
         segment), then `--rounds` redactions of a recent message, each followed by its
         compaction (the worker's run_compaction): the CPU seconds the compaction took
         (this process's, all threads), wall seconds from the redaction to the old
         vector's last file gone, points and HNSW bytes rewritten against the whole
         index; one more of an old message (a sealed segment). At one redaction a
         minute the share of a core is CPU / 60 s. At the end every file of the data
         dir is scanned for every redacted window's old vector (none may be left).

`--chroma server` runs the inproc and service parts against a `chroma run` on this host
(the collection built into its persist dir by `bench/corpus_scale.py --chroma server`,
the same windows and vectors), for the service's own memory when Chroma is elsewhere,
and reports the server's beside it (bench/out/scale-N-server.json).

Figures are printed and written to bench/out/scale-N.json. Unattended: every step
prints progress; a part needs no answer. Times here (2 shared cores, load 6 to 12):
10,000 windows about 12 minutes for the build and all parts; 100,000 and 1,000,000
windows: the build grows with the windows (about 1 ms of CPU a window), the parts by
the copy of the cache (GBs at 1,000,000) and the term index build.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import corpus_scale  # noqa: E402
import evalkit  # noqa: E402
import perfkit  # noqa: E402

LIVE_ROOM = "!scale-live:bench.local"
T0 = 1_800_000_000_000  # after every generated room: the live room is the newest talk


def step(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- in process ---------------------------------------------------------------------------


def inproc(windows: int, items, reps: int, chroma: str = "embedded") -> dict:
    cache = corpus_scale.cache_dir(windows, chroma)
    with corpus_scale.chroma_at(cache, chroma) as port:
        return _inproc(windows, items, reps, cache, port)


def _inproc(windows: int, items, reps: int, cache: Path, port: int | None) -> dict:
    import query

    from matrix_sources.indexer.models.embedder import DEFAULT_BACKEND, load_embedder
    from matrix_sources.indexer.search.searcher import Searcher, SourceQuery
    from matrix_sources.indexer.store.eventlog.keywords_build import KeywordBuild

    model = load_embedder("all-MiniLM-L6-v2", DEFAULT_BACKEND, evalkit.OUT_DIR / "models")
    t = time.perf_counter()
    store = corpus_scale.open_store(cache, windows, bulk=False, port=port)
    opened = time.perf_counter() - t
    searcher = Searcher(model, store)
    t = time.perf_counter()
    searcher.search(SourceQuery.build([items[0].query]))
    cold = time.perf_counter() - t
    out: dict = {
        "count": store.count(),
        "segments": store.segments.counts(),
        "open_s": round(opened, 2),
        "cold_first_search_ms": round(cold * 1000),
    }
    step(
        f"in process: {out['count']} windows in {len(out['segments'])} segments; "
        "the keyword index (built once, if the cache predates it)"
    )
    rss = perfkit.proc_status(os.getpid())["VmRSS"]
    t = time.perf_counter()
    KeywordBuild(store.eventlog.db).run()  # nothing else writes meanwhile
    out["term_index"] = {
        "windows": store.eventlog.keywords.count(),
        "build_s": round(time.perf_counter() - t, 1),
        "rss_growth_mib": round((perfkit.proc_status(os.getpid())["VmRSS"] - rss) / 1024),
    }
    step(f"keyword index ready in {out['term_index']['build_s']} s; searching")
    for texts in query.text_sets(items, "sentences", 8, 3):  # warm up
        searcher.search(SourceQuery.build(texts))
    out.update(
        query.rows(
            searcher,
            store,
            model,
            items,
            reps,
            [("sentences", 1), ("sentences", 8), ("keywords", 1)],
        )
    )
    out["vm_rss_mib"] = round(perfkit.proc_status(os.getpid())["VmRSS"] / 1024)
    return out


# -- the service ------------------------------------------------------------------------


def _first_answer(
    port: int, token: str, spawned: float, found: dict, stop: threading.Event
) -> None:
    body = json.dumps({"texts": ["how do I mount an nfs share"], "top_k": 3}).encode()
    while not stop.is_set():
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/_matrix_sources/v1/search",
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            # Waited on until answered: a client that gave up after 5 s left its search
            # running on the service beside the first asks (it took 10 s, loading HNSW).
            with urllib.request.urlopen(req, timeout=300) as r:
                if r.status == 200:
                    found["first_answer_s"] = round(time.monotonic() - spawned, 1)
                    return
        except OSError:
            pass
        time.sleep(0.2)


def service(
    windows: int,
    items,
    asks: int,
    push_seconds: float,
    redact_every: float,
    work: Path,
    chroma: str = "embedded",
    cold: bool = False,
) -> dict:
    """The service on a copy of the cache: embedded, or as a client of a `chroma run` on
    a copy of the server cache's persist dir (the server's memory reported beside).
    `cold`: the restart on a cold page cache (the data dir and the Python environment
    evicted), as after a reboot."""
    from tests.chromaserver import chroma_server_in

    cache = corpus_scale.cache_dir(windows, chroma)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    if chroma == "embedded":
        return _service(windows, items, asks, push_seconds, redact_every, work, cache, None, cold)
    step(f"copying the server's persist dir into {work / 'chroma-server'}")
    shutil.copytree(cache / "server" / "data", work / "chroma-server" / "data")
    with chroma_server_in(work / "chroma-server") as server:
        return _service(windows, items, asks, push_seconds, redact_every, work, cache, server, cold)


def _service(
    windows: int,
    items,
    asks: int,
    push_seconds: float,
    redact_every: float,
    work: Path,
    cache: Path,
    server,
    cold: bool = False,
) -> dict:
    import live
    import query
    import stackkit

    from tests.harness import make_stack

    stack = make_stack(work)
    settings = {**stackkit.BENCH_SETTINGS, "index.compaction_interval_seconds": redact_every}
    if server is not None:  # on another machine, as docs/deployment.md has it: no
        # persist_dir (the service does not reach the server's folder)
        settings.update(
            {
                "index.chroma.mode": "server",
                "index.chroma.host": "127.0.0.1",
                "index.chroma.port": server.port,
            }
        )
    perfkit.apply_settings(stack.config, settings)
    rooms = corpus_scale.room_ids(windows, "embedded" if server is None else "server")
    stackkit.write_allowlist(stack, rooms + live.push_room_ids(200))
    step(f"copying the cache into {stack.data_dir}")
    if server is None:
        shutil.copytree(cache / "chroma", stack.data_dir / "chroma")
    shutil.copy2(cache / "eventlog.sqlite3", stack.data_dir / "eventlog.sqlite3")
    # The model's ONNX export, as a running deployment has it (made once per data dir).
    shutil.copytree(evalkit.OUT_DIR / "models", stack.data_dir / "models", dirs_exist_ok=True)
    from matrix_sources.indexer.config import load_config
    from matrix_sources.indexer.datadir import api_token

    token = api_token(load_config(stack.config), create=True)  # as `init` writes it
    out: dict = {}
    stack.synapse.start()
    try:
        # The first start on this data dir (untimed): the ask room made, allowlisted and
        # answered in, as a deployment's rooms are before it restarts.
        step("first start: the ask room made and answered in")
        spawned = time.monotonic()
        stack.service.start(timeout=1800)
        out["first_start_ready_s"] = round(time.monotonic() - spawned, 1)
        asker = asyncio.run(query.ask_room(stack))
        stack.service.stop()
        restart_log_at = stack.service.log_path.stat().st_size
        if cold:
            step("the data dir and the Python environment evicted from the page cache")
            evicted = perfkit.evict_page_cache([stack.data_dir, Path(sys.prefix)])
            out["page_cache"] = f"cold: {evicted / 2**30:.1f} GiB evicted before the restart"
        else:
            out["page_cache"] = "warm: the restart follows the first start"
        # The restart, timed: the first search answered, then `!sources` at once, while
        # the rooms are joined and their state learnt again behind it.
        found: dict = {}
        stop = threading.Event()
        spawned = time.monotonic()
        poller = threading.Thread(
            target=_first_answer, args=(stack.service.port, token, spawned, found, stop)
        )
        poller.start()
        step("restarting the service")
        stack.service.start(timeout=1800, wait_ready=False)
        poller.join(600)
        stop.set()
        out["start_to_first_answer_s"] = found.get("first_answer_s")
        pid = stack.service.proc.pid
        out["rss_after_start_mib"] = round(perfkit.proc_status(pid)["VmRSS"] / 1024)
        ready: dict = {}
        waiter = threading.Thread(target=_ready_at, args=(stack, spawned, ready))
        waiter.start()
        step(
            f"first answer {out['start_to_first_answer_s']} s after the spawn; asking "
            "!sources through Synapse"
        )
        asked_at = round(time.monotonic() - spawned, 1)
        trips = asyncio.run(query.ask_loop(stack, items, asks, room=asker))
        out["round_trip"] = {
            k: v for k, v in trips.items() if k in ("sentences_1", "sentences_8", "keywords_1")
        }
        out["asks_from_s"] = [asked_at, round(time.monotonic() - spawned, 1)]
        waiter.join(1800)
        out["start_to_ready_s"] = ready.get("s")
        out["join_failed"] = len(_log_lines(stack.service.log_path, restart_log_at, "join_failed"))
        out["collection_checked"] = _log_lines(
            stack.service.log_path, restart_log_at, "collection_checked"
        )
        status = perfkit.proc_status(pid)
        out["vm_rss_mib"], out["vm_hwm_mib"] = (
            round(status["VmRSS"] / 1024),
            round(status["VmHWM"] / 1024),
        )
        if server is not None:
            status = perfkit.proc_status(server.pid)
            out["chroma_server"] = {
                "vm_rss_mib": round(status["VmRSS"] / 1024),
                "vm_hwm_mib": round(status["VmHWM"] / 1024),
            }
        # The push measures the steady state: at a million windows the asks above come
        # while the postings still build (minutes), and a push then is a different test.
        out["postings_build_s"] = _postings_ready(stack.service.log_path)
        # The steady state before the push: the postings built and the build's garbage
        # handed back (heap.release_free_memory), every segment's HNSW index loaded.
        time.sleep(2)
        status = perfkit.proc_status(pid)
        out["vm_rss_postings_built_mib"] = round(status["VmRSS"] / 1024)
        step(
            f"postings built in {out['postings_build_s']} s; pushing 200 messages/s for "
            f"{push_seconds} s, a redaction every {redact_every} s"
        )
        log_at = stack.service.log_path.stat().st_size
        bodies = live.eval_bodies(evalkit.eval_dir(None))
        out["push_200"] = asyncio.run(
            live.push(stack, bodies, 200, push_seconds, redact_every=redact_every)
        )
        copies = _log_lines(stack.service.log_path, log_at, "chroma_segments_copied")
        out["push_200"]["copies"] = [
            {"points": int(c["points"]), "seconds": float(c["seconds"])} for c in copies
        ]
        status = perfkit.proc_status(pid)
        out["vm_rss_after_push_mib"] = round(status["VmRSS"] / 1024)
        out["vm_hwm_after_push_mib"] = round(status["VmHWM"] / 1024)
    finally:
        stack.service.stop()
        stack.synapse.stop()
    out["data_dir"] = str(stack.data_dir)
    return out


def _ready_at(stack, spawned: float, found: dict, timeout: float = 1800) -> None:
    """When the service said ready (every room joined and its state learnt)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stack.http("/_matrix/mau/ready")[0] == 200:
            found["s"] = round(time.monotonic() - spawned, 1)
            return
        time.sleep(0.5)


def _postings_ready(log_path: Path, timeout: float = 900.0) -> float | None:
    """Waits until the service has logged its keyword index ready: how long its
    one-off build took (0 when the event log had it already)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = _log_lines(log_path, 0, "keyword_index_ready")
        if ready:
            return float(ready[0]["seconds"])
        time.sleep(0.5)
    return None


def _log_lines(path: Path, offset: int, event: str) -> list[dict]:
    """The `event` lines of the service's log after `offset`, as key=value dicts."""
    import re

    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return [
        dict(re.findall(r"(\w+)=(\S+)", line)) for line in text.splitlines() if f" {event} " in line
    ]


# -- redactions, in process ---------------------------------------------------------------


def _hnsw_bytes(root: Path) -> dict[int, int]:
    """Generation -> bytes of its HNSW files (data_level0.bin and its three others)."""
    out: dict[int, int] = {}
    for p in root.glob("g*/*/*.bin"):
        n = int(p.parent.parent.name[1:])
        out[n] = out.get(n, 0) + p.stat().st_size
    return out


def _scan(
    root: Path, vectors: dict[str, list[float]], n: int = 16, tol: float = 1e-5
) -> dict[str, list[str]]:
    """Each vector -> the files (under root) holding its first n components, in one
    pass over the files (tests/vectorscan.py does one vector at a time)."""
    import numpy as np

    want = {k: np.asarray(v[:n], dtype=np.float32) for k, v in vectors.items()}
    found: dict[str, list[str]] = {k: [] for k in vectors}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for align in range(4):
            count = (len(data) - align) // 4
            if count < n:
                continue
            a = np.frombuffer(data, dtype="<f4", count=count, offset=align)
            for k, w in want.items():
                with np.errstate(invalid="ignore"):
                    for i in np.flatnonzero(np.abs(a[: count - n + 1] - w[0]) < tol):
                        if np.all(np.abs(a[i : i + n] - w) < tol):
                            found[k].append(str(path.relative_to(root)))
                            break
    return {k: sorted(set(v)) for k, v in found.items()}


def redact(data_dir: Path, rounds: int, live_messages: int) -> dict:
    from matrix_sources.indexer.components import open_store, writers
    from matrix_sources.indexer.config import load_config
    from matrix_sources.indexer.ingest.gate import Gate
    from matrix_sources.indexer.models.embedder import DEFAULT_BACKEND, load_embedder
    from matrix_sources.indexer.store.journal import Journal

    cfg = load_config(data_dir / "config.yaml")
    model = load_embedder("all-MiniLM-L6-v2", DEFAULT_BACKEND, evalkit.OUT_DIR / "models")
    store = open_store(cfg)
    log = store.eventlog
    old_event = _old_event(data_dir)
    old_room = _room_of(data_dir, old_event)
    gate = Gate(frozenset({LIVE_ROOM, old_room}), "@sourcesbot:localhost")
    ingest, pipeline = writers(
        log,
        Journal(data_dir / "journal.jsonl"),
        store,
        model,
        gate,
        cfg.index.chunk_policy,
        compact_every=0.0,
    )
    pipeline.compaction.merge_due = lambda: False  # only the redactions' copies are timed
    rooms = corpus_scale.corpus100k.eval_messages(evalkit.eval_dir(None))
    lines = [b for room in rooms[:4] for _, b in room][:live_messages]
    ingest.admit(
        [
            {
                "type": "m.room.join_rules",
                "room_id": r,
                "state_key": "",
                "sender": "@a:bench.local",
                "event_id": f"$scale-jr-{k}",
                "origin_server_ts": T0,
                "content": {"join_rule": "public"},
            }
            for k, r in enumerate((LIVE_ROOM, old_room))
        ]
    )
    step(f"indexing a live room of {len(lines)} messages")
    for i in range(0, len(lines), 200):
        ingest.admit(
            [
                {
                    "type": "m.room.message",
                    "room_id": LIVE_ROOM,
                    "sender": f"@p{k % 7}:bench.local",
                    "event_id": f"$scale-live-{k}",
                    "origin_server_ts": T0 + k * 20_000,
                    "content": {"msgtype": "m.text", "body": body},
                }
                for k, body in enumerate(lines[i : i + 200], start=i)
            ]
        )
        pipeline.process_all()
    pipeline.compaction.request({"before the rounds"})
    pipeline.run_compaction()  # nothing of before the rounds is left to copy
    total = store.count()
    rng = random.Random(24)
    recent = list(range(max(0, len(lines) - 150), len(lines)))
    targets = [("recent", f"$scale-live-{k}", LIVE_ROOM) for k in rng.sample(recent, rounds)]
    targets.append(("old", old_event, old_room))
    results, vectors = [], {}
    for kind, event_id, room in targets:
        window = _window_of(data_dir, event_id)
        [(_, vector)] = store.get_with_vectors([window])
        vectors[event_id] = vector
        before = _hnsw_bytes(store.path)
        dirty = sum(1 for s in store.segments.list if s.dirty)
        t, cpu = time.monotonic(), time.process_time()
        ingest.admit(
            [
                {
                    "type": "m.room.redaction",
                    "room_id": room,
                    "sender": "@a:bench.local",
                    "redacts": event_id,
                    "event_id": f"{event_id}-redaction",
                    "origin_server_ts": T0,
                    "content": {},
                }
            ]
        )
        pipeline.process_all()
        asked = time.monotonic()
        ran = pipeline.run_compaction()
        done = time.monotonic()
        segs = store.segments
        after = _hnsw_bytes(store.path)
        fresh = {n: b for n, b in after.items() if n not in before}
        copied = sum(c for seg, c in zip(segs.list, segs.counts()) if seg.n in fresh)
        results.append(
            {
                "kind": kind,
                "compacted": bool(ran),
                "cpu_s": round(time.process_time() - cpu, 2),
                "wall_s": round(done - t, 2),
                "copy_wall_s": round(done - asked, 2),
                "segments_copied": len(fresh),
                "dirty_before": dirty,
                "points_copied": copied,
                "points": total,
                "segments": len(segs.list),
                "hnsw_bytes_rewritten": sum(fresh.values()),
                "hnsw_bytes": sum(after.values()),
            }
        )
        r = results[-1]
        step(
            f"redaction of a {kind} message: {r['segments_copied']} segment(s) copied, "
            f"{r['points_copied']} of {total} points, {r['cpu_s']} s CPU, "
            f"{r['wall_s']} s from the redaction to the old files gone"
        )
    step("scanning every file of the data dir for the redacted windows' old vectors")
    left = _scan(data_dir, vectors)
    cpu = sorted(r["cpu_s"] for r in results if r["kind"] == "recent")
    return {
        "rounds": results,
        "vectors_left_in_files": {k: v for k, v in left.items() if v},
        "recent_cpu_s_p50": cpu[len(cpu) // 2],
        "recent_cpu_s_max": cpu[-1],
        "core_share_at_one_a_minute": round(cpu[-1] / 60, 3),
        "hnsw_share_rewritten_max": round(
            max(r["hnsw_bytes_rewritten"] / r["hnsw_bytes"] for r in results), 3
        ),
        "points_share_copied_max": round(max(r["points_copied"] / r["points"] for r in results), 3),
    }


def _query(data_dir: Path, sql: str, *args):
    import sqlite3

    db = sqlite3.connect(f"file:{data_dir / 'eventlog.sqlite3'}?mode=ro", uri=True)
    try:
        return db.execute(sql, args).fetchone()
    finally:
        db.close()


def _window_of(data_dir: Path, event_id: str) -> str:
    return _query(data_dir, "SELECT window_id FROM events WHERE event_id = ?", event_id)[0]


def _room_of(data_dir: Path, event_id: str) -> str:
    return _query(data_dir, "SELECT room_id FROM events WHERE event_id = ?", event_id)[0]


def _old_event(data_dir: Path) -> str:
    """A message of the first generated room: in the oldest segment."""
    return _query(
        data_dir,
        "SELECT event_id FROM events WHERE event_id LIKE '$gen-00000-%' "
        "AND status = 'indexed' ORDER BY event_id LIMIT 1 OFFSET 37",
    )[0]


# -- the report ---------------------------------------------------------------------------


def summary(r: dict) -> list[str]:
    out = []
    if "inproc" in r:
        x = r["inproc"]
        out.append(
            f"in process: {x['count']} windows, {len(x['segments'])} segments; search "
            f"p95 1 text {x['sentences_1']['search']['p95_ms']:.0f} ms, 8 texts "
            f"{x['sentences_8']['search']['p95_ms']:.0f} ms, search words "
            f"{x['keywords_1']['search']['p95_ms']:.0f} ms; keyword index ready in "
            f"{x['term_index']['build_s']} s (+{x['term_index']['rss_growth_mib']} MiB)"
        )
    if "service" in r:
        x = r["service"]
        rt = x["round_trip"]
        p = x["push_200"]
        out.append(
            f"service restarted ({x.get('page_cache')}; collection check "
            f"{x.get('collection_checked')}): first answer {x['start_to_first_answer_s']} s "
            f"after the spawn, ready (every room joined or failed: {x.get('join_failed')} failed) "
            f"{x.get('start_to_ready_s')} s; !sources asked from {x.get('asks_from_s')} s,"
            f" p95 1 text {rt['sentences_1']['p95_ms']:.0f} ms, 8 texts "
            f"{rt['sentences_8']['p95_ms']:.0f} ms, search words "
            f"{rt['keywords_1']['p95_ms']:.0f} ms; VmRSS {x['vm_rss_mib']} MiB, VmHWM "
            f"{x['vm_hwm_mib']} MiB; once the postings are built VmRSS "
            f"{x.get('vm_rss_postings_built_mib')} MiB; after the push VmRSS "
            f"{x.get('vm_rss_after_push_mib')} MiB, VmHWM {x.get('vm_hwm_after_push_mib')} MiB"
        )
        if "chroma_server" in x:
            out.append(
                f"the Chroma server beside it: VmRSS {x['chroma_server']['vm_rss_mib']}"
                f" MiB, VmHWM {x['chroma_server']['vm_hwm_mib']} MiB"
            )
        out.append(
            f"200 msg/s, {p['redactions']} redactions during it: freshness "
            f"p95 {p['freshness']['p95_ms']:.0f} ms, {p['indexed']}/{p['messages']} "
            f"indexed, {len(p['copies'])} segment copies during it"
        )
    if "redact" in r:
        x = r["redact"]
        out.append(
            f"redactions: CPU per compaction p50 {x['recent_cpu_s_p50']} s, max "
            f"{x['recent_cpu_s_max']} s -> {x['core_share_at_one_a_minute']:.1%} of a "
            f"core at one a minute; at most {x['points_share_copied_max']:.1%} of the "
            f"points and {x['hnsw_share_rewritten_max']:.1%} of the HNSW bytes "
            f"rewritten; old vectors left in files: {x['vectors_left_in_files'] or 0}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--windows", type=int, default=10_000)
    p.add_argument("--parts", default="inproc,service,redact")
    p.add_argument("--reps", type=int, default=100, help="in-process searches per row")
    p.add_argument("--asks", type=int, default=20, help="!sources per row")
    p.add_argument("--push-seconds", type=float, default=60.0)
    p.add_argument("--redact-every", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=5, help="redactions of recent messages")
    p.add_argument("--live", type=int, default=600, help="messages of the live room")
    p.add_argument("--work", default=None)
    p.add_argument(
        "--chroma",
        choices=("embedded", "server"),
        default="embedded",
        help="server: the collection in a `chroma run` on this host (inproc and "
        "service parts; redact is embedded only)",
    )
    p.add_argument(
        "--cold",
        action="store_true",
        help="service part: the restart on a cold page cache (the data dir and the "
        "Python environment evicted first, as after a reboot)",
    )
    p.add_argument(
        "--patch",
        action="append",
        default=[],
        metavar="MODULE.NAME=VALUE",
        help="set a module constant first, for the inproc part (repeatable), e.g. "
        "matrix_sources.indexer.search.searcher.RERANK_POOL=30",
    )
    args = p.parse_args(argv)
    perfkit.quiet_env()
    evalkit.set_constants(args.patch)
    root = evalkit.eval_dir(args.eval_dir)
    items = evalkit.load_items(root / "dev")
    parts = args.parts.split(",")
    server = args.chroma == "server"
    if server and "redact" in parts:
        p.error("--chroma server: the redact part is embedded only; give --parts inproc,service")
    name = f"scale-{args.windows}" + ("-server" if server else "")
    work = Path(args.work or evalkit.OUT_DIR / f"{name}-stack")
    started = time.monotonic()
    step(f"the {args.windows}-window collection (bench/corpus_scale.py; built if missing)")
    state = corpus_scale.build(root, args.windows, chroma=args.chroma)
    report: dict = {
        "benchmark": "scale",
        "windows": args.windows,
        "chroma": args.chroma,
        "machine": perfkit.machine(),
        "patch": args.patch,
        "load_average_before": perfkit.load_average(),
        "build": state,
    }
    if "inproc" in parts:
        report["inproc"] = inproc(args.windows, items, args.reps, args.chroma)
    if "service" in parts:
        report["service"] = service(
            args.windows,
            items,
            args.asks,
            args.push_seconds,
            args.redact_every,
            work,
            args.chroma,
            args.cold,
        )
    if "redact" in parts:
        data = Path(report.get("service", {}).get("data_dir") or work / "data")
        if not data.exists():
            raise SystemExit(f"error: {data}: run the service part first (it makes the copy)")
        report["redact"] = redact(data, args.rounds, args.live)
    report["load_average_after"] = perfkit.load_average()
    report["seconds"] = round(time.monotonic() - started)
    path = perfkit.write_report(name, report)
    for line in summary(report):
        print(line)
    print(f"{report['seconds']} s in all; wrote {path}\n\n" + perfkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
