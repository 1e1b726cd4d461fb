"""On PostgreSQL: the keyword index's B-tree postings (what ships) against a GIN index
over the same keys, for what search reads of a term.

    MATRIX_SOURCES_TEST_POSTGRES=postgresql://... \\
        .venv/bin/python bench/pg_keywords.py [--windows 100000] [--reps 3]

The first `--windows` windows of bench/corpus_scale.py's million-window event log (its
keys, cut by the project's tokenizer when it was written) are copied into two tables of
a throwaway database on that server (`scripts/pg-server start DIR` prints a DSN):

btree  kw_postings as migration 16 makes it: (seg, key COLLATE "C", doc, tf), primary
       key (seg, key, doc); a term is read as keyword_reads.py reads it (the SQL of
       `_matching`: one range a segment; a stem's prefix, compounds left out).
gin    one row a window, its keys as a `tsvector` (`array_to_tsvector`, the `simple`
       configuration, no parsing: our keys are its lexemes) and their counts aligned in
       an array, a GIN index on the vector; a term is `tsv @@ 'key'` (a stem `'key':*`),
       and each matching row's count is summed from its arrays (compounds left out, as
       the B-tree read does).

For every term of the dev questions (what `!sources` asks): (docs, counts) as search
needs them, and the count of windows idf needs, each way, `--reps` rounds, checked to
agree; p50 / p95 per term, the total, and each index's size. Printed and written to
bench/out/pg-keywords-N.json; the database is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import corpus_scale  # noqa: E402
import evalkit  # noqa: E402

SOURCE_WINDOWS = 1_000_000


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(1000 * xs[min(len(xs) - 1, int(q * len(xs)))], 2)


def load(pg, log: Path, windows: int) -> dict:
    from matrix_sources.indexer.store.eventlog.keywords import SEG_BITS

    src = sqlite3.connect(f"file:{log}?mode=ro", uri=True)
    segs = (windows >> SEG_BITS) + 1
    pg.execute(
        'CREATE TABLE kw_postings (seg INTEGER NOT NULL, key TEXT COLLATE "C" NOT NULL,'
        " doc INTEGER NOT NULL, tf INTEGER NOT NULL, PRIMARY KEY (seg, key, doc))"
    )
    pg.execute("CREATE TABLE kw_gin (doc INTEGER PRIMARY KEY, keys TEXT[], tfs INTEGER[])")
    t = time.perf_counter()
    rows = 0
    with pg.cursor().copy("COPY kw_postings (seg, key, doc, tf) FROM STDIN") as copy:
        for row in src.execute(
            "SELECT seg, key, doc, tf FROM kw_postings WHERE seg < ? AND doc <= ?", (segs, windows)
        ):
            copy.write_row(row)
            rows += 1
            if rows % 500_000 == 0:
                print(f"  {rows} postings copied", flush=True)
    pg.execute(
        "INSERT INTO kw_gin SELECT doc, array_agg(key ORDER BY key), array_agg(tf ORDER BY key)"
        " FROM kw_postings GROUP BY doc"
    )
    pg.execute("ALTER TABLE kw_gin ADD COLUMN tsv tsvector")
    pg.execute("UPDATE kw_gin SET tsv = array_to_tsvector(keys)")
    pg.execute("CREATE INDEX kw_gin_tsv ON kw_gin USING gin (tsv)")
    pg.execute("VACUUM ANALYZE kw_postings")
    pg.execute("VACUUM ANALYZE kw_gin")
    size = {
        name: pg.execute(f"SELECT pg_total_relation_size('{name}')").fetchone()[0]
        for name in ("kw_postings", "kw_gin")
    }
    return {
        "postings": rows,
        "load_s": round(time.perf_counter() - t, 1),
        "btree_mib": round(size["kw_postings"] / 2**20, 1),
        "gin_mib": round(size["kw_gin"] / 2**20, 1),
        "segments": segs,
    }


def _btree(pg, base: str, prefix: bool, segs: list[int]) -> tuple[dict[int, int], int]:
    from matrix_sources.indexer.store.eventlog.keyword_reads import _matching

    sql, args = _matching(None, base, prefix, None, segs)
    sql = sql.replace("%", "%%").replace("?", "%s")
    rows = pg.execute(f"SELECT p.doc, p.tf {sql}", args).fetchall()
    got: dict[int, int] = {}
    for doc, tf in rows:
        got[doc] = got.get(doc, 0) + tf
    n = pg.execute(f"SELECT COUNT(DISTINCT p.doc) {sql}", args).fetchone()[0]
    return got, n


def _gin(pg, base: str, prefix: bool) -> tuple[dict[int, int], int]:
    lexeme = "'" + base.replace("\\", "\\\\").replace("'", "''") + "'" + (":*" if prefix else "")
    if prefix:  # the word itself, or a longer word (no connector) starting with it
        rows = pg.execute(
            "SELECT g.doc, SUM(u.tf) FROM kw_gin g, unnest(g.keys, g.tfs) AS u(key, tf)"
            " WHERE g.tsv @@ %s::tsquery AND u.key LIKE %s"
            " AND (u.key = %s OR u.key !~ %s) GROUP BY g.doc",
            (lexeme, base.replace("%", "\\%").replace("_", "\\_") + "%", base, "[_.+#'-]"),
        ).fetchall()
    else:
        rows = pg.execute(
            "SELECT doc, tfs[array_position(keys, %s)] FROM kw_gin WHERE tsv @@ %s::tsquery",
            (base, lexeme),
        ).fetchall()
    got = {doc: int(tf) for doc, tf in rows}
    n = (
        pg.execute(
            "SELECT COUNT(*) FROM kw_gin g WHERE g.tsv @@ %s::tsquery AND EXISTS (SELECT 1"
            " FROM unnest(g.keys) AS k WHERE k LIKE %s AND (k = %s OR k !~ %s))",
            (lexeme, base.replace("%", "\\%").replace("_", "\\_") + "%", base, "[_.+#'-]"),
        ).fetchone()[0]
        if prefix
        else pg.execute(
            "SELECT COUNT(*) FROM kw_gin WHERE tsv @@ %s::tsquery", (lexeme,)
        ).fetchone()[0]
    )
    return got, n


def main(argv: list[str] | None = None) -> int:
    import psycopg

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--windows", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    dsn = os.environ.get("MATRIX_SOURCES_TEST_POSTGRES")
    if not dsn:
        raise SystemExit(
            "set MATRIX_SOURCES_TEST_POSTGRES (scripts/pg-server start DIR prints one)"
        )
    root = evalkit.eval_dir(args.eval_dir)
    log = corpus_scale.cache_dir(SOURCE_WINDOWS) / "eventlog.sqlite3"
    if not log.exists():
        corpus_scale.build(root, SOURCE_WINDOWS)
    from matrix_sources.indexer.search.tokens import tokens
    from matrix_sources.indexer.tokens import base_of

    terms = sorted({t for i in evalkit.load_items(root / "dev") for t in tokens(i.query)})
    db = f"bench_kw_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {db}")
    try:
        with psycopg.connect(dsn.rsplit("/", 1)[0] + "/" + db, autocommit=True) as pg:
            print(f"copying the first {args.windows} windows' postings into PostgreSQL", flush=True)
            out = load(pg, log, args.windows)
            print(f"  {out}", flush=True)
            segs = list(range(out["segments"]))
            times: dict[str, list[float]] = {"btree": [], "gin": []}
            for rep in range(args.reps):
                for t in terms:
                    base, prefix = base_of(t)
                    got = {}
                    for way in ("btree", "gin") if rep % 2 == 0 else ("gin", "btree"):
                        began = time.perf_counter()
                        got[way] = (
                            _btree(pg, base, prefix, segs)
                            if way == "btree"
                            else _gin(pg, base, prefix)
                        )
                        times[way].append(time.perf_counter() - began)
                    if got["btree"] != got["gin"]:
                        raise SystemExit(f"the two ways disagree on {t!r}")
            for way, xs in times.items():
                out[way] = {
                    "p50_ms": _pct(xs, 0.5),
                    "p95_ms": _pct(xs, 0.95),
                    "mean_ms": round(1000 * statistics.mean(xs), 2),
                    "total_s": round(sum(xs) / args.reps, 2),
                }
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {db}")
    out.update({"windows": args.windows, "terms": len(terms), "reps": args.reps})
    print(
        f"{args.windows} windows, {out['postings']} postings, {len(terms)} terms of the dev "
        f"questions x {args.reps}: docs, counts and df of a term\n"
        f"  B-tree (shipped): p50 {out['btree']['p50_ms']} ms, p95 {out['btree']['p95_ms']} ms, "
        f"{out['btree']['total_s']} s a round; {out['btree_mib']} MiB\n"
        f"  GIN (tsvector):   p50 {out['gin']['p50_ms']} ms, p95 {out['gin']['p95_ms']} ms, "
        f"{out['gin']['total_s']} s a round; {out['gin_mib']} MiB"
    )
    evalkit.write_json(evalkit.OUT_DIR / f"pg-keywords-{args.windows}.json", out)
    print("\n" + evalkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
