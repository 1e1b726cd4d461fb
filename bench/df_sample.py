"""How far a common term's sampled count is from its exact one, and what each costs.

    .venv/bin/python bench/df_sample.py --windows 1000000 [--sample 16:200,32:1000]

On the event log of bench/corpus_scale.py's collection (read only; built first if
missing), for every term of the dev questions (the ones evidence.py weighs before a
question is answered): the exact count of the windows holding it (`COUNT(DISTINCT doc)`
over every segment) against `KeywordIndex`'s count (keyword_reads.py: estimated from
SAMPLE_SEGMENTS segments once the sample holds ESTIMATED_FROM of the term's windows),
shipped and with each `--sample` setting: the time for all terms (nothing cached),
how many were estimated, the count's relative error (median, p95, worst) and idf's
largest difference. Figures are printed and written to bench/out/df-sample-N.json.
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import corpus_scale  # noqa: E402
import evalkit  # noqa: E402


class _ReadOnly:
    """The one connection KeywordIndex reads through (its Database's `locked`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @contextmanager
    def locked(self):
        yield self.conn


def _idf(total: int, df: int) -> float:
    return math.log(1 + (total - df + 0.5) / (df + 0.5))


def measure(windows: int, eval_dir: Path, settings: list[tuple[int, int]]) -> dict:
    from matrix_sources.indexer.search.tokens import tokens
    from matrix_sources.indexer.store.eventlog import keyword_reads as kr
    from matrix_sources.indexer.tokens import base_of

    log = corpus_scale.cache_dir(windows) / "eventlog.sqlite3"
    if not log.exists():
        corpus_scale.build(eval_dir, windows)
    conn = sqlite3.connect(f"file:{log}?mode=ro", uri=True)
    items = evalkit.load_items(eval_dir / "dev")
    terms = sorted({t for i in items for t in tokens(i.query)})
    total = conn.execute("SELECT COUNT(*) FROM kw_docs").fetchone()[0]
    t0 = time.perf_counter()
    exact = {t: kr._distinct_docs(conn, *kr._matching(conn, *base_of(t), None)) for t in terms}
    out: dict = {
        "windows": total,
        "terms": len(terms),
        "exact_ms": round(1000 * (time.perf_counter() - t0)),
        "settings": [],
    }
    shipped = (kr.SAMPLE_SEGMENTS, kr.ESTIMATED_FROM)
    for segs, least in [shipped, *settings]:
        kr.SAMPLE_SEGMENTS, kr.ESTIMATED_FROM = segs, least
        index = kr.KeywordIndex(_ReadOnly(conn))  # type: ignore[arg-type]
        t0 = time.perf_counter()
        got = {t: index._df(conn, *base_of(t), None) for t in terms}
        took = time.perf_counter() - t0
        errors = sorted(
            (abs(got[t] - exact[t]) / exact[t] for t in terms if exact[t] and got[t] != exact[t]),
            reverse=True,
        )
        idf_diff = max(abs(_idf(total, got[t]) - _idf(total, exact[t])) for t in terms)
        out["settings"].append(
            {
                "sample_segments": segs,
                "estimated_from": least,
                "shipped": (segs, least) == shipped,
                "ms": round(1000 * took),
                "estimated": len(errors),
                "error_median": round(statistics.median(errors), 3) if errors else 0.0,
                "error_p95": round(errors[len(errors) // 20], 3) if errors else 0.0,
                "error_worst": round(errors[0], 3) if errors else 0.0,
                "idf_diff_max": round(idf_diff, 3),
            }
        )
    kr.SAMPLE_SEGMENTS, kr.ESTIMATED_FROM = shipped
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--windows", type=int, default=1_000_000)
    p.add_argument("--sample", default="16:200,16:1000,32:500,64:2000")
    args = p.parse_args(argv)
    settings = [tuple(int(x) for x in s.split(":")) for s in args.sample.split(",") if s]
    out = measure(args.windows, evalkit.eval_dir(args.eval_dir), settings)  # type: ignore[arg-type]
    print(
        f"{out['terms']} terms of the dev questions, {out['windows']} windows: "
        f"exact counts {out['exact_ms']} ms"
    )
    for s in out["settings"]:
        print(
            f"  {s['sample_segments']} segments, from {s['estimated_from']}"
            f"{' (shipped)' if s['shipped'] else ''}: {s['ms']} ms, {s['estimated']} estimated, "
            f"error median {s['error_median']} p95 {s['error_p95']} worst {s['error_worst']}, "
            f"idf within {s['idf_diff_max']}"
        )
    evalkit.write_json(evalkit.OUT_DIR / f"df-sample-{args.windows}.json", out)
    print(evalkit.attribution(evalkit.eval_dir(args.eval_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
