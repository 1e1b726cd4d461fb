"""Why each dev question's first hit misses: a map of what is left to win, and where.

    .venv/bin/python bench/misses.py --work DIR [--sets ubuntu,gitter,slack] [--out F.json]

Runs each set's questions (query alone) through the shipped searcher on the data dirs
`bench/retrieval.py` built (its `--work`), and beside each search, the same fused
ranking (vectors and keyword leg) taken `--deep` windows deep. Each question whose first
hit does not quote a gold answer falls in one class, by the first place its answer is
lost:

    model   no window holding a gold answer in the first --deep of the fused ranking:
            the model and the keyword leg do not find it (no presenter rule can)
    pool    found, but below the presenter's pool (searcher.RERANK_POOL): it is never
            ranked again
    order   in the pool (or brought in by the keyword leg), and the presenter puts
            another window first
    quote   the first hit holds or carries a gold answer, but quotes other lines

A question whose first hit quotes a gold answer is `ok` (shown@1). Printed: the
count of each class per set, then each miss with the fused rank of its answer's window,
the rank the reply gives it, and the question. Windows are compared by the events they
hold, as the benchmark compares them (a hit also counts the lines its conversation
brings in, so a reply may hold an answer its stored window lacks).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

CLASSES = ("ok", "quote", "order", "pool", "model")


def classify(
    gold: frozenset[str], hits: list[dict], fused: list[tuple[str, ...]], pool: int
) -> tuple[str, int | None, int | None]:
    """(class, fused rank of the first window holding a gold answer or None, the rank of
    the reply's first hit holding one or None). `hits`: the reply's hits as JSON;
    `fused`: the event ids of each window of the deep fused ranking."""
    deep = next((r for r, ids in enumerate(fused, 1) if gold & set(ids)), None)
    rank = next((r for r, h in enumerate(hits, 1) if gold & set(h["event_ids"])), None)
    if hits and gold & set(hits[0].get("shown_event_ids", [])):
        return "ok", deep, rank  # quoted, if need be from another window it links
    if rank == 1:
        return "quote", deep, rank
    if rank is not None:  # the reply has it, below another window
        return "order", deep, rank
    if deep is None:
        return "model", None, None
    return ("pool" if deep > pool else "order"), deep, None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-root", default=None)
    p.add_argument("--work", required=True, help="holding retrieval-<set>/ (retrieval.py --work)")
    p.add_argument("--sets", default="ubuntu,gitter,slack")
    p.add_argument("--deep", type=int, default=200, help="how far down the fused ranking to look")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    import asking
    import evalkit

    from matrix_sources.indexer.search import searcher

    fused_of: dict[str, list[tuple[str, ...]]] = {}  # by the question's text
    retrieve = searcher.Searcher._retrieve

    def spy(self, query, texts, vectors, depth, n):
        deep, _ = retrieve(self, query, texts, vectors, args.deep, max(n, 4 * args.deep))
        fused_of[texts[0]] = [h.event_ids for h in deep]
        return retrieve(self, query, texts, vectors, depth, n)

    searcher.Searcher._retrieve = spy
    sets = evalkit.datasets(Path(args.eval_root) if args.eval_root else None)
    report: dict = {}
    for name in filter(None, args.sets.split(",")):
        ds = sets[name]
        items = evalkit.load_items(ds.root, ds.queries)
        config = Path(args.work) / f"retrieval-{name}" / "config.yaml"
        print(f"{name}: searching {len(items)} questions ...", file=sys.stderr, flush=True)
        hits, _ = asking.search_in_process([(i.id, [i.query]) for i in items], config)
        rows = []
        for item in items:
            cls, deep, rank = classify(
                item.gold, hits[item.id], fused_of.get(item.query, []), searcher.RERANK_POOL
            )
            rows.append(
                {"id": item.id, "class": cls, "fused": deep, "rank": rank, "query": item.query}
            )
        counts = Counter(r["class"] for r in rows)
        report[name] = {"counts": {c: counts.get(c, 0) for c in CLASSES}, "items": rows}
        print(
            f"{name}: {len(items)} questions  "
            + "  ".join(f"{c} {counts.get(c, 0)}" for c in CLASSES)
        )
        for r in rows:
            if r["class"] != "ok":
                where = "-" if r["fused"] is None else r["fused"]
                shown = "-" if r["rank"] is None else r["rank"]
                print(
                    f"  {r['class']:5} {r['id']:16} fused {where!s:>4}  reply {shown!s:>2}"
                    f"  {r['query'][:70]}"
                )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
