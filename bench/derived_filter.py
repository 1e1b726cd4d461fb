"""The derived filter's cost: matching one message against a manifest of 100,000 artifacts.

    .venv/bin/python bench/derived_filter.py [--artifacts 100000] [--messages 3000]
                                             [--seed 7] [--json bench/out/derived_filter.json]

Synthetic but varied text: a Zipf-distributed vocabulary of 20,000 generated words (so
common words repeat across artifacts, as real chat and docs do), 85% answer sections of
25-70 words and 15% reference sections of 120-600 words. The artifacts are emitted
through `Manifest.append` into a real `artifacts.jsonl`; a fresh `Manifest` then loads
the file into its inverted index (what the service pays at its first pipeline run). The
messages are what a room sends: 80% new text, 10% a pasted answer, 10% ten lines of a
reference section with the poster's own words around them.

Prints figures; asserts nothing about time (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from matrix_sources.indexer.config import DerivedConfig  # noqa: E402
from matrix_sources.indexer.derived.filter import Matcher  # noqa: E402
from matrix_sources.indexer.derived.manifest import Manifest, utc_now_iso  # noqa: E402
from matrix_sources.indexer.derived.normalise import sha256_normalised, text_shingles  # noqa: E402
from matrix_sources.indexer.records import Artifact  # noqa: E402

VOCAB = 20_000
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class TextGen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        words = set()
        while len(words) < VOCAB:
            words.add("".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 10))))
        self.words = sorted(words)
        weights = [1 / (r + 1) for r in range(VOCAB)]  # Zipf, s = 1
        total = sum(weights)
        acc, self.cum = 0.0, []
        for w in weights:
            acc += w / total
            self.cum.append(acc)

    def text(self, n: int) -> str:
        picks = self.rng.choices(self.words, cum_weights=self.cum, k=n)
        lines, i = [], 0
        while i < n:  # lines of 5-12 words, like chat lines and doc lines
            step = self.rng.randint(5, 12)
            lines.append(" ".join(picks[i : i + step]))
            i += step
        return "\n".join(lines)


def percentiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    at = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
    return {
        "n": len(xs),
        "mean": statistics.fmean(xs),
        "p50": at(0.5),
        "p95": at(0.95),
        "p99": at(0.99),
        "max": xs[-1],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--artifacts", type=int, default=100_000)
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    gen = TextGen(rng)
    cfg = DerivedConfig()
    k = cfg.shingle_size
    tmp = Path(tempfile.mkdtemp(prefix="derived-bench-"))
    path = tmp / "artifacts.jsonl"

    # -- emit: normalise, shingle, append (batches of 1000, as a big `ref add` does) ----
    texts: list[tuple[str, str]] = []
    writer = Manifest(path, k)
    batch: list[Artifact] = []
    now = utc_now_iso()
    shingle_s = append_s = 0.0
    for i in range(args.artifacts):
        if rng.random() < 0.85:
            kind, text = "answer", gen.text(rng.randint(25, 70))
        else:
            kind, text = "reference", gen.text(rng.randint(120, 600))
        t0 = time.perf_counter()
        sha, sh = sha256_normalised(text), text_shingles(text, k)
        shingle_s += time.perf_counter() - t0
        if kind == "answer":
            a = Artifact(kind, f"answer:$r{i}#1", sha, sh, now, k, sources=(f"$src{i}",))
        else:
            a = Artifact(kind, f"docs/f{i}.md#S{i}", sha, sh, now, k, corpus="docs")
        texts.append((kind, text))
        batch.append(a)
        if len(batch) == 1000 or i == args.artifacts - 1:
            t0 = time.perf_counter()
            writer.append(batch)
            append_s += time.perf_counter() - t0
            batch = []
    emit_s = shingle_s + append_s
    del writer

    # -- load: a fresh reader builds the inverted index from the file ------------------
    rss0 = rss_mb()
    started = time.perf_counter()
    manifest = Manifest(path, k)
    manifest.refresh()
    load_s = time.perf_counter() - started
    rss1 = rss_mb()
    matcher = Matcher(manifest, cfg)

    # -- match: what a room sends --------------------------------------------------------
    cases: dict[str, list[float]] = {"new text": [], "pasted answer": [], "partial reference": []}
    cpu: dict[str, list[float]] = {name: [] for name in cases}  # CPU time: the machine is shared
    caught = {name: 0 for name in cases}
    answers = [t for kind, t in texts if kind == "answer"]
    refs = [t for kind, t in texts if kind == "reference"]
    for _ in range(args.messages):
        r = rng.random()
        if r < 0.8:
            name, msg = "new text", gen.text(rng.randint(8, 80))
        elif r < 0.9:
            name, msg = "pasted answer", rng.choice(answers)
        else:
            lines = rng.choice(refs).split("\n")
            start = rng.randrange(max(1, len(lines) - 10))
            msg = gen.text(12) + "\n" + "\n".join(lines[start : start + 10]) + "\n" + gen.text(15)
            name = "partial reference"
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        m = matcher.match(msg)
        cases[name].append((time.perf_counter_ns() - t0) / 1000)
        cpu[name].append((time.thread_time_ns() - c0) / 1000)
        caught[name] += m is not None

    # -- one more answer appended live (what a `!sources` reply costs) --------------------
    appends = []
    for i in range(50):
        text = gen.text(40)
        a = Artifact(
            "answer",
            f"answer:$live{i}#1",
            sha256_normalised(text),
            text_shingles(text, k),
            utc_now_iso(),
            k,
        )
        t0 = time.perf_counter_ns()
        manifest.append([a])
        appends.append((time.perf_counter_ns() - t0) / 1000)

    figures = {
        "artifacts": len(manifest),
        "postings": manifest.index.postings,
        "manifest_mb": path.stat().st_size / 2**20,
        "emit_s": emit_s,
        "shingle_us_per_artifact": shingle_s * 1e6 / args.artifacts,
        "append_us_per_artifact": append_s * 1e6 / args.artifacts,
        "load_s": load_s,
        "index_array_mb": manifest.index.nbytes / 2**20,
        "rss_growth_mb": rss1 - rss0,
        "match_us": {name: percentiles(xs) for name, xs in cases.items() if xs},
        "match_cpu_us": {name: percentiles(xs) for name, xs in cpu.items() if xs},
        "caught": {name: f"{caught[name]}/{len(cases[name])}" for name in cases},
        "append_one_answer_us": percentiles(appends),
        "config": {
            "answer_threshold": cfg.answer_threshold,
            "reference_threshold": cfg.reference_threshold,
            "min_words": cfg.min_words,
            "shingle_size": k,
        },
    }
    print(
        f"derived filter, {figures['artifacts']:,} artifacts "
        f"({figures['postings']:,} shingle postings, manifest {figures['manifest_mb']:.0f} MB)"
    )
    print(
        "  emit: normalise + shingle            "
        f"{figures['shingle_us_per_artifact']:.0f} µs/artifact"
    )
    print(
        "        append (1000 a batch, fsync)   "
        f"{figures['append_us_per_artifact']:.0f} µs/artifact"
    )
    print(f"  load + index build                   {load_s:.1f} s")
    print(
        f"  memory                               index arrays {figures['index_array_mb']:.0f} MB,"
        f" process RSS +{figures['rss_growth_mb']:.0f} MB"
    )
    print(
        "  match, µs per message       wall: mean    p50    p95    p99 | CPU: p50    p95   caught"
    )
    for name, p in figures["match_us"].items():
        c = figures["match_cpu_us"][name]
        print(
            f"    {name:<17} (n={p['n']:>5})  {p['mean']:6.0f} {p['p50']:6.0f} "
            f"{p['p95']:6.0f} {p['p99']:6.0f} |   {c['p50']:6.0f} {c['p95']:6.0f}   "
            f"{figures['caught'][name]}"
        )
    ap_ = figures["append_one_answer_us"]
    print(
        f"  append one answer (fsync)            p50 {ap_['p50']:.0f} µs, p95 {ap_['p95']:.0f} µs"
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
