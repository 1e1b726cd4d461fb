"""Retrieval quality on real chat: the Ubuntu IRC eval set through the real CLI.

    .venv/bin/python bench/retrieval.py [--eval-dir ../shared/eval/ubuntu-irc]
                                        [--out bench/out/retrieval.json]

A fresh data dir (`matrix-sources init`), the split's rooms on the allowlist
(`matrix-sources allowlist add`), its events imported (`matrix-sources import`), then
every item asked three ways through `matrix-sources search --queries FILE --top 10`:

    query            the natural-language question, one text
    keywords         the user's search-box words joined by spaces, one text
    query+keywords   both, as a two-text query (fused by reciprocal rank)

A window is a hit when its event ids hold a gold answer event. Prints a table and the
data's attribution, writes the figures (and every item's first-hit rank) as JSON.
`--set index.window_max_bytes=500` edits the fresh data dir's config.yaml, for trying
settings without touching the templates.
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

CLI = str(Path(sys.executable).parent / "matrix-sources")
VARIANTS = ("query", "keywords", "query+keywords")


def texts_for(item: evalkit.Item, variant: str) -> list[str]:
    kw = " ".join(item.keywords)
    return {"query": [item.query], "keywords": [kw], "query+keywords": [item.query, kw]}[variant]


def run(args: list[str], **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    res = subprocess.run([CLI, *args], text=True, capture_output=True, env=env, **kw)
    if res.returncode != 0:
        raise SystemExit(f"error: matrix-sources {args[0]} exited {res.returncode}\n"
                         f"{res.stderr[-3000:]}")
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


def build_index(split_dir: Path, data_dir: Path, settings: list[str]) -> dict:
    if data_dir.exists():
        shutil.rmtree(data_dir)
    run(["init", "--data-dir", str(data_dir)])
    config = data_dir / "config.yaml"
    applied = set_config(config, settings) if settings else {}
    run(["allowlist", "add", "-c", str(config), *evalkit.room_ids(split_dir)])
    t = time.perf_counter()
    res = run(["import", "-q", "-c", str(config), str(split_dir / "events.jsonl")])
    return {"import_seconds": round(time.perf_counter() - t, 1),
            "import_summary": res.stdout.strip().splitlines(), "settings": applied}


def search_all(items: list[evalkit.Item], config: Path, work: Path) -> tuple[dict, float]:
    qfile = work / "queries.jsonl"
    with open(qfile, "w", encoding="utf-8") as f:
        for item in items:
            for v in VARIANTS:
                f.write(json.dumps({"id": f"{item.id}|{v}", "texts": texts_for(item, v),
                                    "top_k": evalkit.DEPTH}) + "\n")
    t = time.perf_counter()
    res = run(["search", "-c", str(config), "--queries", str(qfile), "--top",
               str(evalkit.DEPTH)])
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
    from indexer.config import load_config
    from indexer.components import open_store

    store = open_store(load_config(config_dir / "config.yaml"))
    counts = {}
    for room in {i.room_id for i in items}:
        windows = [set(w.event_ids) for w in store.get(where={"room_id": room})]
        for item in (i for i in items if i.room_id == room):
            counts[item.id] = sum(1 for w in windows if w & item.gold)
    return counts


def effective_policy(data_dir: Path) -> dict:
    from indexer.config import load_config

    p = load_config(data_dir / "config.yaml").policy
    return {"window_max_bytes": p.max_bytes, "window_gap_seconds": p.gap_ms / 1000,
            "block_windows": p.block_windows, "follow_replies": p.follow_replies}


def evaluate(items: list[evalkit.Item], hits: dict, n_relevant: dict[str, int]) -> dict:
    results = {}
    for v in VARIANTS:
        per_item = []
        for item in items:
            rel = [bool(item.gold & set(h["event_ids"])) for h in hits[f"{item.id}|{v}"]]
            per_item.append({"id": item.id, **evalkit.item_scores(rel, n_relevant[item.id])})
        results[v] = {"metrics": evalkit.aggregate(per_item),
                      "first_hit": {s["id"]: s["first_hit"] for s in per_item}}
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None,
                   help=f"default: ${evalkit.ENV_EVAL_DIR} or {evalkit.DEFAULT_EVAL_DIR}")
    p.add_argument("--split", default="dev")
    p.add_argument("--out", default=str(evalkit.OUT_DIR / "retrieval.json"))
    p.add_argument("--data-dir", default=str(evalkit.OUT_DIR / "retrieval-data"),
                   help="made afresh each run (removed first)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config.yaml setting for the fresh data dir (repeatable)")
    p.add_argument("--reuse-index", action="store_true",
                   help="keep the data dir's index from a previous run; only search again")
    args = p.parse_args(argv)

    root = evalkit.eval_dir(args.eval_dir)
    split_dir = root / args.split
    items = evalkit.load_items(split_dir)
    data_dir = Path(args.data_dir).resolve()
    started = time.perf_counter()
    if args.reuse_index and (data_dir / "config.yaml").exists():
        built = {"reused_index": True}
    else:
        built = build_index(split_dir, data_dir, args.set)
    policy = effective_policy(data_dir)
    hits, search_seconds = search_all(items, data_dir / "config.yaml", data_dir)
    results = evaluate(items, hits, windows_holding(data_dir, items))
    total = time.perf_counter() - started

    from indexer.chunker import CHUNKER_VERSION

    report = {
        "benchmark": "retrieval", "split": args.split, "items": len(items),
        "eval_dir": str(root), "chunker_version": CHUNKER_VERSION, "policy": policy,
        **built,
        "search_seconds": round(search_seconds, 1), "queries": len(items) * len(VARIANTS),
        "total_seconds": round(total, 1), "machine": evalkit.machine(),
        "variants": results,
    }
    evalkit.write_json(Path(args.out), report)
    print(evalkit.table([(f"matrix-sources {v}", results[v]["metrics"]) for v in VARIANTS],
                        f"Retrieval on {args.split} ({len(items)} items), chunker "
                        f"{CHUNKER_VERSION}, windows of {policy['window_max_bytes']} bytes, "
                        f"gap {policy['window_gap_seconds']:g} s"))
    for line in built.get("import_summary", []):
        print("  import: " + line)
    print(f"\nimport {built.get('import_seconds', '-')} s, {len(items) * len(VARIANTS)} "
          f"queries {search_seconds:.1f} s, total {total:.1f} s; wrote {args.out}\n")
    print(evalkit.attribution(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
