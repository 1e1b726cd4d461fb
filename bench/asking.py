"""The dev questions asked in process, and scored: what every retrieval benchmark shares.

    texts_for          an item's texts for a variant (query, keywords, query+keywords)
    search_in_process  the searcher `Index.open` builds on a data dir bench/retrieval.py
                       made, asked here (the model loaded once, in MODEL)
    evaluate           success@k, MRR, nDCG and shown@k per variant (evalkit's metrics)
    xl_items           a set's translated questions by language; evaluate_xl scores them
    offtopic_queries   the questions no chat answers (bench/offtopic-queries.jsonl)

bench/retrieval.py runs the CLI end to end; quotes.py, heldout.py, misses.py,
floor_sweep.py and rank_features.py ask through this module.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import evalkit

VARIANTS = ("query", "keywords", "query+keywords")
OFFTOPIC = Path(__file__).resolve().parent / "offtopic-queries.jsonl"
# Questions in other languages beside a set's own: file name, and the order of the rows.
XL_QUERIES = "dev-queries-xl.jsonl"
XL_LANGS = ("de", "es", "ru", "zh")


def texts_for(item: evalkit.Item, variant: str) -> list[str]:
    kw = " ".join(item.keywords)
    return {"query": [item.query], "keywords": [kw], "query+keywords": [item.query, kw]}[variant]


MODEL: list = []  # the in-process embedder, loaded once for every set


def search_in_process(queries: list[tuple[str, list[str]]], config: Path) -> tuple[dict, float]:
    """What `matrix-sources search --queries` gives (retrieval.search_batch), from the
    searcher Index.open builds in this process: {id: hits as JSON}, and the seconds taken."""
    from matrix_sources.indexer.components import Index
    from matrix_sources.indexer.config import load_config
    from matrix_sources.indexer.models.embedder import load_embedder
    from matrix_sources.indexer.search.searcher import SourceQuery

    cfg = load_config(config)
    if not MODEL:
        MODEL.append(
            load_embedder(cfg.index.embedder.model, cfg.index.embedder.backend, cfg.models_dir)
        )
    # With the postings, as the service opens it: the keyword leg and the word evidence
    # answer from them (the same windows as the event log's scan, which took minutes
    # for questions of many terms, as in Chinese).
    ready = threading.Event()
    index = Index.open(cfg, MODEL[0], postings=True, on_postings_ready=ready.set)
    if cfg.search.lexical_max_terms and not ready.wait(600):
        raise SystemExit("error: the keyword postings were not built within 10 minutes")
    t = time.perf_counter()
    try:
        out = {
            qid: [
                h.to_json() for h in index.searcher.search(SourceQuery.build(texts, evalkit.DEPTH))
            ]
            for qid, texts in queries
        }
    finally:
        index.close()
    return out, time.perf_counter() - t


def evaluate(
    items: list[evalkit.Item],
    hits: dict,
    n_relevant: dict[str, int],
    variants: tuple[str, ...] = VARIANTS,
) -> dict:
    results = {}
    for v in variants:
        per_item = []
        for item in items:
            got = hits[f"{item.id}|{v}"]
            rel = [bool(item.gold & set(h["event_ids"])) for h in got]
            shown = [bool(item.gold & set(h.get("shown_event_ids", []))) for h in got]
            per_item.append(
                {
                    "id": item.id,
                    **evalkit.item_scores(rel, n_relevant[item.id]),
                    "shown@1": float(any(shown[:1])),
                    "shown@5": float(any(shown[: evalkit.SHOWN_AT])),
                }
            )
        metrics = evalkit.aggregate(per_item)
        for k in ("shown@1", "shown@5"):
            metrics[k] = round(sum(s[k] for s in per_item) / len(per_item), 4)
        results[v] = {
            "metrics": metrics,
            "first_hit": {s["id"]: s["first_hit"] for s in per_item},
            "shown": {s["id"]: bool(s["shown@5"]) for s in per_item},
        }
    return results


def xl_items(ds: evalkit.Dataset) -> dict[str, list[evalkit.Item]]:
    """The set's translated items by language ({} if it has none)."""
    path = ds.queries.parent / XL_QUERIES
    if not path.is_file():
        return {}
    langs = {}
    with open(path, encoding="utf-8") as f:
        for o in map(json.loads, filter(str.strip, f)):
            langs[o["id"]] = o["lang"]
    by_lang: dict[str, list[evalkit.Item]] = {}
    for item in evalkit.load_items(ds.root, path):
        by_lang.setdefault(langs[item.id], []).append(item)
    return dict(
        sorted(
            by_lang.items(),
            key=lambda kv: (XL_LANGS.index(kv[0]) if kv[0] in XL_LANGS else len(XL_LANGS), kv[0]),
        )
    )


def evaluate_xl(
    by_lang: dict[str, list[evalkit.Item]],
    hits: dict,
    n_relevant: dict[str, int],
    variants: tuple[str, ...] = VARIANTS,
) -> dict:
    """Per language and variant: the metrics, and how many items got no hit at all."""
    out = {}
    for lang, items in by_lang.items():
        results = evaluate(items, hits, n_relevant, variants)
        for v in variants:
            none = sum(1 for i in items if not hits[f"{i.id}|{v}"])
            results[v]["metrics"]["abstained"] = round(none / len(items), 4)
            results[v]["abstained_items"] = none
        out[lang] = {"items": len(items), "variants": results}
    return out


def offtopic_queries() -> list[tuple[str, list[str]]]:
    with open(OFFTOPIC, encoding="utf-8") as f:
        return [(o["id"], [o["query"]]) for o in map(json.loads, filter(str.strip, f))]


def offtopic_lang(qid: str) -> str:
    """offtopic-de-3 -> de; the first 38 (English, and four that are no language or
    another script) -> en."""
    part = qid.split("-")[1]
    return part if not part.isdigit() else "en"
