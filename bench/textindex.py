"""The lexical leg's index over the event log's text, two ways, at 100,000 windows:

    .venv/bin/python bench/textindex.py [--windows 100000] [--reps 200]

(b) postings  the keyword index in the event log (indexer/store/eventlog/keywords.py):
              its size on disk (dbstat), its one-off build for an event log from before
              it (keywords.build), queries through LexicalRanker (search._lexical_ranker)
              as the service runs them; the in-memory postings it replaced are gone
(a) FTS5      a contentless FTS5 table (`content=''`; a row deleted by giving its text
              again) with `secure-delete` on, one row per window (its bodies), in an SQLite of its
              own opened through apsw (SQLite 3.54; this Python's is 3.40, which has
              neither option); queries `MATCH` the same terms (a prefix `"stem"*` for
              the stems lexical.base_of makes prefixes), ordered by bm25(), top 20

Both read the same event log, generated here (no embedding needed): the windows of
bench/corpus100k.py's generated rooms (eval chat re-windowed by the real chunker),
appended and marked indexed. Cached under bench/out/textindex-<N>/. The queries are
the dev items' search-box words (what gets a lexical leg). Per side: build time, RSS
growth of this process, query p50/p95, and what a purge leaves on disk: a canary
window is indexed, then deleted (event log: its room purged, secure_delete; FTS5: the
row deleted), and the files are searched for the canary's bytes.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import corpus100k  # noqa: E402
import evalkit  # noqa: E402
import perfkit  # noqa: E402

CANARY = "zqcanary71k"


def rss_kib() -> int:
    return perfkit.proc_status(os.getpid())["VmRSS"]


def build_eventlog(root: Path, windows: int, folder: Path):
    """The event log of `windows` generated windows, every event indexed (cached)."""
    from matrix_sources.indexer.pipeline.chunker import build_windows
    from matrix_sources.indexer.store.eventlog.log import EventLog

    folder.mkdir(parents=True, exist_ok=True)
    log = EventLog(folder / "eventlog.sqlite3")
    have = len(log.window_ids())
    if have >= windows:
        return log, {"windows": have, "cached": True}
    rooms = corpus100k.eval_messages(root)
    pol = corpus100k.policy()
    t = time.perf_counter()
    n, done = 0, 0
    while done < windows:
        msgs = corpus100k.stream(rooms, n)
        n += 1
        ws = build_windows(msgs, pol, "")
        ws = ws[: windows - done]
        log.append([(m, None) for w in ws for m in w.messages])
        log.mark_indexed(
            ws[0].room_id,
            {m.event_id: w.window_id for w in ws for m in w.messages},
            ws[-1].messages[-1],
        )
        done += len(ws)
    events = sum(log.counts().values())
    return log, {
        "windows": done,
        "events": events,
        "rooms": n,
        "seconds": round(time.perf_counter() - t, 1),
    }


def keyword_texts(root: Path, reps: int) -> list[str]:
    items = evalkit.load_items(root / "dev")
    pool = [" ".join(i.keywords) for i in items if i.keywords]
    return [pool[i % len(pool)] for i in range(reps)]


def canary_window(log, room: str = "!canary:bench.local"):
    from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, Window, WindowID

    m = Message(
        EventID("$canary"),
        RoomID(room),
        UserID("@c:bench.local"),
        1,
        f"the secret word is {CANARY} keep it",
    )
    w = Window(WindowID("wcanary"), RoomID(room), (m,))
    log.append([(m, None)])
    log.mark_indexed(w.room_id, {m.event_id: w.window_id}, m)
    return w


def files_with(paths, needle: bytes) -> list[str]:
    return [str(p) for p in paths if p.exists() and needle in p.read_bytes()]


KW_TABLES = (
    "kw_docs",
    "kw_postings",
    "kw_postings_doc",
    "kw_docs_room",
    "sqlite_autoindex_kw_docs_1",
)


def index_bytes(log) -> int:
    """Bytes the keyword index's tables and indexes take in the event log (dbstat)."""
    with log.db.locked() as conn:
        marks = ",".join("?" * len(KW_TABLES))
        got = conn.execute(
            f"SELECT SUM(pgsize) FROM dbstat WHERE name IN ({marks})", KW_TABLES
        ).fetchone()
    return int(got[0] or 0)


def postings(log, texts: list[str], folder: Path) -> dict:
    """The keyword index in the event log (store/eventlog/keywords.py): its size on
    disk, its one-off build (an event log from before it), queries through the
    LexicalRanker the service uses, and the scan it replaced."""
    from matrix_sources.indexer.search.searcher import _lexical_ranker
    from matrix_sources.indexer.store.eventlog import keywords
    from matrix_sources.indexer.store.vectors.chroma import ChromaStore

    gc.collect()
    before = rss_kib()
    with tempfile.TemporaryDirectory() as tmp:
        store = ChromaStore(path=Path(tmp) / "chroma", eventlog=log)
        after_open = rss_kib()
        with log.transaction() as cur:  # as an event log from before the index
            keywords.reset(cur)
        t = time.perf_counter()
        keywords.build(log.db)
        build_s = time.perf_counter() - t
        log.truncate_wal()
        size = index_bytes(log)
        with log.db.locked() as conn:
            docs = conn.execute("SELECT COUNT(*) FROM kw_docs").fetchone()[0]
            rows = conn.execute("SELECT COUNT(*) FROM kw_postings").fetchone()[0]
        gc.collect()
        grown = rss_kib() - after_open
        ranker = _lexical_ranker(store)
        assert ranker.index is not None
        for x in texts[:20]:
            ranker.rank(x, 20)
        times = []
        for x in texts:
            t = time.perf_counter()
            ranker.rank(x, 20)
            times.append(time.perf_counter() - t)
        # The scan an event log still being indexed falls back to.
        scan = []
        ranker.index = None
        for x in texts[:5]:
            t = time.perf_counter()
            ranker.rank(x, 20)
            scan.append(time.perf_counter() - t)
    return {
        "build_s": round(build_s, 1),
        "index_mib": round(size / 2**20, 1),
        "index_mib_per_million_windows": round(size / 2**20 * 1_000_000 / max(docs, 1)),
        "windows": docs,
        "postings": rows,
        "rss_growth_mib": round(grown / 1024, 1),
        "rss_before_mib": round(before / 1024),
        "query": perfkit.summary_ms(times),
        "scan_fallback_query": perfkit.summary_ms(scan),
    }


def fts5(log, texts: list[str], folder: Path) -> dict:
    import apsw

    from matrix_sources.indexer.search.lexical import base_of, stem, terms

    path = folder / "fts5.sqlite3"
    for p in folder.glob("fts5.sqlite3*"):
        p.unlink()
    gc.collect()
    before = rss_kib()
    db = apsw.Connection(str(path))
    for sql in (
        "PRAGMA journal_mode=WAL",
        "PRAGMA secure_delete=ON",
        "CREATE VIRTUAL TABLE w USING fts5(body, content='')",
        "INSERT INTO w(w, rank) VALUES('secure-delete', 1)",
        "CREATE TABLE wid (rowid INTEGER PRIMARY KEY, window_id TEXT UNIQUE)",
    ):
        list(db.execute(sql))
    t = time.perf_counter()
    db.execute("BEGIN")
    for i, (wid, msgs) in enumerate(log.texts.indexed_windows(), start=1):
        db.execute("INSERT INTO wid (rowid, window_id) VALUES (?, ?)", (i, wid))
        db.execute(
            "INSERT INTO w (rowid, body) VALUES (?, ?)", (i, "\n".join(m.body for m in msgs))
        )
    db.execute("COMMIT")
    db.execute("INSERT INTO w(w) VALUES('optimize')")
    build_s = time.perf_counter() - t
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = sum(p.stat().st_size for p in folder.glob("fts5.sqlite3*"))

    def match(text: str) -> str:
        words = list({stem(x): x for x in reversed(terms(text))}.values())[::-1]
        parts = []
        for x in words:
            base, prefix = base_of(x)
            base = base.replace('"', '""')
            parts.append(f'"{base}"*' if prefix else f'"{base}"')
        return " OR ".join(parts)

    q = (
        "SELECT wid.window_id FROM w JOIN wid ON wid.rowid = w.rowid WHERE w MATCH ?"
        " ORDER BY bm25(w) LIMIT 20"
    )
    for x in texts[:20]:
        list(db.execute(q, (match(x),)))
    times = []
    for x in texts:
        m = match(x)
        if not m:
            continue
        t = time.perf_counter()
        list(db.execute(q, (m,)))
        times.append(time.perf_counter() - t)
    grown = rss_kib() - before
    # Purge residue: a canary row added, then deleted with secure-delete on.
    db.execute(
        "INSERT INTO w (rowid, body) VALUES (?, ?)", (10**9, f"the secret word is {CANARY} keep it")
    )
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    present = files_with(sorted(folder.glob("fts5.sqlite3*")), CANARY.encode())
    # A contentless row is deleted by giving its text again (the event log has it);
    # with `contentless_delete=1` a delete only leaves a tombstone and the tokens stay
    # (checked: the canary was still in the file), secure-delete or not.
    db.execute(
        "INSERT INTO w(w, rowid, body) VALUES('delete', ?, ?)",
        (10**9, f"the secret word is {CANARY} keep it"),
    )
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    left = files_with(sorted(folder.glob("fts5.sqlite3*")), CANARY.encode())
    db.close()
    return {
        "build_s": round(build_s, 1),
        "file_mib": round(size / 2**20, 1),
        "rss_growth_mib": round(grown / 1024, 1),
        "query": perfkit.summary_ms(times),
        "canary_before_delete": present,
        "canary_after_delete": left,
        "sqlite": apsw.sqlite_lib_version(),
    }


def purge_residue(log, folder: Path) -> dict:
    """The event log side of a purge: the canary window's room purged."""
    from matrix_sources.indexer.records import RoomID

    w = canary_window(log)
    log.truncate_wal()
    files = sorted(folder.glob("eventlog.sqlite3*"))
    present = files_with(files, CANARY.encode())
    log.purge_room(RoomID(w.room_id))
    return {
        "canary_before_purge": present,
        "canary_after_purge": files_with(sorted(folder.glob("eventlog.sqlite3*")), CANARY.encode()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--windows", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--only", default="postings,fts5,purge")
    args = p.parse_args(argv)
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    folder = evalkit.OUT_DIR / f"textindex-{args.windows}"
    report: dict = {"machine": perfkit.machine(), "load_before": perfkit.load_average()}
    log, report["eventlog"] = build_eventlog(root, args.windows, folder)
    report["eventlog"]["file_mib"] = round(
        sum(p.stat().st_size for p in folder.glob("eventlog.sqlite3*")) / 2**20, 1
    )
    print("event log:", report["eventlog"], flush=True)
    texts = keyword_texts(root, args.reps)
    only = set(args.only.split(","))
    if "postings" in only:
        report["postings"] = postings(log, texts, folder)
        print("(b) postings:", perfkit.dumps(report["postings"]), flush=True)
    if "fts5" in only:
        report["fts5"] = fts5(log, texts, folder)
        print("(a) fts5:", perfkit.dumps(report["fts5"]), flush=True)
    if "purge" in only:
        report["eventlog_purge"] = purge_residue(log, folder)
        print("event log purge:", report["eventlog_purge"], flush=True)
    report["load_after"] = perfkit.load_average()
    out = perfkit.write_report(f"textindex-{args.windows}", report)
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
