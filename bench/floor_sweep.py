"""The abstain floor, swept: every question of a data dir built by bench/retrieval.py
asked once with the floor off, each hit's score kept, then each floor's figures.

    .venv/bin/python bench/floor_sweep.py --sets gitter --work bench/out/e5 \
        --floors 0.78,0.80,0.82 --margins 0,0.02,0.04 [--variants query]

A tuning aid (bench/retrieval.py gives the shipped figures through the CLI). It opens
the data dir as the CLI does (Index.open: the config's model, the presenter), asks the
set's items, its translated items (Gitter's dev-queries-xl.jsonl) and the off-topic
questions with search.min_similarity -1 and 20 hits, and keeps, per hit, the score the
floor compares, whether it shares a word with the question (abstain.py) and the events it
cites and shows. A floor (min_similarity, no_shared_word_margin) then keeps the hits that
reach it, as the searcher would: success@5, shown@5 and "nothing matches" per language,
and the off-topic questions that still got a hit. The scores are cached in the data dir
(floor-scores.json), so a second sweep asks nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import asking  # noqa: E402
import evalkit  # noqa: E402

TOP = 20


def ask_all(data_dir: Path, asked: list[tuple[str, list[str]]]) -> dict:
    """qid -> [[score, shares_word, cited, shown], ...] with the floor off."""
    from matrix_sources.indexer.components import Index
    from matrix_sources.indexer.config import load_config
    from matrix_sources.indexer.search.abstain import Floor
    from matrix_sources.indexer.search.searcher import SourceQuery

    cache = data_dir / "floor-scores.json"
    out = json.loads(cache.read_text()) if cache.exists() else {}
    todo = [(q, t) for q, t in asked if q not in out]
    if todo:
        index = Index.open(load_config(data_dir / "config.yaml"))
        index.searcher.floor = Floor(-1.0, 0.0)
        t0 = time.perf_counter()
        try:
            for n, (qid, texts) in enumerate(todo, 1):
                words = Floor(0.0).for_query(texts)
                hits = index.searcher.search(SourceQuery.build(texts, TOP))
                out[qid] = [
                    [
                        h.similarity,
                        words.shares_word(h.bodies),
                        list(h.cited_event_ids),
                        [ln.event_id for ln in h.shown],
                    ]
                    for h in hits
                ]
                if n % 50 == 0:
                    cache.write_text(json.dumps(out))
                    print(
                        f"  {n}/{len(todo)} asked, {time.perf_counter() - t0:.0f} s",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            cache.write_text(json.dumps(out))
            index.close()
    return out


def kept(hits: list, floor: float, margin: float) -> list:
    return [h for h in hits if h[0] >= floor + (0.0 if h[1] else margin)]


def figures(
    items: list[evalkit.Item], variant: str, scores: dict, floor: float, margin: float
) -> dict:
    s5 = shown5 = none = 0
    for item in items:
        hits = kept(scores[f"{item.id}|{variant}"], floor, margin)
        none += not hits
        s5 += any(item.gold & set(h[2]) for h in hits[:5])
        shown5 += any(item.gold & set(h[3]) for h in hits[:5])
    n = len(items)
    return {"success@5": round(s5 / n, 3), "shown@5": round(shown5 / n, 3), "abstained": none}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets", default="gitter")
    p.add_argument("--work", default=str(evalkit.OUT_DIR))
    p.add_argument("--floors", default="0.34")
    p.add_argument("--margins", default="0.11")
    p.add_argument("--variants", default="query,keywords,query+keywords")
    p.add_argument(
        "--langs",
        default=None,
        help="comma-separated: which question languages (en, de, es, ru, zh); all by default",
    )
    p.add_argument("--out", default=None)
    args = p.parse_args()
    sets = evalkit.datasets()
    variants = args.variants.split(",")
    floors = [float(x) for x in args.floors.split(",")]
    margins = [float(x) for x in args.margins.split(",")]
    report = {}
    for name in args.sets.split(","):
        ds = sets[name]
        data_dir = Path(args.work).resolve() / f"retrieval-{name}"
        groups = {"en": evalkit.load_items(ds.root, ds.queries), **asking.xl_items(ds)}
        if args.langs:
            groups = {k: v for k, v in groups.items() if k in args.langs.split(",")}
        off = asking.offtopic_queries()
        asked = [
            (f"{i.id}|{v}", asking.texts_for(i, v))
            for items in groups.values()
            for i in items
            for v in variants
        ] + off
        scores = ask_all(data_dir, asked)
        rows = []
        for floor in floors:
            for margin in margins:
                row = {"floor": floor, "margin": margin}
                for lang, items in groups.items():
                    for v in variants:
                        row[f"{lang} {v}"] = figures(items, v, scores, floor, margin)
                answered = [q for q, _ in off if kept(scores[q], floor, margin)]
                row["offtopic_answered"] = answered
                rows.append(row)
                print(
                    f"{name} floor {floor:.2f} +{margin:.2f}: "
                    + "; ".join(
                        f"{k} s@5 {r['success@5']:.3f} none {r['abstained']}"
                        for k, r in row.items()
                        if isinstance(r, dict)
                    )
                    + f"; off-topic answered {len(answered)}/{len(off)} "
                    + str(sorted({asking.offtopic_lang(q) for q in answered}))
                )
        report[name] = rows
    if args.out:
        evalkit.write_json(Path(args.out), report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
