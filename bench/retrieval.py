"""Retrieval quality on real chat, judged by what a person reads: the three dev sets
(Ubuntu IRC, Gitter and Slack developer chat) through the real CLI, side by side.

    .venv/bin/python bench/retrieval.py [--sets ubuntu,gitter,slack] [--eval-root ../shared/eval]
                                        [--out bench/out/retrieval.json] [--floor-cost]

For each set: a fresh data dir (`matrix-sources init`), its rooms on the allowlist
(`matrix-sources allowlist add`), its events imported (`matrix-sources import`), then
every item asked three ways through `matrix-sources search --queries FILE --top 10`:

    query            the natural-language question, one text
    keywords         the user's search-box words joined by spaces, one text
    query+keywords   both, as a two-text query (fused by reciprocal rank)

A hit counts when the events it cites (`event_ids`: its window's and the answers
linked to it from later windows) hold a gold answer event. "answer shown@5" asks more:
a gold answer is among the lines the reply quotes (`shown_event_ids`) for one of the
first 5 hits. The off-topic questions of bench/offtopic-queries.jsonl (cooking,
sports, travel, "?", emoji, Arabic, Hebrew, and eight each in German, Spanish, Russian
and Chinese; written for this benchmark) are asked of
each index too: the share that gets no hit ("nothing matches") is reported.
For a set with translated questions beside its own (Gitter's `dev-queries-xl.jsonl`: the
same items asked in German, Spanish, Russian and Chinese, technical terms kept in
English), each language's items are asked the same three ways of the same English
index and reported as a cross-lingual table, with how many got "nothing matches".
`--floor-cost` asks every item again with the floor off (search.min_similarity -1) to
show what the floor costs answerable questions. `--set KEY=VALUE` edits the fresh
data dirs' config.yaml. Prints the table and the data's attribution, writes the
figures (and every item's first-hit rank) as JSON.

To iterate on search (not on indexing): `--reuse-index --in-process` keeps the data
dirs of a previous run and asks the same searcher the CLI builds (Index.open) in this
process, the model loaded once; `--patch module.NAME=VALUE` sets a constant of an
indexer module first (e.g. `--patch indexer.search.present.LINE_WEIGHT=0.6`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import evalkit  # noqa: E402
import quotes  # noqa: E402
from asking import (  # noqa: E402
    VARIANTS,
    evaluate,
    evaluate_xl,
    offtopic_lang,
    offtopic_queries,
    search_in_process,
    texts_for,
    xl_items,
)

CLI = str(Path(sys.executable).parent / "matrix-sources")
COLUMNS = ("success@1", "success@5", "success@10", "mrr@10", "shown@1", "shown@5")
XL_COLUMNS = ("success@1", "success@5", "success@10", "mrr@10", "shown@5", "abstained")


def run(args: list[str], **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    res = subprocess.run([CLI, *args], text=True, capture_output=True, env=env, **kw)
    if res.returncode != 0:
        raise SystemExit(
            f"error: matrix-sources {args[0]} exited {res.returncode}\n{res.stderr[-3000:]}"
        )
    return res


def set_config(config: Path, settings: list[str]) -> dict:
    """Apply KEY=VALUE (dotted keys, YAML values) to the data dir's config.yaml."""
    from ruamel.yaml import YAML

    y = YAML()
    data = y.load(config.read_text(encoding="utf-8"))
    applied = {}
    for s in settings:
        key, _, raw = s.partition("=")
        value = YAML(typ="safe").load(raw)
        node = data
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
        applied[key] = value
    with open(config, "w", encoding="utf-8") as f:
        y.dump(data, f)
    return applied


def build_index(ds: evalkit.Dataset, data_dir: Path, settings: list[str]) -> dict:
    if data_dir.exists():
        shutil.rmtree(data_dir)
    run(["init", "--data-dir", str(data_dir)])
    config = data_dir / "config.yaml"
    applied = set_config(config, settings) if settings else {}
    run(["allowlist", "add", "-c", str(config), *evalkit.room_ids(ds.root, ds.rooms)])
    t = time.perf_counter()
    res = run(["import", "-q", "-c", str(config), str(ds.events)])
    return {
        "import_seconds": round(time.perf_counter() - t, 1),
        "import_summary": res.stdout.strip().splitlines(),
        "settings": applied,
    }


def search_batch(
    queries: list[tuple[str, list[str]]], config: Path, work: Path, in_process: bool = False
) -> tuple[dict, float]:
    if in_process:
        return search_in_process(queries, config)
    qfile = work / "queries.jsonl"
    with open(qfile, "w", encoding="utf-8") as f:
        for qid, texts in queries:
            f.write(json.dumps({"id": qid, "texts": texts, "top_k": evalkit.DEPTH}) + "\n")
    t = time.perf_counter()
    res = run(["search", "-c", str(config), "--queries", str(qfile), "--top", str(evalkit.DEPTH)])
    seconds = time.perf_counter() - t
    out = {}
    for line in res.stdout.splitlines():
        o = json.loads(line)
        if "error" in o:
            raise SystemExit(f"error: query {o['id']}: {o['error']}")
        out[o["id"]] = o["hits"]
    return out, seconds


def windows_holding(config_dir: Path, items: list[evalkit.Item]) -> dict[str, int]:
    """Per item, how many stored windows hold one of its gold answers (nDCG's ideal)."""
    from matrix_sources.indexer.components import open_store
    from matrix_sources.indexer.config import load_config

    store = open_store(load_config(config_dir / "config.yaml"))
    counts = {}
    for room in {i.room_id for i in items}:
        windows = [set(w.event_ids) for w in store.get(where={"room_id": room})]
        for item in (i for i in items if i.room_id == room):
            counts[item.id] = sum(1 for w in windows if w & item.gold)
    return counts


def effective_settings(data_dir: Path) -> dict:
    from matrix_sources.indexer.config import load_config

    cfg = load_config(data_dir / "config.yaml")
    p = cfg.index.chunk_policy
    return {
        "embedder": cfg.index.embedder.model,
        "backend": cfg.index.embedder.backend,
        "window_max_bytes": p.max_bytes,
        "window_gap_seconds": p.gap_ms / 1000,
        "block_windows": p.block_windows,
        "follow_replies": p.follow_replies,
        "min_similarity": cfg.search.min_similarity,
        "no_shared_word_margin": cfg.search.no_shared_word_margin,
        "answer_horizon_hours": cfg.index.answer_horizon_hours,
        "answer_horizon_messages": cfg.index.answer_horizon_messages,
    }


def run_set(ds: evalkit.Dataset, data_dir: Path, args) -> dict:
    items = evalkit.load_items(ds.root, ds.queries)
    if args.reuse_index and (data_dir / "config.yaml").exists():
        built = {"reused_index": True}
    else:
        built = build_index(ds, data_dir, args.set)
    config = data_dir / "config.yaml"
    asked = [(f"{i.id}|{v}", texts_for(i, v)) for i in items for v in args.variants]
    off = offtopic_queries()
    by_lang = xl_items(ds)
    xl = [
        (f"{i.id}|{v}", texts_for(i, v))
        for lang in by_lang.values()
        for i in lang
        for v in args.variants
    ]
    hits, seconds = search_batch(asked + off + xl, config, data_dir, args.in_process)
    n_relevant = windows_holding(data_dir, items + [i for lang in by_lang.values() for i in lang])
    results = evaluate(items, hits, n_relevant, args.variants)
    quotes.annotate(results, items, hits, ds.queries)
    abstained = [qid for qid, _ in off if not hits[qid]]
    report = {
        "items": len(items),
        "eval_root": str(ds.root),
        **built,
        "settings": effective_settings(data_dir),
        "search_seconds": round(seconds, 1),
        "queries": len(asked) + len(off) + len(xl),
        "variants": results,
        "crosslingual": evaluate_xl(by_lang, hits, n_relevant, args.variants),
        "offtopic": {
            "asked": len(off),
            "abstained": len(abstained),
            "answered": [qid for qid, _ in off if hits[qid]],
            "by_lang": {
                lang: [
                    sum(1 for q, _ in off if offtopic_lang(q) == lang and not hits[q]),
                    sum(1 for q, _ in off if offtopic_lang(q) == lang),
                ]
                for lang in dict.fromkeys(offtopic_lang(q) for q, _ in off)
            },
        },
    }
    if args.floor_cost:
        set_config(config, ["search.min_similarity=-1"])
        try:
            unfloored, _ = search_batch(asked, config, data_dir, args.in_process)
        finally:
            set_config(config, [f"search.min_similarity={report['settings']['min_similarity']}"])
        report["without_floor"] = {
            v: r["metrics"]
            for v, r in evaluate(items, unfloored, n_relevant, args.variants).items()
        }
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--eval-root",
        default=None,
        help="the folder holding ubuntu-irc/ and gitter/ (default: "
        "$MATRIX_SOURCES_EVAL_ROOT or ../shared/eval)",
    )
    p.add_argument(
        "--sets", default="ubuntu,gitter,slack", help="comma-separated: ubuntu, gitter, slack"
    )
    p.add_argument("--out", default=str(evalkit.OUT_DIR / "retrieval.json"))
    p.add_argument(
        "--work",
        default=str(evalkit.OUT_DIR),
        help="data dirs go here as retrieval-<set>/ (made afresh each run)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config.yaml setting for the fresh data dirs (repeatable)",
    )
    p.add_argument(
        "--reuse-index",
        action="store_true",
        help="keep the data dirs' index from a previous run; only search again",
    )
    p.add_argument(
        "--floor-cost",
        action="store_true",
        help="ask again with search.min_similarity -1 to show what the floor costs",
    )
    p.add_argument(
        "--in-process",
        action="store_true",
        help="search in this process (the model loaded once), not through the CLI",
    )
    p.add_argument(
        "--patch",
        action="append",
        default=[],
        metavar="MODULE.NAME=VALUE",
        help="set a module constant before searching (repeatable; in-process)",
    )
    p.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS)
    )
    p.add_argument(
        "--folds",
        action="store_true",
        help="for a set with translated questions: the abstain rules fitted on half the "
        "items and measured on the other half, beside in sample (bench/heldout.py)",
    )
    args = p.parse_args(argv)
    args.variants = tuple(v for v in args.variants.split(",") if v)
    if not set(args.variants) <= set(VARIANTS):
        raise SystemExit(f"error: --variants: known are {', '.join(VARIANTS)}")
    evalkit.set_constants(args.patch)

    sets = evalkit.datasets(Path(args.eval_root) if args.eval_root else None)
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    for n in names:
        if n not in sets:
            raise SystemExit(f"error: --sets: unknown set {n!r}; known: {', '.join(sets)}")
        if not sets[n].queries.is_file():
            raise SystemExit(f"error: {sets[n].queries}: no such file (pass --eval-root)")
    started = time.perf_counter()
    reports = {
        n: run_set(sets[n], Path(args.work).resolve() / f"retrieval-{n}", args) for n in names
    }
    if args.folds:
        import heldout

        for n in names:
            if xl_items(sets[n]):
                data_dir = Path(args.work).resolve() / f"retrieval-{n}"
                reports[n]["folds"] = heldout.report({n: (data_dir, sets[n])})
    from matrix_sources.indexer.pipeline.chunker import CHUNKER_VERSION

    evalkit.write_json(
        Path(args.out),
        {
            "benchmark": "retrieval",
            "chunker_version": CHUNKER_VERSION,
            "total_seconds": round(time.perf_counter() - started, 1),
            "machine": evalkit.machine(),
            "sets": reports,
        },
    )
    rows = [
        (f"{n} {v}", reports[n]["variants"][v]["metrics"]) for v in args.variants for n in names
    ]
    if args.floor_cost:
        rows += [
            (f"{n} {v} (no floor)", reports[n]["without_floor"][v])
            for v in args.variants
            for n in names
        ]
    xl_rows = [
        (f"{n} {lang} {v}", r["crosslingual"][lang]["variants"][v]["metrics"])
        for v in args.variants
        for n, r in reports.items()
        for lang in r["crosslingual"]
    ]
    s = next(iter(reports.values()))["settings"]
    print(
        evalkit.table(
            rows,
            f"Retrieval on the dev sets, {s['embedder']}, chunker {CHUNKER_VERSION}, windows "
            f"of {s['window_max_bytes']} bytes, floor {s['min_similarity']} "
            f"(+{s['no_shared_word_margin']} sharing no word), "
            f"answers within {s['answer_horizon_hours']:g} h / "
            f"{s['answer_horizon_messages']} messages",
            COLUMNS,
        )
    )
    print(
        "\n"
        + evalkit.table(
            rows,
            "What the first hit quotes, where it is right (bench/quotes.py: quoted lines "
            "inside the item's conversation; repeated@5: replies quoting a line twice)",
            quotes.COLUMNS,
        )
    )
    if xl_rows:
        print(
            "\n"
            + evalkit.table(
                xl_rows,
                f"Cross-lingual: the same items asked in other languages of the same "
                f"chat, embedder {s['embedder']} (abstained: the share of items that got "
                f"no hit)",
                XL_COLUMNS,
            )
        )
    for n in names:
        r = reports[n]
        o = r["offtopic"]
        print(
            f"\n{n}: {r['items']} items; off-topic questions with no hit: "
            f"{o['abstained']}/{o['asked']} ("
            + ", ".join(f"{lang} {a}/{b}" for lang, (a, b) in o["by_lang"].items())
            + ")"
            + (f" (answered: {', '.join(o['answered'])})" if o["answered"] else "")
        )
        for line in r.get("import_summary", []):
            print("  import: " + line)
        print(
            f"  import {r.get('import_seconds', '-')} s, {r['queries']} queries "
            f"{r['search_seconds']:.1f} s"
        )
    for n, r in reports.items():
        if "folds" in r:
            import heldout

            print(f"\n{n}: query alone, fitted on half the items, held out beside in sample\n")
            print(heldout.table(r["folds"]))
    print(f"\nwrote {args.out}\n")
    for n in names:
        print(evalkit.attribution(sets[n].root, sets[n].title) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
