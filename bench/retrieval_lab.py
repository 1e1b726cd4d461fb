"""Fast, in-process sweeps over chunking and search settings: a tuning aid, not the
benchmark (bench/retrieval.py measures the shipped code through the real CLI).

    .venv/bin/python bench/retrieval_lab.py --policy '{"max_bytes": 400}' \
        --policy '{"follow_replies": false}' --searcher '{"lexical_max_terms": 0}'

Every --policy (ChunkPolicy fields) is tried with every --searcher (Searcher fields);
none given means the defaults. Same data, metrics, chunker and Searcher code as the
product, but windows are built with `indexer.pipeline.chunker` directly (no event log; every
block closed, as an import of old history leaves them), their vectors cached by text
under bench/out/lab-cache/, and each configuration gets a fresh embedded Chroma.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import evalkit  # noqa: E402
import numpy as np  # noqa: E402

from matrix_sources.indexer.pipeline import chunker  # noqa: E402
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID  # noqa: E402
from matrix_sources.indexer.search import searcher as search  # noqa: E402
from matrix_sources.indexer.store.vectors.chroma import ChromaStore  # noqa: E402

CACHE = evalkit.OUT_DIR / "lab-cache"
SHORT = {"query": "q", "keywords": "kw", "query+keywords": "q+kw"}


class CachedEmbedder:
    """The real model behind a by-text cache (vectors are deterministic per text)."""

    name = "sentence-transformers/all-MiniLM-L6-v2"
    dim = 384
    backend = "torch"

    def __init__(self) -> None:
        CACHE.mkdir(parents=True, exist_ok=True)
        self.path = CACHE / "vectors.npz"
        self.vecs: dict[str, np.ndarray] = {}
        if self.path.exists():
            with np.load(self.path) as z:
                self.vecs = {k: z[k] for k in z.files}
        self.model = None
        self.dirty = 0

    def encode(self, texts):
        keys = [hashlib.sha1(t.encode("utf-8", "surrogatepass")).hexdigest() for t in texts]
        missing = [(k, t) for k, t in zip(keys, texts) if k not in self.vecs]
        if missing:
            if self.model is None:
                from matrix_sources.indexer.models.embedder import SentenceTransformerEmbedder

                self.model = SentenceTransformerEmbedder()
            uniq = dict(missing)
            out = self.model.encode(list(uniq.values()))
            for k, v in zip(uniq, out):
                self.vecs[k] = np.asarray(v, dtype=np.float32)
            self.dirty += len(uniq)
        return [self.vecs[k].tolist() for k in keys]

    def save(self) -> None:
        if self.dirty:
            np.savez(self.path, **self.vecs)
            self.dirty = 0


def load_messages(split_dir: Path) -> dict[RoomID, list[Message]]:
    rooms: dict[RoomID, list[Message]] = {}
    for ev in evalkit.load_events(split_dir):
        if ev["type"] != "m.room.message":
            continue
        body = ev["content"].get("body", "")
        if not body.strip():
            continue
        m = Message(
            EventID(ev["event_id"]),
            RoomID(ev["room_id"]),
            UserID(ev["sender"]),
            ev["origin_server_ts"],
            body,
        )
        rooms.setdefault(m.room_id, []).append(m)
    return rooms


def run_config(rooms, items, emb, policy, searcher_kwargs, variants) -> dict:
    windows = [w for msgs in rooms.values() for w in chunker.build_windows(msgs, policy, "")]
    with tempfile.TemporaryDirectory() as tmp:
        store = ChromaStore(path=Path(tmp) / "chroma")
        for i in range(0, len(windows), 500):
            batch = windows[i : i + 500]
            store.upsert(batch, emb.encode([chunker.embed_text(w) for w in batch]))
        emb.save()
        s = search.Searcher(emb, store, **searcher_kwargs)
        by_room: dict[str, list[set]] = {}
        for w in windows:
            by_room.setdefault(w.room_id, []).append(set(w.event_ids))
        out = {"windows": len(windows)}
        for v in variants:
            per = []
            for item in items:
                kw = " ".join(item.keywords)
                texts = {
                    "query": [item.query],
                    "keywords": [kw],
                    "query+keywords": [item.query, kw],
                }[v]
                hits = s.search(search.SourceQuery.build(texts, evalkit.DEPTH))
                rel = [bool(item.gold & set(h.event_ids)) for h in hits]
                n_rel = sum(1 for ws in by_room[item.room_id] if ws & item.gold)
                per.append({"id": item.id, **evalkit.item_scores(rel, n_rel)})
            out[v] = evalkit.aggregate(per)
            out[v + ":first"] = {p["id"]: p["first_hit"] for p in per}
        emb.save()
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--split", default="dev")
    p.add_argument(
        "--policy", action="append", default=[], help="JSON of ChunkPolicy fields (repeatable)"
    )
    p.add_argument(
        "--searcher",
        action="append",
        default=[],
        help="JSON of Searcher keyword arguments (repeatable)",
    )
    p.add_argument("--variants", default="query,keywords,query+keywords")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    root = evalkit.eval_dir(args.eval_dir)
    items = evalkit.load_items(root / args.split)
    rooms = load_messages(root / args.split)
    emb = CachedEmbedder()
    variants = args.variants.split(",")
    rows, results = [], []
    for pol, sk in itertools.product(args.policy or ["{}"], args.searcher or ["{}"]):
        t = time.perf_counter()
        policy = chunker.ChunkPolicy(**json.loads(pol))
        r = run_config(rooms, items, emb, policy, json.loads(sk), variants)
        label = " ".join(f"{k}={v}" for k, v in {**json.loads(pol), **json.loads(sk)}.items())
        for v in variants:
            rows.append((f"{(label or 'defaults')[:28]} {SHORT[v]}", r[v]))
        results.append(
            {
                "policy": json.loads(pol),
                "searcher": json.loads(sk),
                **{k: v for k, v in r.items() if ":" not in k},
                "seconds": round(time.perf_counter() - t, 1),
            }
        )
        print(
            f"{label or 'defaults'}: {r['windows']} windows, {time.perf_counter() - t:.0f} s",
            file=sys.stderr,
        )
    print(evalkit.table(rows, f"lab, chunker {chunker.CHUNKER_VERSION}"))
    if args.out:
        evalkit.write_json(Path(args.out), {"runs": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
