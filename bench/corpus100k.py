"""A 100,000-window collection made from the eval chat, for the query and memory
benchmarks; built once with the real model and cached under bench/out/query-100k/.

    .venv/bin/python bench/corpus100k.py [--windows 100000] [--minutes 10]

The eval set has ~25,500 messages (~6,000 windows). Re-windowing makes more: each
generated room ("stream") interleaves runs of 5 to 40 consecutive messages of two eval
rooms picked at random (same seed, same streams), under new room and event ids and new
timestamps 20 s apart, and is cut by the real chunker with the shipped config's policy
(config/config.example.yaml), so windows have the sizes an import gives. Each window is
embedded by all-MiniLM-L6-v2 (its `embed_text`, in length order) and upserted through
ChromaStore, with the collection meta the service expects; its events are recorded in
an event log beside it (indexed into their windows), which holds the text. A cache
built before the text moved out of Chroma has no event log: build it again.

Embedding 100,000 windows takes tens of minutes on 2 shared cores, so the build is
resumable: `--minutes` bounds one run, and the next run goes on from the last stream
stored (build.json). The texts are eval text: the cache stays under bench/out/, which
is not committed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import evalkit  # noqa: E402
import perfkit  # noqa: E402

CACHE = evalkit.OUT_DIR / "query-100k"
SEED = 100_000
STREAM_MESSAGES = 400
SPACING_MS = 20_000
T0 = 1_600_000_000_000
UPSERT = 512


def eval_messages(root: Path) -> list[list[tuple[str, str]]]:
    """Per eval room, its (sender, body) messages in timeline order (empty bodies out)."""
    rooms: dict[str, list[tuple[str, str]]] = {}
    for split in perfkit.SPLITS:
        for ev in evalkit.load_events(root / split):
            body = (ev.get("content") or {}).get("body")
            if ev.get("type") == "m.room.message" and isinstance(body, str) and body.strip():
                rooms.setdefault(ev["room_id"], []).append((ev["sender"], body))
    return [rooms[r] for r in sorted(rooms)]


def stream(rooms: list[list[tuple[str, str]]], n: int):
    """The n-th generated room's messages (Message records), deterministic in n."""
    from matrix_sources.indexer.records import EventID, Message, RoomID, UserID

    rng = random.Random(SEED * 7919 + n)
    a, b = rng.sample(range(len(rooms)), 2)
    pos = {a: rng.randrange(len(rooms[a])), b: rng.randrange(len(rooms[b]))}
    room_id = RoomID(f"!gen-{n:05d}:bench.local")
    out = []
    src = a
    while len(out) < STREAM_MESSAGES:
        for _ in range(rng.randint(5, 40)):
            sender, body = rooms[src][pos[src] % len(rooms[src])]
            pos[src] += 1
            i = len(out)
            out.append(
                Message(
                    EventID(f"$gen-{n:05d}-{i:04d}"),
                    room_id,
                    UserID(sender),
                    T0 + n * STREAM_MESSAGES * SPACING_MS + i * SPACING_MS,
                    body,
                )
            )
        src = b if src == a else a
    return out[:STREAM_MESSAGES]


def room_ids(cache: Path = CACHE) -> list[str]:
    """The generated rooms the cached collection holds: a service given the collection
    must have them on its allowlist, or it purges them at start as it should."""
    state = json.loads((cache / "build.json").read_text())
    return [f"!gen-{n:05d}:bench.local" for n in range(state["streams"])]


def policy():
    from matrix_sources.indexer.config import load_config

    return load_config(
        Path(__file__).resolve().parent.parent / "config" / "config.example.yaml"
    ).index.chunk_policy


def cache_for(backend: str | None = None) -> Path:
    """The cache of a backend's vector class (embedder.VECTOR_CLASS): the shipped
    default's at CACHE, another class's beside it (query-100k-float), so a service on
    any backend opens a collection of its own class without re-embedding it."""
    from matrix_sources.indexer.models.embedder import DEFAULT_BACKEND, VECTOR_CLASS

    kind = VECTOR_CLASS[backend or DEFAULT_BACKEND]
    return (
        CACHE if kind == VECTOR_CLASS[DEFAULT_BACKEND] else CACHE.with_name(f"{CACHE.name}-{kind}")
    )


def open_cache(path: Path = CACHE):
    """The collection with its event log (the windows' text lives there only)."""
    from matrix_sources.indexer.store.eventlog.log import EventLog
    from matrix_sources.indexer.store.vectors.chroma import ChromaStore

    return ChromaStore(path=path / "chroma", eventlog=EventLog(path / "eventlog.sqlite3"))


def build(
    root: Path, windows: int, minutes: float, cache: Path = CACHE, backend: str | None = None
) -> dict:
    from matrix_sources.indexer.models.embedder import (
        DEFAULT_BACKEND,
        encode_in_length_order,
        load_embedder,
    )
    from matrix_sources.indexer.pipeline.chunker import CHUNKER_VERSION, build_windows, embed_text
    from matrix_sources.indexer.pipeline.rebuild import expected_meta

    state_path = cache / "build.json"
    state = (
        json.loads(state_path.read_text())
        if state_path.exists()
        else {
            "streams": 0,
            "windows": 0,
            "embed_seconds": 0.0,
            "seed": SEED,
            "chunker": CHUNKER_VERSION,
            "runs": [],
        }
    )
    store = open_cache(cache)
    if store.count() != state["windows"]:
        raise SystemExit(
            f"error: {cache}: the collection holds {store.count()} windows, "
            f"build.json says {state['windows']}; remove the folder and build "
            "again"
        )
    if state["windows"] >= windows:
        return state
    rooms = eval_messages(root)
    pol = policy()
    # Any backend of one vector class makes the same collection (embedder.VECTOR_CLASS).
    model = load_embedder(
        "all-MiniLM-L6-v2", backend or DEFAULT_BACKEND, evalkit.OUT_DIR / "models"
    )
    store.set_meta(expected_meta(model))
    started = time.monotonic()
    deadline = started + minutes * 60 if minutes else float("inf")
    run = {"from_windows": state["windows"], "load_before": perfkit.load_average()}
    while state["windows"] < windows and time.monotonic() < deadline:
        batch, streams = [], 0
        while len(batch) < 2048 and state["windows"] + len(batch) < windows:
            msgs = stream(rooms, state["streams"] + streams)
            streams += 1
            batch += build_windows(msgs, pol, f"gen {msgs[0].room_id[5:10]}")
        batch = batch[: windows - state["windows"]]
        t = time.perf_counter()
        vectors = encode_in_length_order(model, [embed_text(w) for w in batch], 64)
        state["embed_seconds"] += time.perf_counter() - t
        for i in range(0, len(batch), UPSERT):
            store.upsert(batch[i : i + UPSERT], vectors[i : i + UPSERT])
        for w in batch:  # as the pipeline records them: the text's one home
            store.eventlog.append([(m, None) for m in w.messages])
            store.eventlog.mark_indexed(
                w.room_id, {m.event_id: w.window_id for m in w.messages}, w.messages[-1]
            )
        state["streams"] += streams
        state["windows"] += len(batch)
        state_path.write_text(json.dumps(state, indent=1))
        rate = state["windows"] / max(state["embed_seconds"], 1e-9)
        print(f"  {state['windows']:>7} windows ({rate:.1f} windows/s embedding)", flush=True)
    run.update(
        to_windows=state["windows"],
        seconds=round(time.monotonic() - started, 1),
        load_after=perfkit.load_average(),
    )
    state["runs"].append(run)
    state_path.write_text(json.dumps(state, indent=1))
    return state


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--windows", type=int, default=100_000)
    p.add_argument(
        "--backend",
        default=None,
        help="embedder.backend to embed with (default: the shipped default)",
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=10.0,
        help="stop after this long (resume with the same command); 0: no bound",
    )
    args = p.parse_args(argv)
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    cache = cache_for(args.backend)
    cache.mkdir(parents=True, exist_ok=True)
    state = build(root, args.windows, args.minutes, cache=cache, backend=args.backend)
    done = state["windows"] >= args.windows
    print(
        f"{cache}: {state['windows']} windows from {state['streams']} generated rooms, "
        f"{state['embed_seconds']:.0f} s embedding so far"
        + ("" if done else f"; run again to go on to {args.windows}")
    )
    print("\n" + perfkit.attribution(root))
    return 0 if done else 3


if __name__ == "__main__":
    sys.exit(main())
