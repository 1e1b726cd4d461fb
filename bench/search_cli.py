"""`matrix-sources search` wall time, process start included: through the running
service's search API, against opening the data dir (the service stopped). Issue 25's
target: at most 1 s through the service, median of 5, at 100,000 windows as well.

    .venv/bin/python bench/search_cli.py [--reps 5] [--at-100k] [--events N]
                                         [--out bench/out/search_cli.json]

Default: the Ubuntu IRC dev chat (../shared/eval/ubuntu-irc/dev) imported into a fresh
data dir with the real model (`--events N`: its first N events only, for a quick run).
`--at-100k`: the 100,000-window collection of bench/corpus100k.py instead (built first
if it is not cached: tens of minutes, once).

Then a real local Synapse and `matrix-sources run` on that collection (tests/harness.py,
as the end-to-end tests start them), and:

api      `matrix-sources search --json QUESTION` as a fresh process, `--reps` times, each
         with another dev question (the console script, as a person or an agent runs
         it); wall time from spawn to exit. Also `python -X importtime` of that process:
         its imports, the five largest.
stopped  the service stopped, the same commands: the data dir opened, the model loaded
         by the command (what every search cost before the API).

Each question's hits are compared between the two (they must be the same). Prints the
figures and writes them as JSON; run it alone on the machine (timing).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import evalkit  # noqa: E402
import perfkit  # noqa: E402

CLI = str(Path(sys.executable).parent / "matrix-sources")
TARGET_S = 1.0


def env() -> dict:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "ANONYMIZED_TELEMETRY": "False",
    }


def timed_search(config: Path, question: str) -> tuple[float, list[dict], str]:
    t = time.perf_counter()
    res = subprocess.run(
        [CLI, "search", "-c", str(config), "--json", question],
        capture_output=True,
        text=True,
        env=env(),
        timeout=600,
    )
    seconds = time.perf_counter() - t
    if res.returncode != 0:
        raise SystemExit(f"error: search exited {res.returncode}: {res.stderr[-2000:]}")
    return seconds, json.loads(res.stdout)["hits"], res.stderr


def first_difference(a: object, b: object, path: str = "hits") -> str:
    """Where two JSON values first differ, as a path and the two values there."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return first_difference(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
        if len(a) != len(b):
            return f"{path}: {len(a)} items through the API, {len(b)} stopped"
    return f"{path}: {str(a)[:80]!r} through the API, {str(b)[:80]!r} stopped"


def import_profile(config: Path, question: str) -> dict:
    """`python -X importtime` of the API path: total and the five largest top-level
    imports (cumulative microseconds, as the flag prints them)."""
    probe = (
        "import sys; from matrix_sources.appservice.cli.main import main; "
        f"sys.exit(main(['search', '-c', {str(config)!r}, '--json', {question!r}]))"
    )
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe],
        capture_output=True,
        text=True,
        env=env(),
        timeout=600,
    )
    top = []
    for line in res.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\S.*)$", line)
        if m and not m.group(3).startswith(" "):  # top level: no indentation
            top.append((int(m.group(2)), m.group(3)))
    top.sort(reverse=True)
    heavy = [
        m
        for m in ("torch", "chromadb", "mautrix", "onnxruntime")
        if re.search(rf"\| +{m}$", res.stderr, re.M)
    ]
    return {
        "imports_ms": round(sum(us for us, _ in top) / 1000),
        "largest_ms": {name: round(us / 1000) for us, name in top[:5]},
        "heavy_imported": heavy,
    }


def collection_size(config: Path) -> int:
    from matrix_sources.indexer.components import open_store
    from matrix_sources.indexer.config import load_config

    return open_store(load_config(config), inspect=True).count()


def rows(config: Path, questions: list[str]) -> tuple[list[float], list[list[dict]], str]:
    times, hits, err = [], [], ""
    for q in questions:
        s, h, err = timed_search(config, q)
        times.append(s)
        hits.append(h)
    return times, hits, err


def seed(args, work: Path) -> tuple[Path, list[str]]:
    """A data dir holding the collection and its event log, and its rooms."""
    if args.at_100k:
        import corpus100k

        if corpus100k.open_cache().count() < 100_000:
            print(
                "building the 100,000-window collection first (bench/corpus100k.py; "
                "once, resumable)",
                flush=True,
            )
            corpus100k.build(work, 100_000, 0)
        return corpus100k.CACHE, corpus100k.room_ids()
    ds = evalkit.datasets(args.eval_root)["ubuntu"]
    rooms = evalkit.room_ids(ds.root, ds.rooms)
    data = work / "seed"
    config = perfkit.fresh_data_dir(data, rooms)
    events = ds.events
    if args.events:
        events = work / "events.jsonl"
        with open(ds.events, encoding="utf-8") as f, open(events, "w", encoding="utf-8") as out:
            out.writelines(line for _, line in zip(range(args.events), f))
    t = time.perf_counter()
    subprocess.run(
        [CLI, "import", "-q", "-c", str(config), str(events)],
        check=True,
        env=env(),
        capture_output=True,
    )
    print(f"imported {events} in {time.perf_counter() - t:.0f} s", flush=True)
    return data, rooms


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--at-100k", action="store_true")
    p.add_argument("--events", type=int, default=0, help="import only the first N events")
    p.add_argument("--eval-root", default=None)
    p.add_argument("--out", default=str(evalkit.OUT_DIR / "search_cli.json"))
    args = p.parse_args(argv)
    perfkit.quiet_env()
    import stackkit

    work = evalkit.OUT_DIR / "search-cli"
    work.mkdir(parents=True, exist_ok=True)
    seeded, rooms = seed(args, work)
    items = evalkit.load_items(evalkit.datasets(args.eval_root)["ubuntu"].root / "dev")
    questions = [i.query for i in items][: args.reps]
    with stackkit.running_stack(
        work / "stack", seed_chroma=seeded / "chroma", allowlist=rooms
    ) as stack:
        api, api_hits, api_err = rows(stack.config, questions)
        assert "loading the model" not in api_err, api_err
        profile = import_profile(stack.config, questions[0])
        stack.service.stop()
        stopped, stopped_hits, _ = rows(stack.config, questions)
        windows = collection_size(stack.config)
    same = sum(a == b for a, b in zip(api_hits, stopped_hits))
    for q, a, b in zip(questions, api_hits, stopped_hits):
        if a != b:
            print(f"  differs: {q[:60]!r}: {first_difference(a, b)}", flush=True)
    report = {
        "machine": perfkit.machine(),
        "load_average": perfkit.load_average(),
        "windows": windows,
        "questions": len(questions),
        "api_s": [round(s, 3) for s in api],
        "stopped_s": [round(s, 3) for s in stopped],
        "api_median_s": round(statistics.median(api), 3),
        "stopped_median_s": round(statistics.median(stopped), 3),
        "target_s": TARGET_S,
        "same_hits": f"{same}/{len(questions)}",
        **profile,
    }
    print(
        f"matrix-sources search, wall time per process ({len(questions)} questions, "
        f"{windows} windows; load {report['load_average']})"
    )
    print(
        f"  through the service's API   median {report['api_median_s']:.2f} s  "
        f"{report['api_s']}  (target <= {TARGET_S} s)"
    )
    print(
        f"  opening the data dir        median {report['stopped_median_s']:.2f} s  "
        f"{report['stopped_s']}"
    )
    print(f"  same hits both ways: {report['same_hits']}")
    print(
        f"  API path imports: {profile['imports_ms']} ms (python -X importtime), largest "
        + ", ".join(f"{k} {v} ms" for k, v in profile["largest_ms"].items())
        + f"; torch/chromadb/mautrix/onnxruntime imported: {profile['heavy_imported'] or 'none'}"
    )
    out = perfkit.write_report("search_cli", report, args.out)
    print(f"wrote {out}")
    return 0 if same == len(questions) else 1


if __name__ == "__main__":
    sys.exit(main())
