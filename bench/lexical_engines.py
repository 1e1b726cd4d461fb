"""The keyword leg two ways, on the three dev sets' chat (issue 22: a well-kept engine
against the hand-written postings):

    .venv/bin/python bench/lexical_engines.py      # bm25s must be importable (not a dependency)

(a) postings  indexer/search/termindex.py + lexical.LexicalRanker, as the service runs it
(b) bm25s     bm25s.BM25 (k1 1.2, b 0.75), fed the same tokenizer's keys
              (indexer/search/tokens.py), so both match the same words

Both index the windows the real chunker cuts from every dev room. Reported: build time,
query p50/p95 over the dev items' search-box words and every word of 200 sampled
messages, how often the first result holds the word searched (the issue's 500-message
test asks it of the whole search), top-10 agreement, and what a live write costs: the
postings take a window at a time; bm25s has no update, so a changed window means
indexing everything again.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import evalkit  # noqa: E402

from matrix_sources.indexer.pipeline.chunker import build_windows  # noqa: E402
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID  # noqa: E402
from matrix_sources.indexer.search.lexical import LexicalRanker, terms  # noqa: E402
from matrix_sources.indexer.search.termindex import TermIndex, window_bodies  # noqa: E402
from matrix_sources.indexer.search.tokens import base_of, keys, matches  # noqa: E402


def windows_of_dev_sets():
    out = []
    for ds in evalkit.datasets().values():
        rooms: dict[str, list[Message]] = {}
        for ev in evalkit.load_events(ds.events.parent):
            if ev["type"] != "m.room.message" or not ev["content"].get("body", "").strip():
                continue
            rooms.setdefault(ev["room_id"], []).append(
                Message(
                    EventID(ev["event_id"]),
                    RoomID(ev["room_id"]),
                    UserID(ev["sender"]),
                    ev["origin_server_ts"],
                    ev["content"]["body"].strip(),
                )
            )
        for msgs in rooms.values():
            out += build_windows(msgs, ChunkPolicy())
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main() -> int:
    import bm25s

    windows = windows_of_dev_sets()
    ids = [w.window_id for w in windows]
    parts = {w.window_id: window_bodies(w) for w in windows}
    print(f"{len(windows)} windows", file=sys.stderr)

    t = time.perf_counter()
    index = TermIndex()
    index.windows_written(windows)
    index.ready.set()
    built_a = time.perf_counter() - t
    ranker = LexicalRanker(lambda *a: [], lambda i: {}, index.count, index)

    t = time.perf_counter()
    corpus = [[k for p in parts[w] for k in keys(p)] for w in ids]
    engine = bm25s.BM25(k1=1.2, b=0.75)
    engine.index(corpus, show_progress=False)
    built_b = time.perf_counter() - t

    queries = [
        " ".join(i.keywords)
        for ds in evalkit.datasets().values()
        for i in evalkit.load_items(ds.root, ds.queries)
    ]
    rng = random.Random(22)
    words = [t for w in rng.sample(windows, 200) for m in w.messages for t in terms(m.body)]
    asked = list(dict.fromkeys(queries + words))
    times_a, times_b, agree, first_a, first_b = [], [], [], 0, 0
    for q in asked:
        qt = terms(q)
        t = time.perf_counter()
        got_a = ranker.rank(q, 10)
        times_a.append(time.perf_counter() - t)
        t = time.perf_counter()
        # bm25s scores exact keys: the stems' prefixes are spelled out as the keys they match
        vocab = engine.vocab_dict
        qkeys = [k for term in qt for k in vocab if matches(*base_of(term), k)]
        got_b = []
        if qkeys:
            res, scores = engine.retrieve([qkeys], k=10, show_progress=False)
            got_b = [ids[i] for i, s in zip(res[0], scores[0]) if s > 0]
        times_b.append(time.perf_counter() - t)
        if got_a or got_b:
            agree.append(len(set(got_a) & set(got_b)) / max(len(got_a), len(got_b)))
        if len(qt) == 1:

            def holds(wid, q=qt[0]):
                return any(matches(*base_of(q), k) for p in parts[wid] for k in keys(p))

            first_a += bool(got_a) and holds(got_a[0])
            first_b += bool(got_b) and holds(got_b[0])
    single = sum(1 for q in asked if len(terms(q)) == 1)
    print(f"queries: {len(asked)} ({single} single words)")
    print(f"{'':24}{'postings':>14}{'bm25s':>14}")
    print(f"{'build (s)':24}{built_a:14.2f}{built_b:14.2f}")
    print(
        f"{'query p50 (ms)':24}{1000 * statistics.median(times_a):14.2f}"
        f"{1000 * statistics.median(times_b):14.2f}"
    )
    print(
        f"{'query p95 (ms)':24}{1000 * pct(times_a, 0.95):14.2f}{1000 * pct(times_b, 0.95):14.2f}"
    )
    print(f"{'first holds the word':24}{first_a / single:14.3f}{first_b / single:14.3f}")
    print(f"top-10 overlap: {statistics.mean(agree):.3f}")
    t = time.perf_counter()
    index.windows_written(windows[:1])
    print(
        f"{'one window rewritten (s)':24}{time.perf_counter() - t:14.4f}"
        f"{built_b:14.2f} (a full re-index)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
