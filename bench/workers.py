"""Ingest throughput with 1, 2 and 4 embedding workers (issue 25): `matrix-sources
worker` processes sharing a PostgreSQL event log and a Chroma server.

    .venv/bin/python bench/workers.py                      # stand-in embedder, 1 2 4
    .venv/bin/python bench/workers.py --real --workers 1,2 # the real model, for the record

The stand-in embedder costs a fixed time per encode call (`--batch-seconds`, a sleep:
a model on another machine, whose time is its own and not this machine's CPU), and
returns bag-of-words vectors; everything else is what a worker runs (claims, derived
filter, chunker, fenced upserts to the Chroma server, event-log commits). The target:
4 workers reach at least 3.5x the throughput of one, so coordination does not
serialise them. `--real` loads the configured model in each worker instead (on this
machine's CPU, so workers compete for it: a figure for the record, not a target).

For each worker count: a fresh PostgreSQL schema and a fresh Chroma server; `--rooms`
rooms of `--messages` messages in all appended to the event log as the service would
(pending); the workers started and loaded, then released together; timed until no
event is pending. A throwaway PostgreSQL is started (scripts/pg-server) unless
`--database URL` names one. Prints messages/s per count and the ratio to one worker,
and a JSON line with everything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 3.5  # 4 workers over 1, stand-in embedder
TOPICS = (
    "the nightly backup failed again",
    "federation to matrix.org is slow",
    "the bridge dropped messages overnight",
    "disk usage on the media repo",
    "how do I rotate the signing key",
    "room upgrades break old clients",
    "spam waves from new accounts",
    "postgres vacuum takes hours",
)


class StandInEmbedder:
    """A fixed cost per encode call, like a model served from another machine."""

    name = "stand-in"
    backend = "stand-in"
    dim = 384

    def __init__(self, seconds: float) -> None:
        from matrix_sources.indexer.models.embedder import HashEmbedder

        self.seconds = seconds
        self._vectors = HashEmbedder(self.dim)
        self.batches = 0

    def encode(self, texts):
        self.batches += 1
        time.sleep(self.seconds)
        return self._vectors.encode(texts)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_chroma(folder: Path) -> tuple[subprocess.Popen, int]:
    exe = shutil.which("chroma") or str(Path(sys.executable).parent / "chroma")
    port = free_port()
    log = open(folder / "chroma.log", "wb")
    proc = subprocess.Popen(
        [exe, "run", "--path", str(folder / "chroma"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=log,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1
            ) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("chroma run did not start: " + (folder / "chroma.log").read_text())


def fresh_schema(dsn: str, name: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute(f"CREATE SCHEMA {name}")
    return f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{name}"


def make_data_dir(folder: Path, database: str, chroma_port: int, rooms: int) -> Path:
    from ruamel.yaml import YAML

    from matrix_sources.indexer.datadir import init_data_dir

    init_data_dir(folder, "http://127.0.0.1:8008", "bench.example.org")
    config = folder / "config.yaml"
    y = YAML()
    cfg = y.load(config.read_text())
    cfg["store"]["database"] = database
    cfg["index"]["pipeline"] = "external"
    cfg["index"]["debounce_seconds"] = 0.2
    cfg["index"]["chroma"]["mode"] = "server"
    cfg["index"]["chroma"]["host"] = "127.0.0.1"
    cfg["index"]["chroma"]["port"] = chroma_port
    cfg["logging"]["level"] = "WARNING"
    with open(config, "w") as f:
        y.dump(cfg, f)
    return config


def append_corpus(database: str, rooms: int, messages: int) -> int:
    from matrix_sources.indexer.records import EventID, Message, RoomID, UserID
    from matrix_sources.indexer.store.eventlog.log import EventLog

    log = EventLog(database)
    t0 = 1_700_000_000_000
    per_room = messages // rooms
    for r in range(rooms):
        room = RoomID(f"!bench{r:02d}:bench.example.org")
        log.append(
            [
                (
                    Message(
                        EventID(f"$b{r:02d}-{i:05d}"),
                        room,
                        UserID(f"@user{i % 7}:bench.example.org"),
                        t0 + i * 20_000,
                        f"{TOPICS[(i + r) % len(TOPICS)]}, says user{i % 7} (message {i})",
                    ),
                    None,
                )
                for i in range(per_room)
            ]
        )
    n = log.counts().get("pending", 0)
    log.close()
    return n


def pending(database: str) -> int:
    from matrix_sources.indexer.store.eventlog.db import reader

    with reader(database) as db:
        return db.execute("SELECT COUNT(*) FROM events WHERE status = 'pending'").fetchone()[0]


def run_count(dsn: str, workdir: Path, workers: int, args) -> dict:
    folder = workdir / f"w{workers}"
    folder.mkdir()
    chroma, port = start_chroma(folder)
    database = fresh_schema(dsn, f"bench_w{workers}")
    procs = []
    try:
        config = make_data_dir(folder / "data", database, port, args.rooms)
        total = append_corpus(database, args.rooms, args.messages)
        go = folder / "go"
        for i in range(workers):
            ready = folder / f"ready{i}"
            out = open(folder / f"worker{i}.log", "wb")
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        str(config),
                        "--ready",
                        str(ready),
                        "--go",
                        str(go),
                        "--batch-seconds",
                        str(args.batch_seconds),
                    ]
                    + (["--real"] if args.real else []),
                    stdout=out,
                    stderr=out,
                )
            )
        deadline = time.monotonic() + 300
        while not all((folder / f"ready{i}").exists() for i in range(workers)):
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                raise RuntimeError(
                    "a worker did not start: "
                    + "".join((folder / f"worker{i}.log").read_text() for i in range(workers))
                )
            time.sleep(0.1)
        started = time.perf_counter()
        go.touch()
        while pending(database):
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(
                    "a worker exited: "
                    + "".join(
                        (folder / f"worker{i}.log").read_text()[-3000:] for i in range(workers)
                    )
                )
            time.sleep(0.05)
        seconds = time.perf_counter() - started
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        chroma.terminate()
        chroma.wait(30)
    return {
        "workers": workers,
        "messages": total,
        "seconds": round(seconds, 2),
        "messages_per_second": round(total / seconds, 1),
    }


def worker_main(args) -> int:
    """One worker process: open, say ready, wait for go, run until terminated."""
    import signal

    from matrix_sources.indexer.components import open_worker
    from matrix_sources.indexer.config import load_config
    from matrix_sources.indexer.pipeline.standalone import WorkerLoop

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = load_config(Path(args.worker))
    if args.real:
        from matrix_sources.indexer.models.embedder import load_embedder

        embedder = load_embedder(
            cfg.index.embedder.model, cfg.index.embedder.backend, cfg.models_dir
        )
        embedder.encode(["warm up"])
    else:
        embedder = StandInEmbedder(args.batch_seconds)
    worker = open_worker(cfg, embedder)
    loop = WorkerLoop(worker, poll=0.05)
    signal.signal(signal.SIGTERM, lambda *_: loop.stop.set())
    Path(args.ready).touch()
    while not Path(args.go).exists():
        time.sleep(0.01)
    loop.run()
    worker.close()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--rooms", type=int, default=64)
    p.add_argument("--messages", type=int, default=19200)
    p.add_argument(
        "--batch-seconds",
        type=float,
        default=2.0,
        help="the stand-in embedder's cost per encode call (64 windows at most)",
    )
    p.add_argument("--real", action="store_true", help="the configured model instead")
    p.add_argument("--database", default=None, help="a PostgreSQL URL (default: a throwaway one)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--ready", help=argparse.SUPPRESS)
    p.add_argument("--go", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker_main(args)
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    workdir = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    pgdir = Path(tempfile.mkdtemp(prefix="bench-workers-pg-"))  # its owner: postgres
    dsn = args.database
    try:
        if dsn is None:
            dsn = subprocess.run(
                [str(ROOT / "scripts" / "pg-server"), "start", str(pgdir)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        results = [run_count(dsn, workdir, int(n), args) for n in args.workers.split(",")]
    finally:
        if args.database is None:
            subprocess.run([str(ROOT / "scripts" / "pg-server"), "stop", str(pgdir)])
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(pgdir, ignore_errors=True)
    base = results[0]["messages_per_second"]
    embedder = (
        "the configured model" if args.real else f"stand-in, {args.batch_seconds} s per encode call"
    )
    print(
        f"{args.messages} messages in {args.rooms} rooms; embedder: {embedder}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    for r in results:
        print(
            f"  {r['workers']} worker(s): {r['messages_per_second']:8.1f} msg/s "
            f"({r['seconds']} s), {r['messages_per_second'] / base:.2f}x one"
        )
    if not args.real and results[-1]["workers"] == 4 and results[0]["workers"] == 1:
        ratio = results[-1]["messages_per_second"] / base
        print(f"4 workers over 1: {ratio:.2f}x (target >= {TARGET})")
    print(
        json.dumps(
            {
                "results": results,
                "rooms": args.rooms,
                "real": args.real,
                "batch_seconds": args.batch_seconds,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
