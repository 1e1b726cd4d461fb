"""A collection of 10,000, 100,000 or 1,000,000 windows for bench/scale.py, in segments
as the service leaves them, with its event log; built once, resumable.

    .venv/bin/python bench/corpus_scale.py --windows 1000000 [--minutes 0] [--chroma server]

Windows: the generated rooms of bench/corpus100k.py (runs of eval chat lines under new
room and event ids, 20 s apart), cut by the real chunker with the shipped policy; their
messages are appended to an event log beside the collection and marked indexed into
their windows, as the pipeline does (the event log is the text's one home: search,
replies and the keyword postings read it).

Vectors: through the model, 100,000 windows took 25 minutes here, a million would take
over four hours. So every distinct eval message is embedded once by the shipped model
(cached in bench/out/scale-message-vectors.npz), and a window's vector is the mean of
its messages' vectors plus Gaussian noise of 0.01 a component, normalised: real
vectors of the real text, no two windows alike (bench/ingest.py measures import through
the model).

Segments: written as the shipped policy leaves an index of that size after merging
(indexer/store/vectors/segments.py): all but the last twentieth straight into segments of the
policy's largest size there (SegmentPolicy.largest: 1,000 at 10,000 windows, 8,000 at
100,000, 32,000 at 1,000,000; no copy), then the last twentieth through the shipped policy (a hot
segment sealed when full), and the merges it asks for run to the end. Progress every
batch; `--minutes` bounds one run and the next goes on (build.json). About 4 minutes for
10,000 windows here (2 shared cores, load average 6 to 12); 100,000 and 1,000,000 scale
with the windows (Chroma's insert, about 1 ms of CPU a window, most of it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import corpus100k  # noqa: E402
import evalkit  # noqa: E402
import perfkit  # noqa: E402

NOISE = 0.01  # per component, before normalising
TAIL = 20  # the last 1/TAIL of the windows goes through the shipped policy
BATCH = 2048  # windows per upsert round
MESSAGE_VECTORS = evalkit.OUT_DIR / "scale-message-vectors.npz"


def cache_dir(windows: int, chroma: str = "embedded") -> Path:
    """The embedded cache (its collection in chroma/), or the server's (`chroma run`'s
    persist dir in server/data/): the same windows and vectors either way."""
    return evalkit.OUT_DIR / (
        f"scale-{windows}" if chroma == "embedded" else f"scale-{windows}-server"
    )


@contextmanager
def chroma_at(cache: Path, chroma: str) -> Iterator[int | None]:
    """The port of a `chroma run` on the server cache's persist dir, for the block's
    length (None: embedded, nothing to start)."""
    if chroma == "embedded":
        yield None
        return
    from tests.chromaserver import chroma_server_in

    (cache / "server").mkdir(parents=True, exist_ok=True)
    with chroma_server_in(cache / "server") as server:
        yield server.port


def message_vectors(rooms: list[list[tuple[str, str]]]):
    """body sha256 -> row, and the vectors: every distinct eval message embedded once by
    the shipped model (cached)."""
    import numpy as np

    bodies = sorted({b for room in rooms for _, b in room})
    keys = [hashlib.sha256(b.encode()).hexdigest()[:16] for b in bodies]
    if MESSAGE_VECTORS.exists():
        got = np.load(MESSAGE_VECTORS)
        if list(got["keys"]) == keys:
            return {k: i for i, k in enumerate(keys)}, got["vectors"]
    from matrix_sources.indexer.models.embedder import (
        DEFAULT_BACKEND,
        encode_in_length_order,
        load_embedder,
    )

    model = load_embedder("all-MiniLM-L6-v2", DEFAULT_BACKEND, evalkit.OUT_DIR / "models")
    print(
        f"embedding {len(bodies)} distinct eval messages once ({MESSAGE_VECTORS.name})", flush=True
    )
    vectors = np.asarray(encode_in_length_order(model, bodies, 64), dtype=np.float32)
    MESSAGE_VECTORS.parent.mkdir(parents=True, exist_ok=True)
    np.savez(MESSAGE_VECTORS, keys=np.asarray(keys), vectors=vectors)
    return {k: i for i, k in enumerate(keys)}, vectors


def window_vectors(windows, rows: dict[str, int], vectors, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    out = np.empty((len(windows), vectors.shape[1]), dtype=np.float32)
    for i, w in enumerate(windows):
        idx = [rows[hashlib.sha256(m.body.encode()).hexdigest()[:16]] for m in w.messages]
        out[i] = vectors[idx].mean(axis=0)
    out += rng.normal(scale=NOISE, size=out.shape).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def open_store(cache: Path, windows: int, bulk: bool, port: int | None = None):
    """The cache's store: while bulk, every segment filled to the policy's largest size
    for `windows` (no merges to make); else the shipped policy. `port`: a Chroma server's
    on 127.0.0.1 (chroma_at), else the embedded folder."""
    from matrix_sources.indexer.store.eventlog.log import EventLog
    from matrix_sources.indexer.store.vectors.chroma import ChromaStore
    from matrix_sources.indexer.store.vectors.segments import SegmentPolicy

    shipped = SegmentPolicy()
    big = shipped.largest(windows)
    policy = SegmentPolicy(hot=big, fanout=shipped.fanout, cap=big, share=None) if bulk else shipped
    log = EventLog(cache / "eventlog.sqlite3")
    if port is not None:
        return ChromaStore(host="127.0.0.1", port=port, eventlog=log, policy=policy)
    return ChromaStore(path=cache / "chroma", eventlog=log, policy=policy)


def build(root: Path, windows: int, minutes: float = 0.0, chroma: str = "embedded") -> dict:
    cache = cache_dir(windows, chroma)
    cache.mkdir(parents=True, exist_ok=True)
    done = cache / "build.json"
    if done.exists():  # built: no server to start for it
        state = json.loads(done.read_text())
        if state["windows"] >= windows and state["merged"]:
            return state
    with chroma_at(cache, chroma) as port:
        return _build(root, windows, minutes, cache, port)


def _build(root: Path, windows: int, minutes: float, cache: Path, port: int | None) -> dict:
    from matrix_sources.indexer.models.embedder import DEFAULT_BACKEND, load_embedder
    from matrix_sources.indexer.pipeline.chunker import CHUNKER_VERSION, build_windows
    from matrix_sources.indexer.pipeline.rebuild import expected_meta
    from matrix_sources.indexer.store.vectors.compactor import TEXT_HOME_KEY

    state_path = cache / "build.json"
    state = (
        json.loads(state_path.read_text())
        if state_path.exists()
        else {
            "windows_wanted": windows,
            "streams": 0,
            "windows": 0,
            "merged": False,
            "chunker": CHUNKER_VERSION,
            "seconds": 0.0,
            "runs": [],
        }
    )
    if state["windows"] >= windows and state["merged"]:
        return state
    rooms = corpus100k.eval_messages(root)
    rows, vectors = message_vectors(rooms)
    pol = corpus100k.policy()
    bulk_until = windows - windows // TAIL
    store = open_store(cache, windows, bulk=state["windows"] < bulk_until, port=port)
    if store.count() != state["windows"]:
        raise SystemExit(
            f"error: {cache}: the collection holds {store.count()} windows, "
            f"build.json says {state['windows']}; remove the folder and build "
            "again"
        )
    model = load_embedder("all-MiniLM-L6-v2", DEFAULT_BACKEND, evalkit.OUT_DIR / "models")
    store.set_meta(expected_meta(model))
    store.eventlog.set_meta(TEXT_HOME_KEY, "eventlog")  # as the service leaves it: no text
    # in Chroma to move out at its start
    started = time.monotonic()
    deadline = started + minutes * 60 if minutes else float("inf")
    log = store.eventlog
    while state["windows"] < windows and time.monotonic() < deadline:
        if state["windows"] >= bulk_until and store.segments.policy.share is None:
            # the tail: the shipped policy
            store = open_store(cache, windows, bulk=False, port=port)
            log = store.eventlog
        limit = bulk_until if state["windows"] < bulk_until else windows
        batch, streams = [], []
        while len(batch) < BATCH and state["windows"] + len(batch) < limit:
            n = state["streams"] + len(streams)
            msgs = corpus100k.stream(rooms, n)
            ws = build_windows(msgs, pol, f"gen {msgs[0].room_id[5:10]}")
            ws = ws[: limit - state["windows"] - len(batch)]
            streams.append((msgs, ws))
            batch += ws
        vs = window_vectors(batch, rows, vectors, seed=state["streams"])
        for i in range(0, len(batch), 512):
            store.upsert(batch[i : i + 512], vs[i : i + 512])
        for msgs, ws in streams:  # as the pipeline records them: the text's one home
            held = [m for w in ws for m in w.messages]
            log.append([(m, None) for m in held])
            log.mark_indexed(
                msgs[0].room_id, {m.event_id: w.window_id for w in ws for m in w.messages}, held[-1]
            )
        state["streams"] += len(streams)
        state["windows"] += len(batch)
        state["seconds"] = round(state["seconds"] + time.monotonic() - started, 1)
        started = time.monotonic()
        state_path.write_text(json.dumps(state, indent=1))
        rate = state["windows"] / max(state["seconds"], 1e-9)
        left = (windows - state["windows"]) / rate if rate else 0
        print(
            f"  {state['windows']:>8} of {windows} windows, {len(store.segments.list)} "
            f"segments ({rate:.0f} windows/s, about {left / 60:.0f} min left)",
            flush=True,
        )
    if state["windows"] >= windows and not state["merged"]:
        merged = 0
        while store.merge_due():
            merged += store.merge() or 0
            print(
                f"  merged: {merged} points copied, {len(store.segments.list)} segments", flush=True
            )
        state["merged"] = True
        state["merge_copied"] = merged
    state["segments"] = store.segments.counts()
    state["runs"].append({"to_windows": state["windows"], "load": perfkit.load_average()})
    state_path.write_text(json.dumps(state, indent=1))
    return state


def room_ids(windows: int, chroma: str = "embedded") -> list[str]:
    """The generated rooms of a cache (a service given it must allowlist them)."""
    state = json.loads((cache_dir(windows, chroma) / "build.json").read_text())
    return [f"!gen-{n:05d}:bench.local" for n in range(state["streams"])]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--windows", type=int, default=10_000)
    p.add_argument(
        "--chroma",
        choices=("embedded", "server"),
        default="embedded",
        help="server: the collection in a `chroma run` (started here, its "
        "persist dir in the cache) for bench/scale.py --chroma server",
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=0.0,
        help="stop after this long (resume with the same command); 0: no bound",
    )
    args = p.parse_args(argv)
    perfkit.quiet_env()
    root = evalkit.eval_dir(args.eval_dir)
    t = time.monotonic()
    state = build(root, args.windows, args.minutes, args.chroma)
    done = state["windows"] >= args.windows and state["merged"]
    print(
        f"{cache_dir(args.windows, args.chroma)}: {state['windows']} windows from "
        f"{state['streams']} "
        f"generated rooms in {len(state['segments'])} segments {state['segments']}, "
        f"{state['seconds']:.0f} s of building so far (this run {time.monotonic() - t:.0f} s)"
        + ("" if done else "; run again to go on")
    )
    print("\n" + perfkit.attribution(root))
    return 0 if done else 3


if __name__ == "__main__":
    sys.exit(main())
