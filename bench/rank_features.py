"""What the presenter knows about each candidate, dumped for offline ranking trials: a
tuning aid for the first hit (issue 22), not a benchmark.

    .venv/bin/python bench/rank_features.py --sets ubuntu,gitter,slack --out F.pkl

Runs each dev set's questions (query alone) and the off-topic ones through the shipped
searcher on the data dirs `bench/retrieval.py` built (bench/out/retrieval-<set>), and
for every window of the presenter's pool records: the window's and its closest line's
cosine similarity, the share of the query's words it holds, whether it clears the
floor, what its responses say (count, best cosine to the query and to the matched
question) and whether it or its responses hold a gold answer. Then replay orders on the
dump in seconds (success@1 and @5 per set; the figures it gives run about one item above
the searcher's, which also drops responses under the answer floors):

    .venv/bin/python bench/rank_features.py --replay F.pkl \
        --key "0.4*sim + 0.45*line + 0.15*resp_q + 0.1*share" --key "key + 0.05*share"
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import asking  # noqa: E402
import evalkit  # noqa: E402
import numpy as np  # noqa: E402

from matrix_sources.indexer.records import CORPUS_CHAT  # noqa: E402
from matrix_sources.indexer.search import lines, present  # noqa: E402


def capture(presenter, hits, query_vectors, floor, evidence) -> list[dict]:
    queries = np.asarray(query_vectors, dtype=np.float32)
    rows = []
    for rank, h in enumerate(hits):
        if h.corpus != CORPUS_CHAT:
            continue
        w = presenter.eventlog.texts.window_messages(h.window_id)
        if not w:
            continue
        vecs = presenter._vectors([m.body for m in w])
        line_sims = (vecs @ queries.T).max(axis=1)
        fair = np.array([not lines.stuffed(m.body) for m in w])
        anchor = int(np.argmax(np.where(fair, line_sims, -2.0) if fair.any() else line_sims))
        sim = h.similarity if h.similarity is not None else -1.0
        key = (1 - present.LINE_WEIGHT) * sim + present.LINE_WEIGHT * float(line_sims[anchor])
        plan = presenter.conversations.plan(h, w)
        outside, linked = presenter._answers(plan, anchor)
        inside = [(m, vecs[i]) for i, m in enumerate(w) if i > anchor and m.event_id in linked]
        avecs = presenter._vectors([m.body for m, _ in outside])
        resp = inside + [(m, avecs[j]) for j, (m, _) in enumerate(outside)]
        asked = set(evidence.weights) | set(present.tokens(w[anchor].body))
        to_q = [float((v @ queries.T).max()) for _, v in resp]
        to_a = [float(v @ vecs[anchor]) for _, v in resp]
        nov = [lines.novelty(m.body, asked) for m, _ in resp]
        rows.append(
            {
                "rank": rank,
                "sim": sim,
                "line": float(line_sims[anchor]),
                "key": key,
                "share": evidence.share(h.bodies),
                "above": floor is None or key >= floor.needed(h.bodies),
                "n_lines": len(w),
                "anchor_at": anchor,
                "senders": len({m.sender for m in w}),
                "anchor_q": "?" in w[anchor].body,
                "n_resp": len(resp),
                "n_out": len(outside),
                "resp_q": max(to_q, default=0.0),
                "resp_a": max(to_a, default=0.0),
                "resp_best": max(((a + b) * n for a, b, n in zip(to_q, to_a, nov)), default=0.0),
                "resp_says": sum(
                    1
                    for (m, _), a, b in zip(resp, to_q, to_a)
                    if lines.says_something(m, asked) and max(a, b) >= 0.1
                ),
                "line_mean": float(line_sims.mean()),
                "events": set(h.event_ids) | {m.event_id for m, _ in resp},
                "window_events": set(h.event_ids),
            }
        )
    return rows


def collect(sets: list[str]) -> dict:
    dumped: dict = {}
    real = present.Presenter.present_above

    def spy(self, hits, query_vectors, top_k=None, floor=None, evidence=present.NO_EVIDENCE):
        spy.rows = capture(self, hits, query_vectors, floor, evidence)
        return real(self, hits, query_vectors, top_k, floor, evidence)

    present.Presenter.present_above = spy
    for name in sets:
        ds = evalkit.datasets()[name]
        items = evalkit.load_items(ds.root, ds.queries)
        config = evalkit.OUT_DIR / f"retrieval-{name}" / "config.yaml"
        asked = [(f"{i.id}|query", [i.query]) for i in items] + asking.offtopic_queries()
        from matrix_sources.indexer.components import Index
        from matrix_sources.indexer.config import load_config
        from matrix_sources.indexer.models.embedder import load_embedder
        from matrix_sources.indexer.search.searcher import SourceQuery

        cfg = load_config(config)
        if not asking.MODEL:
            asking.MODEL.append(
                load_embedder(cfg.index.embedder.model, cfg.index.embedder.backend, cfg.models_dir)
            )
        index = Index.open(cfg, asking.MODEL[0])
        gold = {f"{i.id}|query": i.gold for i in items}
        out = {}
        try:
            for n, (qid, texts) in enumerate(asked, 1):
                spy.rows = []
                hits = index.searcher.search(SourceQuery.build(texts, evalkit.DEPTH))
                out[qid] = {
                    "rows": spy.rows,
                    "gold": gold.get(qid, frozenset()),
                    "hits": [h.window_id for h in hits],
                    "shown1": set(hits[0].shown_event_ids)
                    if hits and hasattr(hits[0], "shown_event_ids")
                    else {ln.event_id for ln in hits[0].shown}
                    if hits
                    else set(),
                }
                if n % 20 == 0:
                    print(f"{name}: {n}/{len(asked)}", file=sys.stderr, flush=True)
        finally:
            index.close()
        dumped[name] = out
    present.Presenter.present_above = real
    return dumped


def replay(data: dict, key: str) -> dict[str, tuple[float, float]]:
    """success@1 and @5 per set when the rows the floor kept are ordered by `key`, a
    Python expression over a row's fields."""
    order = compile(key, "--key", "eval")
    names = {"__builtins__": {"min": min, "max": max}}
    out = {}
    for name, questions in data.items():
        asked = [q for q in questions.values() if q["gold"]]
        s1 = s5 = 0
        for q in asked:
            rows = sorted(
                (r for r in q["rows"] if r["above"]),
                key=lambda r: (-eval(order, names, dict(r)), r["rank"]),
            )
            hit = [bool(r["events"] & q["gold"]) for r in rows]
            s1 += any(hit[:1])
            s5 += any(hit[:5])
        out[name] = (round(s1 / len(asked), 3), round(s5 / len(asked), 3))
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sets", default="ubuntu,gitter,slack")
    p.add_argument("--out", default=str(evalkit.OUT_DIR / "rank-features.pkl"))
    p.add_argument("--replay", metavar="PKL", help="replay orders on a dump instead")
    p.add_argument("--key", action="append", default=[], help="an order (with --replay)")
    a = p.parse_args()
    if a.replay:
        with open(a.replay, "rb") as f:
            data = pickle.load(f)
        for key in a.key or ["key + 0.05*share"]:
            print(
                f"{key}: "
                + ", ".join(
                    f"{n} success@1 {s1:.3f} @5 {s5:.3f}"
                    for n, (s1, s5) in replay(data, key).items()
                )
            )
        return 0
    data = collect(a.sets.split(","))
    with open(a.out, "wb") as f:
        pickle.dump(data, f)
    print(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
