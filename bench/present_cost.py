"""What reading the responses costs: the presenter's time per search, with a part as
shipped against without it, in one process, alternating per query. `--part responses`:
the responses in the order (`RANK_ANSWER` as shipped) against without (0: only the hits
shown are planned, as before issue 22's order); `--part dialogue`: a back and forth
followed past the horizon (`conversation.DIALOGUE_HOPS` as shipped) against not (0).

    .venv/bin/python bench/present_cost.py [--sets ubuntu,gitter,slack] [--top 5]
        [--part responses|dialogue]

Each dev set's questions through the shipped searcher on the data dirs
`bench/retrieval.py` built (bench/out/retrieval-<set>); the line cache is emptied before
each search (a question nobody asked before: the cold case). Prints p50 and p95 of
`Presenter.present_above` and the ratio, and writes bench/out/present-cost.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import evalkit  # noqa: E402

from matrix_sources.indexer.search import conversation, present  # noqa: E402

PARTS = {"responses": (present, "RANK_ANSWER"), "dialogue": (conversation, "DIALOGUE_HOPS")}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p * len(xs)) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="ubuntu,gitter,slack")
    ap.add_argument("--top", type=int, default=5, help="hits asked for (!sources: 5)")
    ap.add_argument("--part", choices=sorted(PARTS), default="responses")
    a = ap.parse_args()
    module, knob = PARTS[a.part]
    from matrix_sources.indexer.components import Index
    from matrix_sources.indexer.config import load_config
    from matrix_sources.indexer.models.embedder import load_embedder
    from matrix_sources.indexer.search.searcher import SourceQuery

    shipped = getattr(module, knob)
    times: dict[float, list[float]] = {shipped: [], 0: []}
    real = present.Presenter.present_above

    counting = [False]

    def timed(self, *args, **kw):
        t = time.perf_counter()
        try:
            return real(self, *args, **kw)
        finally:
            if counting[0]:
                times[getattr(module, knob)].append(time.perf_counter() - t)

    present.Presenter.present_above = timed
    model = None
    for name in a.sets.split(","):
        ds = evalkit.datasets()[name]
        items = evalkit.load_items(ds.root, ds.queries)
        cfg = load_config(evalkit.OUT_DIR / f"retrieval-{name}" / "config.yaml")
        model = model or load_embedder(
            cfg.index.embedder.model, cfg.index.embedder.backend, cfg.models_dir
        )
        index = Index.open(cfg, model)
        try:
            s = index.searcher
            counting[0] = False
            s.search(SourceQuery.build([items[0].query], a.top))  # warm the model
            counting[0] = True
            for n, it in enumerate(items):
                order = (shipped, 0) if n % 2 else (0, shipped)
                for w in order:
                    setattr(module, knob, w)
                    s.presenter._cache.clear()
                    s.search(SourceQuery.build([it.query], a.top))
            print(f"{name}: {len(items)} questions", file=sys.stderr)
        finally:
            setattr(module, knob, shipped)
            index.close()
    figs = {}
    for w, xs in times.items():
        figs[str(w)] = {
            "searches": len(xs),
            "p50_ms": round(statistics.median(xs) * 1000, 1),
            "p95_ms": round(pct(xs, 0.95) * 1000, 1),
        }
    base, new = figs["0"], figs[str(shipped)]
    print(f"presenter, cold line cache, top {a.top}, {new['searches']} searches each")
    print(f"  {a.part} ({knob} {shipped}): p50 {new['p50_ms']} ms, p95 {new['p95_ms']} ms")
    print(f"  without ({knob} 0): p50 {base['p50_ms']} ms, p95 {base['p95_ms']} ms")
    print(
        f"  ratio p50 {new['p50_ms'] / base['p50_ms']:.2f}, p95 "
        f"{new['p95_ms'] / base['p95_ms']:.2f}"
    )
    evalkit.write_json(
        evalkit.OUT_DIR / f"present-cost-{a.part}.json",
        {
            "benchmark": "present_cost",
            "part": a.part,
            "top": a.top,
            "sets": a.sets,
            "machine": evalkit.machine(),
            "figures": figs,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
